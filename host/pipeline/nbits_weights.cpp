#include "pipeline/nbits_weights.h"

#include <set>
#include <stdexcept>

namespace nf::host {
namespace {

bool is_nbits(const ir::Node& n) { return n.op_type == "MatMulNBits" && n.domain == "com.microsoft"; }

int64_t attr(const ir::Node& n, const char* name, int64_t dflt) {
  auto it = n.attrs.find(name);
  return it == n.attrs.end() ? dflt : it->second.i;
}

// The float weight [K, N] of one MatMulNBits node.
ir::Tensor dequantized(const ir::Graph& g, const ir::Node& n) {
  auto refuse = [&](const std::string& why) -> ir::Tensor {
    throw std::runtime_error("MatMulNBits '" + n.name + "': " + why);
  };
  const int64_t K = attr(n, "K", 0), N = attr(n, "N", 0), bits = attr(n, "bits", 4), block = attr(n, "block_size", 0);
  if (K <= 0 || N <= 0 || block < 16 || (block & (block - 1)) != 0)
    return refuse("K, N and block_size (a power of two >= 16) must be given");
  if (bits != 2 && bits != 4 && bits != 8) return refuse(std::to_string(bits) + "-bit codes are not read (2, 4 or 8)");
  if (n.inputs.size() > 4 && !n.inputs[4].empty()) return refuse("its g_idx input (act-order) is not read");
  const int64_t blocks = (K + block - 1) / block, blob = block * bits / 8;
  const ir::Tensor* codes = n.inputs.size() > 1 ? g.initializer(n.inputs[1]) : nullptr;
  const ir::Tensor* scales = n.inputs.size() > 2 ? g.initializer(n.inputs[2]) : nullptr;
  if (!codes || codes->dtype != NF_DTYPE_UINT8 || codes->numel() != N * blocks * blob || !codes->data())
    return refuse("its codes are not a uint8 constant of N x ceil(K / block_size) x block_size x bits / 8 bytes");
  if (!scales || scales->dtype != NF_DTYPE_FLOAT32 || scales->numel() != N * blocks || !scales->data())
    return refuse("its scales are not a float constant of N x ceil(K / block_size) values");
  const ir::Tensor* zeros = n.inputs.size() > 3 && !n.inputs[3].empty() ? g.initializer(n.inputs[3]) : nullptr;
  const int64_t zero_row = (blocks * bits + 7) / 8;  // packed zero points of one column
  if (n.inputs.size() > 3 && !n.inputs[3].empty() &&
      (!zeros || zeros->dtype != NF_DTYPE_UINT8 || zeros->numel() != N * zero_row || !zeros->data()))
    return refuse("its zero points are not packed uint8 constants (float zero points are not read)");

  const auto* code = static_cast<const uint8_t*>(codes->data());
  const auto* zero = zeros ? static_cast<const uint8_t*>(zeros->data()) : nullptr;
  const float* scale = scales->as<float>();
  const int per_byte = static_cast<int>(8 / bits), mask = (1 << bits) - 1;
  auto unpack = [&](const uint8_t* bytes, int64_t i) { return (bytes[i / per_byte] >> ((i % per_byte) * bits)) & mask; };
  ir::Tensor w = ir::Tensor::zeros(NF_DTYPE_FLOAT32, {K, N});
  float* out = static_cast<float*>(w.mutable_data());
  for (int64_t col = 0; col < N; ++col)
    for (int64_t b = 0; b < blocks; ++b) {
      const float s = scale[col * blocks + b];
      const int z = zero ? unpack(zero + col * zero_row, b) : 1 << (bits - 1);
      const uint8_t* blk = code + (col * blocks + b) * blob;
      for (int64_t i = 0; i < block && b * block + i < K; ++i)
        out[(b * block + i) * N + col] = static_cast<float>(unpack(blk, i) - z) * s;
    }
  // Read once: a mapped source's pages of them leave the resident set (~K x N / 2 bytes each).
  for (const ir::Tensor* t : {codes, scales, zeros})
    if (t) t->drop_pages();
  return w;
}

}  // namespace

uint64_t nbits_weight_elements(const ir::Node& n) {
  const int64_t K = attr(n, "K", 0), N = attr(n, "N", 0);
  return is_nbits(n) && K > 0 && N > 0 ? static_cast<uint64_t>(K) * static_cast<uint64_t>(N) : 0;
}

size_t nbits_matmuls(const ir::Graph& g) {
  size_t count = 0;
  for (const auto& n : g.nodes) count += is_nbits(*n);
  return count;
}

DequantizedNBits dequantize_nbits_matmuls(ir::Graph& g, const std::function<void(ir::TensorRef&)>& keep) {
  DequantizedNBits result;
  std::set<std::string> packed;  // codes, scales and zero points: dropped when nothing else reads them
  std::vector<std::unique_ptr<ir::Node>> biases;
  for (auto& n : g.nodes) {
    if (!is_nbits(*n)) continue;
    auto ref = ir::make_tensor_ref(dequantized(g, *n));
    const std::string weight = n->inputs[1] + "/dequantized";
    g.initializers[weight] = ref;
    ++result.weights;
    result.bytes += ref->tensor.nbytes();
    if (keep) keep(*ref);
    for (size_t i = 1; i < std::min<size_t>(n->inputs.size(), 4); ++i) packed.insert(n->inputs[i]);
    const std::string bias = n->inputs.size() > 5 ? n->inputs[5] : "";
    n->op_type = "MatMul";
    n->domain.clear();
    n->attrs.clear();
    n->inputs = {n->inputs[0], weight};
    if (!bias.empty()) {  // MatMul then the bias, into the node's output
      auto add = std::make_unique<ir::Node>();
      add->op_type = "Add";
      add->name = n->name + "/bias";
      add->outputs = n->outputs;
      n->outputs = {n->outputs[0] + "/no_bias"};
      add->inputs = {n->outputs[0], bias};
      biases.push_back(std::move(add));
    }
  }
  for (auto& add : biases) g.nodes.push_back(std::move(add));
  std::set<std::string> read;
  for (const auto& n : g.nodes) read.insert(n->inputs.begin(), n->inputs.end());
  for (const auto& name : packed)
    if (!read.count(name)) g.initializers.erase(name), g.types.erase(name);
  return result;
}

}  // namespace nf::host

#include "pipeline/nbits_weights.h"

#include <algorithm>
#include <atomic>
#include <set>
#include <stdexcept>
#include <thread>

namespace nf::host {
namespace {

bool is_nbits(const ir::Node& n) { return n.op_type == "MatMulNBits" && n.domain == "com.microsoft"; }
bool is_gather_quantized(const ir::Node& n) { return n.op_type == "GatherBlockQuantized" && n.domain == "com.microsoft"; }

int64_t attr(const ir::Node& n, const char* name, int64_t dflt) {
  auto it = n.attrs.find(name);
  return it == n.attrs.end() ? dflt : it->second.i;
}

// Views followed back to a constant (a hostile file may chain them in a cycle), and the
// largest side of a weight read (2^30: products of two stay within int64).
constexpr int kMaxViews = 8;
constexpr int64_t kMaxSide = int64_t{1} << 30;

// The int64 values of a constant: an initializer or a Constant node's.
std::vector<int64_t> int64s(const ir::Graph& g, const std::string& v) {
  const ir::Tensor* t = g.initializer(v);
  if (const ir::Node* p = g.producer(v); !t && p && p->op_type == "Constant" && p->domain.empty())
    if (auto a = p->attrs.find("value"); a != p->attrs.end() && a->second.t) t = &a->second.t->tensor;
  if (!t || t->dtype != NF_DTYPE_INT64 || !t->data()) return {};
  return {t->as<int64_t>(), t->as<int64_t>() + t->numel()};
}

// Dims `in` reshaped to `target`, its 0s copied from `in` and its -1 resolved.
std::vector<int64_t> reshaped(const std::vector<int64_t>& in, std::vector<int64_t> target) {
  int64_t known = 1, total = 1, unknown = -1;
  for (int64_t d : in) total *= d;
  for (size_t i = 0; i < target.size(); ++i) {
    if (target[i] == 0 && i < in.size()) target[i] = in[i];
    if (target[i] == -1) unknown = static_cast<int64_t>(i);
    else known *= target[i];
  }
  if (unknown >= 0 && known > 0) target[static_cast<size_t>(unknown)] = total / known;
  return target;
}

// A constant's bytes and the dims it is read with (a Reshape's target).
struct View {
  const ir::Tensor* t = nullptr;
  std::vector<int64_t> dims;
};

// The constant `v` is: an initializer, or one behind ops that keep its bytes (Identity,
// Reshape, and a Cast to the type it has: a 16-bit scale widened on load). `via` collects them.
View constant(const ir::Graph& g, const std::string& v, std::vector<const ir::Node*>* via, int depth = 0) {
  if (const ir::Tensor* t = g.initializer(v)) return {t, t->dims};
  const ir::Node* p = g.producer(v);
  if (!p || !p->domain.empty() || p->inputs.empty() || depth == kMaxViews ||
      (p->op_type != "Identity" && p->op_type != "Reshape" && p->op_type != "Cast"))
    return {};
  View c = constant(g, p->inputs[0], via, depth + 1);
  if (!c.t || (p->op_type == "Cast" && attr(*p, "to", -1) != c.t->dtype)) return {};
  if (p->op_type == "Reshape") c.dims = reshaped(c.dims, p->inputs.size() > 1 ? int64s(g, p->inputs[1]) : std::vector<int64_t>{});
  via->push_back(p);
  return c;
}

// Rows of K values stored as `bits`-bit codes (several a byte, the first in the low bits) in
// blocks of `block` along the row, a scale per block and row, and zero points per row: packed
// codes, or (MatMulNBits only) one float per block, as ONNX Runtime's HQQ quantizer writes
// them; none: 2^(bits - 1). What MatMulNBits keeps per output column and GatherBlockQuantized
// per table row. Value = (code - zero point) x scale.
struct BlockCodes {
  const ir::Tensor *codes, *scales, *zeros;  // zeros may be null
  int64_t rows, K, bits, block, row_bytes;
  int64_t blocks() const { return (K + block - 1) / block; }
  // Read once: a mapped source's pages of them leave the resident set.
  void drop_pages() const {
    for (const ir::Tensor* t : {codes, scales, zeros})
      if (t) t->drop_pages();
  }

  // Row r's K values into dst[0, K).
  void decode_row(int64_t r, float* dst) const {
    const int per_byte = static_cast<int>(8 / bits), mask = (1 << bits) - 1;
    auto unpack = [&](const uint8_t* bytes, int64_t i) { return (bytes[i / per_byte] >> ((i % per_byte) * bits)) & mask; };
    const int64_t n_blocks = blocks(), zero_row = (n_blocks * bits + 7) / 8;
    const auto* row = static_cast<const uint8_t*>(codes->data()) + r * row_bytes;
    const bool float_zeros = zeros && zeros->dtype == NF_DTYPE_FLOAT32;
    const auto* zero = zeros && !float_zeros ? static_cast<const uint8_t*>(zeros->data()) + r * zero_row : nullptr;
    const float* zero_value = float_zeros ? zeros->as<float>() + r * n_blocks : nullptr;
    const float* scale = scales->as<float>() + r * n_blocks;
    for (int64_t b = 0; b < n_blocks; ++b) {
      const float s = scale[b];
      const int64_t end = std::min(K, (b + 1) * block);
      if (zero_value) {  // as ONNX Runtime computes it: code x scale + (-scale x zero point)
        const float shift = -s * zero_value[b];
        for (int64_t k = b * block; k < end; ++k) dst[k] = static_cast<float>(unpack(row, k)) * s + shift;
        continue;
      }
      const int z = zero ? unpack(zero, b) : 1 << (bits - 1);
      if (bits == 4)  // the common case, without the division
        for (int64_t k = b * block; k < end; ++k) dst[k] = static_cast<float>(((row[k >> 1] >> ((k & 1) * 4)) & 15) - z) * s;
      else
        for (int64_t k = b * block; k < end; ++k) dst[k] = static_cast<float>(unpack(row, k) - z) * s;
    }
  }

  // The rows as a [rows, K] table (transposed: the [K, rows] weight), on every core: each
  // worker decodes tiles of kTile rows and writes them out, a transposed tile in blocks that
  // stay in cache.
  ir::Tensor dequantize(bool transposed) const {
    constexpr int64_t kTile = 32, kChunk = 64;
    ir::Tensor out = ir::Tensor::zeros(NF_DTYPE_FLOAT32, transposed ? std::vector<int64_t>{K, rows} : std::vector<int64_t>{rows, K});
    float* o = static_cast<float*>(out.mutable_data());
    const int64_t tiles = (rows + kTile - 1) / kTile;
    std::atomic<int64_t> next{0};
    auto work = [&] {
      std::vector<float> buf(transposed ? static_cast<size_t>(kTile * K) : 0);  // a tile of rows to transpose
      for (int64_t t; (t = next++) < tiles;) {
        const int64_t r0 = t * kTile, n = std::min(kTile, rows - r0);
        if (!transposed) {
          for (int64_t i = 0; i < n; ++i) decode_row(r0 + i, o + (r0 + i) * K);
          continue;
        }
        for (int64_t i = 0; i < n; ++i) decode_row(r0 + i, buf.data() + i * K);
        for (int64_t k0 = 0; k0 < K; k0 += kChunk)
          for (int64_t k = k0; k < std::min(K, k0 + kChunk); ++k)
            for (int64_t i = 0; i < n; ++i) o[k * rows + r0 + i] = buf[static_cast<size_t>(i * K + k)];
      }
    };
    std::vector<std::thread> workers(std::max(1u, std::thread::hardware_concurrency()) - 1);
    for (auto& w : workers) w = std::thread(work);
    work();
    for (auto& w : workers) w.join();
    return out;
  }
};

// The parts of a BlockCodes every node checks alike; throws with `refuse`'s line.
template <class Refuse>
BlockCodes block_codes(const ir::Graph& g, const ir::Node& n, const ir::Tensor* codes, int64_t rows, int64_t K,
                       int64_t row_bytes, std::vector<const ir::Node*>* via, Refuse refuse) {
  // MatMulNBits must give its block_size; GatherBlockQuantized's defaults to 128.
  const int64_t bits = attr(n, "bits", 4), block = attr(n, "block_size", is_nbits(n) ? 0 : 128);
  if (block < 16 || (block & (block - 1)) != 0) refuse("its block_size must be a power of two >= 16");
  if (bits != 2 && bits != 4 && bits != 8) refuse(std::to_string(bits) + "-bit codes are not read (2, 4 or 8)");
  if (rows > kMaxSide || K > kMaxSide || row_bytes > kMaxSide) refuse("its sizes are beyond any model's");
  BlockCodes c{nullptr, nullptr, nullptr, rows, K, bits, block, row_bytes};
  const ir::Tensor* scales = n.inputs.size() > 2 ? constant(g, n.inputs[2], via).t : nullptr;
  if (!codes || codes->dtype != NF_DTYPE_UINT8 || codes->numel() != rows * row_bytes || !codes->data())
    refuse("its codes are not a uint8 constant of " + std::to_string(rows) + " rows of " + std::to_string(K) + " " +
           std::to_string(bits) + "-bit values in blocks of " + std::to_string(block));
  if (!scales || scales->dtype != NF_DTYPE_FLOAT32 || scales->numel() != rows * c.blocks() || !scales->data())
    refuse("its scales are not a float constant of one value per block and row");
  const std::string zero_name = n.inputs.size() > 3 ? n.inputs[3] : "";
  const ir::Tensor* zeros = zero_name.empty() ? nullptr : constant(g, zero_name, via).t;
  const bool packed_zeros = zeros && zeros->dtype == NF_DTYPE_UINT8 && zeros->numel() == rows * ((c.blocks() * bits + 7) / 8);
  const bool float_zeros = zeros && is_nbits(n) && zeros->dtype == NF_DTYPE_FLOAT32 && zeros->numel() == rows * c.blocks();
  if (!zero_name.empty() && (!(packed_zeros || float_zeros) || !zeros->data()))
    refuse(is_nbits(n) ? "its zero points are neither packed uint8 codes nor one float per block and row (the scales' type)"
                       : "its zero points are not packed uint8 codes of one per block and row");
  c.codes = codes, c.scales = scales, c.zeros = zeros;
  return c;
}

// The float weight [K, N] of one MatMulNBits node.
ir::Tensor matmul_weight(const ir::Graph& g, const ir::Node& n, std::vector<const ir::Node*>* via) {
  auto refuse = [&](const std::string& why) { throw std::runtime_error("MatMulNBits '" + n.name + "': " + why); };
  const int64_t K = attr(n, "K", 0), N = attr(n, "N", 0), bits = attr(n, "bits", 4), block = attr(n, "block_size", 0);
  if (K <= 0 || N <= 0 || block <= 0) refuse("K, N and block_size (a power of two >= 16) must be given");
  if (K > kMaxSide || N > kMaxSide || block > kMaxSide) refuse("its sizes are beyond any model's");
  if (n.inputs.size() > 4 && !n.inputs[4].empty()) refuse("its g_idx input (act-order) is not read");
  const ir::Tensor* codes = n.inputs.size() > 1 ? constant(g, n.inputs[1], via).t : nullptr;
  const BlockCodes c = block_codes(g, n, codes, N, K, (K + block - 1) / block * block * bits / 8, via, refuse);
  ir::Tensor w = c.dequantize(true);
  c.drop_pages();
  return w;
}

// The float table [rows, K] of one GatherBlockQuantized node (a 2-D table gathered by rows,
// quantized along them: the embedding form).
ir::Tensor gathered_table(const ir::Graph& g, const ir::Node& n, std::vector<const ir::Node*>* via) {
  auto refuse = [&](const std::string& why) { throw std::runtime_error("GatherBlockQuantized '" + n.name + "': " + why); };
  const View data = n.inputs.empty() ? View{} : constant(g, n.inputs[0], via);
  const std::vector<int64_t>& dims = data.dims;
  if (!data.t || dims.size() != 2 || dims[0] <= 0 || dims[1] <= 0) refuse("its data is not a constant 2-D table");
  if (attr(n, "gather_axis", 0) != 0 || attr(n, "quantize_axis", 1) != 1)
    refuse("only rows gathered (gather_axis 0) from a table quantized along them (quantize_axis 1) are read");
  const int64_t bits = attr(n, "bits", 4);
  if (bits != 2 && bits != 4 && bits != 8) refuse(std::to_string(bits) + "-bit codes are not read (2, 4 or 8)");
  const int64_t rows = dims[0], row_bytes = dims[1], K = row_bytes * (8 / bits);
  const BlockCodes c = block_codes(g, n, data.t, rows, K, row_bytes, via, refuse);
  ir::Tensor t = c.dequantize(false);
  c.drop_pages();
  return t;
}

}  // namespace

uint64_t nbits_weight_elements(const ir::Graph& g, const ir::Node& n) {
  if (is_nbits(n)) {
    const int64_t K = attr(n, "K", 0), N = attr(n, "N", 0);
    return K > 0 && N > 0 ? static_cast<uint64_t>(K) * static_cast<uint64_t>(N) : 0;
  }
  if (!is_gather_quantized(n) || n.inputs.empty()) return 0;
  std::vector<const ir::Node*> via;
  const std::vector<int64_t> dims = constant(g, n.inputs[0], &via).dims;
  const int64_t bits = attr(n, "bits", 4);
  if (dims.size() != 2 || dims[0] <= 0 || dims[1] <= 0 || (bits != 2 && bits != 4 && bits != 8)) return 0;
  return static_cast<uint64_t>(dims[0]) * static_cast<uint64_t>(dims[1] * (8 / bits));
}

size_t nbits_nodes(const ir::Graph& g) {
  size_t count = 0;
  for (const auto& n : g.nodes) count += is_nbits(*n) || is_gather_quantized(*n);
  return count;
}

DequantizedNBits dequantize_nbits_nodes(ir::Graph& g, const std::function<void(ir::TensorRef&)>& keep) {
  DequantizedNBits result;
  std::set<std::string> packed;  // codes, scales, zero points and their views: dropped when nothing else reads them
  std::vector<std::unique_ptr<ir::Node>> biases;
  for (auto& n : g.nodes) {
    const bool matmul = is_nbits(*n);
    if (!matmul && !is_gather_quantized(*n)) continue;
    std::vector<const ir::Node*> via;
    auto ref = ir::make_tensor_ref(matmul ? matmul_weight(g, *n, &via) : gathered_table(g, *n, &via));
    const std::string weight = n->inputs[matmul ? 1 : 0] + "/dequantized";
    g.initializers[weight] = ref;
    ++(matmul ? result.weights : result.tables);
    result.bytes += ref->tensor.nbytes();
    if (keep) keep(*ref);
    for (size_t i = matmul ? 1 : 0; i < std::min<size_t>(n->inputs.size(), 4); ++i)
      if (i != 1 || matmul) packed.insert(n->inputs[i]);
    for (const ir::Node* p : via) packed.insert(p->inputs.begin(), p->inputs.end());
    if (!matmul) {  // Gather(table, indices): the rows it took
      n->op_type = "Gather";
      n->domain.clear();
      n->attrs.clear();
      n->inputs = {weight, n->inputs[1]};
      continue;
    }
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
  // The views the packed values were read through (a Reshape of shared codes, a Cast of
  // scales), then the packed values themselves, once nothing reads them.
  for (bool changed = true; changed;) {
    changed = false;
    std::set<std::string> read(g.outputs.begin(), g.outputs.end());
    for (const auto& n : g.nodes) read.insert(n->inputs.begin(), n->inputs.end());
    for (auto it = g.nodes.begin(); it != g.nodes.end();)
      if ((*it)->outputs.size() == 1 && packed.count((*it)->outputs[0]) && !read.count((*it)->outputs[0])) {
        g.types.erase((*it)->outputs[0]);
        it = g.nodes.erase(it), changed = true;
      } else {
        ++it;
      }
    for (const auto& name : packed)
      if (!read.count(name) && g.initializers.erase(name)) g.types.erase(name), changed = true;
  }
  return result;
}

}  // namespace nf::host

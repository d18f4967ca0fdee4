#include "pipeline/last_row_logits.h"

#include <npuforge/decoder_io.hpp>

#include <algorithm>
#include <limits>
#include <set>

#include "pipeline/tied_head.h"

namespace nf::host {
namespace {

bool contains(const std::vector<std::string>& list, const std::string& v) {
  return std::find(list.begin(), list.end(), v) != list.end();
}

// Ops that may sit between the head's MatMul and logits and act on each row alone (a
// Reshape or Expand may carry the prompt's length: not repeated on one row).
bool row_wise(const ir::Node& n, const ir::Graph& g) {
  static const std::set<std::string> kUnary = {"Cast", "Identity", "Tanh"};
  static const std::set<std::string> kWithConstant = {"Add", "Sub", "Mul", "Div"};
  if (!n.domain.empty() || n.outputs.size() != 1) return false;
  if (kUnary.count(n.op_type)) return n.inputs.size() == 1;
  if (!kWithConstant.count(n.op_type) || n.inputs.size() != 2) return false;
  const std::string& other = n.inputs[1];
  if (g.initializers.count(other)) return true;
  const ir::Node* p = g.producer(other);
  return p && p->op_type == "Constant" && p->domain.empty();
}

ir::Tensor int64s(std::vector<int64_t> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return ir::Tensor::from<int64_t>(NF_DTYPE_INT64, {n}, v);
}

}  // namespace

std::unique_ptr<ir::ModelSet> with_last_row_logits(const ir::ModelSet& ms) {
  // One target graph in the dynamic layout (static layouts are arcl's).
  if (ms.targets().size() != 1 || ms.targets()[0] != ms.graphs[0].get() || ms.metadata.count("io")) return nullptr;
  const ir::Graph& src = *ms.graphs[0];
  if (!contains(src.outputs, decoder::kLogits) || contains(src.outputs, decoder::kLastRowLogits) ||
      !contains(src.inputs, decoder::kInputIds) || !contains(src.inputs, decoder::past_key(0)))
    return nullptr;
  auto opset = src.opsets.find("");
  if (opset == src.opsets.end() || opset->second < 11) return nullptr;  // Slice with a negative axis
  const ir::Node* head = lm_head_matmul(src);
  if (!head || head->inputs.size() != 2 || head->outputs.size() != 1) return nullptr;
  // The ops from the head's output to logits, head side first.
  std::vector<const ir::Node*> chain;
  for (std::string v = decoder::kLogits; v != head->outputs[0];) {
    const ir::Node* n = src.producer(v);
    if (!n || n->inputs.empty() || !row_wise(*n, src)) return nullptr;
    chain.insert(chain.begin(), n);
    v = n->inputs[0];
  }

  auto out = ms.clone();
  ir::Graph& g = *out->graphs[0];
  const std::string prefix = std::string(decoder::kLastRowLogits) + "/";
  auto add_node = [&](const std::string& op, std::vector<std::string> in, std::string output,
                      const ir::Node* like = nullptr) {
    auto n = like ? std::make_unique<ir::Node>(*like) : std::make_unique<ir::Node>();
    n->op_type = op;
    n->name = prefix + (like ? like->name : op);
    n->inputs = std::move(in);
    n->outputs = {std::move(output)};
    g.nodes.push_back(std::move(n));
  };
  // hidden[..., -1:, :]: the sequence axis is the one before the features.
  const std::string& hidden = head->inputs[0];
  const std::string last = prefix + "hidden";
  for (auto [name, values] : {std::pair<const char*, std::vector<int64_t>>{"starts", {-1}},
                              {"ends", {std::numeric_limits<int64_t>::max()}},
                              {"axes", {-2}}})
    g.initializers[prefix + name] = ir::make_tensor_ref(int64s(values));
  add_node("Slice", {hidden, prefix + "starts", prefix + "ends", prefix + "axes"}, last);
  // The head and the ops after it again, on that row; every value keeps its encoding.
  auto carry_encoding = [&](const std::string& from, const std::string& to) {
    if (auto e = out->encodings.find(from); e != out->encodings.end()) out->encodings[to] = e->second;
  };
  carry_encoding(hidden, last);
  std::string v = last;
  std::vector<const ir::Node*> repeated{head};
  repeated.insert(repeated.end(), chain.begin(), chain.end());
  for (size_t i = 0; i < repeated.size(); ++i) {
    const ir::Node* n = repeated[i];
    const std::string made = i + 1 == repeated.size() ? decoder::kLastRowLogits : prefix + n->outputs[0];
    std::vector<std::string> in = n->inputs;
    in[0] = v;
    add_node(n->op_type, in, made, n);
    carry_encoding(n->outputs[0], made);
    v = made;
  }
  g.outputs.push_back(decoder::kLastRowLogits);
  if (auto t = g.types.find(decoder::kLogits); t != g.types.end()) {
    ir::ValueType type = t->second;
    if (type.shape && type.shape->size() == 3) (*type.shape)[1] = ir::Dim{1, ""};
    g.types[decoder::kLastRowLogits] = type;
  }
  return out;
}

}  // namespace nf::host

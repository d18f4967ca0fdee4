#include "pipeline/widen_floats.h"

#include <npuforge/kernels/elementwise.h>

#include <set>
#include <stdexcept>

#include "common/util.h"

namespace nf::host {
namespace {

bool is_16bit_float(int64_t t) { return t == NF_DTYPE_FLOAT16 || t == NF_DTYPE_BFLOAT16; }

// Elements at a time, so a multi-GB table is read and released in pieces.
constexpr int64_t kChunk = int64_t{1} << 20;

class Widener {
 public:
  Widener(const std::function<void(ir::TensorRef&)>& keep, uint64_t total) : keep_(keep), total_(total) {}

  void graph(ir::Graph& g) {
    for (auto& [name, type] : g.types) retype(type.dtype);
    for (auto& [name, ref] : g.initializers)
      if (ref && is_16bit_float(ref->tensor.dtype) && done_.insert(ref.get()).second) weight(*ref);
    for (auto& node : g.nodes)
      for (auto& [name, a] : node->attrs) attribute(name, a);
  }

  Widened result;

 private:
  void retype(ir::DType& t) {
    if (!is_16bit_float(t)) return;
    note(t);
    t = NF_DTYPE_FLOAT32;
    ++result.edits;
  }
  void note(ir::DType t) {
    if (result.from == NF_DTYPE_UNDEFINED) result.from = t;
  }

  void attribute(const std::string& name, ir::Attribute& a) {
    // Cast's `to`; `dtype` of the generator ops (EyeLike, RandomNormal, ...).
    if (a.type == NF_ATTR_INT && (name == "to" || name == "dtype") && is_16bit_float(a.i)) {
      note(static_cast<ir::DType>(a.i));
      a.i = NF_DTYPE_FLOAT32;
      ++result.edits;
    }
    // Constant's and ConstantOfShape's `value`.
    if (a.type == NF_ATTR_TENSOR && a.t && is_16bit_float(a.t->tensor.dtype)) {
      a.t = make_tensor_ref(widened(a.t->tensor));
      ++result.edits;
    }
    if (a.type == NF_ATTR_GRAPH && a.g) graph(*a.g);
  }

  void weight(ir::TensorRef& ref) {
    ref.tensor = widened(ref.tensor);
    ++result.weights;
    result.bytes += ref.tensor.nbytes();
    if (keep_) keep_(ref);
    if (progress_.report(result.bytes, total_, "")) throw Cancelled();
  }

  ir::Tensor widened(const ir::Tensor& src) {
    note(src.dtype);
    ir::Tensor out = ir::Tensor::zeros(NF_DTYPE_FLOAT32, src.dims);
    const auto* in = src.as<uint16_t>();
    float* f = out.mutable_as<float>();
    const bool bf = src.dtype == NF_DTYPE_BFLOAT16;
    const int64_t n = src.numel();
    for (int64_t begin = 0; begin < n; begin += kChunk) {
      const int64_t end = std::min(n, begin + kChunk);
      for (int64_t i = begin; i < end; ++i) f[i] = bf ? kernels::bf16_to_float(in[i]) : kernels::half_to_float(in[i]);
      if (src.buffer) src.buffer->drop_pages(src.offset + static_cast<size_t>(begin) * 2, static_cast<size_t>(end - begin) * 2);
    }
    return out;
  }

  const std::function<void(ir::TensorRef&)>& keep_;
  const uint64_t total_;
  std::set<const ir::TensorRef*> done_;  // a tensor shared by two names is widened once
  Progress progress_{"widening 16-bit weights to float32"};
};

}  // namespace

Widened widen_16bit_floats(ir::Graph& g, const std::function<void(ir::TensorRef&)>& keep) {
  uint64_t total = 0;
  std::set<const ir::TensorRef*> seen;
  for (const auto& [name, ref] : g.initializers)
    if (ref && is_16bit_float(ref->tensor.dtype) && seen.insert(ref.get()).second)
      total += static_cast<uint64_t>(ref->tensor.numel()) * 4;
  Widener w(keep, total);
  w.graph(g);
  return w.result;
}

}  // namespace nf::host

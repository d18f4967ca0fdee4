#include "npuforge/graph/value_types.h"

#include <npuforge/kernels/tensor.h>

namespace nf::graph {

bool TensorType::is_static() const {
  if (dtype == NF_DTYPE_UNDEFINED || !dims) return false;
  for (int64_t d : *dims)
    if (d < 0) return false;
  return true;
}

const char* dtype_name(nf_dtype t) { return kernels::dtype_name(t); }

std::string to_string(const TensorType& t) {
  std::string s = dtype_name(t.dtype);
  if (!t.dims) return s + "[?]";
  s += "[";
  for (size_t i = 0; i < t.dims->size(); ++i) {
    if (i) s += ", ";
    s += (*t.dims)[i] < 0 ? "?" : std::to_string((*t.dims)[i]);
  }
  return s + "]";
}

std::optional<TensorType> get_value_type(const Graph& g, const std::string& value) {
  ValueType vt;
  if (!g.value_type(value, &vt)) return std::nullopt;
  return TensorType{vt.dtype, vt.dims};
}

void set_value_type(Graph& g, const std::string& value, const TensorType& t) {
  if (!t.dims) return;  // the ABI records ranked types only
  g.set_value_type(value, t.dtype, *t.dims);
}

void set_value_type(Graph& g, const std::string& value, nf_dtype dtype, const std::vector<int64_t>& dims) {
  g.set_value_type(value, dtype, dims);
}

void set_int64_initializer(Graph& g, const std::string& name, const std::vector<int64_t>& values) {
  Tensor t = Tensor::create(NF_DTYPE_INT64, std::vector<int64_t>{static_cast<int64_t>(values.size())});
  std::copy(values.begin(), values.end(), t.mutable_as<int64_t>());
  g.set_initializer(name, t);
}

}  // namespace nf::graph

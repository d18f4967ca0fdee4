// Value types as transforms need them: read, write, and "is it fully static".
#pragma once

#include <npuforge/plugin.hpp>

#include <optional>
#include <string>
#include <vector>

namespace nf::graph {

// What is known of a value: its element type and, when the rank is known, its dims
// (-1 for a dim that is not known).
struct TensorType {
  nf_dtype dtype = NF_DTYPE_UNDEFINED;
  std::optional<std::vector<int64_t>> dims;

  bool is_static() const;
  bool operator==(const TensorType&) const = default;
};

std::string to_string(const TensorType& t);
const char* dtype_name(nf_dtype t);

// The graph's recorded type of a value (inputs, outputs, value_info, initializers).
std::optional<TensorType> get_value_type(const Graph& g, const std::string& value);
// Records a type; unknown dims (-1) are written as symbolic dims.
void set_value_type(Graph& g, const std::string& value, const TensorType& t);
void set_value_type(Graph& g, const std::string& value, nf_dtype dtype, const std::vector<int64_t>& dims);

// Sets initializer `name` to the 1-D int64 tensor `values`: the shape, axes or bounds operand
// of a node a transform adds.
void set_int64_initializer(Graph& g, const std::string& name, const std::vector<int64_t>& values);

}  // namespace nf::graph

// The shape rules of the operator table (internal to the graph toolkit; operators.cpp
// names them in the table's `infer` column).
#pragma once

#include "npuforge/graph/operators.h"

namespace nf::graph::shape_rules {

using Dims = std::vector<int64_t>;
using Types = OpTypes;
using Values = OpInputs;

Types same_as_input(const OpNode& n, const Types& in, const Values& v);
Types arithmetic(const OpNode& n, const Types& in, const Values& v);
Types comparison(const OpNode& n, const Types& in, const Values& v);
Types where(const OpNode& n, const Types& in, const Values& v);
Types cast(const OpNode& n, const Types& in, const Values& v);
Types shape_op(const OpNode& n, const Types& in, const Values& v);
Types reshape(const OpNode& n, const Types& in, const Values& v);
Types unsqueeze(const OpNode& n, const Types& in, const Values& v);
Types squeeze(const OpNode& n, const Types& in, const Values& v);
Types transpose(const OpNode& n, const Types& in, const Values& v);
Types concat(const OpNode& n, const Types& in, const Values& v);
Types slice(const OpNode& n, const Types& in, const Values& v);
Types gather(const OpNode& n, const Types& in, const Values& v);
Types gather_elements(const OpNode& n, const Types& in, const Values& v);
Types one_hot(const OpNode& n, const Types& in, const Values& v);
Types non_zero(const OpNode& n, const Types& in, const Values& v);
Types expand(const OpNode& n, const Types& in, const Values& v);
Types constant_of_shape(const OpNode& n, const Types& in, const Values& v);
Types matmul(const OpNode& n, const Types& in, const Values& v);
Types gemm(const OpNode& n, const Types& in, const Values& v);
Types reduce(const OpNode& n, const Types& in, const Values& v);
Types topk(const OpNode& n, const Types& in, const Values& v);
Types split(const OpNode& n, const Types& in, const Values& v);
Types tile(const OpNode& n, const Types& in, const Values& v);
Types flatten(const OpNode& n, const Types& in, const Values& v);
Types layer_norm(const OpNode& n, const Types& in, const Values& v);

}  // namespace nf::graph::shape_rules

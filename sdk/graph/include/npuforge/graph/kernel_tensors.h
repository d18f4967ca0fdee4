// Moving tensors between the host (nf::Tensor, host-owned bytes) and the reference
// kernels (kernels::Tensor) without copying host bytes when reading.
#pragma once

#include <npuforge/kernels/tensor.h>
#include <npuforge/plugin.hpp>

namespace nf::graph {

// A kernel view of a host tensor; keeps a reference to the host tensor alive.
kernels::Tensor to_kernel(const Tensor& t);
// A new host tensor holding a copy of a kernel tensor.
Tensor to_host(const kernels::Tensor& t);

}  // namespace nf::graph

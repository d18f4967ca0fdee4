#include "npuforge/graph/kernel_tensors.h"

#include <cstring>
#include <memory>

namespace nf::graph {

kernels::Tensor to_kernel(const Tensor& t) {
  auto keep = std::make_shared<Tensor>(t);
  return kernels::Tensor::borrow(t.dtype(), t.dims(), t.data(), std::shared_ptr<const void>(keep, keep.get()));
}

Tensor to_host(const kernels::Tensor& t) {
  Tensor h = Tensor::create(t.dtype(), t.dims());
  if (t.nbytes()) std::memcpy(h.mutable_data(), t.raw(), t.nbytes());
  return h;
}

}  // namespace nf::graph

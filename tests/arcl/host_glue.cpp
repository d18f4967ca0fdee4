#include "host_glue.h"

#include "test_support.h"

namespace arcl_test {

const nf_host_api* host_table() { return nf::host::host_api(); }

nf_model_set* load_model_set(const std::string& model) { return nf::host::handle(load_model(model).release()); }

}  // namespace arcl_test

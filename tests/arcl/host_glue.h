// The few host calls the SDK-level tests need, behind C types only: plugin.hpp's
// nf::host() and the host's nf::host namespace cannot meet in one translation unit.
#pragma once

#include <npuforge/plugin.h>

#include <string>

namespace arcl_test {

const nf_host_api* host_table();
// A test model's source model set (graph "model" + config metadata); release it with
// host_table()->model_set_release.
nf_model_set* load_model_set(const std::string& model);

}  // namespace arcl_test

// The arcl tests' helpers: the shared in-process ones, and arcl applied in place.
#pragma once

#include "support/plugins.h"

namespace arcl_test {

using namespace nf::test;

inline TransformResult apply_arcl(nf::ir::ModelSet& ms, const nlohmann::json& options) {
  return apply_transform(ms, "arcl", options);
}

}  // namespace arcl_test

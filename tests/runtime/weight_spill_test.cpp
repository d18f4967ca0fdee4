// The build moves weights that stages make into a scratch file between stages
// (host/pipeline/weight_spill.h): same bytes, same tensors, sharing kept, nothing in memory.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <numeric>

#include "api/host_api.h"
#include "pipeline/weight_spill.h"

using namespace nf;
namespace fs = std::filesystem;

namespace {

ir::Tensor iota_tensor(int64_t n) {
  ir::Tensor t = ir::Tensor::zeros(NF_DTYPE_FLOAT32, {n});
  std::iota(t.mutable_as<float>(), t.mutable_as<float>() + n, 0.f);
  return t;
}

}  // namespace

TEST(WeightSpill, MovesNewWeightsKeepingBytesTensorsAndSharing) {
  ir::ModelSet ms;
  ms.graphs.push_back(std::make_unique<ir::Graph>());
  ms.graphs.push_back(std::make_unique<ir::Graph>());
  const int64_t big = 512 << 10;  // 2 MiB of floats
  auto shared = ir::make_tensor_ref(iota_tensor(big));
  ms.graphs[0]->initializers["w"] = shared;
  ms.graphs[1]->initializers["w"] = ir::make_tensor_ref(shared->tensor);  // another box, same bytes
  ms.graphs[1]->initializers["small"] = ir::make_tensor_ref(iota_tensor(16));
  const uint64_t id = shared->id;

  // A folder that does not exist yet: the file goes into its nearest existing parent.
  host::WeightSpill spill(fs::temp_directory_path() / "npuforge-spill-test" / "out");
  ASSERT_TRUE(spill.active()) << "O_TMPFILE is not supported in " << fs::temp_directory_path();
  EXPECT_EQ(spill.spill(ms), static_cast<uint64_t>(big) * 4);

  const ir::Tensor& a = ms.graphs[0]->initializers["w"]->tensor;
  const ir::Tensor& b = ms.graphs[1]->initializers["w"]->tensor;
  EXPECT_EQ(ms.graphs[0]->initializers["w"]->id, id);
  EXPECT_EQ(a.buffer, b.buffer) << "a buffer shared between graphs stays one buffer";
  EXPECT_FALSE(a.buffer->writable());
  a.drop_pages();  // read back from the file
  for (int64_t i = 0; i < big; i += 4099) ASSERT_EQ(a.as<float>()[i], static_cast<float>(i));
  EXPECT_TRUE(ms.graphs[1]->initializers["small"]->tensor.buffer->writable()) << "small weights stay";

  // A writer gets its own copy; the other graph still reads the spilled bytes.
  ir::Tensor& w = ms.graphs[1]->initializers["w"]->tensor;
  w.mutable_as<float>()[0] = -1.f;
  EXPECT_EQ(a.as<float>()[0], 0.f);
  EXPECT_EQ(w.as<float>()[0], -1.f);

  EXPECT_EQ(spill.spill(ms), static_cast<uint64_t>(big) * 4) << "only the new copy moves again";
  EXPECT_EQ(spill.spill(ms), 0u);
}

// While a stage runs: a weight a plugin installs moves out when its last plugin reference goes.
TEST(WeightSpill, MovesAWeightWhenThePluginLetsItGo) {
  const nf_host_api* api = host::host_api();
  ir::Graph g;
  host::WeightSpill spill(fs::temp_directory_path());
  ASSERT_TRUE(spill.active());
  host::SpillReleasedWeights during_stage(spill);

  const int64_t dims[] = {512 << 10};
  nf_tensor* t = nullptr;
  ASSERT_EQ(api->tensor_create(NF_DTYPE_FLOAT32, dims, 1, &t), nullptr);
  auto* values = static_cast<float*>(api->tensor_mutable_data(t));
  std::iota(values, values + dims[0], 0.f);
  ASSERT_EQ(api->graph_set_initializer(host::handle(&g), "w", t), nullptr);
  api->tensor_retain(t);  // a second plugin reference
  api->tensor_release(t);
  EXPECT_TRUE(g.initializers["w"]->tensor.buffer->writable()) << "still referenced by the plugin";
  api->tensor_release(t);
  const ir::Tensor& w = g.initializers["w"]->tensor;
  EXPECT_FALSE(w.buffer->writable()) << "the last reference went: the weight is in the scratch file";
  for (int64_t i = 0; i < dims[0]; i += 4099) ASSERT_EQ(w.as<float>()[i], static_cast<float>(i));

  nf_tensor* scratch = nullptr;  // not an initializer: left alone
  ASSERT_EQ(api->tensor_create(NF_DTYPE_FLOAT32, dims, 1, &scratch), nullptr);
  auto kept = host::adopt_tensor_handle(scratch);
  EXPECT_TRUE(kept->tensor.buffer->writable());
}

// The scratch file keeps the packages' room free: a weight that would leave less than
// keep_free bytes on its file system stays in memory, and so do the ones after it.
TEST(WeightSpill, LeavesRoomForThePackages) {
  ir::ModelSet ms;
  ms.graphs.push_back(std::make_unique<ir::Graph>());
  ms.graphs[0]->initializers["w"] = ir::make_tensor_ref(iota_tensor(512 << 10));
  host::WeightSpill spill(fs::temp_directory_path(), uint64_t{1} << 62);  // more than any disk
  ASSERT_TRUE(spill.active());
  EXPECT_EQ(spill.spill(ms), 0u);
  EXPECT_FALSE(spill.active());
  EXPECT_TRUE(ms.graphs[0]->initializers["w"]->tensor.buffer->writable()) << "the weight stays in memory";
  EXPECT_EQ(ms.graphs[0]->initializers["w"]->tensor.as<float>()[12345], 12345.f);

  host::WeightSpill roomy(fs::temp_directory_path(), 1);
  EXPECT_EQ(roomy.spill(ms), uint64_t{512 << 10} * 4);
}

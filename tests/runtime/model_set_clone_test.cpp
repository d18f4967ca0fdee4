// nf_host_api::model_set_clone: a copy whose graphs, metadata and encodings are its own and
// whose weights share the source's bytes (the aries compile saves its placeholder graph
// from one instead of writing and reading back the whole model set).
#include <gtest/gtest.h>

#include <numeric>

#include "api/host_api.h"

using namespace nf;

TEST(ModelSetClone, SharesWeightBytesAndNothingElse) {
  const nf_host_api* api = host::host_api();
  ir::ModelSet ms;
  ms.graphs.push_back(std::make_unique<ir::Graph>());
  ms.graphs[0]->name = "g";
  ir::Tensor w = ir::Tensor::zeros(NF_DTYPE_FLOAT32, {1024});
  std::iota(w.mutable_as<float>(), w.mutable_as<float>() + 1024, 0.f);
  ms.graphs[0]->initializers["w"] = ir::make_tensor_ref(w);
  ms.metadata["config"] = "{\"hidden_size\":8}";
  ms.encodings["w"] = ir::Encoding();

  nf_model_set* copy = nullptr;
  ASSERT_EQ(api->model_set_clone(host::handle(&ms), &copy), nullptr);
  ir::ModelSet& c = *host::unwrap(copy);
  ASSERT_EQ(c.graphs.size(), 1u);
  EXPECT_EQ(c.graphs[0]->name, "g");
  EXPECT_EQ(c.graphs[0]->initializers.at("w")->tensor.data(), ms.graphs[0]->initializers.at("w")->tensor.data())
      << "weights are shared, not copied";
  EXPECT_EQ(c.metadata, ms.metadata);
  EXPECT_EQ(c.encodings.count("w"), 1u);

  // Changing the copy leaves the source as it was.
  nf_tensor* placeholder = nullptr;
  const int64_t one = 1;
  ASSERT_EQ(api->tensor_create(NF_DTYPE_FLOAT32, &one, 1, &placeholder), nullptr);
  ASSERT_EQ(api->graph_set_initializer(api->model_set_graph(copy, 0), "w", placeholder), nullptr);
  api->tensor_release(placeholder);
  ASSERT_EQ(api->model_set_remove_encoding(copy, "w"), nullptr);
  ASSERT_EQ(api->model_set_set_metadata(copy, "config", "null"), nullptr);
  EXPECT_EQ(ms.graphs[0]->initializers.at("w")->tensor.numel(), 1024);
  EXPECT_EQ(ms.graphs[0]->initializers.at("w")->tensor.as<float>()[1023], 1023.f);
  EXPECT_EQ(ms.encodings.count("w"), 1u);
  EXPECT_EQ(ms.metadata.count("config"), 1u);
  api->model_set_release(copy);

  nf_status* st = api->model_set_clone(nullptr, &copy);
  ASSERT_NE(st, nullptr);
  EXPECT_EQ(api->status_code(st), NF_STATUS_INVALID_ARGUMENT);
  api->status_release(st);
}

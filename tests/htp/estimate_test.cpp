// The htp hardware model on hand-made graph summaries (no plugin loading, no package): what
// one op costs, term by term, so a change to the model is a deliberate one.
#include <gtest/gtest.h>

#include <npuforge/plugin.hpp>

#include "estimate.h"

namespace {

using nlohmann::json;

nf::htp::HtpOptions options() {
  nf::htp::HtpOptions o;
  o.chipset = "test";
  o.vtcm_size_in_mb = 8;
  o.hvx_threads = 6;
  o.chip.chipset = "test";
  o.chip.hvx_threads_max = 6;
  o.chip.a16w8_macs_per_s = 1e12;
  o.chip.relative_rate = {{"a16w8", 1.0}, {"a16w4", 1.0}, {"a16w16", 0.5}, {"fp16", 0.5}, {"a8w8", 2.0}};
  o.chip.hvx_bytes_per_s = 1e12;
  o.chip.npu_bytes_per_s = 1e10;  // 10 GB/s: 1 ms for 10 MB
  o.chip.per_op_s = 1e-5;
  o.chip.per_graph_s = 1e-4;
  return o;
}

// One graph of `ops` at AR 128 and CL 256 (and the same graph as the AR 1 decode variant).
json package_meta(double weight_bytes) {
  return {{"variants", {{{"ar", 128}, {"cl", 256}, {"graph", "g"}}, {{"ar", 1}, {"cl", 256}, {"graph", "g1"}}}},
          {"weights", {{"w", {{"bytes", weight_bytes}}}}},
          {"weight_bytes", weight_bytes},
          {"chip", {{"file", "test.json"}}}};
}

json summaries(const json& ops) {
  json g = {{"ar", 128}, {"cl", 256}, {"split", "1_of_1"}, {"inputs", json::object()}, {"outputs", json::object()}, {"ops", ops}};
  json g1 = g;
  g1["ar"] = 1;
  return {{"g", g}, {"g1", g1}};
}

double ttft_ms(const json& ops, double weight_bytes = 0) {
  return nf::htp::estimate(options(), package_meta(weight_bytes), summaries(ops), {{"prompt_len", 128}})["ttft_ms"].get<double>();
}

// An attention matmul reading 10 MB of KV cache (1 ms at 10 GB/s) over 2 ms of MACs.
const json kAttention = {{"kind", "hmx"}, {"op", "MatMul"}, {"macs", 2e9}, {"m", 128}, {"k", 64}, {"n", 256},
                         {"a_bits", 16}, {"w_bits", 8}, {"a_int", true}, {"w_int", true}, {"weight", nullptr},
                         {"dram_in_bytes", 1e7}, {"out_bytes", 1024}};

}  // namespace

// The cache must be in VTCM before the op runs: its transfer adds to the MACs (was hidden
// under them: max(2, 1) = 2 ms, which made prefills over a big cache too fast).
TEST(HtpCostModel, CacheReadsAddToCompute) {
  EXPECT_NEAR(ttft_ms(json::array({kAttention})), 2.0 + 1.0 + 0.01 + 0.1, 1e-9);
}

// Weights are constants streamed in behind compute: the larger of the two counts.
TEST(HtpCostModel, WeightStreamHidesUnderCompute) {
  json linear = kAttention;
  linear["weight"] = "w";
  linear["dram_in_bytes"] = 0;
  EXPECT_NEAR(ttft_ms(json::array({linear}), 1e7), 2.0 + 0.01 + 0.1, 1e-9);   // 1 ms of weights under 2 ms of MACs
  EXPECT_NEAR(ttft_ms(json::array({linear}), 4e7), 4.0 + 0.01 + 0.1, 1e-9);   // 4 ms of weights: bound by DRAM
}

// A result that does not fit half the VTCM (per 32-row tile) is written and read back: that
// traffic adds too.
TEST(HtpCostModel, SpillAddsToCompute) {
  json op = {{"kind", "hvx"}, {"op", "Mul"}, {"in_bytes", 0}, {"out_bytes", 4 * 16 * 1048576.0}, {"dram_in_bytes", 0}};
  const double vector_ms = 64 * 1048576.0 / 1e12 * 1e3, spill_ms = 2 * 64 * 1048576.0 / 1e10 * 1e3;
  EXPECT_NEAR(ttft_ms(json::array({op})), vector_ms + spill_ms + 0.01 + 0.1, 1e-9);
}

// fp16 activations over integer weights (AI Hub's "w4"): the weights are expanded to fp16
// before the op, K x N of them per pass at the chip's expansion rate, in series with the op;
// integer activations (w4a16) run on the integer kernel with no expansion.
TEST(HtpCostModel, Fp16ActivationsPayTheWeightExpansion) {
  json linear = kAttention;
  linear["weight"] = "w";
  linear["dram_in_bytes"] = 0;
  linear["k"] = 1000;
  linear["n"] = 2000;
  linear["macs"] = 1e9;  // 1 ms at a16w8, 2 ms at fp16 (relative 0.5)
  auto o = options();
  o.chip.fp16_weight_expand_per_s = 1e9;  // 2e6 weights: 2 ms
  auto ms = [&](const json& op) {
    return nf::htp::estimate(o, package_meta(1e6), summaries(json::array({op})), {{"prompt_len", 128}})["ttft_ms"].get<double>();
  };
  EXPECT_NEAR(ms(linear), 1.0 + 0.01 + 0.1, 1e-9);  // w4a16: 1 ms of MACs over 0.1 ms of weights
  linear["a_int"] = false;
  EXPECT_NEAR(ms(linear), 2.0 + 2.0 + 0.01 + 0.1, 1e-9);
  o.chip.fp16_weight_expand_per_s.reset();  // a chip file without the figure: refused, not guessed
  EXPECT_THROW(ms(linear), nf::Error);
}

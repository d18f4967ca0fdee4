// What the hardware model needs of a compiled graph, taken once at compile time from the
// static shapes and encodings: per op its class (HMX matmul, HVX vector work, table
// lookup, data movement the compiler folds away), MACs, operand sizes at their stored
// widths, and which graph inputs (KV cache, mask) it is the first to read from DRAM.
// Also the compile checks: every op supported, every value static.
#pragma once

#include <npuforge/plugin.hpp>

#include <map>
#include <nlohmann/json.hpp>
#include <string>

namespace nf::htp {

struct WeightInfo {
  int bits = 16;       // stored bits per element
  uint64_t bytes = 0;  // stored bytes (payload + scales)
  bool lpbq = false;
  bool is_float = false;  // stored as fp16 (no integer encoding)
};

// Throws naming the graph and the node when an op is not one HTP runs.
void check_ops(Graph g);
// Throws naming the graph and the value when a shape is not static.
void check_static(Graph g);

// How values without an encoding are costed.
struct CostPolicy {
  bool fp16_relaxed = true;
  int assume_activation_bw = 0;  // > 0: unencoded float activations costed as integers of this width
  int assume_kv_bw = 0;          // > 0: the same for past_key_values.* / present.* values
};

// Bits per element of an activation value: its integer encoding's width, else the policy's
// assumption, else fp16 (fp32 without fp16_relaxed_precision).
int activation_bits(ModelSet ms, const std::string& value, nf_dtype dtype, const CostPolicy& p);
// True when the value runs as integers: a PER_TENSOR integer encoding, or the policy assumes one.
bool int_encoded(ModelSet ms, const std::string& value, nf_dtype dtype, const CostPolicy& p);

// The graph's summary (format in README.md, "graphs.json").
nlohmann::json summarize(ModelSet ms, Graph g, const std::map<std::string, WeightInfo>& weights, const CostPolicy& p);

}  // namespace nf::htp

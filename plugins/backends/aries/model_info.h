// What the compiler and the simulator need to know about a decoder model set: its linear
// layers (kind per BitConfig, block index, shape), its attention/MLP dimensions and KV
// capacity, read from the graphs (and the HF config in the set's metadata when present).
#pragma once

#include <npuforge/plugin.hpp>

#include <string>
#include <vector>

#include "options.h"

namespace nf::aries {

struct Linear {
  std::string weight;   // initializer name (B of MatMul/Gemm, or the input of Transpose for a tied head)
  std::string input, output, node;
  Kind kind = Kind::other;
  bool ffn_down = false;
  bool nk = false;          // stored [N, K] (Gemm transB, or a tied embedding read transposed)
  bool via_transpose = false;
  int64_t block = -1;       // transformer block index, -1 outside the blocks (head)
  int64_t K = 0, N = 0;
};

struct ModelShape {
  int64_t layers = 0, hidden = 0, heads = 0, kv_heads = 0, head_dim = 0, intermediate = 0, vocab = 0;
  bool static_graph = true;
  int64_t kv_capacity = 0;  // static context length (0: dynamic)
  int64_t max_rows = 0;     // largest rows per call (AR) over the static graphs
  std::vector<int64_t> rows_per_call;  // every static graph's rows per call (AR), ascending
  // Rows of the compiled graph that serves a pass of `rows` (the smallest AR >= rows, else
  // the largest, run as several calls); `rows` itself when no static graph says.
  int64_t graph_rows_for(int64_t rows) const;
  nlohmann::json to_json() const;
  static ModelShape from_json(const nlohmann::json& j);
};

struct ModelInfo {
  ModelShape shape;
  std::vector<Linear> linears;  // one per distinct weight
};

// Reads the graphs of `role` ("": the target decoder; "draft": a speculative decoder's
// draft, graph_roles.hpp); throws when they are not a decoder the backend understands.
ModelInfo inspect(ModelSet ms, const std::string& role = "");
// The graphs of a role ("": the target's).
std::vector<Graph> graphs_of(ModelSet ms, const std::string& role);

// Static shapes and the ARIES operator list; throws naming the graph, input/op and rule.
void check_compilable(ModelSet ms);

// Transformer blocks of each part: [first, end) per part, from split_parts / split_blocks.
std::vector<std::pair<int64_t, int64_t>> part_ranges(const AriesOptions& o, int64_t layers);

}  // namespace nf::aries

// Execution plan of one graph: nodes in topological order over numbered value slots,
// initializers and constant-only subgraphs folded at prepare time, constant MatMul/Gemm
// weights pre-packed, and slots freed after their last use. Shapes are inferred while
// running, since decoder graphs have dynamic dims.
#pragma once

#include <npuforge/plugin.hpp>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "npuforge/engine/ops.h"

namespace nf::engine {

struct SessionOptions {
  int threads = 0;                      // 0 = all cores
  std::string weight_dtype = "float32";  // float32 | int8 | int4
  int64_t block_size = 32;               // int4 block along the input dim
  // Run what carries an encoding with the encoding's numerics: weights on the integer
  // kernels at exactly their scales, activations (PER_TENSOR integer encodings on values and
  // graph inputs) rounded onto their grid where they are produced.
  bool use_encodings = true;
  // One-pass runs (calibration): float weights are used in place, not packed into copies,
  // and one viewed as [N, K] (a tied LM head's table) is read by row blocks whose mapped
  // pages go once used, so it is never resident whole.
  bool stream_weights = false;

  static SessionOptions parse(const nlohmann::json& j);
  nlohmann::json to_json() const;
};

// Checks that every node of the graph is an operator this backend runs.
void check_supported(Graph g);

// Packed weights of a session, shared by its graphs (a model set's AR/CL variants reference
// the same weight buffers): keyed by the source data pointer, layout and encoding.
struct PackCache {
  std::map<std::tuple<const void*, bool, int64_t, int64_t, const void*>, std::shared_ptr<const k::PackedWeight>> packed;
};

// Who makes and who reads each value slot of a plan's nodes as they stand (the passes that
// rewire nodes look these up).
struct SlotLinks {
  std::map<int, size_t> producer;              // slot -> index of the node making it
  std::map<int, std::vector<size_t>> readers;  // slot -> nodes reading it, once per input naming it
  std::map<int, int> output_reads;             // slot -> times the graph outputs name it
  // Node inputs and graph outputs that read `slot`.
  int uses(int slot) const;
};

class GraphPlan {
 public:
  GraphPlan(ModelSet ms, Graph g, const SessionOptions& opts, PackCache* cache = nullptr);
  // Runs with named inputs; returns new host tensors for the named outputs.
  void run(const char* const* input_names, const nf_tensor* const* inputs, size_t n_inputs,
           const char* const* output_names, nf_tensor** outputs, size_t n_outputs) const;

 private:
  int slot(const std::string& value);
  SlotLinks slot_links();
  void fold_constants();
  void move_scalar_scales(ModelSet ms, Graph g);
  void fuse_transposed_matmuls();
  void share_repeated_kv();
  void pack_weights(ModelSet ms, Graph g, PackCache* cache);
  void finish_deferred();
  void drop_unused_constants();
  void plan_frees();
  void plan_activation_quant(ModelSet ms);
  void plan_table_lookups(ModelSet ms);
  void plan_integer_mode();
  k::Tensor quantized(int slot, const k::Tensor& t) const;
  // Which nodes a run asking for `wanted` (slots) computes: those its values depend on, so a
  // graph output nobody asked for (the full logits beside logits.last_row) is not made.
  std::vector<char> needed_nodes(std::vector<int> wanted) const;

  struct Input {
    std::string name;
    int slot;
    ValueType type;
  };
  std::string graph_name_;
  SessionOptions opts_;
  std::vector<NodeDef> nodes_;
  std::map<std::string, int> slots_;
  std::vector<std::string> slot_names_;
  std::vector<k::Tensor> constants_;        // per slot; empty handle when computed at run time
  std::vector<std::string> initializer_of_;  // per slot: the initializer name, if any
  std::vector<Input> inputs_;
  std::vector<std::string> outputs_;
  std::vector<std::vector<int>> frees_after_;  // per node: slots whose last use it is
  std::map<int, int> transposed_of_;          // deferred constant 2-D Transpose: output slot -> input slot
  std::map<int, ActivationGrid> act_grid_;    // computed slots whose values carry an encoding
  std::shared_ptr<void> profile_;             // set when NPUFORGE_PROFILE is on (src/profile.h)
  mutable std::mutex needed_mu_;
  mutable std::map<std::vector<int>, std::vector<char>> needed_;  // by sorted wanted slots
};

// The kernels' view of a host tensor (zero-copy; keeps a reference to it).
k::Tensor from_host(const Tensor& t);
// A new host tensor holding a copy of a kernel tensor.
Tensor to_host(const k::Tensor& t);

}  // namespace nf::engine

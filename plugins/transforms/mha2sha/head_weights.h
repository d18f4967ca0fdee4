// Per-head slices of projection weights and biases, made once per model set and shared
// by every graph that uses the same source tensor (AR/CL variants share their weights),
// with the source's encoding sliced to follow.
#pragma once

#include <npuforge/plugin.hpp>

#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace mha2sha {

class HeadWeights {
 public:
  explicit HeadWeights(nf::ModelSet ms) : ms_(ms) {}

  // Names of `heads` slices of `tensor` along its last axis, `part` columns each, head h's
  // from column first + h * stride on (stride 0: part; W [in, cols] -> [in, part]; bias
  // [cols] -> [part]), set as initializers of `g`. A fused projection (q, k and v in one W)
  // is cut by three calls: blocks of q, k, v (Phi-3), or each head's q|k|v side by side
  // (GPT-NeoX: stride 3 * head_dim).
  std::vector<std::string> slices(nf::Graph g, const std::string& tensor, int64_t first, int64_t heads, int64_t part,
                                  int64_t stride = 0);

  // The per-head slices `heads` of activation `source` (along its last axis, `channels`
  // wide; head h is [first + h*part, first + (h+1)*part)) take its encoding: a per-tensor
  // grid as it is, a per-channel one sliced.
  void follow_activation(const std::string& source, const std::vector<std::string>& heads, int64_t channels,
                         int64_t first, int64_t part, int64_t stride = 0);

  // Slices the encodings of every sliced source tensor and drops the source's encoding
  // when no graph of the set reads the source any more. Returns how many were sliced.
  size_t finish_encodings();
  size_t sliced_tensors() const { return done_.size(); }
  size_t bytes_made() const { return bytes_; }

 private:
  struct Sliced {
    std::string source;
    int64_t heads = 0, rank = 0, first = 0, part = 0, stride = 0, columns = 0;
    std::vector<std::string> names;
    // The graph the slices went into first; later graphs take them from there. No handle is
    // kept, so each slice can leave memory as soon as it is made (the host spills weights).
    nf::Graph origin{nullptr};
  };
  nf::ModelSet ms_;
  std::map<std::tuple<std::string, const void*, int64_t>, Sliced> done_;
  size_t bytes_ = 0;
};

}  // namespace mha2sha

// Per-head slices of projection weights and biases, made once per model set and shared
// by every graph that uses the same source tensor (AR/CL variants share their weights),
// with the source's encoding sliced to follow.
#pragma once

#include <npuforge/plugin.hpp>

#include <map>
#include <string>
#include <vector>

namespace mha2sha {

class HeadWeights {
 public:
  explicit HeadWeights(nf::ModelSet ms) : ms_(ms) {}

  // Names of `heads` slices of `tensor` along its last axis (W [in, heads*hd] -> [in, hd];
  // bias [heads*hd] -> [hd]), set as initializers of `g`.
  std::vector<std::string> slices(nf::Graph g, const std::string& tensor, int64_t heads);

  // The per-head slices `heads` of activation `source` (along its last axis, `channels`
  // wide) take its encoding: a per-tensor grid as it is, a per-channel one sliced.
  void follow_activation(const std::string& source, const std::vector<std::string>& heads, int64_t channels);

  // Slices the encodings of every sliced source tensor and drops the source's encoding
  // when no graph of the set reads the source any more. Returns how many were sliced.
  size_t finish_encodings();
  size_t sliced_tensors() const { return done_.size(); }
  size_t bytes_made() const { return bytes_; }

 private:
  struct Sliced {
    std::string source;
    int64_t heads = 0, rank = 0;
    std::vector<std::string> names;
    std::vector<nf::Tensor> tensors;
  };
  nf::ModelSet ms_;
  std::map<std::pair<std::string, const void*>, Sliced> done_;
  size_t bytes_ = 0;
};

}  // namespace mha2sha

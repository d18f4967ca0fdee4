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

// Where each head's `part` columns sit among a projection's columns: head h's start at
// first + h * stride (stride 0: part), or, when the heads come in groups of `group` (InternLM2's
// wqkv holds each KV group's query heads, then its key and its value), at
// first + (h / group) * group_stride + (h % group) * stride.
struct HeadColumns {
  int64_t first = 0, part = 0, stride = 0, group = 0, group_stride = 0;
  int64_t step() const { return stride ? stride : part; }
  int64_t of(int64_t h) const { return group ? first + h / group * group_stride + h % group * step() : first + h * step(); }
  bool operator==(const HeadColumns& o) const {
    return first == o.first && part == o.part && step() == o.step() && group == o.group && group_stride == o.group_stride;
  }
};

class HeadWeights {
 public:
  explicit HeadWeights(nf::ModelSet ms) : ms_(ms) {}

  // Names of `heads` slices of `tensor` along its last axis, at `cols` (W [in, cols] ->
  // [in, part]; bias [cols] -> [part]), set as initializers of `g`. A fused projection (q, k
  // and v in one W) is cut by three calls: blocks of q, k, v (Phi-3), each head's q|k|v side
  // by side (GPT-NeoX: stride 3 * head_dim), or each KV group's (InternLM2: groups).
  std::vector<std::string> slices(nf::Graph g, const std::string& tensor, int64_t heads, const HeadColumns& cols);

  // The per-head slices `heads` of activation `source` (along its last axis, `channels`
  // wide, head h at cols.of(h)) take its encoding: a per-tensor grid as it is, a
  // per-channel one sliced.
  void follow_activation(const std::string& source, const std::vector<std::string>& heads, int64_t channels,
                         const HeadColumns& cols);

  // Slices the encodings of every sliced source tensor and drops the source's encoding
  // when no graph of the set reads the source any more. Returns how many were sliced.
  size_t finish_encodings();
  size_t sliced_tensors() const { return done_.size(); }
  size_t bytes_made() const { return bytes_; }

 private:
  struct Sliced {
    std::string source;
    int64_t heads = 0, rank = 0, columns = 0;
    HeadColumns cols;
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

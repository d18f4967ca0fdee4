// A minimal static-layout decoder for the tests: it keeps every layer's KV rows, fills the
// fixed cache buffers, masks and positions of arcl's graphs by hand, and runs them on the
// cpu backend. It follows the contract in plugins/transforms/arcl/README.md and nothing
// else (the real runner lives in host/runner).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "runtime/session.h"

namespace arcl_test {

struct VariantIO {
  std::string graph;
  int64_t ar = 0, cl = 0;
  std::optional<int64_t> scl;
};

class StaticDecoder {
 public:
  // `io` is the model set's "io" metadata written by arcl.
  StaticDecoder(nf::host::BackendSession& session, const nlohmann::json& io);

  // Runs `tokens` (at most the variant's AR) after the committed rows, commits them and
  // returns the logits of the last one.
  std::vector<float> step(const VariantIO& v, std::span<const int32_t> tokens);
  // Feeds a prompt through `v` in chunks of AR; logits of the last token.
  std::vector<float> prefill(const VariantIO& v, std::span<const int32_t> tokens);
  int64_t n_past() const { return n_past_; }

 private:
  // Additive mask [AR, columns] for a buffer of `columns - AR` cache slots holding the
  // most recent `cached` positions; `window` 0 means no window.
  std::vector<float> mask(int64_t ar, int64_t columns, int64_t n_rows, int64_t cached, int64_t window) const;

  nf::host::BackendSession& session_;
  nlohmann::json io_;
  bool htp_ = false;
  int64_t layers_ = 0, kv_heads_ = 0, head_dim_ = 0, vocab_ = 0, window_ = 0;
  std::vector<bool> sliding_;
  int64_t n_past_ = 0;
  // [layer][position] -> kv_heads * head_dim floats, head-major.
  std::vector<std::vector<std::vector<float>>> keys_, values_;
};

// Index of the largest logit (first on ties), like torch.argmax.
int32_t argmax(const std::vector<float>& logits);

}  // namespace arcl_test

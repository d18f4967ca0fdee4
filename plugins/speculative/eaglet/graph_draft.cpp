#include "graph_draft.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "draft_graph.h"

namespace eaglet {

GraphDraft::GraphDraft(nf_runner* target, nf_runner* draft, const std::string& dir) : target_(target), r_(draft) {
  const DraftFile file = read_draft_file(dir);
  cfg_ = file.config;
  head_ = static_cast<int64_t>(nf::host().runner_vocab_size(r_));
  if (head_ <= 0 || head_ > cfg_.vocab) {
    nf::host().runner_release(r_);
    throw nf::Error("eaglet: the draft graph's logits are " + std::to_string(head_) + " wide (a static vocabulary of at most " +
                    std::to_string(cfg_.vocab) + " expected)");
  }
  head_tokens_ = head_tokens(file, head_, cfg_.vocab);
}

GraphDraft::~GraphDraft() { nf::host().runner_release(r_); }

void GraphDraft::forward(const std::vector<int32_t>& tokens, const std::vector<int32_t>& parents,
                         const std::vector<float>& features, std::vector<float>& out_features, std::vector<float>& logits,
                         bool keep) {
  const size_t n = tokens.size(), H = static_cast<size_t>(cfg_.hidden);
  nf::check(nf::host().runner_set_row_input(r_, kFeatureInput, features.data(), n, H));
  logits.resize(n * static_cast<size_t>(head_));
  if (keep)
    nf::check(nf::host().runner_forward_scratch(r_, tokens.data(), parents.data(), n, logits.data()));
  else
    nf::check(nf::host().runner_forward(r_, tokens.data(), parents.data(), n, logits.data()));
  count_pass(n);
  nf_tensor* hs = nf::host().runner_last_output(r_, kFeatureOutputInSet);
  if (!hs) throw nf::Error("eaglet: the draft graph returned no '" + std::string(kFeatureOutputInSet) + "'");
  const nf::Tensor t = nf::Tensor::borrow(hs);
  const auto dims = t.dims();
  if (t.dtype() != NF_DTYPE_FLOAT32 || dims.size() != 3 || dims[1] < static_cast<int64_t>(n) ||
      dims[2] != cfg_.hidden)
    throw nf::Error("eaglet: the draft graph's hidden_states is not float32 [1, rows, " + std::to_string(H) + "]");
  out_features.assign(t.data_as<float>(), t.data_as<float>() + n * H);
}

void GraphDraft::run_committed(std::span<const Row> rows, float* features, float* logits) {
  const size_t H = static_cast<size_t>(cfg_.hidden), V = static_cast<size_t>(head_);
  for (size_t done = 0; done < rows.size();) {
    const size_t n = std::min(rows.size() - done, nf::host().runner_rows_available(r_));
    if (n == 0) throw nf::Error("eaglet: the draft's context is full");
    const Chain c = chain_of(rows.subspan(done, n), H);
    std::vector<float> f, l;
    forward(c.tokens, c.parents, c.features, f, l);
    nf::check(nf::host().runner_commit(r_, c.rows.data(), n));
    std::copy(f.begin(), f.end(), features + done * H);
    std::copy(l.begin(), l.end(), logits + done * V);
    done += n;
  }
}

std::vector<int32_t> GraphDraft::run_scratch(std::span<const Row> rows, float* features, float* logits) {
  const size_t H = static_cast<size_t>(cfg_.hidden), V = static_cast<size_t>(head_);
  std::vector<int32_t> ids;
  for (const Row& row : rows) {
    if (row.parent >= static_cast<int32_t>(scratch_.size()))
      throw nf::Error("eaglet: a draft row's parent must be an earlier scratch entry");
    ids.push_back(static_cast<int32_t>(scratch_.size()));
    scratch_.push_back({row.token, row.parent, {row.feature, row.feature + H}});
  }
  // A runner that keeps scratch rows holds every earlier entry (entry e = its scratch row
  // e): only the new entries run.
  if (keeps_scratch_) {
    std::vector<int32_t> tokens, parents;
    std::vector<float> in;
    for (const Row& row : rows) {
      tokens.push_back(row.token);
      parents.push_back(row.parent);
      in.insert(in.end(), row.feature, row.feature + H);
    }
    std::vector<float> f, l;
    try {
      forward(tokens, parents, in, f, l, true);
      std::copy(f.begin(), f.end(), features);
      std::copy(l.begin(), l.end(), logits);
      return ids;
    } catch (const nf::Error& e) {
      if (e.code != NF_STATUS_UNSUPPORTED || scratch_.size() != rows.size()) throw;
      keeps_scratch_ = false;  // the first call says so: run ancestors again from now on
    }
  }
  // Else the new entries run with their ancestors, which come out as before (the draft is
  // a function of its inputs).
  std::set<int32_t> needed;
  for (int32_t id : ids)
    for (int32_t e = id; e >= 0 && needed.insert(e).second; e = scratch_[static_cast<size_t>(e)].parent) {
    }
  std::vector<int32_t> row_of(scratch_.size(), -1), tokens, parents;
  std::vector<float> in;
  for (int32_t e : needed) {  // ascending: a parent before its children
    const Entry& entry = scratch_[static_cast<size_t>(e)];
    row_of[static_cast<size_t>(e)] = static_cast<int32_t>(tokens.size());
    tokens.push_back(entry.token);
    parents.push_back(entry.parent < 0 ? -1 : row_of[static_cast<size_t>(entry.parent)]);
    in.insert(in.end(), entry.feature.begin(), entry.feature.end());
  }
  if (tokens.size() > nf::host().runner_rows_available(r_))
    throw nf::Error("eaglet: the draft tree needs " + std::to_string(tokens.size()) + " rows, the draft graph takes " +
                    std::to_string(nf::host().runner_rows_available(r_)));
  std::vector<float> f, l;
  forward(tokens, parents, in, f, l);
  for (size_t i = 0; i < ids.size(); ++i) {
    const size_t r = static_cast<size_t>(row_of[static_cast<size_t>(ids[i])]);
    std::memcpy(features + i * H, f.data() + r * H, H * sizeof(float));
    std::memcpy(logits + i * V, l.data() + r * V, V * sizeof(float));
  }
  return ids;
}

void GraphDraft::clear_scratch() {
  scratch_.clear();
  nf::host().runner_clear_scratch(r_);
}

void GraphDraft::clear_cache() {
  // No reset in the runner API: a fresh runner of the draft role has an empty cache.
  nf_runner* fresh = nullptr;
  nf::check(nf::host().runner_open_role(target_, "draft", &fresh));
  nf::host().runner_release(r_);
  r_ = fresh;
  clear_scratch();
}

}  // namespace eaglet

#include "runner/speculative.h"

#include <algorithm>
#include <stdexcept>

#include "api/host_api.h"
#include "common/util.h"
#include "manifest/schema.h"

namespace nf::host {
namespace {

// Hands the decoder the runner while counting its forward calls and rows: a backend pass
// count would charge the DynamicRunner's path-by-path scoring to the decoder.
struct CountingRunner final : nf_runner {
  explicit CountingRunner(Runner& r) : inner(r) {}
  size_t vocab_size() const override { return inner.vocab_size(); }
  size_t max_rows() const override { return inner.max_rows(); }
  size_t n_past() const override { return inner.n_past(); }
  size_t rows_available() const override { return inner.rows_available(); }
  void forward(const int32_t* tokens, const int32_t* parents, size_t n_rows, float* logits) override {
    inner.forward(tokens, parents, n_rows, logits);
    ++forwards;
    most_rows = std::max<int64_t>(most_rows, static_cast<int64_t>(n_rows));
  }
  void commit(const int32_t* rows, size_t n) override { inner.commit(rows, n); }
  nf_tensor* last_output(const char* name) override { return inner.last_output(name); }
  size_t input_vocab_size() const override { return inner.input_vocab_size(); }
  nf_runner* open_role(const char* role) override { return inner.open_role(role); }
  void set_prefix_kv(size_t layers, size_t kv_heads, size_t n, size_t head_dim, const float* keys,
                     const float* values) override {
    inner.set_prefix_kv(layers, kv_heads, n, head_dim, keys, values);
  }
  void forward_flags(const int32_t* tokens, const int32_t* parents, const uint32_t* flags, size_t n_rows,
                     float* logits) override {
    inner.forward_flags(tokens, parents, flags, n_rows, logits);
    ++forwards;
    most_rows = std::max<int64_t>(most_rows, static_cast<int64_t>(n_rows));
  }
  bool keeps_scratch() const override { return inner.keeps_scratch(); }
  void forward_scratch(const int32_t* tokens, const int32_t* parents, size_t n_rows, float* logits) override {
    inner.forward_scratch(tokens, parents, n_rows, logits);
    ++forwards;
    most_rows = std::max<int64_t>(most_rows, static_cast<int64_t>(n_rows));
  }
  void clear_scratch() override { inner.clear_scratch(); }

  Runner& inner;
  int64_t forwards = 0, most_rows = 0;
};

// Owns a decoder instance; releases it through the plugin's table.
struct DecoderHandle {
  const nf_speculative_api* api;
  nf_decoder* d = nullptr;
  ~DecoderHandle() {
    if (d) call_plugin_void("speculative decoder release", [&] { api->release(d); });
  }
};

}  // namespace

nlohmann::json SpeculativeStats::to_json() const {
  return {{"tau", tau},
          {"acceptance_rate", acceptance_rate},
          {"steps", steps},
          {"target_forwards", target_forwards},
          {"draft_forwards", draft_forwards},
          {"backend_passes", gen.forward_passes},
          {"max_rows", max_rows},
          {"wall_seconds", wall_seconds},
          {"decoder", decoder}};
}

std::vector<int32_t> generate_speculative(Runner& runner, const PluginInfo& decoder, const nlohmann::json& options,
                                          std::span<const int32_t> prompt, int max_new, Sampler& sampler,
                                          std::span<const int32_t> stop_ids,
                                          const std::function<void(int32_t)>& on_token, SpeculativeStats* stats) {
  if (prompt.empty()) throw std::runtime_error("empty prompt: give at least one token");
  if (decoder.kind != NF_KIND_SPECULATIVE) throw std::runtime_error("'" + decoder.name + "' is not a speculative decoder");
  nlohmann::json opts = options.is_null() ? nlohmann::json::object() : options;
  auto errors = manifest::validate_json(decoder.schema, opts, {"option", "speculative decoder '" + decoder.name + "'"});
  if (!errors.empty()) throw std::runtime_error(errors[0].message);

  SpeculativeStats st;
  st.gen.prompt_tokens = static_cast<int64_t>(prompt.size());
  int64_t passes0 = runner.forward_passes();
  double t0 = now_seconds();
  std::vector<float> logits = runner.append(prompt);
  double t1 = now_seconds();
  st.gen.prefill_seconds = t1 - t0;

  CountingRunner counted(runner);
  const nf_speculative_api* api = decoder.speculative();
  DecoderHandle h{api};
  nf_context ctx{"speculative " + decoder.name, {}};
  std::string opts_text = opts.dump();
  throw_if_error(call_plugin_entry([&] {
                   return api->create(opts_text.c_str(), &counted, prompt.data(), prompt.size(), &ctx, &h.d);
                 }),
                 "speculative decoder '" + decoder.name + "'");

  // The decoder draws the target's tokens through this, so sampling stays the host's.
  auto sample = [](void* user, const float* l) -> int32_t {
    auto* self = static_cast<std::pair<Sampler*, size_t>*>(user);
    return (*self->first)(std::span<const float>(l, self->second));
  };
  std::pair<Sampler*, size_t> sample_user{&sampler, logits.size()};

  std::vector<int32_t> out;
  std::vector<int32_t> buf(static_cast<size_t>(std::max(1, max_new)));
  st.gen.stop_reason = "max_new_tokens";
  bool stopped = false;
  while (!stopped && static_cast<int>(out.size()) < max_new) {
    if (cancel_flag()) {
      st.gen.stop_reason = "interrupted";
      break;
    }
    size_t room = static_cast<size_t>(max_new) - out.size();
    // At the end of the context a step may return one last token, without a forward (as
    // plain decoding samples its last token from the full cache's logits); then it stops.
    const bool last = runner.rows_available() == 0;
    if (last) room = 1;
    size_t n = 0;
    throw_if_error(call_plugin_entry([&] { return api->step(h.d, logits.data(), sample, &sample_user, buf.data(), room, &n); }),
                   "speculative decoder '" + decoder.name + "'");
    if (n == 0 || n > room) throw std::runtime_error("speculative decoder '" + decoder.name + "' returned " +
                                                     std::to_string(n) + " tokens for room " + std::to_string(room));
    ++st.steps;
    for (size_t i = 0; i < n; ++i) {
      int32_t tok = buf[i];
      out.push_back(tok);
      if (on_token) on_token(tok);
      if (std::find(stop_ids.begin(), stop_ids.end(), tok) != stop_ids.end()) {
        st.gen.stop_reason = "eos";
        stopped = true;
        break;
      }
    }
    if (last && !stopped && static_cast<int>(out.size()) < max_new) {
      st.gen.stop_reason = "context_full";
      stopped = true;
    }
  }
  double t2 = now_seconds();
  if (api->stats)
    call_plugin_void("speculative decoder stats", [&] {
      api->stats(h.d, [](void* user, const char* json) {
        *static_cast<nlohmann::json*>(user) = nlohmann::json::parse(json ? json : "", nullptr, false);
      }, &st.decoder);
    });

  if (st.decoder.is_object() && st.decoder.contains("draft_forwards") && st.decoder["draft_forwards"].is_number_integer())
    st.draft_forwards = st.decoder["draft_forwards"].get<int64_t>();
  st.gen.decode_seconds = t2 - t1;
  st.gen.new_tokens = static_cast<int64_t>(out.size());
  st.gen.forward_passes = runner.forward_passes() - passes0;
  st.target_forwards = counted.forwards;
  st.max_rows = counted.most_rows;
  st.wall_seconds = t2 - t0;
  // The first new token comes from the prefill's logits in plain decoding too; each
  // forward after it yields the bonus token plus the accepted drafts.
  st.tau = st.target_forwards > 0 ? static_cast<double>(st.gen.new_tokens) / static_cast<double>(st.target_forwards) : 0;
  st.acceptance_rate = st.gen.new_tokens > 0
                           ? static_cast<double>(st.gen.new_tokens - st.steps) / static_cast<double>(st.gen.new_tokens)
                           : 0;
  if (stats) *stats = std::move(st);
  return out;
}

}  // namespace nf::host

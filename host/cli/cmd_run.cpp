// `npuforge run MODEL.onnx|PACKAGE (--prompt TEXT | --prompt-ids 1,2,3) [...]`.
#include <cstdio>
#include <iostream>

#include "cli/commands.h"
#include "cli/open_model.h"
#include "runner/generate.h"
#include "runner/speculative.h"
#include "tokenizer/tokenizer.h"

namespace nf::cli {
namespace {

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    std::string item = text.substr(start, end - start);
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(item, &used);
    } catch (...) {
      used = 0;
    }
    if (used == 0 || used != item.size() || v < 0 || v > INT32_MAX)
      throw UserError("bad prompt id '" + item + "' in --prompt-ids (want non-negative integers separated by commas)");
    ids.push_back(static_cast<int32_t>(v));
    start = end + 1;
  }
  return ids;
}

}  // namespace

void add_run(CLI::App& app) {
  auto* cmd = app.add_subcommand("run", "Generate text from a model or package");
  static std::string path, prompt, prompt_ids;
  static int max_new = 32;
  static host::SamplingParams sp;
  static bool json = false, show_stats = false;
  static std::string decoder_name;
  cmd->add_option("model", path, "model.onnx or a package directory")->required();
  auto* p1 = cmd->add_option("--prompt", prompt, "Prompt text (needs a tokenizer)");
  auto* p2 = cmd->add_option("--prompt-ids", prompt_ids, "Prompt token ids, e.g. 1,2,3");
  p1->excludes(p2);
  static CLI::Option* ids_option = p2;
  cmd->add_option("--max-new-tokens", max_new, "Tokens to generate")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  cmd->add_option("--temperature", sp.temperature, "0 = greedy")->check(CLI::Range(0.0, 100.0))->capture_default_str();
  cmd->add_option("--top-k", sp.top_k, "Keep the k most likely tokens (0 = all)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-p", sp.top_p, "Nucleus sampling mass")->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--seed", sp.seed, "Sampling seed");
  cmd->add_flag("--json", json, "One JSON object: tokens, text, stats");
  cmd->add_option("--decoder", decoder_name,
                  "Speculative decoder, or 'none' (default: the package's [speculative] decoder)");
  cmd->add_flag("--stats", show_stats, "Print speculative decoding stats (tau, acceptance, forwards) to stderr");
  cmd->callback([] {
    bool have_ids = ids_option->count() > 0;
    if (prompt.empty() && !have_ids) throw UserError("give --prompt TEXT or --prompt-ids 1,2,3");
    auto model = open_model(path);
    std::optional<Tokenizer> tok;
    if (!model->tokenizer.empty()) tok = Tokenizer::load(model->tokenizer);
    std::vector<int32_t> ids;
    if (have_ids) {
      ids = parse_ids(prompt_ids);
    } else {
      if (!tok) throw UserError(path + ": no tokenizer.json for --prompt; use --prompt-ids");
      ids = tok->encode(prompt);
      if (ids.empty()) throw UserError("the prompt encodes to no tokens");
    }
    for (int32_t id : ids)
      if (model->vocab > 0 && id >= model->vocab)
        throw UserError("prompt id " + std::to_string(id) + " is out of range (vocab size " +
                        std::to_string(model->vocab) + ")");
    std::vector<int32_t> stops;
    if (tok) stops = tok->stop_ids();

    host::Sampler sampler(sp);
    std::optional<Tokenizer::Stream> stream;
    if (tok && !json) stream.emplace(tok->stream());
    auto on_token = [&](int32_t t) {
      if (json) return;
      if (stream)
        std::fputs(stream->push(t).c_str(), stdout);
      else
        std::printf("%d ", t);
      std::fflush(stdout);
    };
    // The decoder: --decoder wins, then the package's speculative entry, else none.
    std::string dname = decoder_name;
    nlohmann::json doptions = nlohmann::json::object();
    if (dname.empty() && model->package) {
      const auto& spec = model->package->meta.value("speculative", nlohmann::json());
      if (spec.is_object() && spec.contains("decoder")) {
        dname = spec["decoder"].get<std::string>();
        doptions = spec.value("options", nlohmann::json::object());
      }
    }
    if (dname == "none") dname.clear();
    const host::PluginInfo* decoder = nullptr;
    if (!dname.empty()) {
      decoder = model->registry.find(NF_KIND_SPECULATIVE, dname);
      if (!decoder) {
        std::string installed;
        for (const auto* p : model->registry.list(NF_KIND_SPECULATIVE)) installed += (installed.empty() ? "" : ", ") + p->name;
        throw UserError("unknown speculative decoder '" + dname + "'; installed: " +
                        (installed.empty() ? "none" : installed));
      }
    }

    host::GenerateStats st;
    std::vector<int32_t> out;
    std::optional<host::SpeculativeStats> spec_stats;
    if (decoder) {
      spec_stats.emplace();
      out = host::generate_speculative(*model->runner, *decoder, doptions, ids, max_new, sampler, stops, on_token,
                                       &*spec_stats);
      st = spec_stats->gen;
    } else {
      out = host::generate(*model->runner, ids, max_new, sampler, stops, on_token, &st);
    }
    nlohmann::json stats{{"prompt_tokens", st.prompt_tokens},
                         {"new_tokens", st.new_tokens},
                         {"forward_passes", st.forward_passes},
                         {"prefill_seconds", st.prefill_seconds},
                         {"decode_seconds", st.decode_seconds},
                         {"prefill_tokens_per_s", st.prefill_seconds > 0 ? st.prompt_tokens / st.prefill_seconds : 0.0},
                         {"decode_tokens_per_s",
                          st.decode_seconds > 0 && st.new_tokens > 1 ? (st.new_tokens - 1) / st.decode_seconds : 0.0},
                         {"stop_reason", st.stop_reason}};
    if (spec_stats) stats["speculative"] = spec_stats->to_json();
    if (json) {
      nlohmann::json j{{"tokens", out}, {"stats", stats}};
      if (tok) j["text"] = tok->decode(out);
      std::cout << j.dump() << "\n";
    } else {
      if (stream) std::fputs(stream->finish().c_str(), stdout);
      std::printf("\n");
      std::fprintf(stderr, "%lld prompt tokens, %lld new tokens; prefill %.1f tok/s, decode %.1f tok/s\n",
                   static_cast<long long>(st.prompt_tokens), static_cast<long long>(st.new_tokens),
                   stats["prefill_tokens_per_s"].get<double>(), stats["decode_tokens_per_s"].get<double>());
      if (show_stats && spec_stats)
        std::fprintf(stderr, "speculative %s: tau %.3f tokens/forward, acceptance %.3f, %lld forwards (%lld backend passes, max %lld rows), %.3f s\n",
                     decoder->name.c_str(), spec_stats->tau, spec_stats->acceptance_rate,
                     static_cast<long long>(spec_stats->target_forwards),
                     static_cast<long long>(spec_stats->gen.forward_passes), static_cast<long long>(spec_stats->max_rows),
                     spec_stats->wall_seconds);
      else if (show_stats)
        std::fprintf(stderr, "no speculative decoder: %lld forwards, %.3f s\n", static_cast<long long>(st.forward_passes),
                     st.prefill_seconds + st.decode_seconds);
    }
  });
}

}  // namespace nf::cli

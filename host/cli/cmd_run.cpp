// `npuforge run MODEL.onnx|PACKAGE (--prompt TEXT | --prompt-ids 1,2,3) [...]`.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <set>

#include "cli/commands.h"
#include "cli/open_model.h"
#include "common/util.h"
#include "manifest/schema.h"
#include "runner/generate.h"
#include "runner/speculative.h"
#include "runner/static_runner.h"
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

// On packages whose backend estimates (htp, aries): simulated decode time of these new
// tokens without and with the decoder. Plain decoding costs one decode step per token. The
// decoder costs each target forward as one pass of its most rows: the backend prices the
// compiled graph that holds them at the context length (workload "pass_rows"; a backend
// that does not gets the estimate of a prompt of that many rows). A decoder whose draft
// model the package holds (graphs of role "draft") has each pass priced as a call of its
// compiled graph (workload "role": "draft" with pass_rows), and each call of its depth loop
// as one graph (role "draft_tree", the decoder's draft_tree_calls) as a call of that graph. A draft that runs outside the
// package reports it in its stats (sdk/docs/abi.md: draft_forwards, draft_rows,
// draft_linears), and the backend prices each draft pass from those matrices (workload
// "graph_pass") plus a graph launch of its own.
nlohmann::json simulated_decode(OpenModel& model, const host::SpeculativeStats& s, int64_t context_len) {
  const host::PluginInfo* backend = model.registry.find(NF_KIND_BACKEND, model.package->backend());
  if (!backend || !backend->backend()->estimate) return nullptr;
  auto estimate = [&](const nlohmann::json& workload) {
    std::string out, options = model.package->backend_options().dump(), w = workload.dump();
    auto collect = [](void* user, const char* json) { *static_cast<std::string*>(user) = json; };
    const std::string artifacts = model.package->artifacts().string();
    host::throw_if_error(host::call_plugin_entry([&] {
                           return backend->backend()->estimate(options.c_str(), artifacts.c_str(), w.c_str(), collect, &out);
                         }),
                         "backend '" + backend->name + "' estimate");
    return nlohmann::json::parse(out);
  };
  nlohmann::json r{{"backend", backend->name}, {"simulated", true}};
  try {
    const int64_t rows = std::max<int64_t>(1, s.max_rows);
    nlohmann::json one = estimate({{"prompt_len", 1}, {"context_len", context_len}, {"pass_rows", rows}});
    const double step_ms = one.at("decode_ms_per_token").get<double>();
    nlohmann::json notes = nlohmann::json::array();
    double tree_ms = 0;
    if (one.contains("pass")) {
      const nlohmann::json& pass = one["pass"];
      tree_ms = pass.at("ms").get<double>();
      notes.push_back("a target forward of up to " + std::to_string(rows) + " rows: " +
                      std::to_string(pass.value("calls", 1)) + " call(s) of the compiled " +
                      std::to_string(pass.value("graph_rows", rows)) + "-row graph at context " +
                      std::to_string(context_len) + " (backend estimate, pass_rows)");
    } else {
      tree_ms = estimate({{"prompt_len", rows}, {"context_len", context_len}}).at("ttft_ms").get<double>();
      notes.push_back("backend '" + backend->name + "' prices no pass_rows: a target forward of up to " +
                      std::to_string(rows) + " rows costs the estimate of a " + std::to_string(rows) + "-token prompt");
    }
    const double plain = static_cast<double>(s.gen.new_tokens) * step_ms;
    const double target_ms = static_cast<double>(s.target_forwards) * tree_ms;
    double draft_ms = 0, draft_pass_ms = 0, launch_ms = 0;
    const nlohmann::json roles = model.package->meta.value("metadata", nlohmann::json()).value("roles", nlohmann::json());
    if (s.draft_forwards > 0 && roles.is_object() && roles.contains("draft")) {
      // The package holds the draft: each pass is a call of its compiled graph, priced by the
      // backend's model of that graph (per op, precision as compiled) with its launch.
      // Pass by pass when the decoder counts its passes by rows (draft_pass_rows), else all at
      // the average rows.
      const double passes = static_cast<double>(s.draft_forwards);
      nlohmann::json by_rows = s.decoder.value("draft_pass_rows", nlohmann::json());
      const nlohmann::json tree_calls = s.decoder.value("draft_tree_calls", nlohmann::json());
      const bool tree = tree_calls.is_object() && !tree_calls.empty();
      if ((!by_rows.is_object() || by_rows.empty()) && !tree) {
        const double rows = s.decoder.value("draft_rows", 0.0) / passes;
        by_rows = {{std::to_string(static_cast<int64_t>(std::ceil(std::max(1.0, rows)))), s.draft_forwards}};
      }
      // Each call of role `role`'s graphs by its rows ({"rows": calls}), noted as `what`.
      auto price = [&](const char* role, const nlohmann::json& calls, const std::string& what) {
        if (!calls.is_object() || calls.empty()) return;
        std::set<int64_t> graph_rows;
        for (const auto& [rows, count] : calls.items()) {
          const int64_t r = std::stoll(rows);
          if (r < 1 || !count.is_number_unsigned()) throw std::runtime_error("the decoder's " + what + " counts are malformed");
          nlohmann::json d = estimate({{"role", role}, {"prompt_len", 1}, {"context_len", context_len}, {"pass_rows", r}});
          draft_ms += count.get<double>() * d.at("pass").at("ms").get<double>();
          graph_rows.insert(d["pass"].value("graph_rows", r));
        }
        std::string variants;
        for (int64_t g : graph_rows) variants += (variants.empty() ? "" : "/") + std::to_string(g);
        notes.push_back(what + ": calls of the package's " + role + " graph holding each call's rows (" + variants +
                        "-row variants) at context " + std::to_string(context_len) + " (backend estimate, role " + role + ")");
      };
      price("draft", by_rows, "draft passes");
      price("draft_tree", tree_calls, "draft trees (the depth loop as one graph a step)");
      draft_pass_ms = draft_ms / passes;
    } else if (s.draft_forwards > 0) {
      const double draft_rows = s.decoder.value("draft_rows", 0.0);
      if (draft_rows <= 0 || !s.decoder.contains("draft_linears"))
        throw std::runtime_error("the decoder reports draft_forwards but no draft_linears / draft_rows to price them by");
      const double passes = static_cast<double>(s.draft_forwards);
      nlohmann::json pass = estimate({{"graph_pass", {{"linears", s.decoder["draft_linears"]}, {"rows", draft_rows / passes}}}});
      if (!pass.contains("graph_pass_ms"))
        throw std::runtime_error("backend '" + backend->name + "' does not price a graph_pass: the draft cannot be priced");
      draft_pass_ms = pass["graph_pass_ms"].get<double>();
      launch_ms = pass.value("per_graph_ms", 0.0);
      draft_ms = passes * (draft_pass_ms + launch_ms);
      notes.push_back("a draft pass: the draft's linears at the average " + std::to_string(draft_rows / passes).substr(0, 5) +
                      " rows, weights " + pass.value("weights_stored_as", std::string("?")) +
                      " (backend graph_pass), and a graph launch of its own");
    }
    const double spec = target_ms + draft_ms;
    r.update({{"context_len", context_len},
              {"decode_step_ms", step_ms},
              {"tree_pass_ms", tree_ms},
              {"draft_pass_ms", draft_pass_ms},
              {"draft_launch_ms", launch_ms},
              {"target_forwards_ms", target_ms},
              {"draft_ms", draft_ms},
              {"plain_decode_ms", plain},
              {"speculative_decode_ms", spec},
              {"speedup", spec > 0 ? plain / spec : 0.0},
              {"notes", notes}});
  } catch (const std::exception& e) {
    r["error"] = e.what();
  }
  return r;
}

}  // namespace

void add_run(CLI::App& app) {
  auto* cmd = app.add_subcommand("run", "Generate text from a model or package");
  static std::string path, prompt, prompt_ids;
  static int max_new = 32;
  static host::SamplingParams sp;
  static bool json = false, show_stats = false;
  static std::string decoder_name, profile;
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
  add_profile_option(cmd, profile);
  cmd->callback([] {
    host::install_cancel_handler();  // stops at the next token
    bool have_ids = ids_option->count() > 0;
    if (prompt.empty() && !have_ids) throw UserError("give --prompt TEXT or --prompt-ids 1,2,3");
    const std::filesystem::path profile_file = start_profile(profile);
    auto model = open_model(path, decoder_name == "none" ? "" : decoder_name);
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
    // A prompt the context cannot hold is bad input; filling the context while generating
    // is a normal stop ("context_full").
    if (const auto* s = dynamic_cast<const host::StaticRunner*>(model->runner.get()))
      if (static_cast<int64_t>(ids.size()) > s->context_length())
        throw UserError("the prompt has " + std::to_string(ids.size()) + " tokens, more than the " +
                        std::to_string(s->context_length()) + " the context of " + path + " holds");
    // With a tokenizer (text in, text out): its end tokens and config.json's eos_token_id.
    std::vector<int32_t> stops;
    if (tok) {
      stops = tok->stop_ids();
      for (int32_t id : model->eos_ids)
        if (std::find(stops.begin(), stops.end(), id) == stops.end()) stops.push_back(id);
    }

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
    if (model->package) {
      // The package's [speculative] options also apply when --decoder names that decoder.
      const auto& spec = model->package->meta.value("speculative", nlohmann::json());
      if (spec.is_object() && spec.contains("decoder") && (dname.empty() || dname == spec["decoder"].get<std::string>())) {
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

    if (decoder) {
      // Asset options (a draft model, learned embeddings) are relative to the package, or
      // to the folder of a bare model.onnx. Defaults first, so a default path resolves too;
      // schema errors are reported by generate_speculative.
      std::filesystem::path base =
          model->package ? model->package->root : std::filesystem::absolute(path).parent_path();
      manifest::validate_json(decoder->schema, doptions);
      for (const std::string& key : manifest::asset_properties(decoder->schema))
        if (doptions.contains(key) && doptions[key].is_string() &&
            std::filesystem::path(doptions[key].get<std::string>()).is_relative())
          doptions[key] = (base / doptions[key].get<std::string>()).string();
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
    const bool interrupted = st.stop_reason == "interrupted";
    if (spec_stats) {
      stats["speculative"] = spec_stats->to_json();
      if (model->package) {
        auto sim = simulated_decode(*model, *spec_stats, st.prompt_tokens + st.new_tokens);
        if (!sim.is_null()) stats["speculative"]["simulated"] = sim;
      }
    }
    if (json) {
      nlohmann::json j{{"tokens", out}, {"stop", st.stop_reason}, {"stats", stats}};
      if (tok) j["text"] = tok->decode(out);
      std::cout << j.dump() << std::endl;
    } else {
      // The text ends its line before anything goes to stderr: flushed, so a terminal or a
      // log taking both streams never gets the stats line glued to the text.
      if (stream) std::fputs(stream->finish().c_str(), stdout);
      std::printf("\n");
      std::fflush(stdout);
      const std::string why = st.stop_reason == "eos"            ? "; stopped at an end-of-sequence token"
                              : st.stop_reason == "context_full" ? "; stopped at the end of the context (" +
                                                                       std::to_string(model->runner->n_past()) +
                                                                       " tokens)"
                              : interrupted                      ? "; interrupted"
                                                                 : "";
      if (!quiet())
        std::fprintf(stderr, "%lld prompt tokens, %lld new tokens; prefill %.1f tok/s, decode %.1f tok/s%s\n",
                     static_cast<long long>(st.prompt_tokens), static_cast<long long>(st.new_tokens),
                     stats["prefill_tokens_per_s"].get<double>(), stats["decode_tokens_per_s"].get<double>(),
                     why.c_str());
      if (show_stats && spec_stats)
        std::fprintf(stderr, "speculative %s: tau %.3f tokens/forward, acceptance %.3f, %lld forwards (%lld draft forwards, %lld backend passes, max %lld rows), %.3f s\n",
                     decoder->name.c_str(), spec_stats->tau, spec_stats->acceptance_rate,
                     static_cast<long long>(spec_stats->target_forwards),
                     static_cast<long long>(spec_stats->draft_forwards),
                     static_cast<long long>(spec_stats->gen.forward_passes), static_cast<long long>(spec_stats->max_rows),
                     spec_stats->wall_seconds);
      if (show_stats && spec_stats && stats["speculative"].contains("simulated")) {
        const auto& sim = stats["speculative"]["simulated"];
        if (sim.contains("error"))
          std::fprintf(stderr, "simulated on %s: %s\n", sim["backend"].get<std::string>().c_str(),
                       sim["error"].get<std::string>().c_str());
        else
          std::fprintf(stderr, "simulated on %s: decode %.2f ms plain, %.2f ms with %s (%.2fx)\n",
                       sim["backend"].get<std::string>().c_str(), sim["plain_decode_ms"].get<double>(),
                       sim["speculative_decode_ms"].get<double>(), decoder->name.c_str(), sim["speedup"].get<double>());
      }
      if (show_stats && !spec_stats)
        std::fprintf(stderr, "no speculative decoder: %lld forwards, %.3f s\n", static_cast<long long>(st.forward_passes),
                     st.prefill_seconds + st.decode_seconds);
    }
    if (!profile.empty()) {
      model.reset();  // the session closes and the engine writes the profile
      print_profile(profile_file);
    }
    if (interrupted) throw Interrupted("after " + std::to_string(st.new_tokens) + " new tokens");
  });
}

}  // namespace nf::cli

// `npuforge eval MODEL|PACKAGE --text FILE [--window N] [--reference MODEL|PACKAGE] [--json]`:
// perplexity, and with --reference the share of scored positions whose top-1 token equals
// the reference's (e.g. a quantized package against the float model).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "cli/commands.h"
#include "cli/open_model.h"
#include "common/util.h"
#include "runner/generate.h"
#include "tokenizer/tokenizer.h"

namespace nf::cli {

void add_eval(CLI::App& app) {
  auto* cmd = app.add_subcommand("eval", "Perplexity of a model or package on a text file");
  static std::string path, text_path, reference, profile;
  static int window = 128;
  static bool json = false;
  cmd->add_option("model", path, "model.onnx or a package directory")->required();
  cmd->add_option("--text", text_path, "UTF-8 text file")->required()->check(CLI::ExistingFile);
  cmd->add_option("--window", window, "Tokens per scoring window")->check(CLI::Range(2, 1 << 20))->capture_default_str();
  cmd->add_option("--reference", reference, "model.onnx or package whose top-1 tokens the model is compared with");
  cmd->add_flag("--json", json, "Machine-readable output");
  add_profile_option(cmd, profile);
  cmd->callback([] {
    host::install_cancel_handler();  // stops at the next window
    const std::string text = host::read_regular_file(text_path, host::kTextMax, "evaluation text");  // before any work
    const std::filesystem::path profile_file = start_profile(profile);
    auto model = open_model(path);
    if (model->tokenizer.empty()) throw UserError(path + ": eval needs a tokenizer.json beside the model or in the package");
    auto tok = Tokenizer::load(model->tokenizer);
    auto ids = tok.encode(text, false);
    // A bar (terminal) or a line every 10 s (logs) per scored model; also stops on Ctrl-C.
    auto score = [&](host::Runner& runner, const std::string& label) {
      host::Progress bar(label);
      return host::perplexity(runner, ids, window, [&](int64_t done, int64_t total) {
        bar.report(static_cast<uint64_t>(done), static_cast<uint64_t>(total), "windows");
      });
    };
    auto r = score(*model->runner, "eval");
    nlohmann::json j{{"perplexity", r.perplexity},
                     {"mean_nll", r.mean_nll},
                     {"tokens_scored", r.tokens_scored},
                     {"windows", r.windows},
                     {"window", window},
                     {"seconds", r.seconds},
                     {"tokens_per_s", r.seconds > 0 ? r.windows * window / r.seconds : 0.0},
                     {"windows_total", r.windows_total},
                     {"stop", r.interrupted ? "interrupted" : "done"}};
    bool interrupted = r.interrupted;
    if (!reference.empty() && !interrupted) {
      auto ref_model = open_model(reference);
      auto ref = score(*ref_model->runner, "eval reference");
      // Interrupted, the reference scored a prefix of the model's positions: compare those.
      interrupted = ref.interrupted;
      if (!interrupted && ref.top1.size() != r.top1.size())
        throw UserError(reference + ": scored " + std::to_string(ref.top1.size()) + " positions, the model " +
                        std::to_string(r.top1.size()));
      const size_t n = std::min(ref.top1.size(), r.top1.size());
      size_t same = 0;
      for (size_t i = 0; i < n; ++i) same += r.top1[i] == ref.top1[i];
      j["reference_perplexity"] = ref.perplexity;
      j["top1_agreement"] = n == 0 ? 0.0 : static_cast<double>(same) / static_cast<double>(n);
      j["top1_positions"] = n;
      if (interrupted) j["stop"] = "interrupted";
    }
    if (json)
      std::cout << j.dump() << std::endl;
    else if (r.windows > 0) {
      std::string windows = std::to_string(r.windows);
      if (r.windows < r.windows_total) windows += " of " + std::to_string(r.windows_total);
      std::printf("perplexity %.4f over %lld tokens (%s windows of %d), %.1f tok/s\n", r.perplexity,
                  static_cast<long long>(r.tokens_scored), windows.c_str(), window, j["tokens_per_s"].get<double>());
      if (j.contains("top1_agreement"))
        std::printf("top-1 agreement with %s: %.2f%% over %zu positions (its perplexity %.4f)\n", reference.c_str(),
                    100 * j["top1_agreement"].get<double>(), j["top1_positions"].get<size_t>(),
                    j["reference_perplexity"].get<double>());
      std::fflush(stdout);
    }
    if (!profile.empty()) {
      model.reset();  // the session closes and the engine writes the profile
      print_profile(profile_file);
    }
    if (interrupted)
      throw Interrupted("after " + std::to_string(r.windows) + " of " + std::to_string(r.windows_total) + " windows");
  });
}

}  // namespace nf::cli

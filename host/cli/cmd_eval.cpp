// `npuforge eval MODEL|PACKAGE --text FILE [--window N] [--reference MODEL|PACKAGE] [--json]`:
// perplexity, and with --reference the share of scored positions whose top-1 token equals
// the reference's (e.g. a quantized package against the float model).
#include <cstdio>
#include <iostream>

#include "cli/commands.h"
#include "cli/open_model.h"
#include "pipeline/util.h"
#include "runner/generate.h"
#include "tokenizer/tokenizer.h"

namespace nf::cli {

void add_eval(CLI::App& app) {
  auto* cmd = app.add_subcommand("eval", "Perplexity of a model or package on a text file");
  static std::string path, text_path, reference;
  static int window = 128;
  static bool json = false;
  cmd->add_option("model", path, "model.onnx or a package directory")->required();
  cmd->add_option("--text", text_path, "UTF-8 text file")->required()->check(CLI::ExistingFile);
  cmd->add_option("--window", window, "Tokens per scoring window")->check(CLI::Range(2, 1 << 20))->capture_default_str();
  cmd->add_option("--reference", reference, "model.onnx or package whose top-1 tokens the model is compared with");
  cmd->add_flag("--json", json, "Machine-readable output");
  cmd->callback([] {
    const std::string text = host::read_regular_file(text_path, host::kTextMax, "evaluation text");  // before any work
    auto model = open_model(path);
    if (model->tokenizer.empty()) throw UserError(path + ": eval needs a tokenizer.json beside the model or in the package");
    auto tok = Tokenizer::load(model->tokenizer);
    auto ids = tok.encode(text, false);
    auto r = host::perplexity(*model->runner, ids, window);
    nlohmann::json j{{"perplexity", r.perplexity},
                     {"mean_nll", r.mean_nll},
                     {"tokens_scored", r.tokens_scored},
                     {"windows", r.windows},
                     {"window", window},
                     {"seconds", r.seconds},
                     {"tokens_per_s", r.seconds > 0 ? r.windows * window / r.seconds : 0.0}};
    if (!reference.empty()) {
      auto ref_model = open_model(reference);
      auto ref = host::perplexity(*ref_model->runner, ids, window);
      if (ref.top1.size() != r.top1.size())
        throw UserError(reference + ": scored " + std::to_string(ref.top1.size()) + " positions, the model " +
                        std::to_string(r.top1.size()));
      size_t same = 0;
      for (size_t i = 0; i < r.top1.size(); ++i) same += r.top1[i] == ref.top1[i];
      j["reference_perplexity"] = ref.perplexity;
      j["top1_agreement"] = r.top1.empty() ? 0.0 : static_cast<double>(same) / static_cast<double>(r.top1.size());
    }
    if (json)
      std::cout << j.dump() << "\n";
    else {
      std::printf("perplexity %.4f over %lld tokens (%lld windows of %d), %.1f tok/s\n", r.perplexity,
                  static_cast<long long>(r.tokens_scored), static_cast<long long>(r.windows), window,
                  j["tokens_per_s"].get<double>());
      if (j.contains("top1_agreement"))
        std::printf("top-1 agreement with %s: %.2f%% (its perplexity %.4f)\n", reference.c_str(),
                    100 * j["top1_agreement"].get<double>(), j["reference_perplexity"].get<double>());
    }
  });
}

}  // namespace nf::cli

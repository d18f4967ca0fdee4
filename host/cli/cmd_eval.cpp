// `npuforge eval MODEL|PACKAGE --text FILE [--window N] [--json]`: perplexity.
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
  static std::string path, text_path;
  static int window = 128;
  static bool json = false;
  cmd->add_option("model", path, "model.onnx or a package directory")->required();
  cmd->add_option("--text", text_path, "UTF-8 text file")->required()->check(CLI::ExistingFile);
  cmd->add_option("--window", window, "Tokens per scoring window")->check(CLI::Range(2, 1 << 20))->capture_default_str();
  cmd->add_flag("--json", json, "Machine-readable output");
  cmd->callback([] {
    auto model = open_model(path);
    if (model->tokenizer.empty()) throw UserError(path + ": eval needs a tokenizer.json beside the model or in the package");
    auto tok = Tokenizer::load(model->tokenizer);
    auto ids = tok.encode(host::read_text_file(text_path), false);
    auto r = host::perplexity(*model->runner, ids, window);
    nlohmann::json j{{"perplexity", r.perplexity},
                     {"mean_nll", r.mean_nll},
                     {"tokens_scored", r.tokens_scored},
                     {"windows", r.windows},
                     {"window", window},
                     {"seconds", r.seconds},
                     {"tokens_per_s", r.seconds > 0 ? r.windows * window / r.seconds : 0.0}};
    if (json)
      std::cout << j.dump() << "\n";
    else
      std::printf("perplexity %.4f over %lld tokens (%lld windows of %d), %.1f tok/s\n", r.perplexity,
                  static_cast<long long>(r.tokens_scored), static_cast<long long>(r.windows), window,
                  j["tokens_per_s"].get<double>());
  });
}

}  // namespace nf::cli

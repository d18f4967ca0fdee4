#include "cli/open_model.h"

#include <cstdio>
#include <climits>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "api/host_api.h"
#include "cli/commands.h"
#include "common/files.h"
#include "manifest/schema.h"
#include "pipeline/last_row_logits.h"
#include "pipeline/pipeline.h"
#include "pipeline/weight_spill.h"
#include "runner/static_runner.h"
#include "runtime/package.h"

namespace fs = std::filesystem;

namespace nf::cli {
namespace {

// A backend's options with the schema's defaults filled in.
nlohmann::json default_options(const host::PluginInfo& p) {
  nlohmann::json options = nlohmann::json::object();
  auto errors = manifest::validate_json(p.schema, options);
  if (!errors.empty()) throw UserError("backend '" + p.name + "' options: " + errors[0].message, exit_code::failed);
  return options;
}

int64_t vocab_of(const nlohmann::json& graph_spec) {
  for (const auto& o : graph_spec.at("outputs"))
    if (o.at("name") == "logits" && o.contains("shape") && o["shape"].size() == 3 && o["shape"][2].is_number_integer())
      return o["shape"][2];
  return -1;
}

// eos_token_id of a config.json (the decoder's text_config in a multimodal one): an id or a list.
std::vector<int32_t> config_eos_ids(const std::string& file) {
  if (file.empty() || !fs::is_regular_file(file)) return {};
  std::ifstream in(file);
  nlohmann::json config = nlohmann::json::parse(in, nullptr, false);
  if (!config.is_object()) throw UserError(file + ": not a JSON object");
  const nlohmann::json* eos = config.contains("eos_token_id") ? &config["eos_token_id"] : nullptr;
  if (!eos && config.contains("text_config") && config["text_config"].is_object() && config["text_config"].contains("eos_token_id"))
    eos = &config["text_config"]["eos_token_id"];
  if (!eos || eos->is_null()) return {};
  std::vector<int32_t> ids;
  for (const auto& v : eos->is_array() ? *eos : nlohmann::json::array({*eos})) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX)
      throw UserError(file + ": eos_token_id must be a token id or a list of them, not " + eos->dump());
    ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  return ids;
}

}  // namespace

std::unique_ptr<OpenModel> open_model(const std::string& path, const std::string& decoder) {
  auto m = std::make_unique<OpenModel>();
  m->registry.load_directories(host::Registry::search_path());
  nlohmann::json graphs, metadata;
  if (fs::is_directory(path)) {
    try {
      m->package = host::open_package(path);
    } catch (const host::PackageError& e) {  // not a package, or a corrupt one: bad input
      throw UserError(e.what());
    }
    std::string backend = m->package->backend();
    const host::PluginInfo* p = m->registry.find(NF_KIND_BACKEND, backend);
    if (!p) throw UserError(path + ": the package needs backend '" + backend + "', which is not installed", exit_code::failed);
    m->session = host::BackendSession::open_artifacts(*p, m->package->backend_options(), m->package->artifacts().string());
    m->tokenizer = m->package->tokenizer();
    m->eos_ids = config_eos_ids(m->package->config());
    graphs = m->package->meta.at("graphs");
    metadata = m->package->meta.value("metadata", nlohmann::json());
  } else if (fs::is_regular_file(path)) {
    const host::PluginInfo* p = m->registry.find(NF_KIND_BACKEND, "cpu");
    if (!p) throw UserError("the cpu backend plugin is not installed (needed to run a bare .onnx model)", exit_code::failed);
    m->model_set = host::load_source_model(path, "");
    host::WeightSpill spill(fs::temp_directory_path());  // the widened weights outlive it, in its file
    host::read_weight_forms(*m->model_set->graphs[0], [&](ir::TensorRef& t) { spill.spill(t); });
    if (const host::PluginInfo* d = decoder.empty() ? nullptr : m->registry.find(NF_KIND_SPECULATIVE, decoder);
        d && d->speculative()->build) {
      // The decoder's build hook, as a build runs it. No manifest: every asset option takes
      // its default, beside the model.
      nlohmann::json options = nlohmann::json::object();
      for (const auto& a : manifest::asset_paths(manifest::PluginUse{}, d->schema, "", fs::path(path).parent_path().string()))
        options[a.key] = a.path;
      // A plugin gets its options with every default filled in (sdk/docs/abi.md), as a build passes them.
      if (auto errors = manifest::validate_json(d->schema, options); !errors.empty())
        throw UserError("speculative " + decoder + ": " + errors.front().message);
      const std::string text = options.dump();
      nf_context ctx{"speculative " + decoder, {}};
      host::throw_if_error(d->speculative()->build(text.c_str(), host::handle(m->model_set.get()), &ctx), decoder);
      for (const char* key : {"extra_embeddings", "roles"})
        if (m->model_set->metadata.count(key)) metadata[key] = nlohmann::json::parse(m->model_set->metadata.at(key));
    }
    if (auto with_last_row = host::with_last_row_logits(*m->model_set)) m->model_set = std::move(with_last_row);
    m->session = host::BackendSession::open_model_set(*p, default_options(*p), *m->model_set);
    fs::path tok = fs::path(path).parent_path() / "tokenizer.json";
    if (fs::is_regular_file(tok)) m->tokenizer = tok.string();
    m->eos_ids = config_eos_ids((fs::path(path).parent_path() / "config.json").string());
    graphs = host::graph_specs(*m->model_set);
  } else {
    throw UserError(path + ": no such model file or package directory");
  }
  // metadata.io.layout "static" (arcl packages) picks the static-shape runner.
  try {
    m->runner = host::make_runner(*m->session, graphs, metadata);
  } catch (const std::runtime_error& e) {
    throw UserError(path + ": " + e.what());
  }
  m->vocab = graphs.size() == 1 ? vocab_of(graphs[0]) : static_cast<int64_t>(m->runner->vocab_size());
  return m;
}

void add_profile_option(CLI::App* cmd, std::string& file) {
  cmd->add_option("--profile", file,
                  "Write each graph node's time to FILE (JSON; the same as NPUFORGE_PROFILE=FILE) and print the "
                  "costliest operators");
}

std::filesystem::path start_profile(const std::string& file) {
  if (file.empty()) return {};
  const fs::path path = fs::absolute(file);
  if (fs::is_directory(path)) throw UserError("--profile " + file + " is a directory");
  fs::remove(path);
  if (::setenv("NPUFORGE_PROFILE", path.c_str(), 1) != 0) throw UserError("--profile: cannot set NPUFORGE_PROFILE");
  return path;
}

void print_profile(const fs::path& file) {
  if (!fs::is_regular_file(file)) {
    std::fprintf(stderr, "profile: the backend wrote none (the engine's backends profile: cpu, htp, aries)\n");
    return;
  }
  const nlohmann::json j = nlohmann::json::parse(host::read_regular_file(file, host::kJsonMax, "profile"), nullptr, false);
  if (!j.is_object() || !j.contains("ops") || !j.contains("passes")) throw UserError(file.string() + ": not a profile");
  std::fprintf(stderr, "profile (%s): %.1f ms in graph nodes\n", file.string().c_str(), j.value("ms", 0.0));
  for (const auto& p : j["passes"])
    std::fprintf(stderr, "  graph %s, %lld rows: %lld runs, %.1f ms\n", p.value("graph", "").c_str(),
                 static_cast<long long>(p.value("rows", 0)), static_cast<long long>(p.value("runs", 0)), p.value("ms", 0.0));
  size_t shown = 0;
  for (const auto& o : j["ops"]) {
    if (shown++ == 8) break;
    std::fprintf(stderr, "  %-22s %6.1f%%  %9.1f ms  %8lld calls\n", o.value("op", "").c_str(), 100 * o.value("share", 0.0),
                 o.value("ms", 0.0), static_cast<long long>(o.value("calls", 0)));
  }
}

}  // namespace nf::cli

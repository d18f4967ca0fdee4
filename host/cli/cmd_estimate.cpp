// `npuforge estimate PACKAGE [--prompt-len N] [--context-len N] [--json]`: what the
// package would cost on its target, from the backend's hardware model (nf_backend_api
// estimate). The figures are simulated, never measured; the output says so.
//
// Contract with the backends (every simulator fills these; all are optional except the
// first three, and a backend may add more fields, which --json prints as they are):
//   workload in : {"prompt_len": N, "context_len": N}    (a key is absent when the user
//                 did not give it; the backend picks its default and echoes it back)
//                 or {"graph_pass": {"linears": [[K, N], ...], "rows": R}} (nf::GraphPass:
//                 one pass of a graph outside the package, e.g. a speculative draft; `npuforge
//                 run --stats` asks it). Out: graph_pass_ms (without launch), per_graph_ms
//                 (one launch), weights_stored_as. A backend that does not price it answers
//                 without graph_pass_ms.
//   out, JSON object:
//     backend            string  backend name ("htp", "aries", ...)
//     device             string  the simulated chip / device ("sm8750", "aries-rb", ...)
//     simulated          bool    true: figures come from a hardware model
//     prompt_len         int     tokens in the prompt the TTFT is for
//     context_len        int     KV context the decode rate is for
//     ttft_ms            number  time to first token: prefill of prompt_len (in chunks)
//     prefill_tokens_per_s number prompt_len / ttft
//     decode_ms_per_token number
//     decode_tokens_per_s number  at context_len
//     decode_bound       string  "dram" | "compute" | "overhead": what limits decode
//     memory_bytes       int     device memory footprint (weights + KV cache + activations)
//     weight_bytes       int     weights at their stored width
//     kv_cache_bytes     int     KV cache at context_len
//     activation_bytes   int     peak activation / scratch buffers
//     dram_bytes_per_token int   DRAM traffic of one decode step
//     notes              [string] assumptions worth reading beside the numbers
//     breakdown          object  backend-specific detail (per graph / per op class)
#include <cstdio>
#include <iostream>

#include "api/host_api.h"
#include "cli/commands.h"
#include "registry/registry.h"
#include "runtime/package.h"

namespace nf::cli {
namespace {

void collect(void* user, const char* json) { *static_cast<std::string*>(user) = json ? json : ""; }

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024.0 && u < 4) {
    b /= 1024.0;
    ++u;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", b, units[u]);
  return buf;
}

// One line per known field, in a fixed order; other scalars after them.
void print_text(const nlohmann::json& j) {
  auto num = [&](const char* k) { return j.contains(k) && j[k].is_number(); };
  std::printf("%s on %s (%s)\n", j.value("backend", "?").c_str(), j.value("device", "?").c_str(),
              j.value("simulated", false) ? "simulated, not measured" : "measured");
  if (num("prompt_len") && num("ttft_ms"))
    std::printf("  time to first token  %10.1f ms   (prompt %lld tokens)\n", j["ttft_ms"].get<double>(),
                j["prompt_len"].get<long long>());
  if (num("prefill_tokens_per_s")) std::printf("  prefill              %10.1f tokens/s\n", j["prefill_tokens_per_s"].get<double>());
  if (num("decode_tokens_per_s")) {
    std::printf("  decode               %10.1f tokens/s", j["decode_tokens_per_s"].get<double>());
    if (num("context_len")) std::printf(" (context %lld)", j["context_len"].get<long long>());
    if (j.contains("decode_bound")) std::printf(", %s-bound", j["decode_bound"].get<std::string>().c_str());
    std::printf("\n");
  }
  if (num("decode_ms_per_token")) std::printf("  decode step          %10.2f ms\n", j["decode_ms_per_token"].get<double>());
  const std::pair<const char*, const char*> bytes[] = {{"memory_bytes", "memory"},
                                                       {"weight_bytes", "  weights"},
                                                       {"kv_cache_bytes", "  KV cache"},
                                                       {"activation_bytes", "  activations"},
                                                       {"dram_bytes_per_token", "DRAM per token"}};
  for (const auto& [k, label] : bytes)
    if (num(k)) std::printf("  %-20s %13s\n", label, human_bytes(j[k].get<double>()).c_str());
  static const char* known[] = {"backend", "device", "simulated", "prompt_len", "context_len", "ttft_ms",
                                "prefill_tokens_per_s", "decode_tokens_per_s", "decode_bound", "decode_ms_per_token",
                                "memory_bytes", "weight_bytes", "kv_cache_bytes", "activation_bytes",
                                "dram_bytes_per_token", "notes", "breakdown"};
  for (const auto& [k, v] : j.items()) {
    bool is_known = false;
    for (const char* n : known) is_known |= k == n;
    if (!is_known && (v.is_primitive())) std::printf("  %-20s %13s\n", k.c_str(), v.dump().c_str());
  }
  if (j.contains("notes") && j["notes"].is_array())
    for (const auto& n : j["notes"]) std::printf("  note: %s\n", n.get<std::string>().c_str());
}

}  // namespace

void add_estimate(CLI::App& app) {
  auto* cmd = app.add_subcommand("estimate", "Simulated latency, throughput and memory of a package on its target");
  static std::string path;
  static int64_t prompt_len = 0, context_len = 0;
  static bool json = false;
  cmd->add_option("package", path, "A package directory (npuforge build output)")->required();
  auto* p = cmd->add_option("--prompt-len", prompt_len, "Prompt tokens for the time to first token (default: the backend's)")
                ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  auto* c = cmd->add_option("--context-len", context_len, "KV context for the decode rate (default: the package's largest)")
                ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  cmd->add_flag("--json", json, "Print the backend's estimate JSON as it is");
  static CLI::Option *prompt_opt = p, *context_opt = c;
  cmd->callback([] {
    host::Package pkg;
    try {
      pkg = host::open_package(path);
    } catch (const host::PackageError& e) {
      throw UserError(e.what());
    }
    host::Registry registry;
    registry.load_directories(host::Registry::search_path());
    std::string backend = pkg.backend();
    const host::PluginInfo* info = registry.find(NF_KIND_BACKEND, backend);
    if (!info) throw UserError(path + ": the package needs backend '" + backend + "', which is not installed", exit_code::failed);
    if (!info->backend()->estimate)
      throw UserError("backend '" + backend + "' does not estimate (it has no hardware model)");
    nlohmann::json workload = nlohmann::json::object();
    if (prompt_opt->count()) workload["prompt_len"] = prompt_len;
    if (context_opt->count()) workload["context_len"] = context_len;
    std::string out, options = pkg.backend_options().dump(), wl = workload.dump();
    const std::string artifacts = pkg.artifacts().string();
    nf_status* st = host::call_plugin_entry(
        [&] { return info->backend()->estimate(options.c_str(), artifacts.c_str(), wl.c_str(), collect, &out); });
    if (st) throw UserError("backend '" + backend + "': " + host::take_status_message(st), exit_code::failed);
    nlohmann::json j = nlohmann::json::parse(out, nullptr, false);
    if (!j.is_object()) throw UserError("backend '" + backend + "' returned an estimate that is not a JSON object", exit_code::failed);
    if (json)
      std::cout << j.dump(2) << "\n";
    else
      print_text(j);
  });
}

}  // namespace nf::cli

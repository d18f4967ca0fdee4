// The simulator outside the plugin, for calibration and what-if runs (bench/aries_estimate.sh):
//   aries_sim fit ARTIFACTS_DIR DECODE_TOK_S TTFT_MS PROMPT_LEN CONTEXT_LEN
//     fits the two device parameters that are not published (effective DRAM bandwidth,
//     the MAC array's sustained streaming efficiency) so the package reproduces a measured
//     decode rate and time to first token; every other parameter stays as the package's
//     device file gives it.
//   aries_sim predict CONFIG.json DEVICE_FILE PROMPT_LEN CONTEXT_LEN [OPTIONS_JSON]
//     the estimate of a Llama-family model from its HF config's shapes (no weights), with
//     aries options (default: preset llm).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>

#include "compile.h"

using namespace nf::aries;

namespace {

int fit(char** argv) {
  PackageInfo p = PackageInfo::read(argv[0]);
  const double want_tps = std::atof(argv[1]), want_ttft = std::atof(argv[2]);
  Workload w{std::atoll(argv[3]), std::atoll(argv[4])};
  Device d = p.device;
  auto run = [&] { return simulate(p.model, p.options, d, w); };
  for (int round = 0; round < 8; ++round) {
    double lo = 1e8, hi = 1e13;  // decode rises with bandwidth
    for (int i = 0; i < 80; ++i) {
      d.dram_bandwidth_bytes_per_s = std::sqrt(lo * hi);
      (run()["decode_tokens_per_s"].get<double>() < want_tps ? lo : hi) = d.dram_bandwidth_bytes_per_s;
    }
    double elo = 1e-4, ehi = 1.0;  // TTFT falls as efficiency rises
    for (int i = 0; i < 80; ++i) {
      d.mac_efficiency = std::sqrt(elo * ehi);
      (run()["ttft_ms"].get<double>() > want_ttft ? elo : ehi) = d.mac_efficiency;
    }
  }
  auto j = run();
  std::printf("dram_bandwidth_bytes_per_s %.4g\nmac_efficiency %.4g\n", d.dram_bandwidth_bytes_per_s, d.mac_efficiency);
  std::printf("check: decode %.2f tok/s (%s-bound), ttft %.1f ms\n", j["decode_tokens_per_s"].get<double>(),
              j["decode_bound"].get<std::string>().c_str(), j["ttft_ms"].get<double>());
  return 0;
}

int predict(int argc, char** argv) {
  std::ifstream cf(argv[0]);
  if (!cf) throw nf::Error(std::string("cannot read ") + argv[0]);
  nlohmann::json config = nlohmann::json::parse(cf);
  Device d = Device::load_file(argv[1]);
  Workload w{std::atoll(argv[2]), std::atoll(argv[3])};
  nlohmann::json opts = argc > 4 ? nlohmann::json::parse(argv[4]) : nlohmann::json{{"preset", "llm"}};
  AriesOptions o = AriesOptions::resolve(opts);
  SimModel m = llama_from_config(config, o.bits);
  if (o.split_parts > 0 || !o.split_blocks.empty()) m.parts = static_cast<int64_t>(part_ranges(o, m.shape.layers).size());
  MemoryPlan mem = memory_plan(m, o, o.llm.max_cache_length);
  if (mem.total() > d.dram_bytes - d.dram_reserved_bytes)
    throw nf::Error("the model does not fit " + d.id + " (" + std::to_string(mem.total() / 1e9) + " GB needed)");
  std::cout << simulate(m, o, d, w).dump(2) << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc == 7 && std::strcmp(argv[1], "fit") == 0) return fit(argv + 2);
    if ((argc == 6 || argc == 7) && std::strcmp(argv[1], "predict") == 0) return predict(argc - 2, argv + 2);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "aries_sim: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr,
               "usage: aries_sim fit ARTIFACTS_DIR DECODE_TOK_S TTFT_MS PROMPT_LEN CONTEXT_LEN\n"
               "       aries_sim predict CONFIG.json DEVICE_FILE PROMPT_LEN CONTEXT_LEN [OPTIONS_JSON]\n");
  return 2;
}

// The simulator outside the plugin, for calibration and what-if runs (bench/aries_estimate.sh):
//   aries_sim fit DEVICE_FILE CONFIG.json DECODE_TOK_S TTFT_MS PROMPT_LEN CONTEXT_LEN [CONFIG2.json TTFT_MS]
//     fits the device parameters that are not published so the package reproduces a
//     measured decode rate and time to first token of the model CONFIG.json describes (W8,
//     preset llm, single core: qb Compiler's defaults): the effective DRAM bandwidth (decode)
//     and the MAC array's sustained streaming efficiency (TTFT). With a second model's HF
//     config and its measured TTFT (same workload), also the per-core on-chip buffer: the
//     buffer size whose row blocking gives that model's TTFT (scanned in 16 KiB steps, the
//     first two refitted at each). Every other parameter stays as the device file gives it.
//   aries_sim predict CONFIG.json DEVICE_FILE PROMPT_LEN CONTEXT_LEN [OPTIONS_JSON]
//     the estimate of a dense decoder from its HF config's shapes (no weights; a gated MLP
//     unless the family's is plain, a mixture of experts refused), with aries options
//     (default: preset llm).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>

#include "compile.h"

using namespace nf::aries;

namespace {

SimModel from_config(const char* path, const AriesOptions& o) {
  std::ifstream cf(path);
  if (!cf) throw nf::Error(std::string("cannot read ") + path);
  nlohmann::json config = nlohmann::json::parse(cf, nullptr, false);
  if (!config.is_object()) throw nf::Error(std::string(path) + " is not a JSON object");
  return decoder_from_config(config, o.bits);
}

// Bandwidth on the decode rate, then efficiency on the TTFT, a few rounds (they interact
// through the weight-tile fetch).
void fit_two(const SimModel& m, const AriesOptions& o, Device& d, const Workload& w, double want_tps, double want_ttft) {
  auto run = [&] { return simulate(m, o, d, w); };
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
}

int fit(int argc, char** argv) {
  Device d = Device::load_file(argv[0]);
  const AriesOptions o = AriesOptions::resolve({{"preset", "llm"}});
  const SimModel m = from_config(argv[1], o);
  const double want_tps = std::atof(argv[2]), want_ttft = std::atof(argv[3]);
  Workload w{std::atoll(argv[4]), std::atoll(argv[5])};
  if (!(want_tps > 0) || !(want_ttft > 0) || w.prompt_len < 1 || w.context_len < 1)
    throw nf::Error("fit: DECODE_TOK_S, TTFT_MS, PROMPT_LEN and CONTEXT_LEN must be positive");
  if (argc == 8) {
    // The buffer: row blocking is a step function of it, so scan rather than bisect.
    const SimModel big = from_config(argv[6], o);
    const double want_big = std::atof(argv[7]);
    if (!(want_big > 0)) throw nf::Error("fit: the second TTFT_MS must be positive");
    double best = 1e300, best_buf = d.onchip_buffer_bytes;
    for (double buf = 64 * 1024; buf <= 8 * 1024 * 1024; buf += 16 * 1024) {
      d.onchip_buffer_bytes = buf;
      fit_two(m, o, d, w, want_tps, want_ttft);
      double err = std::fabs(simulate(big, o, d, w)["ttft_ms"].get<double>() / want_big - 1);
      if (err < best - 1e-9) best = err, best_buf = buf;
    }
    d.onchip_buffer_bytes = best_buf;
    std::printf("onchip_buffer_bytes %.0f\n", best_buf);
  }
  fit_two(m, o, d, w, want_tps, want_ttft);
  auto j = simulate(m, o, d, w);
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
  SimModel m = decoder_from_config(config, o.bits);
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
    if ((argc == 8 || argc == 10) && std::strcmp(argv[1], "fit") == 0) return fit(argc - 2, argv + 2);
    if ((argc == 6 || argc == 7) && std::strcmp(argv[1], "predict") == 0) return predict(argc - 2, argv + 2);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "aries_sim: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr,
               "usage: aries_sim fit DEVICE_FILE CONFIG.json DECODE_TOK_S TTFT_MS PROMPT_LEN CONTEXT_LEN [CONFIG2.json TTFT_MS]\n"
               "       aries_sim predict CONFIG.json DEVICE_FILE PROMPT_LEN CONTEXT_LEN [OPTIONS_JSON]\n");
  return 2;
}

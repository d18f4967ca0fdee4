// membw: sustainable memory read bandwidth of this machine, in GB/s.
//
// Sums a float buffer much larger than the last-level cache (default 512 MiB) with
// 1 and 2 threads (or the counts given with --threads), each thread reading its own
// contiguous slice; reports the best of several passes, since a decode step of an LLM
// is exactly this: one streaming read over all weights.
//
//   membw [--mib 512] [--runs 7] [--threads 1,2] [--json]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

// Eight independent accumulators so the sum is not latency-bound on one FP add chain;
// the compiler vectorises this at -O2/-O3 with -ffast-math off because the lanes are explicit.
float sum_range(const float* p, size_t n) {
  float a[16] = {0};
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int k = 0; k < 16; ++k) a[k] += p[i + k];
  float s = 0;
  for (; i < n; ++i) s += p[i];
  for (float v : a) s += v;
  return s;
}

double measure(const float* buf, size_t n, int threads, int runs, volatile float* sink) {
  double best = 0;
  for (int r = 0; r < runs; ++r) {
    std::vector<float> partial(threads, 0.f);
    auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    size_t chunk = n / threads;
    for (int t = 0; t < threads; ++t) {
      size_t b = t * chunk, e = (t == threads - 1) ? n : b + chunk;
      pool.emplace_back([&, b, e, t] { partial[t] = sum_range(buf + b, e - b); });
    }
    for (auto& th : pool) th.join();
    auto t1 = std::chrono::steady_clock::now();
    float s = 0;
    for (float v : partial) s += v;
    *sink = *sink + s;
    double sec = std::chrono::duration<double>(t1 - t0).count();
    best = std::max(best, n * sizeof(float) / sec / 1e9);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  size_t mib = 512;
  int runs = 7;
  bool json = false;
  std::vector<int> threads = {1, 2};
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--mib" && i + 1 < argc) {
      mib = std::strtoull(argv[++i], nullptr, 10);
    } else if (a == "--runs" && i + 1 < argc) {
      runs = std::atoi(argv[++i]);
    } else if (a == "--threads" && i + 1 < argc) {
      threads.clear();
      std::string s = argv[++i];
      size_t pos = 0;
      while (pos < s.size()) {
        size_t c = s.find(',', pos);
        if (c == std::string::npos) c = s.size();
        threads.push_back(std::atoi(s.substr(pos, c - pos).c_str()));
        pos = c + 1;
      }
    } else if (a == "--json") {
      json = true;
    } else {
      std::fprintf(stderr, "usage: membw [--mib N] [--runs N] [--threads 1,2] [--json]\n");
      return 2;
    }
  }
  if (mib == 0 || runs <= 0 || threads.empty()) {
    std::fprintf(stderr, "membw: --mib, --runs and --threads must be positive\n");
    return 2;
  }
  for (int t : threads)
    if (t <= 0) {
      std::fprintf(stderr, "membw: thread counts must be positive\n");
      return 2;
    }
  size_t n = mib * 1024 * 1024 / sizeof(float);
  std::vector<float> buf(n);
  // Touch every page (and give the data non-trivial values) before timing.
  for (size_t i = 0; i < n; ++i) buf[i] = static_cast<float>(i & 1023) * 1e-3f;
  volatile float sink = 0;
  if (json) std::printf("{\"buffer_mib\": %zu, \"runs\": %d", mib, runs);
  for (int t : threads) {
    double gbs = measure(buf.data(), n, t, runs, &sink);
    if (json)
      std::printf(", \"read_gb_per_s_%dt\": %.2f", t, gbs);
    else
      std::printf("threads %d: %.2f GB/s (best of %d, %zu MiB buffer)\n", t, gbs, runs, mib);
  }
  if (json) std::printf("}\n");
  return sink == 12345.f ? 1 : 0;
}

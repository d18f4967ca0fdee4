// linear_bench: the kernels of nf::kernels::linear alone, per weight format (float32, int8
// per channel / block 64, int4 block 32 / 64).
//
//   linear_bench [--tokens 1] [--shape KxN] [--mib 512] [--runs 5] [--threads 1] [--simd scalar|avx2|avx512]
//
// --tokens 1 (decode): GB/s of the GEMV beside a plain streaming read of the same bytes. A
// decode step of an LLM is these GEMVs over every weight once, so a kernel below the
// streaming read is compute-bound, and the decode bench (decode_bench.sh) cannot reach the
// memory bound either. Enough copies of one KxN weight are packed to stream --mib MiB a pass.
// --tokens M > 1: GFLOP/s of linear() on M rows (above 4 rows: the prefill GEMM) beside
// OpenBLAS sgemm on the same fp32 [N, K] rows.
// Each figure is the best of --runs passes.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "npuforge/kernels/linear.h"
#include "npuforge/kernels/matmul.h"
#include "npuforge/kernels/parallel.h"

namespace k = nf::kernels;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Best GB/s of a plain read of `bytes` (the peer every kernel is measured against).
double read_gbps(size_t bytes, int runs) {
  std::vector<float> buf(bytes / 4, 1.f);
  double best = 0;
  volatile float sink = 0;
  for (int r = 0; r < runs; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    float a[16] = {0};
    for (size_t i = 0; i + 16 <= buf.size(); i += 16)
      for (int j = 0; j < 16; ++j) a[j] += buf[i + j];
    double t = seconds_since(t0);
    for (float v : a) sink = sink + v;
    best = std::max(best, static_cast<double>(bytes) / t / 1e9);
  }
  return best;
}

struct Format {
  const char* name;
  k::PackedWeight (*pack)(const float*, int64_t, int64_t);
};

}  // namespace

int main(int argc, char** argv) {
  int64_t K = 2048, N = 8192, M = 1;
  size_t mib = 512;
  int runs = 5, threads = 1;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) { std::fprintf(stderr, "linear_bench: %s needs a value\n", a.c_str()); std::exit(2); }
      return argv[++i];
    };
    if (a == "--shape") {
      if (std::sscanf(next(), "%ldx%ld", &K, &N) != 2 || K <= 0 || N <= 0) {
        std::fprintf(stderr, "linear_bench: --shape wants KxN, e.g. 2048x8192\n");
        return 2;
      }
    } else if (a == "--tokens") {
      M = std::atoi(next());
      if (M < 1) { std::fprintf(stderr, "linear_bench: --tokens wants a count >= 1\n"); return 2; }
    } else if (a == "--mib") mib = std::strtoul(next(), nullptr, 10);
    else if (a == "--runs") runs = std::atoi(next());
    else if (a == "--threads") threads = std::atoi(next());
    else if (a == "--simd") {
      const std::string s = next();
      if (s != "scalar" && s != "avx2" && s != "avx512") {
        std::fprintf(stderr, "linear_bench: --simd wants scalar, avx2 or avx512\n");
        return 2;
      }
      k::limit_simd(s == "scalar" ? k::Simd::kScalar : s == "avx2" ? k::Simd::kAvx2 : k::Simd::kAvx512);
    }
    else {
      std::fprintf(stderr, "linear_bench: unknown argument %s (see the header of bench/linear_bench.cpp)\n", a.c_str());
      return 2;
    }
  }
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.f, 0.02f);
  std::vector<float> w(static_cast<size_t>(K * N)), x(static_cast<size_t>(M * K)), y(static_cast<size_t>(M * N));
  for (float& v : w) v = normal(rng);
  for (float& v : x) v = normal(rng) * 50;

  const Format formats[] = {
      {"float32", [](const float* p, int64_t k_, int64_t n_) { return k::pack_f32(p, k_, n_); }},
      {"int8 per channel", [](const float* p, int64_t k_, int64_t n_) { return k::quantize_int8(p, k_, n_, 0); }},
      {"int8 block 64", [](const float* p, int64_t k_, int64_t n_) { return k::quantize_int8(p, k_, n_, 64); }},
      {"int4 block 32", [](const float* p, int64_t k_, int64_t n_) { return k::quantize_int4(p, k_, n_, 32); }},
      {"int4 block 64", [](const float* p, int64_t k_, int64_t n_) { return k::quantize_int4(p, k_, n_, 64); }},
  };
  if (M > 1) {
    // Prefill: the GEMM's rate, and OpenBLAS on the same [N, K] rows.
    const double flops = 2.0 * static_cast<double>(M * K * N);
    auto gflops = [&](auto&& fn) {
      fn();  // warm-up: first touch, thread pool
      double best = 1e30;
      for (int r = 0; r < runs; ++r) {
        auto t0 = std::chrono::steady_clock::now();
        fn();
        best = std::min(best, seconds_since(t0));
      }
      return flops / best / 1e9;
    };
    k::set_blas_threads(threads);
    const k::PackedWeight rows = k::pack_f32(w.data(), K, N);
    const double blas = gflops([&] { k::sgemm(x.data(), rows.f32_rows(), y.data(), M, N, K, true); });
    std::printf("%ld tokens x shape %ldx%ld, %d thread(s), %s kernels\n\n", M, K, N, threads,
                k::simd_name(k::simd_level()));
    std::printf("| weights | GEMM | GFLOP/s | vs OpenBLAS fp32 |\n|---|---|---|---|\n");
    std::printf("| float32 | OpenBLAS sgemm | %.1f | 1.00x |\n", blas);
    for (const Format& f : formats) {
      const k::PackedWeight p = f.pack(w.data(), K, N);
      const double g = gflops([&] { k::linear(x.data(), M, p, nullptr, y.data(), threads); });
      std::printf("| %s | npuforge linear | %.1f | %.2fx |\n", f.name, g, g / blas);
    }
    return 0;
  }
  const double read = read_gbps(mib << 20, runs);
  std::printf("shape %ldx%ld, %d thread(s), %zu MiB streamed per pass, %s kernels\n", K, N, threads, mib,
              k::simd_name(k::simd_level()));
  std::printf("plain read of %zu MiB: %.1f GB/s\n\n", mib, read);
  std::printf("| format | bytes per weight copy | copies | GB/s | of plain read | us per GEMV |\n|---|---|---|---|---|---|\n");
  for (const Format& f : formats) {
    std::vector<k::PackedWeight> copies;
    copies.push_back(f.pack(w.data(), K, N));
    const size_t bytes = copies[0].weight_bytes();
    const size_t n_copies = std::max<size_t>(1, (mib << 20) / bytes);
    while (copies.size() < n_copies) copies.push_back(copies[0]);
    double best = 1e30;
    for (int r = 0; r < runs; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      for (const k::PackedWeight& c : copies) k::linear(x.data(), 1, c, nullptr, y.data(), threads);
      best = std::min(best, seconds_since(t0));
    }
    const double gbps = static_cast<double>(bytes * n_copies) / best / 1e9;
    std::printf("| %s | %zu | %zu | %.1f | %.0f%% | %.1f |\n", f.name, bytes, n_copies, gbps, 100 * gbps / read,
                best / static_cast<double>(n_copies) * 1e6);
  }
  return 0;
}

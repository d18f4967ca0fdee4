// Helpers for the kernel tests: deterministic random data and naive reference loops.
#pragma once

#include <gtest/gtest.h>
#include <npuforge/kernels/tensor.h>

#include <random>
#include <vector>

namespace nf::kernels::test {

inline std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

inline Tensor ftensor(Dims dims, uint32_t seed) {
  return Tensor::from(NF_DTYPE_FLOAT32, dims, randn(static_cast<size_t>(numel(dims)), seed));
}

inline std::vector<float> values(const Tensor& t) { return {t.data<float>(), t.data<float>() + t.numel()}; }

// Element-wise |a - b| <= atol + rtol * |b|.
inline ::testing::AssertionResult near(const std::vector<float>& a, const std::vector<float>& b, float rtol = 1e-5f,
                                       float atol = 1e-5f) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << "size " << a.size() << " vs " << b.size();
  for (size_t i = 0; i < a.size(); ++i)
    if (!(std::fabs(a[i] - b[i]) <= atol + rtol * std::fabs(b[i])))
      return ::testing::AssertionFailure() << "element " << i << ": " << a[i] << " vs " << b[i];
  return ::testing::AssertionSuccess();
}

}  // namespace nf::kernels::test

// An orthogonal rotation R (n x n) applied to vectors without forming R when it is a
// random Hadamard: R = H diag(s) / sqrt(n) with H = H_{2^k} (x) H_b (Sylvester doubling of
// a Paley base of order b, hadamard.h), so x R is a dense b x b step on each b-block, a fast
// Walsh-Hadamard transform across the blocks, then the signs: O(n (b + log n)) instead of
// O(n^2) per vector. A learned R (rotations file) is dense and goes through dgemm. A
// Kronecker product P (x) Q of two rotations (R4's online Hadamard, online.h) applies its
// factors in turn.
// Arithmetic is double; callers round to float once per rotation.
#pragma once

#include <cstdint>
#include <vector>

namespace spinquant {

class Rotation {
 public:
  // SpinQuant's random Hadamard of order n (signs from `seed`, 0: all +1); throws
  // std::invalid_argument for orders hadamard.h does not build.
  static Rotation random_hadamard(int64_t n, uint64_t seed);
  // A dense orthogonal R, row-major n x n.
  static Rotation dense(std::vector<double> R, int64_t n);
  // R = P (x) Q (order p q, index i * q + j): Q on each q-block, then P across the blocks.
  static Rotation kronecker(Rotation P, Rotation Q);

  int64_t size() const { return n_; }
  // {P, Q} when R = P (x) Q, else empty.
  const std::vector<Rotation>& factors() const { return factors_; }
  // x <- x R for `count` vectors stored one after another (x is count x n, row-major).
  void apply_to_rows(double* x, int64_t count) const;
  // X <- R^T X for X n x width, row-major: every column x becomes x R.
  void apply_to_columns(double* X, int64_t width) const;
  // R itself, row-major (for writing it into a graph, and for tests).
  std::vector<double> matrix() const;

 private:
  int64_t n_ = 0;
  int64_t base_ = 1;            // b: H = H_{2^k} (x) H_b, index = i * b + j
  std::vector<double> hb_;      // H_b, b x b (+-1)
  std::vector<double> scale_;   // s_p / sqrt(n)
  std::vector<double> dense_;   // R when learned (then base_ = 0)
  std::vector<Rotation> factors_;  // {P, Q} when R = P (x) Q (then base_ = -1)
};

}  // namespace spinquant

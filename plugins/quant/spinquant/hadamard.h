// Orthonormal Hadamard rotations for spinquant. A Hadamard matrix of order n exists for
// the sizes built here: Sylvester's 2^k, Paley's construction I for q + 1 with q a prime
// = 3 (mod 4) (12, 20, 24, 44, 48, 60, 68, ...), Paley's construction II for 2 (q + 1) with
// q a prime = 1 (mod 4) (12, 28, 36, 60, 76, ...), and their Sylvester doublings (e.g. 96 =
// 12 * 8, 1536 = 12 * 128, 3584 = 28 * 128, 5120 = 20 * 256). The smallest base wins: the
// rotation's dense step is b x b per block. Other orders throw.
// The rotation is R = H diag(s) / sqrt(n), s = random signs from a seed (SpinQuant's
// random Hadamard; seed 0 keeps all signs +1). R is orthogonal: R R^T = I.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace nf::quant {

inline bool is_prime(int64_t p) {
  if (p < 2) return false;
  for (int64_t d = 2; d * d <= p; ++d)
    if (p % d == 0) return false;
  return true;
}

// The quadratic character of GF(q), q prime: 0 at 0, 1 at the squares, -1 elsewhere.
inline std::vector<int> quadratic_character(int64_t q) {
  std::vector<int> chi(static_cast<size_t>(q), -1);
  chi[0] = 0;
  for (int64_t x = 1; x < q; ++x) chi[static_cast<size_t>((x * x) % q)] = 1;
  return chi;
}

// Paley I: order q + 1 from the quadratic residues of GF(q), q prime, q = 3 mod 4.
inline std::vector<int> paley_hadamard(int64_t q) {
  const int64_t n = q + 1;
  const std::vector<int> chi = quadratic_character(q);
  // S (skew conference matrix) of order n, then H = I + S.
  std::vector<int> H(static_cast<size_t>(n * n), 0);
  for (int64_t j = 1; j < n; ++j) {
    H[static_cast<size_t>(j)] = 1;       // first row: 0, 1, 1, ...
    H[static_cast<size_t>(j * n)] = -1;  // first column: 0, -1, -1, ...
  }
  for (int64_t i = 1; i < n; ++i)
    for (int64_t j = 1; j < n; ++j) H[static_cast<size_t>(i * n + j)] = chi[static_cast<size_t>(((j - i) % q + q) % q)];
  for (int64_t i = 0; i < n; ++i) H[static_cast<size_t>(i * n + i)] = 1;
  return H;
}

// Paley II: order 2 (q + 1) from q prime, q = 1 mod 4. The symmetric conference matrix C of
// order q + 1 (zero diagonal, first row and column ones, the quadratic-residue character
// chi(j - i) elsewhere) gives H = C (x) [[1, 1], [1, -1]] + I (x) [[1, -1], [-1, -1]].
inline std::vector<int> paley2_hadamard(int64_t q) {
  const int64_t c = q + 1, n = 2 * c;
  const std::vector<int> chi = quadratic_character(q);
  auto conference = [&](int64_t i, int64_t j) {
    if (i == j) return 0;
    if (i == 0 || j == 0) return 1;
    return chi[static_cast<size_t>(((j - i) % q + q) % q)];
  };
  static const int kOff[2][2] = {{1, 1}, {1, -1}}, kDiag[2][2] = {{1, -1}, {-1, -1}};
  std::vector<int> H(static_cast<size_t>(n * n));
  for (int64_t i = 0; i < c; ++i)
    for (int64_t j = 0; j < c; ++j)
      for (int a = 0; a < 2; ++a)
        for (int b = 0; b < 2; ++b)
          H[static_cast<size_t>((2 * i + a) * n + 2 * j + b)] = i == j ? kDiag[a][b] : conference(i, j) * kOff[a][b];
  return H;
}

inline bool paley1_order(int64_t b) { return b % 4 == 0 && is_prime(b - 1) && (b - 1) % 4 == 3; }
inline bool paley2_order(int64_t b) { return b % 4 == 0 && is_prime(b / 2 - 1) && (b / 2 - 1) % 4 == 1; }

// The order b of the base Hadamard that Sylvester doubling takes to order n (1 for n = 2^k,
// else the smallest Paley I or II order with n / b a power of two); throws when no
// construction here reaches n.
inline int64_t hadamard_base_order(int64_t n) {
  if (n < 1) throw std::invalid_argument("hadamard: order must be positive");
  int64_t m = n;
  while (m % 2 == 0 && m > 1) m /= 2;
  if (m == 1) return 1;
  for (int64_t base_order = m; base_order <= n; base_order *= 2)
    if (paley1_order(base_order) || paley2_order(base_order)) return base_order;
  throw std::invalid_argument("no Hadamard matrix of order " + std::to_string(n) +
                              " is built here (orders 2^k, (q+1) * 2^k with q a prime = 3 mod 4, and "
                              "2 (q+1) * 2^k with q a prime = 1 mod 4)");
}

// +-1 entries of the base of order b (hadamard_base_order), row-major.
inline std::vector<int> hadamard_base(int64_t b) {
  if (b == 1) return {1};
  return paley1_order(b) ? paley_hadamard(b - 1) : paley2_hadamard(b / 2 - 1);
}

// +-1 entries of a Hadamard matrix of order n, row-major: H_{2^k} (x) H_b; throws when none
// is built here.
inline std::vector<int> hadamard_matrix(int64_t n) {
  const int64_t b = hadamard_base_order(n);
  // Sylvester doubling up to n: [[H, H], [H, -H]].
  std::vector<int> H = hadamard_base(b);
  for (int64_t size = b; size < n; size *= 2) {
    std::vector<int> next(static_cast<size_t>(4 * size * size));
    for (int64_t i = 0; i < size; ++i)
      for (int64_t j = 0; j < size; ++j) {
        int v = H[static_cast<size_t>(i * size + j)];
        next[static_cast<size_t>(i * 2 * size + j)] = v;
        next[static_cast<size_t>(i * 2 * size + j + size)] = v;
        next[static_cast<size_t>((i + size) * 2 * size + j)] = v;
        next[static_cast<size_t>((i + size) * 2 * size + j + size)] = -v;
      }
    H = std::move(next);
  }
  return H;
}

// The random column signs s of SpinQuant's Hadamard (seed 0: all +1).
inline std::vector<double> hadamard_signs(int64_t n, uint64_t seed) {
  std::vector<double> s(static_cast<size_t>(n), 1.0);
  if (seed != 0) {
    std::mt19937_64 rng(seed);
    for (auto& v : s) v = (rng() & 1) ? 1.0 : -1.0;
  }
  return s;
}

// R = H diag(s) / sqrt(n), row-major n x n, double for exact fusing.
inline std::vector<double> random_hadamard(int64_t n, uint64_t seed) {
  std::vector<int> H = hadamard_matrix(n);
  std::vector<double> s = hadamard_signs(n, seed);
  const double norm = 1.0 / std::sqrt(static_cast<double>(n));
  std::vector<double> R(static_cast<size_t>(n * n));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j)
      R[static_cast<size_t>(i * n + j)] = H[static_cast<size_t>(i * n + j)] * s[static_cast<size_t>(j)] * norm;
  return R;
}

}  // namespace nf::quant

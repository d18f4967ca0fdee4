#include "spinquant/rotation.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "spinquant/hadamard.h"

namespace spinquant {

Rotation Rotation::random_hadamard(int64_t n, uint64_t seed) {
  Rotation r;
  r.n_ = n;
  r.base_ = nf::quant::hadamard_base_order(n);
  std::vector<int> hb = nf::quant::hadamard_base(r.base_);
  r.hb_.assign(hb.begin(), hb.end());
  r.scale_ = nf::quant::hadamard_signs(n, seed);
  const double norm = 1.0 / std::sqrt(static_cast<double>(n));
  for (double& s : r.scale_) s *= norm;
  return r;
}

Rotation Rotation::dense(std::vector<double> R, int64_t n) {
  if (static_cast<int64_t>(R.size()) != n * n) throw std::invalid_argument("rotation: matrix is not n x n");
  Rotation r;
  r.n_ = n;
  r.base_ = 0;
  r.dense_ = std::move(R);
  return r;
}

Rotation Rotation::kronecker(Rotation P, Rotation Q) {
  Rotation r;
  r.n_ = P.size() * Q.size();
  r.base_ = -1;
  r.factors_ = {std::move(P), std::move(Q)};
  return r;
}

// Element e of a vector is a run of `width` doubles at x + e * width: the same code
// rotates one contiguous vector (width 1) and every column of a row-major block at once.
namespace {

void base_step(double* x, int64_t n, int64_t b, int64_t width, const std::vector<double>& hb, std::vector<double>& tmp) {
  if (b == 1) return;
  tmp.resize(static_cast<size_t>(b * width));
  for (int64_t i = 0; i < n; i += b) {
    double* blk = x + i * width;
    std::fill(tmp.begin(), tmp.end(), 0.0);
    // tmp[q] = sum_j blk[j] Hb[j, q]
    for (int64_t j = 0; j < b; ++j) {
      const double* src = blk + j * width;
      for (int64_t q = 0; q < b; ++q) {
        const double h = hb[static_cast<size_t>(j * b + q)];
        double* dst = &tmp[static_cast<size_t>(q * width)];
        if (h > 0) for (int64_t c = 0; c < width; ++c) dst[c] += src[c];
        else for (int64_t c = 0; c < width; ++c) dst[c] -= src[c];
      }
    }
    std::copy(tmp.begin(), tmp.end(), blk);
  }
}

// x <- x H_{2^k} across the b-blocks (Sylvester order: butterflies (u, v) -> (u + v, u - v)).
void walsh_hadamard(double* x, int64_t n, int64_t b, int64_t width) {
  const int64_t stride = b * width;  // one step of the block index i
  for (int64_t h = 1; h < n / b; h *= 2)
    for (int64_t i = 0; i < n / b; i += 2 * h)
      for (int64_t k = i; k < i + h; ++k) {
        double* u = x + k * stride;
        double* v = x + (k + h) * stride;
        for (int64_t c = 0; c < stride; ++c) {
          const double a = u[c], d = v[c];
          u[c] = a + d;
          v[c] = a - d;
        }
      }
}

void scale_elements(double* x, int64_t width, const std::vector<double>& scale) {
  for (size_t p = 0; p < scale.size(); ++p)
    for (int64_t c = 0; c < width; ++c) x[static_cast<int64_t>(p) * width + c] *= scale[p];
}

}  // namespace

void Rotation::apply_to_rows(double* x, int64_t count) const {
  if (count <= 0) return;
  if (base_ == 0) {
    std::vector<double> out(static_cast<size_t>(count * n_));
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(count), static_cast<int>(n_),
                static_cast<int>(n_), 1.0, x, static_cast<int>(n_), dense_.data(), static_cast<int>(n_), 0.0, out.data(),
                static_cast<int>(n_));
    std::copy(out.begin(), out.end(), x);
    return;
  }
  if (base_ < 0) {  // x (P (x) Q) = P^T X Q with X the p x q blocks of x
    const Rotation &P = factors_[0], &Q = factors_[1];
    for (int64_t r = 0; r < count; ++r) {
      double* v = x + r * n_;
      Q.apply_to_rows(v, P.size());
      P.apply_to_columns(v, Q.size());
    }
    return;
  }
  std::vector<double> tmp;
  for (int64_t r = 0; r < count; ++r) {
    double* v = x + r * n_;
    base_step(v, n_, base_, 1, hb_, tmp);
    walsh_hadamard(v, n_, base_, 1);
    scale_elements(v, 1, scale_);
  }
}

void Rotation::apply_to_columns(double* X, int64_t width) const {
  if (width <= 0) return;
  if (base_ == 0) {
    std::vector<double> out(static_cast<size_t>(n_ * width));
    cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(n_), static_cast<int>(width),
                static_cast<int>(n_), 1.0, dense_.data(), static_cast<int>(n_), X, static_cast<int>(width), 0.0,
                out.data(), static_cast<int>(width));
    std::copy(out.begin(), out.end(), X);
    return;
  }
  if (base_ < 0) {
    const Rotation &P = factors_[0], &Q = factors_[1];
    const int64_t q = Q.size();
    for (int64_t i = 0; i < P.size(); ++i) Q.apply_to_columns(X + i * q * width, width);
    P.apply_to_columns(X, q * width);
    return;
  }
  std::vector<double> tmp;
  base_step(X, n_, base_, width, hb_, tmp);
  walsh_hadamard(X, n_, base_, width);
  scale_elements(X, width, scale_);
}

std::vector<double> Rotation::matrix() const {
  if (base_ == 0) return dense_;
  // Row i of R is e_i R.
  std::vector<double> R(static_cast<size_t>(n_ * n_), 0.0);
  for (int64_t i = 0; i < n_; ++i) R[static_cast<size_t>(i * n_ + i)] = 1.0;
  apply_to_rows(R.data(), n_);
  return R;
}

}  // namespace spinquant

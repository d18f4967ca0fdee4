#include "spinquant/rotate.h"

namespace spinquant {
namespace {

// M [rows, cols] row-major: M' = M blockdiag(R) (each row's r-blocks times R).
void right_multiply(std::vector<float>& M, int64_t rows, int64_t cols, const std::vector<double>& R, int64_t r) {
  std::vector<double> acc(static_cast<size_t>(r));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t b = 0; b < cols; b += r) {
      float* seg = &M[static_cast<size_t>(i * cols + b)];
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t j = 0; j < r; ++j) {
        const double x = seg[j];
        const double* row = &R[static_cast<size_t>(j * r)];
        for (int64_t c = 0; c < r; ++c) acc[static_cast<size_t>(c)] += x * row[c];
      }
      for (int64_t c = 0; c < r; ++c) seg[c] = static_cast<float>(acc[static_cast<size_t>(c)]);
    }
}

// M [rows, cols] row-major: M' = blockdiag(R)^T M (each r-block of rows mixed by R^T).
void left_multiply_transposed(std::vector<float>& M, int64_t rows, int64_t cols, const std::vector<double>& R,
                              int64_t r) {
  std::vector<double> acc(static_cast<size_t>(r * cols));
  for (int64_t b = 0; b < rows; b += r) {
    std::fill(acc.begin(), acc.end(), 0.0);
    // out[k] = sum_j R[j, k] M[b + j]
    for (int64_t j = 0; j < r; ++j) {
      const float* src = &M[static_cast<size_t>((b + j) * cols)];
      for (int64_t k = 0; k < r; ++k) {
        const double rjk = R[static_cast<size_t>(j * r + k)];
        double* dst = &acc[static_cast<size_t>(k * cols)];
        for (int64_t c = 0; c < cols; ++c) dst[c] += rjk * src[c];
      }
    }
    for (int64_t k = 0; k < r; ++k)
      for (int64_t c = 0; c < cols; ++c)
        M[static_cast<size_t>((b + k) * cols + c)] = static_cast<float>(acc[static_cast<size_t>(k * cols + c)]);
  }
}

void check_divides(const std::string& what, const std::string& name, int64_t n, int64_t r) {
  if (n % r != 0)
    throw nf::Error("spinquant: " + what + " of '" + name + "' (" + std::to_string(n) +
                    ") is not a multiple of the rotation size " + std::to_string(r));
}

}  // namespace

void rotate_input(nf::Graph& g, const Linear& l, const std::vector<double>& R, int64_t r) {
  check_divides("input channels", l.weight, l.K, r);
  nf::Tensor t = g.initializer(l.weight);
  std::vector<float> w = read_floats(t);
  if (l.nk) right_multiply(w, l.N, l.K, R, r);  // stored [N, K]: (R^T B)^T = B^T R
  else left_multiply_transposed(w, l.K, l.N, R, r);
  write_initializer(g, l.weight, t.dims(), w);
}

void rotate_output(nf::Graph& g, const Linear& l, const std::vector<double>& R, int64_t r) {
  check_divides("output channels", l.weight, l.N, r);
  nf::Tensor t = g.initializer(l.weight);
  std::vector<float> w = read_floats(t);
  if (l.nk) left_multiply_transposed(w, l.N, l.K, R, r);  // stored [N, K]: (B R)^T = R^T B^T
  else right_multiply(w, l.K, l.N, R, r);
  write_initializer(g, l.weight, t.dims(), w);
  if (!l.bias.empty()) {
    nf::Tensor bt = g.initializer(l.bias);
    std::vector<float> b = read_floats(bt);
    check_divides("bias", l.bias, static_cast<int64_t>(b.size()), r);
    right_multiply(b, 1, static_cast<int64_t>(b.size()), R, r);
    write_initializer(g, l.bias, bt.dims(), b);
  }
}

void rotate_columns(nf::Graph& g, const std::string& name, const std::vector<double>& R, int64_t r) {
  nf::Tensor t = g.initializer(name);
  auto d = t.dims();
  check_divides("columns", name, d[1], r);
  std::vector<float> m = read_floats(t);
  right_multiply(m, d[0], d[1], R, r);
  write_initializer(g, name, d, m);
}

}  // namespace spinquant

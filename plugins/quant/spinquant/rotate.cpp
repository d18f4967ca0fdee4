#include "spinquant/rotate.h"

#include <algorithm>
#include <cstring>

namespace spinquant {
namespace {

constexpr int64_t kStripe = 64;  // columns rotated together along axis 0

// Rows mixed in blocks of R's size: stripes of columns gathered into doubles, rotated, put back.
void rotate_axis0(float* m, int64_t rows, int64_t cols, const Rotation& R) {
  const int64_t r = R.size();
  std::vector<double> buf(static_cast<size_t>(r * kStripe));
  for (int64_t b = 0; b < rows; b += r)
    for (int64_t c0 = 0; c0 < cols; c0 += kStripe) {
      const int64_t w = std::min(kStripe, cols - c0);
      for (int64_t i = 0; i < r; ++i)
        for (int64_t c = 0; c < w; ++c) buf[static_cast<size_t>(i * w + c)] = m[(b + i) * cols + c0 + c];
      R.apply_to_columns(buf.data(), w);
      for (int64_t i = 0; i < r; ++i)
        for (int64_t c = 0; c < w; ++c) m[(b + i) * cols + c0 + c] = static_cast<float>(buf[static_cast<size_t>(i * w + c)]);
    }
}

// Each row's r-blocks times R.
void rotate_axis1(float* m, int64_t rows, int64_t cols, const Rotation& R) {
  std::vector<double> row(static_cast<size_t>(cols));
  for (int64_t i = 0; i < rows; ++i) {
    float* p = m + i * cols;
    std::copy(p, p + cols, row.begin());
    R.apply_to_rows(row.data(), cols / R.size());
    for (int64_t c = 0; c < cols; ++c) p[c] = static_cast<float>(row[static_cast<size_t>(c)]);
  }
}

// Each row (axis 1) or column (axis 0) minus its mean, summed in double.
void centre(float* m, int64_t rows, int64_t cols, int axis) {
  if (axis == 1) {
    for (int64_t i = 0; i < rows; ++i) {
      float* p = m + i * cols;
      double sum = 0;
      for (int64_t c = 0; c < cols; ++c) sum += p[c];
      const double mean = sum / static_cast<double>(cols);
      for (int64_t c = 0; c < cols; ++c) p[c] = static_cast<float>(p[c] - mean);
    }
    return;
  }
  std::vector<double> sum(static_cast<size_t>(cols), 0.0);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t c = 0; c < cols; ++c) sum[static_cast<size_t>(c)] += m[i * cols + c];
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t c = 0; c < cols; ++c)
      m[i * cols + c] = static_cast<float>(m[i * cols + c] - sum[static_cast<size_t>(c)] / static_cast<double>(rows));
}

}  // namespace

void WeightEdits::add(const std::string& name, Step s) {
  auto [it, fresh] = steps_.try_emplace(name);
  if (fresh) order_.push_back(name);
  it->second.push_back(std::move(s));
}

void WeightEdits::scale_input(const Linear& l, const std::vector<float>& gain) {
  add(l.weight, {l.nk ? 1 : 0, nullptr, gain});
}

void WeightEdits::rotate_input(const Linear& l, const Rotation& R) { add(l.weight, {l.nk ? 1 : 0, &R, {}}); }

void WeightEdits::rotate_output(const Linear& l, const Rotation& R) {
  add(l.weight, {l.nk ? 0 : 1, &R, {}});
  if (!l.bias.empty()) add(l.bias, {1, &R, {}});
}

void WeightEdits::rotate_columns(const std::string& name, const Rotation& R) { add(name, {1, &R, {}}); }

void WeightEdits::centre_output(const Linear& l) {
  add(l.weight, {l.nk ? 0 : 1, nullptr, {}, true});
  if (!l.bias.empty()) add(l.bias, {1, nullptr, {}, true});
}

void WeightEdits::centre_columns(const std::string& name) { add(name, {1, nullptr, {}, true}); }

void WeightEdits::apply(nf::Graph& g, const nf::Context& ctx) const {
  for (size_t done = 0; done < order_.size(); ++done) {
    const std::string& name = order_[done];
    ctx.progress(done, order_.size(), "rotating weights");
    nf::Tensor src = g.initializer(name);
    const std::vector<int64_t> dims = src.dims();
    const int64_t cols = dims.empty() ? 1 : dims.back();
    const int64_t rows = cols == 0 ? 0 : src.numel() / cols;
    nf::Tensor out = nf::Tensor::create(NF_DTYPE_FLOAT32, dims);
    float* m = out.mutable_as<float>();
    // Copied in pieces, each piece of a mapped source leaving the resident set once read:
    // the source and its copy are never both in memory (2 GB at 1B for the embedding).
    const auto* from = static_cast<const uint8_t*>(src.data());
    const size_t bytes = static_cast<size_t>(src.numel()) * sizeof(float);
    constexpr size_t kPiece = size_t{32} << 20;
    for (size_t at = 0; at < bytes; at += kPiece) {
      const size_t n = std::min(kPiece, bytes - at);
      std::memcpy(reinterpret_cast<uint8_t*>(m) + at, from + at, n);
      src.drop_pages(at, n);
    }
    src = nf::Tensor();
    for (const Step& s : steps_.at(name)) {
      const int64_t along = s.axis == 0 ? rows : cols;
      if (s.centre) {
        centre(m, rows, cols, s.axis);
        continue;
      }
      if (!s.rotation) {
        if (static_cast<int64_t>(s.gain.size()) != along)
          throw nf::Error("spinquant: gain of " + std::to_string(s.gain.size()) + " entries for '" + name +
                          "' with " + std::to_string(along) + " channels");
        for (int64_t i = 0; i < rows; ++i)
          for (int64_t c = 0; c < cols; ++c) m[i * cols + c] *= s.gain[static_cast<size_t>(s.axis == 0 ? i : c)];
        continue;
      }
      if (along % s.rotation->size() != 0)
        throw nf::Error("spinquant: " + std::string(s.axis == 0 ? "rows" : "columns") + " of '" + name + "' (" +
                        std::to_string(along) + ") are not a multiple of the rotation size " +
                        std::to_string(s.rotation->size()));
      if (s.axis == 0) rotate_axis0(m, rows, cols, *s.rotation);
      else rotate_axis1(m, rows, cols, *s.rotation);
    }
    g.set_initializer(name, out);
  }
  ctx.progress(order_.size(), order_.size(), "rotating weights");
}

}  // namespace spinquant

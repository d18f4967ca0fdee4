#include "head_weights.h"

#include <cstring>
#include <set>

namespace mha2sha {

std::vector<std::string> HeadWeights::slices(nf::Graph g, const std::string& tensor, int64_t heads,
                                             const HeadColumns& at) {
  nf::Tensor src = g.initializer(tensor);
  const int64_t first = at.first, part = at.part;
  auto key = std::make_tuple(tensor, src.data(), first);
  auto it = done_.find(key);
  if (it == done_.end()) {
    const std::vector<int64_t> dims = src.dims();
    const size_t elem = nf::dtype_size(src.dtype());
    bool fits = !dims.empty() && elem != 0 && part > 0, whole = fits && heads * part == dims.back();
    for (int64_t h = 0; fits && h < heads; ++h) {
      fits = at.of(h) >= 0 && at.of(h) + part <= dims.back() && (h == 0 || at.of(h) >= at.of(h - 1) + part);
      whole &= at.of(h) == h * part;
    }
    if (!fits)
      throw nf::Error("mha2sha: cannot cut " + std::to_string(heads) + " heads of " + std::to_string(part) +
                      " columns from column " + std::to_string(first) + " of '" + tensor + "'");
    const int64_t cols = dims.back(), rows = src.numel() / cols;
    Sliced s;
    s.source = tensor;
    s.heads = heads;
    s.rank = static_cast<int64_t>(dims.size());
    s.cols = at;
    s.columns = cols;
    std::vector<int64_t> part_dims = dims;
    part_dims.back() = part;
    const char* from = static_cast<const char*>(src.data());
    for (int64_t h = 0; h < heads; ++h) {
      // One copy of the slice: rows of `part` elements taken from each source row.
      nf::Tensor t = nf::Tensor::create(src.dtype(), part_dims);
      char* to = static_cast<char*>(t.mutable_data());
      const int64_t c0 = at.of(h);
      for (int64_t r = 0; r < rows; ++r)
        std::memcpy(to + r * part * elem, from + (r * cols + c0) * elem, static_cast<size_t>(part) * elem);
      bytes_ += t.nbytes();
      s.names.push_back(tensor + (whole ? "" : ".col" + std::to_string(first)) + ".head" + std::to_string(h));
      if (g.initializer(s.names.back()))
        throw nf::Error("mha2sha: graph " + g.name() + " already has a tensor named '" + s.names.back() + "'");
      g.set_initializer(s.names.back(), t);
    }
    s.origin = g;
    it = done_.emplace(key, std::move(s)).first;
  } else if (it->second.heads != heads || !(it->second.cols == at)) {
    throw nf::Error("mha2sha: '" + tensor + "' is cut into " + std::to_string(heads) + " and " +
                    std::to_string(it->second.heads) + " heads by different attention blocks");
  }
  const Sliced& s = it->second;
  for (size_t h = 0; h < s.names.size(); ++h) {
    nf::Tensor existing = g.initializer(s.names[h]);
    nf::Tensor made = s.origin.initializer(s.names[h]);
    if (existing && existing.get() != made.get())
      throw nf::Error("mha2sha: graph " + g.name() + " already has a tensor named '" + s.names[h] + "'");
    if (!existing) g.set_initializer(s.names[h], made);
  }
  return s.names;
}

namespace {

// The encoding of one slice [c0, c1) of the `channels` output channels.
struct EncodingSlice {
  nf_encoding e{};
  std::vector<float> scale;
  std::vector<int32_t> offset, block_ints;
};

EncodingSlice slice_encoding(const nf_encoding& src, const std::string& name, int64_t channels, int64_t c0, int64_t c1,
                             int64_t channel_axis) {
  EncodingSlice r;
  r.e = src;
  r.e.struct_size = sizeof(nf_encoding);
  auto take = [&](size_t n, const auto* data, auto& out, const char* what) {
    if (n == 0 || !data) return;
    if (n % static_cast<size_t>(channels) != 0)
      throw nf::Error("mha2sha: encoding of '" + name + "' has " + std::to_string(n) + " " + what + ", not a multiple of its " +
                      std::to_string(channels) + " output channels");
    const size_t per = n / static_cast<size_t>(channels);
    out.assign(data + c0 * per, data + c1 * per);
  };
  if (src.enc_type == NF_ENC_PER_TENSOR) {
    r.scale.assign(src.scale, src.scale + src.num_scales);
    r.offset.assign(src.offset, src.offset + src.num_scales);
  } else {
    if (src.axis != channel_axis)
      throw nf::Error("mha2sha: encoding of '" + name + "' is along axis " + std::to_string(src.axis) +
                      ", not the output channels (axis " + std::to_string(channel_axis) + ") that heads cut");
    take(src.num_scales, src.scale, r.scale, "scales");
    take(src.num_scales, src.offset, r.offset, "offsets");
    take(src.num_block_ints, src.per_block_int_scale, r.block_ints, "per-block int scales");
  }
  r.e.num_scales = r.scale.size();
  r.e.scale = r.scale.data();
  r.e.offset = r.offset.data();
  r.e.num_block_ints = r.block_ints.size();
  r.e.per_block_int_scale = r.block_ints.empty() ? nullptr : r.block_ints.data();
  return r;
}

}  // namespace

void HeadWeights::follow_activation(const std::string& source, const std::vector<std::string>& heads, int64_t channels,
                                     const HeadColumns& cols) {
  const int64_t n = static_cast<int64_t>(heads.size());
  for (int64_t h = 0; h < n; ++h) {
    const nf_encoding* e = ms_.encoding(source);  // read again: setting one may move the host's copies
    if (!e) return;
    // The projection output is [1, rows, heads*head_dim]: heads cut axis 2.
    EncodingSlice s = slice_encoding(*e, source, channels, cols.of(h), cols.of(h) + cols.part, 2);
    ms_.set_encoding(heads[static_cast<size_t>(h)], s.e);
  }
}

size_t HeadWeights::finish_encodings() {
  std::set<std::string> still_read;
  for (const nf::Graph& g : ms_.graphs())
    for (const std::string& n : g.initializer_names()) still_read.insert(n);
  size_t sliced = 0;
  for (const auto& [key, s] : done_) {
    if (!ms_.encoding(s.source)) continue;
    for (int64_t h = 0; h < s.heads; ++h) {
      // Read again each time: setting an encoding may move the host's copies.
      const int64_t c0 = s.cols.of(h);
      EncodingSlice e = slice_encoding(*ms_.encoding(s.source), s.source, s.columns, c0, c0 + s.cols.part, s.rank - 1);
      ms_.set_encoding(s.names[static_cast<size_t>(h)], e.e);
      ++sliced;
    }
  }
  // After every slice is made: a fused weight is cut by several entries.
  for (const auto& [key, s] : done_)
    if (!still_read.count(s.source) && ms_.encoding(s.source))
      nf::check(nf::host().model_set_remove_encoding(ms_.get(), s.source.c_str()));
  return sliced;
}

}  // namespace mha2sha

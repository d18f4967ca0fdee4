#include "session.h"

#include <filesystem>

#include "compile.h"
#include "mxq.h"

namespace nf::aries {

Session::Session(const std::string& dir) {
  PackageInfo info = PackageInfo::read(dir);
  if (info.model.estimate_only)
    throw Error("aries backend: " + dir + " was compiled with estimate_only (shapes only, no weights): it estimates "
                "but cannot run; rebuild without estimate_only");
  check(host().model_set_load((dir + "/graph").c_str(), &ms_));
  ModelSet ms(ms_);
  std::vector<Graph> graphs = ms.graphs();
  // Weights: dequantized onto their exact grid, with the encoding that names that grid.
  std::vector<std::string> files;
  for (const auto& part : info.meta.at("parts")) files.push_back(part.at("file"));
  if (info.meta.contains("roles"))
    for (const auto& r : info.meta["roles"])
      if (r.contains("file")) files.push_back(r["file"]);  // a draft tree reads the draft's
  for (const std::string& name : files) {
    MxqFile file = MxqFile::read(dir + "/" + name);
    for (size_t i = 0; i < file.header.at("tensors").size(); ++i) {
      QuantWeight q = file.tensor(i);
      std::vector<int64_t> dims = q.nk ? std::vector<int64_t>{q.N, q.K} : std::vector<int64_t>{q.K, q.N};
      Tensor t = Tensor::create(NF_DTYPE_FLOAT32, dims);
      float* w = t.mutable_as<float>();
      for (int64_t n = 0; n < q.N; ++n)
        for (int64_t k = 0; k < q.K; ++k) {
          float v = static_cast<float>(q.q[static_cast<size_t>(n * q.K + k)]) * q.scale[static_cast<size_t>(n)];
          (q.nk ? w[n * q.K + k] : w[k * q.N + n]) = v;
        }
      bool found = false;
      for (Graph& g : graphs)
        if (host().graph_initializer(g.get(), q.name.c_str())) {
          g.set_initializer(q.name, t);
          found = true;
        }
      if (!found) throw Error("aries backend: container weight '" + q.name + "' is not used by any graph of the package");
      std::vector<int32_t> offset(static_cast<size_t>(q.N), -(1 << (q.bits - 1)));
      nf_encoding e{};
      e.struct_size = sizeof(nf_encoding);
      e.enc_type = NF_ENC_PER_CHANNEL;
      e.bw = q.bits;
      e.is_sym = 1;
      e.axis = q.nk ? 0 : 1;
      e.block_axis = -1;
      e.num_scales = q.scale.size();
      e.scale = q.scale.data();
      e.offset = offset.data();
      ms.set_encoding(q.name, e);
    }
  }
  for (const auto& [name, a] : info.meta.at("activations").items()) {
    float scale = a.at("scale");
    int32_t offset = a.at("offset");
    nf_encoding e{};
    e.struct_size = sizeof(nf_encoding);
    e.enc_type = NF_ENC_PER_TENSOR;
    e.bw = a.at("bw");
    e.is_sym = 0;
    e.axis = -1;
    e.block_axis = -1;
    e.num_scales = 1;
    e.scale = &scale;
    e.offset = &offset;
    ms.set_encoding(name, e);
  }
  opts_.threads = info.options.threads;
  opts_.use_encodings = true;
  for (const Graph& g : graphs) plans_.emplace(g.name(), std::make_unique<engine::GraphPlan>(ms, g, opts_, &packs_));
}

Session::~Session() {
  plans_.clear();
  if (ms_) host().model_set_release(ms_);
}

engine::GraphPlan& Session::plan(const std::string& graph) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = plans_.find(graph);
  if (it == plans_.end()) throw Error("aries backend: no graph '" + graph + "' in the package");
  return *it->second;
}

}  // namespace nf::aries

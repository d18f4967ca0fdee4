#include "session.h"

#include <npuforge/kernels/parallel.h>

#include <npuforge/engine/executor.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>

#include "container.h"
#include "options.h"

namespace fs = std::filesystem;

namespace nf::htp {
namespace {

struct Session {
  nf_model_set* ms = nullptr;
  engine::PackCache packs;
  std::map<std::string, std::unique_ptr<engine::GraphPlan>> plans;
  ~Session() {
    plans.clear();
    if (ms) host().model_set_release(ms);
  }
};

}  // namespace

nlohmann::json read_package_json(const fs::path& p) {
  std::ifstream f(p);
  if (!f) throw Error("htp: not an htp package: missing " + p.string());
  nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
  if (!j.is_object()) throw Error("htp: corrupt package: " + p.string() + " is not a JSON object");
  return j;
}

nf_session* open_session(const char* options_json, const std::string& dir) {
  nlohmann::json meta = read_package_json(fs::path(dir) / "htp.json");
  if (meta.value("backend", "") != "htp") throw Error("htp: " + dir + "/htp.json was not written by the htp backend");
  // The compiled options win for the graphs; `threads` may be given at open.
  nlohmann::json given = Options(options_json).json();
  nlohmann::json recorded = meta.value("options", nlohmann::json::object());
  HtpOptions o = HtpOptions::parse(recorded);
  if (given.contains("threads") && given["threads"].is_number_integer()) o.threads = given["threads"].get<int>();

  if (!meta.value("packed", true))
    throw Error("htp: this package was compiled with pack_weights = false (estimate only): it has no weights to run; "
                "use npuforge estimate, or rebuild with pack_weights = true");
  auto s = std::make_unique<Session>();
  check(host().model_set_load((fs::path(dir) / meta.value("model", "model")).string().c_str(), &s->ms));
  ModelSet ms(s->ms);
  std::map<std::string, Tensor> loaded;  // every weight read, by name
  try {
    for (const auto& split : meta.at("splits")) {
      LoadedContainer c = read_container((fs::path(dir) / split.at("file").get<std::string>()).string());
      for (size_t i = 0; i < c.tensors.size(); ++i) {
        const StoredTensor& t = c.tensors[i];
        Tensor host_t = Tensor::create(NF_DTYPE_FLOAT32, t.dims);
        std::memcpy(host_t.mutable_data(), c.values[i].data(), c.values[i].size() * sizeof(float));
        c.values[i] = {};
        loaded.emplace(t.name, host_t);
        for (const auto& gname : split.at("graphs")) {
          nf_graph* g = host().model_set_find_graph(s->ms, gname.get<std::string>().c_str());
          if (!g) throw Error("htp: corrupt package: split " + split.at("name").get<std::string>() + " lists graph '" +
                              gname.get<std::string>() + "', which the model does not have");
          Graph graph(g);
          Tensor placeholder = graph.initializer(t.name);
          if (!placeholder) continue;  // another variant of the split reads it
          if (placeholder.nbytes() != 0)
            throw Error("htp: corrupt package: graph '" + graph.name() + "' already holds weight '" + t.name + "'");
          graph.set_initializer(t.name, host_t);
        }
      }
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("htp: corrupt package: htp.json: ") + e.what());
  }
  // A weight is packed once: a graph of another group (a draft beside a split target) reads
  // it from the container that holds it. Every placeholder must be filled.
  for (Graph g : ms.graphs())
    for (const auto& name : g.initializer_names()) {
      Tensor t = g.initializer(name);
      if (!t || t.nbytes() != 0 || host().tensor_rank(t.get()) != 1) continue;
      if (auto w = loaded.find(name); w != loaded.end()) {
        g.set_initializer(name, w->second);
        continue;
      }
      throw Error("htp: corrupt package: weight '" + name + "' of graph '" + g.name() + "' is in no weight container");
    }
  engine::SessionOptions so;
  so.threads = o.threads;
  so.use_encodings = true;
  kernels::set_blas_threads(so.threads);
  for (const Graph& g : ms.graphs()) {
    engine::check_supported(g);
    s->plans.emplace(g.name(), std::make_unique<engine::GraphPlan>(ms, g, so, &s->packs));
  }
  return reinterpret_cast<nf_session*>(s.release());
}

void close_session(nf_session* s) { delete reinterpret_cast<Session*>(s); }

void run_session(nf_session* handle, const char* graph, const char* const* input_names, const nf_tensor* const* inputs,
                 size_t n_inputs, const char* const* output_names, nf_tensor** outputs, size_t n_outputs) {
  auto* s = reinterpret_cast<Session*>(handle);
  auto it = s->plans.find(graph);
  if (it == s->plans.end()) throw Error(std::string("htp: no graph '") + graph + "' in the package");
  it->second->run(input_names, inputs, n_inputs, output_names, outputs, n_outputs);
}

}  // namespace nf::htp

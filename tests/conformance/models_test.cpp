// The test decoders (tests/models/*: Llama GQA, Qwen2, Mistral sliding window, Mixtral MoE)
// through the cpu plugin, against the torch goldens: greedy prefill + KV-cache decode must
// give the same tokens and logits; the padded batch must match too. int8/int4 weight-only
// sessions must run the same graphs and stay close to fp32.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "api/host_api.h"
#include "onnx/onnx_io.h"
#include "pipeline/widen_floats.h"
#include "registry/registry.h"

namespace fs = std::filesystem;
#include "cpu_backend.h"

using namespace nf;

namespace {

const nf_backend_api* backend() { return test::cpu_backend(); }

// Throws: the test stops at the first failed call (FAIL() would only leave this helper).
void ok(nf_status* st) {
  if (!st) return;
  std::string m = host::host_api()->status_message(st);
  host::host_api()->status_release(st);
  throw std::runtime_error(m);
}

struct Decoder {
  std::unique_ptr<ir::ModelSet> ms = std::make_unique<ir::ModelSet>();
  nf_session* session = nullptr;
  int layers = 0, kv_heads = 0, head_dim = 0, vocab = 0;
  std::vector<std::string> outputs;

  Decoder(const fs::path& dir, const std::string& options) {
    auto g = onnx_io::load_model((dir / "model.onnx").string());
    g->name = "main";
    host::widen_16bit_floats(*g);  // llama_fp16: computed in float32, as every build does
    outputs = g->outputs;
    ms->graphs.push_back(std::move(g));
    nlohmann::json cfg = nlohmann::json::parse(std::ifstream(dir / "config.json"));
    layers = cfg["num_hidden_layers"];
    kv_heads = cfg.value("num_key_value_heads", cfg["num_attention_heads"].get<int>());
    head_dim = cfg.value("head_dim", cfg["hidden_size"].get<int>() / cfg["num_attention_heads"].get<int>());
    vocab = cfg["vocab_size"];
    ok(backend()->open_model_set(options.c_str(), host::handle(ms.get()), nullptr, &session));
  }
  ~Decoder() {
    if (session) backend()->close(session);
  }

  static ir::Tensor ids(const std::vector<std::vector<int64_t>>& rows) {
    std::vector<int64_t> flat;
    for (auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
    return ir::Tensor::from<int64_t>(NF_DTYPE_INT64, {int64_t(rows.size()), int64_t(rows[0].size())}, flat);
  }

  // One forward; `past` holds 2*layers tensors (key, value per layer) and is replaced by present.
  std::vector<float> step(const std::vector<std::vector<int64_t>>& tokens, const std::vector<std::vector<int64_t>>& mask,
                          const std::vector<std::vector<int64_t>>& pos, std::vector<ir::Tensor>& past) {
    int64_t B = int64_t(tokens.size()), T = int64_t(tokens[0].size());
    if (past.empty())
      for (int i = 0; i < 2 * layers; ++i) past.push_back(ir::Tensor::zeros(NF_DTYPE_FLOAT32, {B, kv_heads, 0, head_dim}));
    std::vector<std::string> names = {"input_ids", "attention_mask", "position_ids"};
    std::vector<ir::Tensor> vals = {ids(tokens), ids(mask), ids(pos)};
    for (int l = 0; l < layers; ++l) {
      names.push_back("past_key_values." + std::to_string(l) + ".key");
      names.push_back("past_key_values." + std::to_string(l) + ".value");
      vals.push_back(past[2 * l]);
      vals.push_back(past[2 * l + 1]);
    }
    std::vector<const char*> in_names, out_names;
    std::vector<nf_tensor*> in_t;
    for (size_t i = 0; i < names.size(); ++i) {
      in_names.push_back(names[i].c_str());
      in_t.push_back(host::new_tensor_handle(vals[i]));
    }
    for (auto& o : outputs) out_names.push_back(o.c_str());
    std::vector<nf_tensor*> out_t(outputs.size());
    nf_status* st = backend()->run(session, "main", in_names.data(), in_t.data(), in_t.size(), out_names.data(),
                                   out_t.data(), out_t.size());
    for (auto* t : in_t) host::host_api()->tensor_release(t);
    ok(st);
    std::vector<float> logits;
    for (size_t i = 0; i < outputs.size(); ++i) {
      ir::Tensor t = host::unwrap(out_t[i])->tensor;
      host::host_api()->tensor_release(out_t[i]);
      if (outputs[i] == "logits") {
        // Last position of every row.
        for (int64_t b = 0; b < B; ++b)
          logits.insert(logits.end(), t.as<float>() + (b * T + T - 1) * vocab, t.as<float>() + (b * T + T) * vocab);
      } else {
        // present.N.key|value
        int l = std::stoi(outputs[i].substr(8));
        past[2 * l + (outputs[i].find("value") != std::string::npos)] = t;
      }
    }
    return logits;
  }

  // The golden procedure: prefill, then one token at a time.
  std::vector<int64_t> generate(const std::vector<int64_t>& prompt, int n_new, std::vector<float>* last_logits,
                                std::vector<float>* prefill_logits) {
    std::vector<ir::Tensor> past;
    std::vector<int64_t> out, pos(prompt.size());
    for (size_t i = 0; i < pos.size(); ++i) pos[i] = int64_t(i);
    std::vector<float> logits = step({prompt}, {std::vector<int64_t>(prompt.size(), 1)}, {pos}, past);
    *prefill_logits = logits;
    int64_t n = int64_t(prompt.size());
    for (int s = 0; s < n_new; ++s) {
      int64_t tok = std::max_element(logits.begin(), logits.end()) - logits.begin();
      out.push_back(tok);
      *last_logits = logits;
      if (s + 1 == n_new) break;
      logits = step({{tok}}, {std::vector<int64_t>(n + 1, 1)}, {{n}}, past);
      ++n;
    }
    return out;
  }
};

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float d = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return a.size() == b.size() ? d : INFINITY;
}

std::vector<std::string> model_names() {
  std::vector<std::string> r;
  fs::path root = fs::path(NPUFORGE_SOURCE_DIR) / "tests/models";
  if (fs::exists(root))
    for (auto& e : fs::directory_iterator(root))
      if (fs::exists(e.path() / "model.onnx") && fs::exists(e.path() / "golden.json")) r.push_back(e.path().filename());
  std::sort(r.begin(), r.end());
  return r;
}

class Model : public ::testing::TestWithParam<std::string> {
 protected:
  fs::path dir() const { return fs::path(NPUFORGE_SOURCE_DIR) / "tests/models" / GetParam(); }
  nlohmann::json golden() const { return nlohmann::json::parse(std::ifstream(dir() / "golden.json")); }
};

TEST_P(Model, GreedyDecodeMatchesGolden) {
  ASSERT_NE(backend(), nullptr);
  nlohmann::json g = golden();
  Decoder d(dir(), R"({"threads": 2})");
  std::vector<float> last, prefill;
  auto ids = d.generate(g["prompt_ids"].get<std::vector<int64_t>>(), g["n_new_tokens"], &last, &prefill);
  EXPECT_EQ(ids, g["generated_ids"].get<std::vector<int64_t>>());
  EXPECT_LT(max_abs_diff(prefill, g["prefill_last_logits"].get<std::vector<float>>()), 1e-3f);
  EXPECT_LT(max_abs_diff(last, g["last_logits"].get<std::vector<float>>()), 1e-3f);
}

TEST_P(Model, PaddedBatchMatchesGolden) {
  nlohmann::json g = golden();
  if (!g.contains("padded_batch")) GTEST_SKIP() << "golden has no padded_batch";
  nlohmann::json pb = g["padded_batch"];
  Decoder d(dir(), R"({"threads": 2})");
  std::vector<ir::Tensor> past;
  auto logits = d.step(pb["input_ids"], pb["attention_mask"], pb["position_ids"], past);
  std::vector<float> want;
  for (auto& row : pb["last_logits"]) for (float v : row) want.push_back(v);
  EXPECT_LT(max_abs_diff(logits, want), 1e-3f);
}

TEST_P(Model, WeightOnlyInt8AndInt4StayClose) {
  nlohmann::json g = golden();
  auto prompt = g["prompt_ids"].get<std::vector<int64_t>>();
  Decoder f(dir(), R"({"threads": 1})");
  std::vector<float> last_f, pre_f;
  f.generate(prompt, 1, &last_f, &pre_f);
  float scale = 0;
  for (float v : pre_f) scale = std::max(scale, std::fabs(v));
  for (const char* opts : {R"({"weight_dtype": "int8"})", R"({"weight_dtype": "int4", "block_size": 16})"}) {
    Decoder q(dir(), opts);
    std::vector<float> last_q, pre_q;
    q.generate(prompt, 1, &last_q, &pre_q);
    // Loose: these tiny random models have no outliers to protect; int8 should be within a
    // few percent of the logit range, int4 within a larger margin.
    float tol = std::string(opts).find("int8") != std::string::npos ? 0.05f : 0.3f;
    EXPECT_LT(max_abs_diff(pre_q, pre_f), tol * scale) << opts;
  }
}

// Manual look at decode speed per weight format (disabled: speed belongs in bench/; run
// with --gtest_also_run_disabled_tests). Prints ms per decode step, asserts nothing.
TEST_P(Model, DISABLED_DecodeStepTime) {
  nlohmann::json g = golden();
  auto prompt = g["prompt_ids"].get<std::vector<int64_t>>();
  for (const char* opts : {R"({"threads": 1})", R"({"threads": 1, "weight_dtype": "int8"})",
                           R"({"threads": 1, "weight_dtype": "int4"})", R"({"threads": 2})",
                           R"({"threads": 2, "weight_dtype": "int8"})"}) {
    Decoder d(dir(), opts);
    std::vector<float> last, pre;
    d.generate(prompt, 2, &last, &pre);  // prepare the plan
    auto t0 = std::chrono::steady_clock::now();
    const int steps = 32;
    d.generate(prompt, steps, &last, &pre);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::cout << GetParam() << " " << opts << ": " << ms / steps << " ms per step (prefill included)\n";
  }
}

INSTANTIATE_TEST_SUITE_P(Models, Model, ::testing::ValuesIn(model_names()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace

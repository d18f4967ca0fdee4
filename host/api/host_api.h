// The host side of the plugin ABI: the nf_host_api table over the IR, and the C++ shapes
// of the handles the host owns (status, context, runner, calibration).
#pragma once

#include <npuforge/plugin.h>

#include <functional>
#include <stdexcept>
#include <string>

#include "ir/ir.h"

struct nf_status {
  std::string message;
  nf_status_code code = NF_STATUS_FAIL;
};

namespace nf::host {
// Model-set metadata the host keeps of model_set_import_graph: the absolute paths of the
// .onnx files imported into the set. A package whose compile kept the graphs of the roles
// (a decoder's draft) does not carry those files among the decoder's assets (pipeline.cpp).
inline constexpr const char* kImportedFilesMetadata = "imported_files";

// Where a stage keeps its checkpoints (pipeline/checkpoints.h).
struct CheckpointStore {
  virtual ~CheckpointStore() = default;
  virtual void save(const std::string& name, const void* data, size_t bytes) = 0;
  // The saved bytes, or false when none (or a damaged entry, which is removed).
  virtual bool load(const std::string& name, std::string* bytes) = 0;
};
}  // namespace nf::host

// One plugin call's context. progress returns true when the user asked to cancel.
struct nf_context {
  std::string plugin;  // "transform arcl": prefix of log lines
  std::function<bool(uint64_t done, uint64_t total, const std::string& what)> progress;
  nf::host::CheckpointStore* checkpoints = nullptr;  // null: the call keeps no checkpoints
};

// Implemented by the host's runner (host/runner); reached by decoders through the ABI.
struct nf_runner {
  virtual ~nf_runner() = default;
  virtual size_t vocab_size() const = 0;
  virtual size_t max_rows() const = 0;
  virtual size_t n_past() const = 0;
  virtual void forward(const int32_t* tokens, const int32_t* parents, size_t n_rows, float* logits) = 0;
  virtual void commit(const int32_t* rows, size_t n) = 0;
  virtual nf_tensor* last_output(const char* name) = 0;
  // Extra input tokens and prefix KV (ssd's forecast tokens and KV prefix); a runner
  // without them keeps these defaults.
  virtual size_t input_vocab_size() const { return vocab_size(); }
  virtual void set_prefix_kv(size_t layers, size_t kv_heads, size_t n, size_t head_dim, const float* keys,
                             const float* values);
  // forward() with per-row flags (NF_ROW_SEES_PREFIX); flags may be null.
  virtual void forward_flags(const int32_t* tokens, const int32_t* parents, const uint32_t* flags, size_t n_rows,
                             float* logits);
  // Rows a forward can take now (the context's end); a runner without one: max_rows().
  virtual size_t rows_available() const { return max_rows(); }
  // A runner over the graphs of `role` with its own KV cache (released with delete), or
  // null when the model has none.
  virtual nf_runner* open_role(const char* role);
  // A per-row float input for the next forward; the default runner has none.
  virtual void set_row_input(const char* name, const float* data, size_t n_rows, size_t width);
  // Rows kept between forwards as scratch (runner_forward_scratch); a runner that cannot
  // keep them says so and is never asked.
  virtual bool keeps_scratch() const { return false; }
  virtual void forward_scratch(const int32_t* tokens, const int32_t* parents, size_t n_rows, float* logits);
  virtual void clear_scratch() {}
};

// Implemented by the host's calibration (host/calibration); reached by quant recipes.
struct nf_calibration {
  virtual ~nf_calibration() = default;
  virtual size_t batch_count() const = 0;
  virtual void run(nf::ir::ModelSet& ms, size_t index, const char* const* names, size_t n, nf_tensor** out) = 0;
};

namespace nf::host {

const nf_host_api* host_api();

// Handle conversions: the ABI's opaque types are the IR's objects.
inline nf_model_set* handle(ir::ModelSet* ms) { return reinterpret_cast<nf_model_set*>(ms); }
inline const nf_model_set* handle(const ir::ModelSet* ms) { return reinterpret_cast<const nf_model_set*>(ms); }
inline ir::ModelSet* unwrap(nf_model_set* ms) { return reinterpret_cast<ir::ModelSet*>(ms); }
inline const ir::ModelSet* unwrap(const nf_model_set* ms) { return reinterpret_cast<const ir::ModelSet*>(ms); }
inline nf_graph* handle(ir::Graph* g) { return reinterpret_cast<nf_graph*>(g); }
inline ir::Graph* unwrap(nf_graph* g) { return reinterpret_cast<ir::Graph*>(g); }
inline nf_tensor* handle(ir::TensorRef* t) { return reinterpret_cast<nf_tensor*>(t); }
inline ir::TensorRef* unwrap(nf_tensor* t) { return reinterpret_cast<ir::TensorRef*>(t); }
inline const ir::TensorRef* unwrap(const nf_tensor* t) { return reinterpret_cast<const ir::TensorRef*>(t); }

// Called when the last plugin reference to a tensor that a plugin installed as an
// initializer is released while a graph still holds it: no plugin can read its bytes now,
// so the build moves them out of memory (pipeline/weight_spill.h). Null removes the hook.
void set_weight_released_hook(std::function<void(ir::TensorRef&)> hook);

// A new ABI reference to a tensor (the caller of the ABI releases it).
nf_tensor* new_tensor_handle(ir::Tensor t);
// Takes over one ABI reference: the returned shared_ptr owns it.
std::shared_ptr<ir::TensorRef> adopt_tensor_handle(nf_tensor* t);

// Turns a returned status into an exception with the plugin's message and code.
struct PluginError : std::runtime_error {
  explicit PluginError(const std::string& message, nf_status_code c = NF_STATUS_FAIL)
      : std::runtime_error(message), code(c) {}
  nf_status_code code;
};
void throw_if_error(nf_status* st, const std::string& prefix);

// A new status (what status_create makes); the receiver releases it.
nf_status* make_status(const std::string& message, nf_status_code code = NF_STATUS_FAIL);
// True for a status the host made and nobody has released: a plugin may return garbage.
bool is_live_status(const nf_status* s);
// The message (and code) of a status a plugin returned, releasing it; a status that is not
// live is not read and gives a message saying so.
std::string take_status_message(nf_status* st, nf_status_code* code = nullptr);

// Calls a plugin function. Exceptions must not cross the C ABI; one that does anyway (a
// plugin function without NF_TRY) becomes a failed status here instead of a crash.
template <class F>
nf_status* call_plugin_entry(F&& f) noexcept {
  try {
    return f();
  } catch (const std::exception& e) {
    return make_status(std::string("threw an exception across the plugin ABI: ") + e.what(), NF_STATUS_INTERNAL);
  } catch (...) {
    return make_status("threw an exception across the plugin ABI", NF_STATUS_INTERNAL);
  }
}
// The same for the plugin functions that return nothing (close, release); what they throw
// is logged and dropped.
void log_plugin_exception(const std::string& who) noexcept;
template <class F>
void call_plugin_void(const std::string& who, F&& f) noexcept {
  try {
    f();
  } catch (...) {
    log_plugin_exception(who);
  }
}

}  // namespace nf::host

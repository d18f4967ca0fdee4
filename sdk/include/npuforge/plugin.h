/* npuforge plugin ABI.
 *
 * A plugin library exports two C symbols:
 *   uint32_t   npuforge_plugin_abi_version(void);     the NF_ABI_VERSION it was built with
 *   nf_status* npuforge_plugin_entry(uint32_t host_abi_version, const nf_host_api* host,
 *                                    const nf_plugin_library** out);
 * The host checks the version first, then calls the entry once. The entry keeps `host`
 * for the life of the process and returns a static table of plugin descriptors.
 *
 * Rules (the whole contract: abi.md, installed with the SDK as share/doc/npuforge/abi.md):
 * - Every table begins with abi_version and struct_size and only ever grows at the end.
 *   A reader accepts a smaller table than it knows: the entries past struct_size are
 *   absent (NF_HAS_ENTRY). The host accepts a larger one and uses what it knows.
 * - NF_ABI_VERSION changes only when a shipped layout changes (never so far); appending
 *   an entry does not change it. The host refuses tables of a newer ABI.
 * - Only C types cross. A fallible call returns nf_status* (NULL = success) with a code and
 *   a message; outputs are untouched on error. A status is released by whoever receives it.
 * - Graphs, tensors and model sets are host-owned and reached through nf_host_api.
 *   Plugin-owned objects (sessions, decoders) are released through the plugin's table.
 * - Strings are UTF-8. A `const char*` returned by the host stays valid until the object
 *   it came from is changed or released.
 */
#ifndef NPUFORGE_PLUGIN_H
#define NPUFORGE_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define NF_ABI_VERSION 1u
/* Oldest plugin ABI this header's host still serves. */
#define NF_ABI_VERSION_MIN 1u

#define NF_ENTRY_SYMBOL "npuforge_plugin_entry"
#define NF_ABI_SYMBOL "npuforge_plugin_abi_version"

/* Bytes of `type` up to the end of `member`. A table has the entry when its struct_size is
 * at least this; NF_HAS_ENTRY also wants it set. Never read an entry past struct_size. */
#define NF_SIZE_THROUGH(type, member) (offsetof(type, member) + sizeof(((type*)0)->member))
#define NF_HAS_ENTRY(type, table, member) \
  ((table)->struct_size >= NF_SIZE_THROUGH(type, member) && (table)->member != NULL)

#if defined(_WIN32)
#define NF_EXPORT __declspec(dllexport)
#else
#define NF_EXPORT __attribute__((visibility("default")))
#endif

/* ---- opaque handles ------------------------------------------------------------- */
typedef struct nf_status nf_status;       /* error with a message; NULL means success */
typedef struct nf_context nf_context;     /* log, progress, cancel for one plugin call */
typedef struct nf_model_set nf_model_set; /* named graphs + metadata + encodings */
typedef struct nf_graph nf_graph;
typedef struct nf_node nf_node;
typedef struct nf_tensor nf_tensor;       /* ref-counted; data may be an mmapped view */
typedef struct nf_session nf_session;     /* backend-owned */
typedef struct nf_runner nf_runner;       /* host-owned: KV cache, row scoring */
typedef struct nf_decoder nf_decoder;     /* speculative-decoder-owned */
typedef struct nf_calibration nf_calibration; /* host-owned calibration batches */

/* What went wrong, for callers that branch on it; the message says it to a person.
 * Codes are only appended. */
typedef enum nf_status_code {
  NF_STATUS_OK = 0,
  NF_STATUS_FAIL = 1,             /* unspecified: what status_create makes */
  NF_STATUS_INVALID_ARGUMENT = 2, /* bad options, input, shape or struct_size */
  NF_STATUS_NOT_FOUND = 3,        /* no graph, value, file, ... of that name */
  NF_STATUS_UNSUPPORTED = 4,      /* valid, but this plugin or host cannot do it */
  NF_STATUS_CANCELLED = 5,        /* the user cancelled (progress returned nonzero) */
  NF_STATUS_INTERNAL = 6          /* a bug: an invariant did not hold */
} nf_status_code;

/* Element types use ONNX TensorProto.DataType codes so no table is needed at import. */
typedef enum nf_dtype {
  NF_DTYPE_UNDEFINED = 0,
  NF_DTYPE_FLOAT32 = 1,
  NF_DTYPE_UINT8 = 2,
  NF_DTYPE_INT8 = 3,
  NF_DTYPE_UINT16 = 4,
  NF_DTYPE_INT16 = 5,
  NF_DTYPE_INT32 = 6,
  NF_DTYPE_INT64 = 7,
  NF_DTYPE_STRING = 8,
  NF_DTYPE_BOOL = 9,
  NF_DTYPE_FLOAT16 = 10,
  NF_DTYPE_FLOAT64 = 11,
  NF_DTYPE_UINT32 = 12,
  NF_DTYPE_UINT64 = 13,
  NF_DTYPE_BFLOAT16 = 16,
  NF_DTYPE_UINT4 = 21,
  NF_DTYPE_INT4 = 22
} nf_dtype;

typedef enum nf_attr_type {
  NF_ATTR_UNDEFINED = 0,
  NF_ATTR_FLOAT = 1,
  NF_ATTR_INT = 2,
  NF_ATTR_STRING = 3,
  NF_ATTR_TENSOR = 4,
  NF_ATTR_GRAPH = 5,
  NF_ATTR_FLOATS = 6,
  NF_ATTR_INTS = 7,
  NF_ATTR_STRINGS = 8
} nf_attr_type;

typedef enum nf_log_level {
  NF_LOG_TRACE = 0,
  NF_LOG_DEBUG = 1,
  NF_LOG_INFO = 2,
  NF_LOG_WARN = 3,
  NF_LOG_ERROR = 4
} nf_log_level;

typedef enum nf_plugin_kind {
  NF_KIND_TRANSFORM = 1,
  NF_KIND_QUANT = 2,
  NF_KIND_BACKEND = 3,
  NF_KIND_SPECULATIVE = 4
} nf_plugin_kind;

/* Quantization encoding of one tensor, in the AIMET 1.0.0 vocabulary.
 * real = (q + offset) * scale.  Arrays are host-owned when returned by the host and
 * caller-owned (copied by the host) when passed in. */
typedef enum nf_enc_type {
  NF_ENC_PER_TENSOR = 0,
  NF_ENC_PER_CHANNEL = 1,
  NF_ENC_PER_BLOCK = 2,
  NF_ENC_LPBQ = 3
} nf_enc_type;

typedef struct nf_encoding {
  uint32_t struct_size;
  nf_enc_type enc_type;
  int32_t is_float;           /* 1: float dtype at `bw` bits (no scale/offset) */
  int32_t bw;                 /* bit width of the stored integers */
  int32_t is_sym;
  int32_t axis;               /* channel axis of the tensor (PER_CHANNEL/PER_BLOCK/LPBQ) */
  int32_t block_axis;         /* block axis (PER_BLOCK/LPBQ), -1 otherwise */
  int32_t block_size;         /* 0 unless blockwise */
  int32_t compressed_bw;      /* LPBQ: bw of the stored blocks (4); else 0 */
  size_t num_scales;          /* 1, channels, or channels*blocks */
  const float* scale;         /* num_scales */
  const int32_t* offset;      /* num_scales */
  size_t num_block_ints;      /* LPBQ: channels*blocks, else 0 */
  const int32_t* per_block_int_scale;
} nf_encoding;

/* Row flags of runner_forward_flags. */
#define NF_ROW_SEES_PREFIX 1u /* the row attends to the runner's prefix KV */

/* ---- host API ---------------------------------------------------------------------- */
typedef struct nf_host_api {
  uint32_t abi_version;
  uint32_t struct_size;

  /* status */
  nf_status* (*status_create)(const char* message);
  const char* (*status_message)(const nf_status* status);
  void (*status_release)(nf_status* status);

  /* context: logging and progress. progress returns nonzero when the user cancelled;
   * the plugin then returns a status as soon as it can. */
  void (*log)(nf_context* ctx, nf_log_level level, const char* message);
  int (*progress)(nf_context* ctx, uint64_t done, uint64_t total, const char* what);

  /* tensors: new tensors start with one reference owned by the caller */
  nf_status* (*tensor_create)(nf_dtype dtype, const int64_t* dims, size_t rank, nf_tensor** out);
  void (*tensor_retain)(nf_tensor* t);
  void (*tensor_release)(nf_tensor* t);
  nf_dtype (*tensor_dtype)(const nf_tensor* t);
  size_t (*tensor_rank)(const nf_tensor* t);
  const int64_t* (*tensor_dims)(const nf_tensor* t);
  size_t (*tensor_nbytes)(const nf_tensor* t);
  const void* (*tensor_data)(const nf_tensor* t);
  /* Writable data: copies first if the bytes are shared or mapped read-only. */
  void* (*tensor_mutable_data)(nf_tensor* t);

  /* model sets: an ordered list of named graphs plus JSON metadata */
  size_t (*model_set_graph_count)(const nf_model_set* ms);
  nf_graph* (*model_set_graph)(nf_model_set* ms, size_t index);
  nf_graph* (*model_set_find_graph)(nf_model_set* ms, const char* name);
  /* Adds a copy of `source` (weights shared, not copied) or an empty graph when NULL. */
  nf_status* (*model_set_add_graph)(nf_model_set* ms, const char* name, const nf_graph* source,
                                    nf_graph** out);
  nf_status* (*model_set_remove_graph)(nf_model_set* ms, const char* name);
  /* Metadata: a JSON object; keys used by the host: "config" (HF config.json),
   * "tokenizer" (path), "io" (runner layout), "calibration_weights" ("encoded": calibration
   * runs weights that carry an encoding on its grid; else float). get returns "null" for a
   * missing key; setting null removes the key. */
  const char* (*model_set_get_metadata)(const nf_model_set* ms, const char* key);
  nf_status* (*model_set_set_metadata)(nf_model_set* ms, const char* key, const char* json);
  /* Encodings keyed by tensor name, shared by all graphs of the set. */
  const nf_encoding* (*model_set_get_encoding)(const nf_model_set* ms, const char* tensor);
  nf_status* (*model_set_set_encoding)(nf_model_set* ms, const char* tensor, const nf_encoding* enc);
  nf_status* (*model_set_remove_encoding)(nf_model_set* ms, const char* tensor);
  size_t (*model_set_encoding_count)(const nf_model_set* ms);
  const char* (*model_set_encoding_name)(const nf_model_set* ms, size_t index);
  /* Persist / load a model set as ONNX files + external data in a directory. */
  nf_status* (*model_set_save)(const nf_model_set* ms, const char* dir);
  nf_status* (*model_set_load)(const char* dir, nf_model_set** out);
  void (*model_set_release)(nf_model_set* ms);

  /* graphs */
  const char* (*graph_name)(const nf_graph* g);
  size_t (*graph_node_count)(const nf_graph* g);
  nf_node* (*graph_node)(nf_graph* g, size_t index);
  /* Appends a node; inputs may contain "" for an omitted optional input. */
  nf_status* (*graph_add_node)(nf_graph* g, const char* op_type, const char* domain, const char* name,
                               const char* const* inputs, size_t n_inputs, const char* const* outputs,
                               size_t n_outputs, nf_node** out);
  nf_status* (*graph_remove_node)(nf_graph* g, nf_node* node);
  /* Orders nodes so every value is produced before use; fails on a cycle. */
  nf_status* (*graph_sort)(nf_graph* g);
  size_t (*graph_input_count)(const nf_graph* g);
  /* graph_input, graph_output, node_input, node_output: NULL when index is out of range. */
  const char* (*graph_input)(const nf_graph* g, size_t index);
  size_t (*graph_output_count)(const nf_graph* g);
  const char* (*graph_output)(const nf_graph* g, size_t index);
  nf_status* (*graph_set_inputs)(nf_graph* g, const char* const* names, size_t n);
  nf_status* (*graph_set_outputs)(nf_graph* g, const char* const* names, size_t n);
  /* Value types (of inputs, outputs, value_info or initializers); returns nonzero when
   * unknown. dims < 0 are symbolic; *dims stays valid until the next call on this thread. */
  int (*graph_value_type)(const nf_graph* g, const char* value, nf_dtype* dtype, size_t* rank,
                          const int64_t** dims);
  const char* (*graph_value_dim_param)(const nf_graph* g, const char* value, size_t axis);
  nf_status* (*graph_set_value_type)(nf_graph* g, const char* value, nf_dtype dtype, const int64_t* dims,
                                     const char* const* dim_params, size_t rank);
  /* Initializers (weights). set takes its own reference to the tensor. */
  size_t (*graph_initializer_count)(const nf_graph* g);
  const char* (*graph_initializer_name)(const nf_graph* g, size_t index);
  nf_tensor* (*graph_initializer)(const nf_graph* g, const char* name); /* borrowed */
  nf_status* (*graph_set_initializer)(nf_graph* g, const char* name, nf_tensor* t);
  nf_status* (*graph_remove_initializer)(nf_graph* g, const char* name);
  int64_t (*graph_opset)(const nf_graph* g, const char* domain); /* -1 when not imported */

  /* nodes */
  const char* (*node_op_type)(const nf_node* n);
  const char* (*node_domain)(const nf_node* n);
  const char* (*node_name)(const nf_node* n);
  size_t (*node_input_count)(const nf_node* n);
  const char* (*node_input)(const nf_node* n, size_t index);
  size_t (*node_output_count)(const nf_node* n);
  const char* (*node_output)(const nf_node* n, size_t index);
  nf_status* (*node_set_input)(nf_node* n, size_t index, const char* value);
  nf_status* (*node_set_output)(nf_node* n, size_t index, const char* value);
  size_t (*node_attr_count)(const nf_node* n);
  const char* (*node_attr_name)(const nf_node* n, size_t index);
  nf_attr_type (*node_attr_type)(const nf_node* n, const char* name);
  /* Getters fail (return nonzero) when the attribute is missing or of another type. */
  int (*node_attr_int)(const nf_node* n, const char* name, int64_t* out);
  int (*node_attr_float)(const nf_node* n, const char* name, float* out);
  int (*node_attr_string)(const nf_node* n, const char* name, const char** out);
  int (*node_attr_ints)(const nf_node* n, const char* name, const int64_t** out, size_t* count);
  int (*node_attr_floats)(const nf_node* n, const char* name, const float** out, size_t* count);
  int (*node_attr_tensor)(const nf_node* n, const char* name, nf_tensor** out); /* borrowed */
  nf_status* (*node_set_attr_int)(nf_node* n, const char* name, int64_t v);
  nf_status* (*node_set_attr_float)(nf_node* n, const char* name, float v);
  nf_status* (*node_set_attr_string)(nf_node* n, const char* name, const char* v);
  nf_status* (*node_set_attr_ints)(nf_node* n, const char* name, const int64_t* v, size_t count);
  nf_status* (*node_set_attr_floats)(nf_node* n, const char* name, const float* v, size_t count);
  nf_status* (*node_set_attr_tensor)(nf_node* n, const char* name, nf_tensor* t);
  nf_status* (*node_remove_attr)(nf_node* n, const char* name);

  /* runner, for speculative decoders: score rows of (token, parent row or -1) in one pass.
   * Row r sees the committed cache, its ancestors and itself, at position n_past + depth.
   * logits_out receives n_rows * vocab floats. commit keeps rows[0..n) as a chain in order. */
  size_t (*runner_vocab_size)(const nf_runner* r);
  size_t (*runner_max_rows)(const nf_runner* r);
  size_t (*runner_n_past)(const nf_runner* r);
  nf_status* (*runner_forward)(nf_runner* r, const int32_t* tokens, const int32_t* parents, size_t n_rows,
                               float* logits_out);
  nf_status* (*runner_commit)(nf_runner* r, const int32_t* rows, size_t n);
  /* Extra named output of the last forward (e.g. "hidden_states"), per row; borrowed. */
  nf_tensor* (*runner_last_output)(nf_runner* r, const char* name);

  /* calibration, for quant recipes: runs batch `index` through the float model set and
   * returns the named activations (caller releases each tensor). */
  size_t (*calibration_batch_count)(const nf_calibration* c);
  nf_status* (*calibration_run)(nf_calibration* c, nf_model_set* ms, size_t index, const char* const* names,
                                size_t n_names, nf_tensor** out);

  /* ---- appended (check struct_size): extra input tokens and rows that see extra KV ----
   * Token ids the graphs embed: runner_vocab_size plus the extra embedding rows the model
   * carries (ids vocab .. input_vocab-1, e.g. ssd's forecast tokens; a package lists them
   * in metadata "extra_embeddings"). Logits still cover runner_vocab_size ids. */
  size_t (*runner_input_vocab_size)(const nf_runner* r);
  /* Extra KV rows (e.g. a learned prefix) that only rows flagged NF_ROW_SEES_PREFIX attend
   * to: keys and values float32 [layers][kv_heads][n][head_dim], keys as the cache holds
   * them (after RoPE). Copied; n = 0 removes them. They take n slots of a static context.
   * Fails when the shape is not the model's cache shape, and on a model whose graphs hold
   * their own prefix (graph state: graph_roles.hpp kv_prefix), which flagged rows see. */
  nf_status* (*runner_set_prefix_kv)(nf_runner* r, size_t layers, size_t kv_heads, size_t n, size_t head_dim,
                                     const float* keys, const float* values);
  /* runner_forward with per-row flags (NULL: all zero). Flagged rows are scratch rows: a
   * flagged row's children must be flagged too, and flagged rows cannot be committed. */
  nf_status* (*runner_forward_flags)(nf_runner* r, const int32_t* tokens, const int32_t* parents,
                                     const uint32_t* flags, size_t n_rows, float* logits_out);

  /* ---- appended (check struct_size): the end of the context ----
   * The most rows a forward can score now: the largest AR variant that still fits after the
   * committed cache and the prefix KV (at most runner_max_rows); 0 when the context is full.
   * Decoders shrink their tree to it near the end of the context. */
  size_t (*runner_rows_available)(const nf_runner* r);

  /* ---- appended (check struct_size): status codes ----
   * status_create makes NF_STATUS_FAIL; status_code(NULL) is NF_STATUS_OK. */
  nf_status* (*status_create_code)(nf_status_code code, const char* message);
  nf_status_code (*status_code)(const nf_status* status);

  /* ---- appended (check struct_size): reading large weights in passes ----
   * A hint that bytes [byte_offset, byte_offset + bytes) of t are not needed in memory for
   * now. A weight mapped from the model's files leaves the resident set and is read back
   * from the file on the next access; other tensors are unaffected. Reading a 1 GB
   * embedding by row blocks and dropping each block keeps one block resident. */
  void (*tensor_drop_pages)(const nf_tensor* t, size_t byte_offset, size_t bytes);

  /* ---- appended (check struct_size): checkpoints of a long stage ----
   * A stage that works in steps (a quant recipe layer by layer) saves each finished step's
   * result under a name; when the build was interrupted and runs again on the same model,
   * options, calibration and plugin library, checkpoint_load returns those bytes and the
   * stage can skip the step. The host keeps them beside the stage cache under the stage's
   * cache key (so changed inputs never see them), verifies them on load and removes them
   * once the stage's result is stored. Without a stage cache (--no-cache), or outside a
   * stage, save keeps nothing and load finds nothing.
   * Names: 1-128 of [A-Za-z0-9._-], not starting with '.'. A save that cannot be written
   * only costs a warning (the build goes on). load: *out is a new uint8 tensor of the
   * saved bytes, or NULL when nothing (valid) is saved under the name. */
  nf_status* (*checkpoint_save)(nf_context* ctx, const char* name, const void* data, size_t bytes);
  nf_status* (*checkpoint_load)(nf_context* ctx, const char* name, nf_tensor** out);

  /* ---- appended (check struct_size): a copy of a model set ----
   * Graphs, metadata and encodings copied, weights shared (not copied): a backend that saves
   * the set changed (its quantized weights replaced by placeholders) edits the copy instead of
   * writing and reading back the whole set. Release with model_set_release. */
  nf_status* (*model_set_clone)(const nf_model_set* ms, nf_model_set** out);

  /* ---- appended (check struct_size): graphs of several roles ----
   * A build hook adds a graph of its own (a decoder's draft) to the model set: the ONNX file
   * at `onnx_path` (external data beside it) becomes graph `name`. Fails, leaving `ms` as it
   * was, when the file is not a model the host can read or the name is taken. */
  nf_status* (*model_set_import_graph)(nf_model_set* ms, const char* name, const char* onnx_path, nf_graph** out);
  /* Renames values of g: from[i] becomes to[i] wherever it is read, written, declared or
   * stored (inputs, outputs, node inputs and outputs, value types, initializers). Encodings
   * are the set's, by name: rename before any are set. Fails, changing nothing, when a new
   * name is already a value of g or two values would share one. */
  nf_status* (*graph_rename_values)(nf_graph* g, const char* const* from, const char* const* to, size_t n);
  /* A runner over the model's graphs of `role` (metadata "roles", e.g. "draft") with a KV
   * cache of its own, on the same backend session; NF_STATUS_NOT_FOUND when the model has no
   * graph of that role. The decoder releases it with runner_release before it is released. */
  nf_status* (*runner_open_role)(nf_runner* r, const char* role, nf_runner** out);
  void (*runner_release)(nf_runner* r);
  /* Values of a per-row float input of the graphs (e.g. a draft's target_hidden_states
   * [1, rows, width]) for the next forward: n_rows rows of `width` floats, copied; row i
   * goes with the forward's row i. The next forward must have n_rows rows; it consumes
   * them. Fails when the graphs have no such input or its width differs. */
  nf_status* (*runner_set_row_input)(nf_runner* r, const char* name, const float* data, size_t n_rows, size_t width);

  /* ---- appended (check struct_size): scratch rows kept between forwards ----
   * runner_forward whose rows stay in the runner as scratch rows, so a tree grown one
   * depth per forward runs each node once: parents number the scratch rows kept since the
   * last clear first (0 .. S-1), then this call's rows (S + i); a row sees the committed
   * cache, its ancestors (kept or new) and itself, at position n_past + depth. Scratch rows
   * take context slots and are never committed: runner_clear_scratch, runner_forward(_flags)
   * and runner_commit drop them. NF_STATUS_UNSUPPORTED when the runner cannot keep rows
   * (dynamic-shape graphs, sliding-window caches): run the ancestors again instead. */
  nf_status* (*runner_forward_scratch)(nf_runner* r, const int32_t* tokens, const int32_t* parents, size_t n_rows,
                                       float* logits_out);
  void (*runner_clear_scratch)(nf_runner* r);
} nf_host_api;

/* ---- plugin tables --------------------------------------------------------------------
 * Required entries are set in every table; the host accepts a table that ends after its
 * last required entry and treats the later ones as absent (NULL):
 *   transform, quant: apply          backend: compile, open, close, run
 *   speculative: create, release, step */

/* transform: model set -> model set, in place. */
typedef struct nf_transform_api {
  uint32_t abi_version;
  uint32_t struct_size;
  nf_status* (*apply)(const char* options_json, nf_model_set* ms, nf_context* ctx);
  /* Optional (appended in ABI 1): refuses, cheaply and without changing `ms`, options that
   * apply would refuse on this model (limits between options, the model's shapes). `npuforge
   * check` calls it on the source model before any stage has run; weight bytes may be
   * 16-bit there (build widens them first), so read shapes, not data. */
  nf_status* (*validate)(const char* options_json, const nf_model_set* ms, nf_context* ctx);
} nf_transform_api;

/* quantization recipe: changes weights and/or sets encodings. */
typedef struct nf_quant_api {
  uint32_t abi_version;
  uint32_t struct_size;
  nf_status* (*apply)(const char* options_json, nf_model_set* ms, nf_calibration* calib, nf_context* ctx);
  /* Optional (appended in ABI 1): as nf_transform_api.validate. */
  nf_status* (*validate)(const char* options_json, const nf_model_set* ms, nf_context* ctx);
  /* Optional (appended in ABI 1, together): apply's work in parts that run side by side,
   * each in its own process (a job of an array on a cluster), before apply.
   * shard_count answers into how many independent parts apply's work splits with these
   * options, at most `wanted` (1: it does not split; then apply runs alone).
   * apply_shard does part `index` of `count` on the stage's input and saves what it finds as
   * checkpoints of the stage (nf_host_api checkpoint_save), leaving `ms` as it was; apply,
   * run once every part finished, loads them and does what is left. The package must be
   * the one apply alone makes, byte for byte. */
  nf_status* (*shard_count)(const char* options_json, size_t wanted, size_t* count);
  nf_status* (*apply_shard)(const char* options_json, nf_model_set* ms, nf_calibration* calib, nf_context* ctx,
                            size_t index, size_t count);
} nf_quant_api;

/* Receives a JSON document produced by a plugin (the string is valid only during the call). */
typedef void (*nf_json_sink)(void* user, const char* json);

/* backend: compile -> artifacts dir; open -> session; run; estimate. */
typedef struct nf_backend_api {
  uint32_t abi_version;
  uint32_t struct_size;
  /* Writes everything the session needs into `out_dir` (which exists and is empty). */
  nf_status* (*compile)(const char* options_json, const nf_model_set* ms, const char* out_dir, nf_context* ctx);
  nf_status* (*open)(const char* options_json, const char* artifacts_dir, nf_context* ctx, nf_session** out);
  void (*close)(nf_session* s);
  /* Runs graph `graph` with named inputs; fills outputs[i] (new references) for each name. */
  nf_status* (*run)(nf_session* s, const char* graph, const char* const* input_names,
                    const nf_tensor* const* inputs, size_t n_inputs, const char* const* output_names,
                    nf_tensor** outputs, size_t n_outputs);
  /* Simulated cost of a workload (JSON: {"prompt_len":N,"context_len":N,...}); NULL if the
   * backend does not estimate. */
  nf_status* (*estimate)(const char* options_json, const char* artifacts_dir, const char* workload_json,
                         nf_json_sink sink, void* user);
  /* Optional (NULL if unsupported): a session over an in-memory model set without
   * compiling, for calibration and `npuforge run MODEL.onnx`. `ms` outlives the session. */
  nf_status* (*open_model_set)(const char* options_json, nf_model_set* ms, nf_context* ctx, nf_session** out);
  /* Optional (appended in ABI 1, together): compile's heavy work in parts that run side by
   * side, each in its own process (a job of an array on a cluster), before compile.
   * compile_part_count answers into how many independent parts compile's work splits with
   * these options, at most `wanted` (1: it does not split; then compile runs alone).
   * compile_part does part `index` of `count` on the model set compile will get and saves
   * what it makes as checkpoints of the compile (nf_host_api checkpoint_save); compile, run
   * once every part finished, loads them instead of making them. The artifacts must be the
   * ones compile alone makes, byte for byte. */
  nf_status* (*compile_part_count)(const char* options_json, size_t wanted, size_t* count);
  nf_status* (*compile_part)(const char* options_json, const nf_model_set* ms, nf_context* ctx, size_t index,
                             size_t count);
} nf_backend_api;

/* speculative decoder: one `step` proposes a tree, scores it through the runner, accepts
 * the longest agreeing path and commits it; writes accepted tokens to out_tokens. */
typedef struct nf_speculative_api {
  uint32_t abi_version;
  uint32_t struct_size;
  nf_status* (*create)(const char* options_json, nf_runner* runner, const int32_t* prompt, size_t n_prompt,
                       nf_context* ctx, nf_decoder** out);
  void (*release)(nf_decoder* d);
  /* `last_logits` are the logits that follow the committed sequence (vocab floats);
   * `sample` picks the target's token from logits (greedy or seeded sampling).
   * On return out_tokens[0..*n_out) were accepted and committed, *n_out >= 1, and
   * last_logits holds the logits after them. One exception, as in plain decoding: when the
   * context is full (runner_rows_available 0) and max_out is 1, the last token is returned
   * without a forward and not committed; a later step fails. */
  nf_status* (*step)(nf_decoder* d, float* last_logits, int32_t (*sample)(void* user, const float* logits),
                     void* sample_user, int32_t* out_tokens, size_t max_out, size_t* n_out);
  /* Counters as a JSON object (draft forwards, proposals, ...). */
  void (*stats)(nf_decoder* d, nf_json_sink sink, void* user);
  /* Optional (appended in ABI 1): the build hook. Adds to the model set what the decoder
   * needs on the device (extra embedding rows, draft graphs, graph state) before the quant
   * recipes and transforms run, so they calibrate, quantize and compile it with the target.
   * `options_json` are the decoder's options with asset paths absolute. The build runs it
   * as its first stage (cached like any stage); `npuforge run MODEL.onnx` runs it before
   * opening the model. Absent: the model set is built as it is. */
  nf_status* (*build)(const char* options_json, nf_model_set* ms, nf_context* ctx);
} nf_speculative_api;

typedef struct nf_plugin_descriptor {
  uint32_t abi_version;
  uint32_t struct_size;
  nf_plugin_kind kind;
  const char* name;           /* manifest name, [a-z0-9_]+ */
  const char* version;        /* semver of the plugin; part of the stage-cache key */
  const char* summary;        /* one line */
  const char* options_schema; /* JSON schema of the options object */
  const void* api;            /* nf_transform_api / nf_quant_api / nf_backend_api / nf_speculative_api */
} nf_plugin_descriptor;

typedef struct nf_plugin_library {
  uint32_t abi_version;
  uint32_t struct_size;
  size_t plugin_count;
  const nf_plugin_descriptor* const* plugins;
} nf_plugin_library;

typedef uint32_t (*nf_abi_version_fn)(void);
typedef nf_status* (*nf_entry_fn)(uint32_t host_abi_version, const nf_host_api* host,
                                  const nf_plugin_library** out);

#ifdef __cplusplus
} /* extern "C" */

/* Layouts of ABI 1, pinned: a change here breaks every shipped plugin. Append a member,
 * then add its offset here and update the size. */
static_assert(offsetof(nf_host_api, status_create) == 8, "nf_host_api layout");
static_assert(offsetof(nf_host_api, runner_rows_available) == 696, "nf_host_api layout");
static_assert(offsetof(nf_host_api, status_create_code) == 704, "nf_host_api layout");
static_assert(offsetof(nf_host_api, status_code) == 712, "nf_host_api layout");
static_assert(offsetof(nf_host_api, tensor_drop_pages) == 720, "nf_host_api layout");
static_assert(offsetof(nf_host_api, checkpoint_save) == 728, "nf_host_api layout");
static_assert(offsetof(nf_host_api, checkpoint_load) == 736, "nf_host_api layout");
static_assert(offsetof(nf_host_api, model_set_clone) == 744, "nf_host_api layout");
static_assert(offsetof(nf_host_api, model_set_import_graph) == 752, "nf_host_api layout");
static_assert(offsetof(nf_host_api, runner_set_row_input) == 784, "nf_host_api layout");
static_assert(offsetof(nf_host_api, runner_forward_scratch) == 792, "nf_host_api layout");
static_assert(offsetof(nf_host_api, runner_clear_scratch) == 800, "nf_host_api layout");
static_assert(sizeof(nf_host_api) == 808, "nf_host_api layout: append new members, then update");
static_assert(offsetof(nf_plugin_descriptor, kind) == 8, "nf_plugin_descriptor layout");
static_assert(offsetof(nf_plugin_descriptor, api) == 48, "nf_plugin_descriptor layout");
static_assert(sizeof(nf_plugin_library) == 24, "nf_plugin_library layout");
static_assert(offsetof(nf_backend_api, compile) == 8, "nf_backend_api layout");
static_assert(offsetof(nf_backend_api, estimate) == 40, "nf_backend_api layout");
static_assert(offsetof(nf_backend_api, open_model_set) == 48, "nf_backend_api layout");
static_assert(offsetof(nf_backend_api, compile_part_count) == 56, "nf_backend_api layout");
static_assert(offsetof(nf_backend_api, compile_part) == 64, "nf_backend_api layout");
static_assert(sizeof(nf_backend_api) == 72, "nf_backend_api layout");
static_assert(offsetof(nf_transform_api, validate) == 16, "nf_transform_api layout");
static_assert(sizeof(nf_transform_api) == 24, "nf_transform_api layout");
static_assert(offsetof(nf_quant_api, validate) == 16, "nf_quant_api layout");
static_assert(offsetof(nf_quant_api, shard_count) == 24, "nf_quant_api layout");
static_assert(offsetof(nf_quant_api, apply_shard) == 32, "nf_quant_api layout");
static_assert(sizeof(nf_quant_api) == 40, "nf_quant_api layout");
static_assert(offsetof(nf_speculative_api, stats) == 32, "nf_speculative_api layout");
static_assert(offsetof(nf_speculative_api, build) == 40, "nf_speculative_api layout");
static_assert(sizeof(nf_speculative_api) == 48, "nf_speculative_api layout");
static_assert(offsetof(nf_encoding, num_scales) == 40, "nf_encoding layout");
#else
_Static_assert(sizeof(nf_host_api) == 808, "nf_host_api layout");
_Static_assert(sizeof(nf_backend_api) == 72, "nf_backend_api layout");
#endif

#endif /* NPUFORGE_PLUGIN_H */

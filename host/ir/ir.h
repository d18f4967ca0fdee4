// The host's graph IR: what ONNX import produces, what plugins edit through the host API,
// and what ONNX export writes. Weights are tensors over shared buffers, so copying a graph
// (one per AR/CL variant) never copies weight bytes; mmapped external data is a buffer too.
#pragma once

#include <npuforge/plugin.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

namespace nf::ir {

using DType = nf_dtype;

// Size of one element in bytes; 0 for strings and sub-byte types.
size_t dtype_size(DType t);
const char* dtype_name(DType t);

// Bytes that a tensor views: owned or a read-only file mapping.
class Buffer {
 public:
  virtual ~Buffer() = default;
  virtual const uint8_t* data() const = 0;
  virtual size_t size() const = 0;
  virtual bool writable() const { return false; }
  uint8_t* mutable_data() { return const_cast<uint8_t*>(data()); }
  // Hint that bytes [offset, offset + n) are not needed in memory for now (a mapping drops
  // its pages from this process; they come back from the file on the next read).
  virtual void drop_pages(size_t /*offset*/, size_t /*n*/) const {}
};

class OwnedBuffer final : public Buffer {
 public:
  explicit OwnedBuffer(size_t n) : bytes_(n) {}
  explicit OwnedBuffer(std::vector<uint8_t> b) : bytes_(std::move(b)) {}
  const uint8_t* data() const override { return bytes_.data(); }
  size_t size() const override { return bytes_.size(); }
  bool writable() const override { return true; }

 private:
  std::vector<uint8_t> bytes_;
};

// A whole file mapped read-only; tensors keep it alive through shared_ptr.
class MappedFile final : public Buffer {
 public:
  // Throws std::runtime_error with the path and reason.
  explicit MappedFile(const std::string& path);
  ~MappedFile() override;
  const uint8_t* data() const override { return static_cast<const uint8_t*>(addr_); }
  size_t size() const override { return size_; }
  // madvise(MADV_DONTNEED) on the pages holding the range: the mapping is read-only and
  // private, so the pages are clean and a later read faults them back in from the file.
  // Keeps the resident set small while a multi-GB file is streamed (hashed, saved).
  void drop_pages(size_t offset, size_t n) const override;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  void* addr_ = nullptr;
  size_t size_ = 0;
  int fd_ = -1;       // kept open: check_mapped_files compares the file with what was mapped
  int slot_ = -1;     // in the SIGBUS handler's table
  int64_t mtime_ns_ = 0;
  friend void check_mapped_files();
};

// Throws std::runtime_error "<path>: changed while in use ..." when a mapped file was
// truncated or rewritten since it was mapped. A truncated file's lost pages do not kill the
// process with SIGBUS: a handler maps zeros over them, and this check then reports the
// file. Called after each plugin call and backend run, and before a package is committed.
void check_mapped_files();

struct Tensor {
  DType dtype = NF_DTYPE_UNDEFINED;
  std::vector<int64_t> dims;
  std::shared_ptr<Buffer> buffer;  // null only for an empty tensor
  size_t offset = 0;               // into buffer
  std::vector<std::string> strings; // dtype STRING only

  int64_t numel() const;
  size_t nbytes() const;  // numel * dtype_size (sub-byte types packed two per byte)
  const void* data() const { return buffer ? buffer->data() + offset : nullptr; }
  // Writable bytes; copies to an owned buffer first unless this tensor owns them alone.
  void* mutable_data();
  template <class T> const T* as() const { return static_cast<const T*>(data()); }
  template <class T> T* mutable_as() { return static_cast<T*>(mutable_data()); }
  // Lets the bytes leave the resident set if they are a file mapping (Buffer::drop_pages).
  void drop_pages() const {
    if (buffer) buffer->drop_pages(offset, nbytes());
  }

  static Tensor zeros(DType dtype, std::vector<int64_t> dims);
  template <class T>
  static Tensor from(DType dtype, std::vector<int64_t> dims, const std::vector<T>& values) {
    Tensor t = zeros(dtype, std::move(dims));
    std::copy(values.begin(), values.end(), t.mutable_as<T>());
    return t;
  }
};

// Whether 2-D `b` [H, V] holds the transpose of `e` [V, H], element for element (same
// dtype): a tied LM head that torch's constant folding stored as a second table. A few
// scattered elements first, so an untied head of the same shape is told apart at once; then
// everything, in tiles that keep both reads within cache lines. Tables whose sampled
// elements are all zero are not trained weights (synth_model.py --zeros stands in for real,
// untied ones): false.
bool is_transpose_of(const Tensor& b, const Tensor& e);

// What the host API hands to plugins as nf_tensor*: a box around a Tensor. C++ owners
// hold shared_ptr<TensorRef>; references taken through the ABI (tensor_retain) keep the
// box alive through `abi_keep` until the last tensor_release.
struct TensorRef : std::enable_shared_from_this<TensorRef> {
  explicit TensorRef(Tensor t = {}) : tensor(std::move(t)), id(next_id()) {}
  Tensor tensor;
  // Unique for the process's lifetime (an address can be reused once the box is freed):
  // what a cache keyed by "this very tensor" compares.
  const uint64_t id;
  std::atomic<int> abi_refs{0};
  std::shared_ptr<TensorRef> abi_keep;
  bool is_weight = false;  // a plugin installed it as an initializer (graph_set_initializer)

 private:
  static uint64_t next_id() {
    static std::atomic<uint64_t> ids{0};
    return ++ids;
  }
};
inline std::shared_ptr<TensorRef> make_tensor_ref(Tensor t) { return std::make_shared<TensorRef>(std::move(t)); }

struct Graph;

struct Attribute {
  nf_attr_type type = NF_ATTR_UNDEFINED;
  int64_t i = 0;
  float f = 0;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<float> floats;
  std::vector<std::string> strings;
  std::shared_ptr<TensorRef> t;     // TENSOR
  std::shared_ptr<Graph> g;         // GRAPH (If/Loop/Scan bodies)
};

struct Node {
  std::string op_type;
  std::string domain;  // "" = ai.onnx
  std::string name;
  std::vector<std::string> inputs;   // "" = omitted optional input
  std::vector<std::string> outputs;
  std::map<std::string, Attribute> attrs;
};

// A dimension: fixed (value >= 0) or symbolic (value < 0, param may name it).
struct Dim {
  int64_t value = -1;
  std::string param;
};

struct ValueType {
  DType dtype = NF_DTYPE_UNDEFINED;
  std::optional<std::vector<Dim>> shape;  // nullopt: rank unknown
};

struct Graph {
  std::string name;
  std::vector<std::unique_ptr<Node>> nodes;  // pointers stay stable for nf_node handles
  std::vector<std::string> inputs;
  std::vector<std::string> outputs;
  std::map<std::string, ValueType> types;    // inputs, outputs and value_info
  std::map<std::string, std::shared_ptr<TensorRef>> initializers;
  std::map<std::string, int64_t> opsets;     // domain -> version
  int64_t ir_version = 8;                    // ONNX IR version to write back
  std::string producer_name;                 // producer_name of the source file
  std::string doc;

  // Deep copy of structure; initializer buffers are shared.
  std::unique_ptr<Graph> clone() const;
  // Indices of the nodes in an order that computes every value before its readers (Kahn's
  // algorithm; a sorted graph keeps its order). Throws on a cycle.
  std::vector<size_t> execution_order() const;
  // Puts the nodes in execution_order().
  void sort();
  Node* producer(const std::string& value) const;
  const Tensor* initializer(const std::string& name) const;
};

// Why `g` cannot be run ("" when it can): a value with two writers (two nodes, or a node
// and a graph input or initializer), a node input or graph output that nothing defines, a
// STRING tensor as a node's input, Gather indices that are not integers. Backends look
// values up by name and kernels trust dtypes, so such a graph would crash them; the host
// checks every graph before a backend sees it.
std::string graph_problem(const Graph& g);

// Every value name of g: inputs, outputs, initializers, typed values, node inputs and outputs.
std::set<std::string> value_names(const Graph& g);
// Renames values of g (and the outer-scope references of its subgraphs) by `renames`.
void rename_values(Graph& g, const std::map<std::string, std::string>& renames);

// Encoding of one tensor; owns its arrays, exposes them as nf_encoding.
struct Encoding {
  nf_encoding view{};
  uint64_t generation = 0;  // unique to each from(): tells a replaced encoding from the one before
  std::vector<float> scale;
  std::vector<int32_t> offset;
  std::vector<int32_t> per_block_int_scale;

  static Encoding from(const nf_encoding& e);
  Encoding() = default;
  Encoding(const Encoding& o) { *this = o; }
  Encoding& operator=(const Encoding& o);
  void relink();  // points view's arrays at our vectors
};

struct ModelSet {
  std::vector<std::unique_ptr<Graph>> graphs;
  std::map<std::string, std::string> metadata;  // key -> JSON text
  std::map<std::string, Encoding> encodings;    // tensor name -> encoding

  Graph* find(const std::string& name) const;
  std::unique_ptr<ModelSet> clone() const;
  // The target decoder's graphs: those no role of metadata "roles" lists (graph_roles.hpp).
  std::vector<Graph*> targets() const;
};

}  // namespace nf::ir

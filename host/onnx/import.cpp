// ONNX ModelProto -> ir::Graph. Every check that a hostile file could trip ends in a
// ModelError; tensors over external data are views into one mapping per data file.
#include "onnx/internal.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <climits>
#include <cstring>
#include <filesystem>
#include <limits>

namespace fs = std::filesystem;

namespace nf::onnx_io {

namespace detail {

std::string one_line(std::string_view s, size_t max_len) {
  std::string r;
  r.reserve(std::min(s.size(), max_len + 3));
  for (char c : s) {
    if (r.size() >= max_len) {
      r += "...";
      break;
    }
    r += (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) ? ' ' : c;
  }
  return r;
}

void fail(const std::string& origin, const std::string& reason) {
  throw ModelError(one_line(origin, 1000) + ": " + one_line(reason, 1000));
}

std::string canonical_dir(const std::string& dir) {
  std::error_code ec;
  fs::path p = fs::canonical(dir.empty() ? fs::path(".") : fs::path(dir), ec);
  return ec ? dir : p.string();
}

}  // namespace detail

namespace {

using detail::fail;
using detail::ImportContext;
using detail::one_line;

// Owns the bytes of a raw_data field, moved out of the parsed proto without a copy.
class StringBuffer final : public ir::Buffer {
 public:
  explicit StringBuffer(std::string s) : bytes_(std::move(s)) {}
  const uint8_t* data() const override { return reinterpret_cast<const uint8_t*>(bytes_.data()); }
  size_t size() const override { return bytes_.size(); }
  bool writable() const override { return true; }

 private:
  std::string bytes_;
};

bool known_dtype(int t) {
  switch (t) {
    case NF_DTYPE_FLOAT32: case NF_DTYPE_UINT8: case NF_DTYPE_INT8: case NF_DTYPE_UINT16:
    case NF_DTYPE_INT16: case NF_DTYPE_INT32: case NF_DTYPE_INT64: case NF_DTYPE_STRING:
    case NF_DTYPE_BOOL: case NF_DTYPE_FLOAT16: case NF_DTYPE_FLOAT64: case NF_DTYPE_UINT32:
    case NF_DTYPE_UINT64: case NF_DTYPE_BFLOAT16: case NF_DTYPE_UINT4: case NF_DTYPE_INT4:
      return true;
    default:
      return false;
  }
}

bool is_4bit(ir::DType t) { return t == NF_DTYPE_INT4 || t == NF_DTYPE_UINT4; }

// Tensors bigger than this are certainly lies (and would overflow size arithmetic).
constexpr uint64_t kMaxTensorBytes = uint64_t{1} << 48;

class Importer {
 public:
  explicit Importer(ImportContext& ctx) : ctx_(ctx) {}

  std::unique_ptr<ir::Graph> model(onnx::ModelProto& m) {
    if (!m.has_graph()) fail(ctx_.origin, "not an ONNX model (no graph)");
    if (m.ir_version() <= 0) fail(ctx_.origin, "not an ONNX model (no ir_version)");
    detail::inline_local_functions(m, ctx_.origin);
    auto g = graph(*m.mutable_graph(), 0);
    g->ir_version = m.ir_version();
    g->producer_name = m.producer_name();
    for (const auto& op : m.opset_import()) {
      std::string domain = op.domain() == "ai.onnx" ? "" : op.domain();
      g->opsets[domain] = op.version();
    }
    return g;
  }

 private:
  ImportContext& ctx_;

  std::unique_ptr<ir::Graph> graph(onnx::GraphProto& gp, int depth) {
    // Protobuf's recursion limit already bounds nesting; this keeps our own stack bounded too.
    if (depth > 64) fail(ctx_.origin, "subgraphs nested too deeply");
    auto g = std::make_unique<ir::Graph>();
    g->name = gp.name();
    g->doc = gp.doc_string();
    if (gp.sparse_initializer_size() > 0)
      fail(ctx_.origin, "sparse initializer '" + gp.sparse_initializer(0).values().name() + "' is not supported");
    for (auto& tp : *gp.mutable_initializer()) {
      if (tp.name().empty()) fail(ctx_.origin, "initializer without a name in graph '" + g->name + "'");
      auto ref = std::make_shared<ir::TensorRef>();
      ref->tensor = tensor(tp);
      if (!g->initializers.emplace(tp.name(), std::move(ref)).second)
        fail(ctx_.origin, "initializer '" + tp.name() + "' is defined twice");
    }
    for (const auto& vi : gp.input()) {
      // An input with an initializer of its name is that constant unless a caller overrides
      // it (IR < 4 exports, keep_initializers_as_inputs=True): a deployed model's weight.
      if (g->initializers.count(vi.name())) continue;
      g->inputs.push_back(vi.name());
      value_info(vi, *g);
    }
    for (const auto& vi : gp.output()) {
      g->outputs.push_back(vi.name());
      value_info(vi, *g);
    }
    for (const auto& vi : gp.value_info()) value_info(vi, *g);
    g->nodes.reserve(gp.node_size());
    for (auto& np : *gp.mutable_node()) g->nodes.push_back(node(np, depth));
    return g;
  }

  void value_info(const onnx::ValueInfoProto& vi, ir::Graph& g) {
    if (!vi.has_type() || !vi.type().has_tensor_type()) return;  // sequences, maps, untyped: no tensor type
    const auto& tt = vi.type().tensor_type();
    ir::ValueType vt;
    if (!known_dtype(tt.elem_type())) {
      if (tt.elem_type() == 0) return;
      fail(ctx_.origin, "value '" + vi.name() + "' has unsupported data type " + std::to_string(tt.elem_type()));
    }
    vt.dtype = static_cast<ir::DType>(tt.elem_type());
    if (tt.has_shape()) {
      std::vector<ir::Dim> dims;
      for (const auto& d : tt.shape().dim()) {
        ir::Dim dim;
        if (d.has_dim_value()) {
          if (d.dim_value() < 0) fail(ctx_.origin, "value '" + vi.name() + "' has a negative dimension");
          dim.value = d.dim_value();
        } else if (d.has_dim_param()) {
          dim.param = d.dim_param();
        }
        dims.push_back(std::move(dim));
      }
      vt.shape = std::move(dims);
    }
    g.types[vi.name()] = std::move(vt);
  }

  std::unique_ptr<ir::Node> node(onnx::NodeProto& np, int depth) {
    auto n = std::make_unique<ir::Node>();
    n->op_type = np.op_type();
    n->domain = np.domain() == "ai.onnx" ? "" : np.domain();
    n->name = np.name();
    n->inputs.assign(np.input().begin(), np.input().end());
    n->outputs.assign(np.output().begin(), np.output().end());
    for (auto& ap : *np.mutable_attribute()) {
      if (ap.name().empty()) fail(ctx_.origin, "node '" + np.name() + "' has an attribute without a name");
      if (!n->attrs.emplace(ap.name(), attribute(ap, np, depth)).second)
        fail(ctx_.origin, "node '" + np.name() + "' has attribute '" + ap.name() + "' twice");
    }
    return n;
  }

  ir::Attribute attribute(onnx::AttributeProto& ap, const onnx::NodeProto& np, int depth) {
    using A = onnx::AttributeProto;
    int type = ap.type();
    if (type == A::UNDEFINED) {  // very old files: infer the kind from the field that is set
      if (ap.has_f()) type = A::FLOAT;
      else if (ap.has_i()) type = A::INT;
      else if (ap.has_s()) type = A::STRING;
      else if (ap.has_t()) type = A::TENSOR;
      else if (ap.has_g()) type = A::GRAPH;
      else if (ap.floats_size()) type = A::FLOATS;
      else if (ap.ints_size()) type = A::INTS;
      else if (ap.strings_size()) type = A::STRINGS;
    }
    if (!ap.ref_attr_name().empty())
      fail(ctx_.origin, "attribute '" + ap.name() + "' of node '" + np.name() + "' refers to a function attribute");
    ir::Attribute a;
    switch (type) {
      case A::FLOAT: a.type = NF_ATTR_FLOAT; a.f = ap.f(); break;
      case A::INT: a.type = NF_ATTR_INT; a.i = ap.i(); break;
      case A::STRING: a.type = NF_ATTR_STRING; a.s = ap.s(); break;
      case A::FLOATS: a.type = NF_ATTR_FLOATS; a.floats.assign(ap.floats().begin(), ap.floats().end()); break;
      case A::INTS: a.type = NF_ATTR_INTS; a.ints.assign(ap.ints().begin(), ap.ints().end()); break;
      case A::STRINGS: a.type = NF_ATTR_STRINGS; a.strings.assign(ap.strings().begin(), ap.strings().end()); break;
      case A::TENSOR:
        a.type = NF_ATTR_TENSOR;
        a.t = std::make_shared<ir::TensorRef>();
        a.t->tensor = tensor(*ap.mutable_t());
        break;
      case A::GRAPH:
        a.type = NF_ATTR_GRAPH;
        a.g = graph(*ap.mutable_g(), depth + 1);
        break;
      default:
        fail(ctx_.origin, "attribute '" + ap.name() + "' of node '" + np.name() + "' has unsupported kind " +
                              std::to_string(type));
    }
    return a;
  }

  // dims -> element count and byte size, refusing negatives and overflow. The product of
  // the nonzero dims is bounded too, so later numel() arithmetic in any order cannot overflow.
  std::pair<uint64_t, uint64_t> tensor_size(const onnx::TensorProto& tp, ir::DType dt) {
    uint64_t nonzero = 1;
    bool empty = false;
    for (int64_t d : tp.dims()) {
      if (d < 0) fail(ctx_.origin, "tensor '" + tp.name() + "' has a negative dimension");
      if (d == 0) {
        empty = true;
        continue;
      }
      if (nonzero > kMaxTensorBytes / static_cast<uint64_t>(d))
        fail(ctx_.origin, "tensor '" + tp.name() + "' is impossibly large");
      nonzero *= static_cast<uint64_t>(d);
    }
    uint64_t numel = empty ? 0 : nonzero;
    uint64_t bytes = is_4bit(dt) ? (numel + 1) / 2 : numel * ir::dtype_size(dt);
    if (bytes > kMaxTensorBytes) fail(ctx_.origin, "tensor '" + tp.name() + "' is impossibly large");
    return {numel, bytes};
  }

  ir::Tensor tensor(onnx::TensorProto& tp) {
    const std::string& name = tp.name();
    if (!known_dtype(tp.data_type()))
      fail(ctx_.origin, "tensor '" + name + "' has unsupported data type " + std::to_string(tp.data_type()));
    if (tp.has_segment()) fail(ctx_.origin, "tensor '" + name + "' is segmented (not supported)");
    ir::Tensor t;
    t.dtype = static_cast<ir::DType>(tp.data_type());
    t.dims.assign(tp.dims().begin(), tp.dims().end());
    auto [numel, bytes] = tensor_size(tp, t.dtype);

    if (tp.data_location() == onnx::TensorProto::EXTERNAL) {
      if (t.dtype == NF_DTYPE_STRING) fail(ctx_.origin, "string tensor '" + name + "' cannot use external data");
      external(tp, bytes, t);
      return t;
    }
    if (t.dtype == NF_DTYPE_STRING) {
      if (tp.has_raw_data()) fail(ctx_.origin, "string tensor '" + name + "' uses raw_data");
      if (static_cast<uint64_t>(tp.string_data_size()) != numel) shape_lie(tp, tp.string_data_size(), numel);
      t.strings.assign(tp.string_data().begin(), tp.string_data().end());
      return t;
    }
    if (tp.has_raw_data()) {
      if (tp.raw_data().size() != bytes) shape_lie(tp, tp.raw_data().size(), bytes, "bytes");
      std::string raw;
      tp.mutable_raw_data()->swap(raw);
      if (bytes > 0) t.buffer = std::make_shared<StringBuffer>(std::move(raw));
      return t;
    }
    typed(tp, numel, bytes, t);
    return t;
  }

  [[noreturn]] void shape_lie(const onnx::TensorProto& tp, uint64_t have, uint64_t need,
                              const char* unit = "values") {
    fail(ctx_.origin, "tensor '" + tp.name() + "' has " + std::to_string(have) + " " + unit + " but its dims need " +
                          std::to_string(need));
  }

  // The typed repeated fields, with ONNX's packing rules: int32_data carries every type of
  // 16 bits or less (fp16/bf16 as bit patterns, 4-bit types two per element byte).
  void typed(const onnx::TensorProto& tp, uint64_t numel, uint64_t bytes, ir::Tensor& t) {
    // Count first: the dims may lie, and nothing is allocated for a lie.
    int have;
    uint64_t need = numel;
    switch (t.dtype) {
      case NF_DTYPE_FLOAT32: have = tp.float_data_size(); break;
      case NF_DTYPE_INT64: have = tp.int64_data_size(); break;
      case NF_DTYPE_FLOAT64: have = tp.double_data_size(); break;
      case NF_DTYPE_UINT32: case NF_DTYPE_UINT64: have = tp.uint64_data_size(); break;
      case NF_DTYPE_UINT4: case NF_DTYPE_INT4: have = tp.int32_data_size(); need = bytes; break;
      default: have = tp.int32_data_size();  // 8/16/32-bit ints, bool, fp16, bf16
    }
    if (static_cast<uint64_t>(have) != need) shape_lie(tp, static_cast<uint64_t>(have), need);
    if (bytes == 0) return;

    auto buf = std::make_shared<ir::OwnedBuffer>(static_cast<size_t>(bytes));
    uint8_t* out = buf->mutable_data();
    size_t esize = ir::dtype_size(t.dtype);
    switch (t.dtype) {
      case NF_DTYPE_FLOAT32: std::memcpy(out, tp.float_data().data(), bytes); break;
      case NF_DTYPE_INT64: std::memcpy(out, tp.int64_data().data(), bytes); break;
      case NF_DTYPE_FLOAT64: std::memcpy(out, tp.double_data().data(), bytes); break;
      case NF_DTYPE_UINT32:
      case NF_DTYPE_UINT64:
        for (int i = 0; i < have; ++i) {
          uint64_t v = tp.uint64_data(i);
          std::memcpy(out + static_cast<size_t>(i) * esize, &v, esize);  // little-endian: the low bytes
        }
        break;
      case NF_DTYPE_UINT4:
      case NF_DTYPE_INT4:  // each int32 carries one byte of two packed values
        for (int i = 0; i < have; ++i) out[i] = static_cast<uint8_t>(tp.int32_data(i));
        break;
      default:
        for (int i = 0; i < have; ++i) {
          int32_t v = tp.int32_data(i);
          if (t.dtype == NF_DTYPE_BOOL) v = v != 0;
          std::memcpy(out + static_cast<size_t>(i) * esize, &v, esize);
        }
    }
    t.buffer = std::move(buf);
  }

  static bool parse_u64(const std::string& s, uint64_t& v) {
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    return ec == std::errc() && p == s.data() + s.size() && !s.empty();
  }

  void external(const onnx::TensorProto& tp, uint64_t bytes, ir::Tensor& t) {
    const std::string& name = tp.name();
    std::string location;
    uint64_t offset = 0, length = bytes;
    bool has_length = false;
    for (const auto& kv : tp.external_data()) {
      if (kv.key() == "location") {
        location = kv.value();
      } else if (kv.key() == "offset") {
        if (!parse_u64(kv.value(), offset)) fail(ctx_.origin, "tensor '" + name + "' has a bad external offset");
      } else if (kv.key() == "length") {
        if (!parse_u64(kv.value(), length)) fail(ctx_.origin, "tensor '" + name + "' has a bad external length");
        has_length = true;
      }
    }
    if (has_length && length != bytes) shape_lie(tp, length, bytes, "bytes");
    auto file = open_external(location, name);
    if (offset > file->size() || bytes > file->size() - offset)
      fail(ctx_.origin, "tensor '" + name + "' reads bytes " + std::to_string(offset) + ".." +
                            std::to_string(offset + bytes) + " past the end of '" + location + "' (" +
                            std::to_string(file->size()) + " bytes)");
    if (bytes > 0) {
      t.buffer = file;
      t.offset = static_cast<size_t>(offset);
    }
  }

  // Resolves a location inside the model's folder and maps the file once.
  std::shared_ptr<ir::MappedFile> open_external(const std::string& location, const std::string& tensor) {
    const std::string what = "tensor '" + tensor + "': external data '" + location + "'";
    if (location.empty()) fail(ctx_.origin, "tensor '" + tensor + "' has external data without a location");
    if (location.find('\0') != std::string::npos) fail(ctx_.origin, what + " contains a NUL byte");
    fs::path rel(location);
    if (rel.is_absolute() || location[0] == '/' || location[0] == '\\')
      fail(ctx_.origin, what + " is an absolute path (refused)");
    for (const auto& part : rel)
      if (part == "..") fail(ctx_.origin, what + " contains '..' (refused)");
    if (location.find("..\\") != std::string::npos || location.find("\\..") != std::string::npos)
      fail(ctx_.origin, what + " contains '..' (refused)");

    std::error_code ec;
    fs::path base = fs::canonical(ctx_.base_dir.empty() ? fs::path(".") : fs::path(ctx_.base_dir), ec);
    if (ec) fail(ctx_.origin, what + " not found: model folder '" + ctx_.base_dir + "' does not exist");
    fs::path full = fs::canonical(base / rel, ec);
    if (ec) fail(ctx_.origin, what + " not found (" + (base / rel).string() + ")");
    // Symlinks may point anywhere: the resolved file must still be inside the model folder.
    auto [b, f] = std::mismatch(base.begin(), base.end(), full.begin(), full.end());
    if (b != base.end() || f == full.end()) fail(ctx_.origin, what + " resolves outside the model folder (refused)");
    if (!fs::is_regular_file(full, ec)) fail(ctx_.origin, what + " is not a regular file");

    auto it = ctx_.files.find(full.string());
    if (it != ctx_.files.end()) return it->second;
    std::shared_ptr<ir::MappedFile> file;
    try {
      file = std::make_shared<ir::MappedFile>(full.string());
    } catch (const std::exception& e) {
      fail(ctx_.origin, what + ": " + e.what());
    }
    ctx_.files.emplace(full.string(), file);
    return file;
  }
};

// Files may hold up to the 2 GB protobuf limit; the default coded-stream limit is lower.
bool parse_stream(google::protobuf::io::ZeroCopyInputStream& in, onnx::ModelProto& m) {
  google::protobuf::io::CodedInputStream cis(&in);
  cis.SetTotalBytesLimit(INT_MAX);
  return m.ParseFromCodedStream(&cis) && cis.ConsumedEntireMessage();
}

std::unique_ptr<ir::Graph> import_parsed(onnx::ModelProto& m, ImportContext& ctx) {
  auto g = Importer(ctx).model(m);
  if (std::string why = ir::graph_problem(*g); !why.empty()) fail(ctx.origin, why);
  return g;
}

}  // namespace

namespace detail {

std::unique_ptr<ir::Graph> parse_and_import(std::string_view bytes, ImportContext& ctx) {
  if (bytes.size() > static_cast<size_t>(INT_MAX)) fail(ctx.origin, "larger than the 2 GB protobuf limit");
  google::protobuf::io::ArrayInputStream in(bytes.data(), static_cast<int>(bytes.size()));
  onnx::ModelProto m;
  if (!parse_stream(in, m)) fail(ctx.origin, "not an ONNX model (protobuf parse failed: truncated or not protobuf)");
  return import_parsed(m, ctx);
}

std::unique_ptr<ir::Graph> parse_and_import_file(const std::string& path, ImportContext& ctx) {
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);  // a FIFO must not block the open
  if (fd < 0) fail(path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(path, "not a regular file");
  }
  if (st.st_size > INT_MAX) {
    ::close(fd);
    fail(path, "larger than the 2 GB protobuf limit");
  }
  onnx::ModelProto m;
  bool ok;
  {
    google::protobuf::io::FileInputStream in(fd);
    in.SetCloseOnDelete(true);
    ok = parse_stream(in, m);
  }
  if (!ok) fail(path, "not an ONNX model (protobuf parse failed: truncated or not protobuf)");
  return import_parsed(m, ctx);
}

}  // namespace detail

std::unique_ptr<ir::Graph> load_model(const std::string& path) {
  detail::ImportContext ctx;
  ctx.origin = path;
  ctx.base_dir = fs::path(path).parent_path().string();
  if (ctx.base_dir.empty()) ctx.base_dir = ".";
  return detail::parse_and_import_file(path, ctx);
}

std::unique_ptr<ir::Graph> load_model_from_bytes(std::string_view bytes, const std::string& base_dir) {
  detail::ImportContext ctx;
  ctx.origin = base_dir.empty() ? "<memory>" : base_dir + "/<memory>";
  ctx.base_dir = base_dir.empty() ? "." : base_dir;
  return detail::parse_and_import(bytes, ctx);
}

}  // namespace nf::onnx_io

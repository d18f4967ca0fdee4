// ir::Graph -> ONNX. Large tensors go to a data file so the proto stays small (protobuf
// cannot serialize messages over 2 GB); each distinct weight view is written once.
#include "onnx/internal.h"

#include "common/util.h"

#include <climits>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <set>

namespace fs = std::filesystem;

namespace nf::onnx_io {

using detail::fail;

namespace detail {

constexpr uint64_t kAlign = 64;

// A tensor's bytes written in pieces: a multi-GB tensor from a mapping should not need one
// huge syscall, and a mapped source drops each piece's pages once written, so saving a
// model set does not page all of its weights into this process.
void write_in_pieces(std::ostream& out, const ir::Tensor& t) {
  const char* p = static_cast<const char*>(t.data());
  for (size_t done = 0, n = t.nbytes(); out && done < n;) {
    const size_t chunk = std::min<size_t>(n - done, size_t{64} << 20);
    out.write(p + done, static_cast<std::streamsize>(chunk));
    t.buffer->drop_pages(t.offset + done, chunk);
    done += chunk;
  }
}

DataWriter::DataWriter(std::string path, std::string location)
    : path_(std::move(path)), tmp_(path_ + ".tmp"), location_(std::move(location)) {
  out_.open(tmp_, std::ios::binary | std::ios::trunc);
  if (!out_) fail(path_, "cannot create data file");
}

DataWriter::~DataWriter() {
  if (!committed_) {
    out_.close();
    std::remove(tmp_.c_str());
  }
}

uint64_t DataWriter::put(const ir::Tensor& t) {
  size_t n = t.nbytes();
  auto key = std::make_tuple(t.buffer.get(), t.offset, n);
  if (auto it = written_.find(key); it != written_.end()) return it->second;
  static const char zeros[kAlign] = {};
  uint64_t pad = (kAlign - size_ % kAlign) % kAlign;
  out_.write(zeros, static_cast<std::streamsize>(pad));
  uint64_t offset = size_ + pad;
  write_in_pieces(out_, t);
  if (!out_) fail(path_, "write failed (disk full?)");
  size_ = offset + n;
  written_.emplace(key, offset);
  return offset;
}

std::string BlobWriter::put(const ir::Tensor& t) {
  const size_t n = t.nbytes();
  auto key = std::make_tuple(t.buffer.get(), t.offset, n);
  if (auto it = written_.find(key); it != written_.end()) return it->second;
  const std::string name = nf::host::hash_buffer(*t.buffer, t.offset, n) + ".bin";
  const std::string location = "blobs/" + name;
  const fs::path dest = fs::path(dir_) / location;
  std::error_code ec;
  fs::create_directories(dest.parent_path(), ec);
  if (!fs::exists(dest, ec) && !(opts_.reuse && opts_.reuse(name, dest))) {
    const std::string tmp = dest.string() + ".tmp";  // written beside and renamed
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    write_in_pieces(out, t);
    out.close();
    if (!out) {
      std::remove(tmp.c_str());
      fail(dest.string(), "write failed (disk full?)");
    }
    fs::rename(tmp, dest, ec);
    if (ec) fail(dest.string(), "cannot rename: " + ec.message());
  }
  written_.emplace(key, location);
  return location;
}

void DataWriter::commit() {
  out_.close();
  if (!out_) fail(path_, "write failed (disk full?)");
  std::error_code ec;
  fs::rename(tmp_, path_, ec);
  if (ec) fail(path_, "cannot rename data file: " + ec.message());
  committed_ = true;
}

}  // namespace detail

namespace {

class Exporter {
 public:
  explicit Exporter(const detail::ExportPolicy& p) : p_(p) {}

  void graph(const ir::Graph& g, onnx::GraphProto* gp) {
    gp->set_name(g.name);
    if (!g.doc.empty()) gp->set_doc_string(g.doc);
    for (const auto& [name, ref] : g.initializers) {
      // Small int64/int32 initializers (shapes, axes, indices) stay in the graph file:
      // ONNX Runtime's shape inference reads them and cannot read external data.
      const ir::Tensor& t = ref->tensor;
      bool shape_like = (t.dtype == NF_DTYPE_INT64 || t.dtype == NF_DTYPE_INT32) && t.nbytes() <= 4096;
      tensor(name, t, shape_like ? SIZE_MAX : p_.initializer_threshold, gp->add_initializer(), !shape_like);
    }
    for (const auto& name : g.inputs) value_info(g, name, gp->add_input());
    for (const auto& name : g.outputs) value_info(g, name, gp->add_output());
    std::set<std::string> io(g.inputs.begin(), g.inputs.end());
    io.insert(g.outputs.begin(), g.outputs.end());
    for (const auto& [name, vt] : g.types)
      if (!io.count(name)) value_info(g, name, gp->add_value_info());
    for (const auto& n : g.nodes) node(*n, gp->add_node());
  }

 private:
  const detail::ExportPolicy& p_;
  uint64_t inline_bytes_ = 0;  // weight bytes put into the proto so far

  void value_info(const ir::Graph& g, const std::string& name, onnx::ValueInfoProto* vi) {
    vi->set_name(name);
    auto it = g.types.find(name);
    if (it == g.types.end() || it->second.dtype == NF_DTYPE_UNDEFINED) return;
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(it->second.dtype);
    if (!it->second.shape) return;
    auto* shape = tt->mutable_shape();
    for (const auto& d : *it->second.shape) {
      auto* dim = shape->add_dim();
      if (d.value >= 0) dim->set_dim_value(d.value);
      else if (!d.param.empty()) dim->set_dim_param(d.param);
    }
  }

  void node(const ir::Node& n, onnx::NodeProto* np) {
    np->set_op_type(n.op_type);
    if (!n.domain.empty()) np->set_domain(n.domain);
    if (!n.name.empty()) np->set_name(n.name);
    for (const auto& i : n.inputs) np->add_input(i);
    for (const auto& o : n.outputs) np->add_output(o);
    for (const auto& [name, a] : n.attrs) attribute(name, a, np->add_attribute(), n);
  }

  void attribute(const std::string& name, const ir::Attribute& a, onnx::AttributeProto* ap, const ir::Node& n) {
    using A = onnx::AttributeProto;
    ap->set_name(name);
    switch (a.type) {
      case NF_ATTR_FLOAT: ap->set_type(A::FLOAT); ap->set_f(a.f); break;
      case NF_ATTR_INT: ap->set_type(A::INT); ap->set_i(a.i); break;
      case NF_ATTR_STRING: ap->set_type(A::STRING); ap->set_s(a.s); break;
      case NF_ATTR_FLOATS:
        ap->set_type(A::FLOATS);
        for (float f : a.floats) ap->add_floats(f);
        break;
      case NF_ATTR_INTS:
        ap->set_type(A::INTS);
        for (int64_t i : a.ints) ap->add_ints(i);
        break;
      case NF_ATTR_STRINGS:
        ap->set_type(A::STRINGS);
        for (const auto& s : a.strings) ap->add_strings(s);
        break;
      case NF_ATTR_TENSOR:
        if (!a.t) fail(p_.origin, "node '" + n.name + "' attribute '" + name + "' has no tensor");
        ap->set_type(A::TENSOR);
        tensor("", a.t->tensor, p_.attribute_threshold, ap->mutable_t());
        break;
      case NF_ATTR_GRAPH:
        if (!a.g) fail(p_.origin, "node '" + n.name + "' attribute '" + name + "' has no graph");
        ap->set_type(A::GRAPH);
        graph(*a.g, ap->mutable_g());
        break;
      default:
        fail(p_.origin, "node '" + n.name + "' attribute '" + name + "' has no type");
    }
  }

  // `blob_ok`: an initializer the policy's blob writer may take.
  void tensor(const std::string& name, const ir::Tensor& t, size_t threshold, onnx::TensorProto* tp,
              bool blob_ok = false) {
    if (!name.empty()) tp->set_name(name);
    tp->set_data_type(t.dtype);
    for (int64_t d : t.dims) {
      if (d < 0) fail(p_.origin, "tensor '" + name + "' has a negative dimension");
      tp->add_dims(d);
    }
    if (t.dtype == NF_DTYPE_STRING) {
      for (const auto& s : t.strings) tp->add_string_data(s);
      return;
    }
    size_t n = t.nbytes();
    if (n == 0) return;
    if (!t.buffer || t.offset > t.buffer->size() || n > t.buffer->size() - t.offset)
      fail(p_.origin, "tensor '" + name + "' has fewer bytes than its dims need");
    const bool blob = blob_ok && p_.blobs && n >= p_.blobs->min_bytes();
    if (blob || (p_.data && n >= threshold)) {
      const std::string location = blob ? p_.blobs->put(t) : p_.data->location();
      const uint64_t offset = blob ? 0 : p_.data->put(t);
      tp->set_data_location(onnx::TensorProto::EXTERNAL);
      auto add = [&](const char* k, const std::string& v) {
        auto* e = tp->add_external_data();
        e->set_key(k);
        e->set_value(v);
      };
      add("location", location);
      add("offset", std::to_string(offset));
      add("length", std::to_string(n));
      return;
    }
    // Refuse before building a proto that protobuf could not serialize anyway.
    inline_bytes_ += n;
    if (inline_bytes_ > static_cast<uint64_t>(INT_MAX))
      fail(p_.origin, "inline weights exceed the 2 GB protobuf limit; save them as external data");
    tp->set_raw_data(t.data(), n);
  }
};

}  // namespace

namespace detail {

void export_model(const ir::Graph& g, const ExportPolicy& policy, onnx::ModelProto* m) {
  m->set_ir_version(g.ir_version > 0 ? g.ir_version : 8);
  m->set_producer_name(g.producer_name.empty() ? "npuforge" : g.producer_name);
  std::map<std::string, int64_t> opsets = g.opsets;
  if (opsets.empty()) opsets[""] = 17;
  for (const auto& [domain, version] : opsets) {
    auto* op = m->add_opset_import();
    op->set_domain(domain);
    op->set_version(version);
  }
  Exporter(policy).graph(g, m->mutable_graph());
}

void write_model_file(const onnx::ModelProto& m, const std::string& path) {
  if (m.ByteSizeLong() > static_cast<size_t>(INT_MAX))
    fail(path, "model proto is over the 2 GB protobuf limit; save weights as external data");
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) fail(path, "cannot create file");
    if (!m.SerializeToOstream(&out) || !out.flush()) {
      out.close();
      std::remove(tmp.c_str());
      fail(path, "write failed");
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    fail(path, "cannot rename: " + ec.message());
  }
}

}  // namespace detail

void save_model(const ir::Graph& g, const std::string& path, const SaveOptions& opts) {
  detail::ExportPolicy policy;
  policy.origin = path;
  policy.initializer_threshold = policy.attribute_threshold = opts.external_threshold;
  std::unique_ptr<detail::DataWriter> data;
  if (!opts.external_data_file.empty()) {
    std::string location = opts.external_data_file;
    if (auto pos = location.find("<stem>"); pos != std::string::npos)
      location.replace(pos, 6, fs::path(path).stem().string());
    fs::path rel(location);
    if (rel.is_absolute() || rel.has_parent_path())
      fail(path, "external data file '" + location + "' must be a plain file name beside the model");
    data = std::make_unique<detail::DataWriter>((fs::path(path).parent_path() / rel).string(), location);
    policy.data = data.get();
  }
  onnx::ModelProto m;
  detail::export_model(g, policy, &m);
  if (data && data->size() > 0) data->commit();  // no file when nothing went external
  detail::write_model_file(m, path);
}

}  // namespace nf::onnx_io

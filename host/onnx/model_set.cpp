// Model sets on disk and AIMET 1.0.0 encodings.
#include "onnx/internal.h"

#include "common/files.h"

#include <cctype>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <set>

namespace fs = std::filesystem;
using nlohmann::json;

namespace nf::onnx_io {

using detail::fail;

namespace {

constexpr const char* kFormat = "npuforge-model-set";
constexpr const char* kWeights = "weights.bin";

// Graph names become file names: keep them to a safe alphabet.
bool safe_file_stem(const std::string& s) {
  if (s.empty() || s.size() > 200 || s[0] == '.') return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.')) return false;
  return true;
}

json read_json(const fs::path& p) {
  std::string text = nf::host::read_regular_file(p, nf::host::kJsonMax, "JSON file");
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    fail(p.string(), std::string("invalid JSON: ") + e.what());
  }
}

void write_json(const fs::path& p, const json& j) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << j.dump(2) << "\n";
  if (!out.flush()) fail(p.string(), "write failed");
}

// ---- encodings --------------------------------------------------------------------------

const char* enc_type_name(nf_enc_type t) {
  switch (t) {
    case NF_ENC_PER_TENSOR: return "PER_TENSOR";
    case NF_ENC_PER_CHANNEL: return "PER_CHANNEL";
    case NF_ENC_PER_BLOCK: return "PER_BLOCK";
    case NF_ENC_LPBQ: return "LPBQ";
  }
  return "PER_TENSOR";
}

json encoding_json(const std::string& name, const ir::Encoding& e) {
  const nf_encoding& v = e.view;
  json j = {{"name", name},
            {"enc_type", enc_type_name(v.enc_type)},
            {"dtype", v.is_float ? "FLOAT" : "INT"},
            {"bw", v.bw},
            {"is_sym", v.is_sym != 0},
            {"scale", e.scale},
            {"offset", e.offset}};
  if (v.enc_type == NF_ENC_PER_BLOCK || v.enc_type == NF_ENC_LPBQ) j["block_size"] = v.block_size;
  if (v.enc_type == NF_ENC_LPBQ) {
    j["compressed_bw"] = v.compressed_bw;
    j["per_block_int_scale"] = e.per_block_int_scale;
  }
  // npuforge extension (AIMET readers ignore it): which tensor axes the scales run along.
  if (v.enc_type != NF_ENC_PER_TENSOR) {
    j["axis"] = v.axis;
    if (v.enc_type != NF_ENC_PER_CHANNEL) j["block_axis"] = v.block_axis;
  }
  return j;
}

class EncodingReader {
 public:
  EncodingReader(std::string where) : where_(std::move(where)) {}

  ir::Encoding read(const json& j) {
    if (!j.is_object()) bad("is not an object");
    static const std::set<std::string> known = {"name", "enc_type", "dtype", "bw", "is_sym", "scale", "offset",
                                                "block_size", "compressed_bw", "per_block_int_scale", "axis",
                                                "block_axis"};
    for (const auto& [k, _] : j.items())
      if (!known.count(k)) bad("has unknown field '" + k + "'");
    ir::Encoding e;
    nf_encoding& v = e.view;
    v.struct_size = sizeof(nf_encoding);
    std::string type = str(j, "enc_type");
    if (type == "PER_TENSOR") v.enc_type = NF_ENC_PER_TENSOR;
    else if (type == "PER_CHANNEL") v.enc_type = NF_ENC_PER_CHANNEL;
    else if (type == "PER_BLOCK") v.enc_type = NF_ENC_PER_BLOCK;
    else if (type == "LPBQ") v.enc_type = NF_ENC_LPBQ;
    else bad("enc_type '" + type + "' is not PER_TENSOR, PER_CHANNEL, PER_BLOCK or LPBQ");
    std::string dtype = str(j, "dtype");
    if (dtype != "INT" && dtype != "FLOAT") bad("dtype '" + dtype + "' is not INT or FLOAT");
    v.is_float = dtype == "FLOAT";
    v.bw = integer(j, "bw", 1, 64);
    if (!j.contains("is_sym") || !j["is_sym"].is_boolean()) bad("field 'is_sym' must be true or false");
    v.is_sym = j["is_sym"].get<bool>();
    e.scale = floats(j, "scale", !v.is_float);
    e.offset = ints(j, "offset", !v.is_float);
    if (e.scale.size() != e.offset.size())
      bad("has " + std::to_string(e.scale.size()) + " scales but " + std::to_string(e.offset.size()) + " offsets");
    if (!v.is_float && e.scale.empty()) bad("has no scales");
    if (v.enc_type == NF_ENC_PER_TENSOR && e.scale.size() > 1)
      bad("is PER_TENSOR but has " + std::to_string(e.scale.size()) + " scales");
    for (float s : e.scale)
      if (!std::isfinite(s) || s < 0) bad("has a negative or non-finite scale");
    bool blockwise = v.enc_type == NF_ENC_PER_BLOCK || v.enc_type == NF_ENC_LPBQ;
    v.block_size = blockwise ? integer(j, "block_size", 1, 1 << 30) : 0;
    if (!blockwise && j.contains("block_size")) bad("has block_size but is " + type);
    v.axis = j.contains("axis") ? integer(j, "axis", 0, 64) : 0;
    v.block_axis = blockwise ? (j.contains("block_axis") ? integer(j, "block_axis", 0, 64) : 1) : -1;
    if (v.enc_type == NF_ENC_LPBQ) {
      v.compressed_bw = integer(j, "compressed_bw", 1, 32);
      e.per_block_int_scale = ints(j, "per_block_int_scale", true);
      size_t ch = e.scale.size(), n = e.per_block_int_scale.size();
      if (n == 0 || n % ch != 0)
        bad("per_block_int_scale has " + std::to_string(n) + " entries, not a multiple of its " + std::to_string(ch) +
            " channel scales");
    } else {
      if (j.contains("compressed_bw") || j.contains("per_block_int_scale"))
        bad("has LPBQ fields but is " + type);
      v.compressed_bw = 0;
    }
    e.relink();
    return e;
  }

  [[noreturn]] void bad(const std::string& why) { throw ModelError(detail::one_line(where_ + " " + why, 1000)); }

 private:
  std::string where_;

  std::string str(const json& j, const char* k) {
    if (!j.contains(k) || !j[k].is_string()) bad(std::string("field '") + k + "' must be a string");
    return j[k].get<std::string>();
  }
  int32_t integer(const json& j, const char* k, int64_t lo, int64_t hi) {
    if (!j.contains(k) || !j[k].is_number_integer()) bad(std::string("field '") + k + "' must be an integer");
    int64_t v = j[k].get<int64_t>();
    if (v < lo || v > hi)
      bad(std::string("field '") + k + "' = " + std::to_string(v) + " is outside [" + std::to_string(lo) + ", " +
          std::to_string(hi) + "]");
    return static_cast<int32_t>(v);
  }
  std::vector<float> floats(const json& j, const char* k, bool required) {
    std::vector<float> r;
    if (!j.contains(k)) {
      if (required) bad(std::string("field '") + k + "' is missing");
      return r;
    }
    if (!j[k].is_array()) bad(std::string("field '") + k + "' must be an array");
    for (const auto& x : j[k]) {
      if (!x.is_number()) bad(std::string("field '") + k + "' must hold numbers");
      r.push_back(x.get<float>());
    }
    return r;
  }
  std::vector<int32_t> ints(const json& j, const char* k, bool required) {
    std::vector<int32_t> r;
    if (!j.contains(k)) {
      if (required) bad(std::string("field '") + k + "' is missing");
      return r;
    }
    if (!j[k].is_array()) bad(std::string("field '") + k + "' must be an array");
    for (const auto& x : j[k]) {
      if (!x.is_number_integer()) bad(std::string("field '") + k + "' must hold integers");
      int64_t v = x.get<int64_t>();
      if (v < INT32_MIN || v > INT32_MAX) bad(std::string("field '") + k + "' holds an integer out of int32 range");
      r.push_back(static_cast<int32_t>(v));
    }
    return r;
  }
};

}  // namespace

namespace {

std::set<std::string> param_names(const ir::ModelSet& ms) {
  std::set<std::string> params;
  for (const auto& g : ms.graphs)
    for (const auto& [name, _] : g->initializers) params.insert(name);
  return params;
}

}  // namespace

json encodings_to_json(const ir::ModelSet& ms) {
  std::set<std::string> params = param_names(ms);
  json act = json::array(), par = json::array();
  for (const auto& [name, e] : ms.encodings) (params.count(name) ? par : act).push_back(encoding_json(name, e));
  return {{"version", "1.0.0"}, {"activation_encodings", act}, {"param_encodings", par}};
}

void write_encodings(const ir::ModelSet& ms, std::ostream& out) {
  std::set<std::string> params = param_names(ms);
  // The bytes of encodings_to_json(ms).dump(2): keys in order, entries indented two levels.
  auto section = [&](const char* key, bool param) {
    out << "  \"" << key << "\": [";
    bool first = true;
    for (const auto& [name, e] : ms.encodings) {
      if ((params.count(name) != 0) != param) continue;
      std::string text = encoding_json(name, e).dump(2);
      out << (first ? "\n    " : ",\n    ");
      // JSON strings escape their newlines, so every '\n' here is a line break to indent.
      size_t from = 0;
      for (size_t nl; (nl = text.find('\n', from)) != std::string::npos; from = nl + 1)
        out.write(text.data() + from, static_cast<std::streamsize>(nl + 1 - from)) << "    ";
      out.write(text.data() + from, static_cast<std::streamsize>(text.size() - from));
      first = false;
    }
    out << (first ? "]" : "\n  ]");
  };
  out << "{\n";
  section("activation_encodings", false);
  out << ",\n";
  section("param_encodings", true);
  out << ",\n  \"version\": \"1.0.0\"\n}";
}

namespace {

bool is_encodings_section(const std::string& key) { return key == "activation_encodings" || key == "param_encodings"; }

// The fields around the entries: the version, nothing unknown, the sections arrays.
void check_encodings_object(const json& j) {
  if (!j.is_object()) throw ModelError("encodings: not a JSON object");
  if (!j.contains("version") || j["version"] != "1.0.0")
    throw ModelError("encodings: version must be \"1.0.0\" (AIMET 1.0.0 format)");
  for (const auto& [k, v] : j.items()) {
    if (k != "version" && !is_encodings_section(k) && k != "quantizer_args" && k != "excluded_layers")
      throw ModelError(detail::one_line("encodings: unknown field '" + k + "'"));
    if (is_encodings_section(k) && !v.is_array()) throw ModelError("encodings: " + k + " must be an array");
  }
}

// Entry `index` of `section` into `read`.
void read_encoding_entry(const std::string& section, size_t index, const json& entry,
                         std::map<std::string, ir::Encoding>& read) {
  std::string where = "encodings: " + section + "[" + std::to_string(index) + "]";
  if (entry.is_object() && entry.contains("name") && entry["name"].is_string())
    where += " '" + entry["name"].get<std::string>() + "'";
  EncodingReader r(where);
  ir::Encoding e = r.read(entry);
  if (!entry.contains("name") || !entry["name"].is_string() || entry["name"].get<std::string>().empty())
    r.bad("field 'name' must be a non-empty string");
  if (!read.emplace(entry["name"].get<std::string>(), std::move(e)).second) r.bad("is a duplicate name");
}

// The model set's encodings.json, entry by entry: each entry is read as it is parsed and not
// kept in the tree, so the tree never holds more than one (an 8B's per-block LPBQ encodings
// are ~1.5 GB of text, a whole tree of them ~2.5x that).
void read_encodings_file(const fs::path& p, ir::ModelSet& ms) {
  std::error_code ec;
  if (!fs::is_regular_file(p, ec)) fail(p.string(), "not a regular file");
  const uint64_t size = fs::file_size(p, ec);
  if (ec || size > nf::host::kEncodingsMax)
    fail(p.string(), "larger than " + std::to_string(nf::host::kEncodingsMax >> 20) + " MiB");
  std::ifstream in(p, std::ios::binary);
  if (!in) fail(p.string(), "cannot be read");
  std::map<std::string, ir::Encoding> read;
  std::string section;  // the top-level key being parsed
  bool in_section = false;
  size_t index = 0;
  json rest;
  try {
    rest = json::parse(in, [&](int depth, json::parse_event_t event, json& parsed) {
      if (depth == 1 && event == json::parse_event_t::key) section = parsed.get<std::string>();
      if (depth == 1 && event == json::parse_event_t::array_start) {
        in_section = is_encodings_section(section);
        index = 0;
      }
      if (depth == 1 && event == json::parse_event_t::array_end) in_section = false;
      if (!in_section || depth != 2) return true;
      if (event == json::parse_event_t::value) read_encoding_entry(section, index++, parsed, read);  // not an object
      if (event != json::parse_event_t::object_end) return true;
      read_encoding_entry(section, index++, parsed, read);
      return false;  // read: not kept in the tree
    });
    check_encodings_object(rest);
  } catch (const json::exception& e) {
    fail(p.string(), std::string("invalid JSON: ") + e.what());
  } catch (const ModelError& e) {
    fail(p.string(), e.what());
  }
  for (auto& [name, e] : read) ms.encodings[name] = e;  // operator= relinks the arrays
}

}  // namespace

void encodings_from_json(const json& j, ir::ModelSet& ms) {
  check_encodings_object(j);
  std::map<std::string, ir::Encoding> read;
  for (const char* section : {"activation_encodings", "param_encodings"}) {
    if (!j.contains(section)) continue;
    size_t i = 0;
    for (const auto& entry : j[section]) read_encoding_entry(section, i++, entry, read);
  }
  for (auto& [name, e] : read) ms.encodings[name] = e;  // operator= relinks the arrays
}

// ---- model sets -------------------------------------------------------------------------

void save_model_set(const ir::ModelSet& ms, const std::string& dir, const BlobOptions* blob_options) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) fail(dir, "model set folder does not exist");
  if (!fs::is_empty(dir, ec) || ec) fail(dir, "model set folder is not empty");
  std::set<std::string> names;
  for (const auto& g : ms.graphs) {
    if (!safe_file_stem(g->name)) fail(dir, "graph name '" + g->name + "' is not a safe file name ([A-Za-z0-9._-])");
    if (!names.insert(g->name).second) fail(dir, "two graphs are named '" + g->name + "'");
  }
  json meta = json::object();
  for (const auto& [k, v] : ms.metadata) {
    try {
      meta[k] = json::parse(v);
    } catch (const json::exception&) {
      fail(dir, "metadata '" + k + "' is not valid JSON");
    }
  }

  // One data file for the whole set: clones share buffers, so shared weights land once.
  detail::DataWriter weights((fs::path(dir) / kWeights).string(), kWeights);
  std::optional<detail::BlobWriter> blobs;
  if (blob_options) blobs.emplace(dir, *blob_options);
  json graphs = json::array();
  std::vector<std::pair<onnx::ModelProto, std::string>> protos;
  for (const auto& g : ms.graphs) {
    std::string file = g->name + ".onnx";
    detail::ExportPolicy policy;
    policy.origin = (fs::path(dir) / file).string();
    policy.data = &weights;
    policy.blobs = blobs ? &*blobs : nullptr;
    policy.initializer_threshold = 1;  // every initializer lives in weights.bin (or a blob)
    policy.attribute_threshold = 1024;
    onnx::ModelProto m;
    detail::export_model(*g, policy, &m);
    protos.emplace_back(std::move(m), policy.origin);
    graphs.push_back({{"name", g->name}, {"file", file}});
  }
  weights.commit();
  for (const auto& [m, path] : protos) detail::write_model_file(m, path);
  if (!ms.encodings.empty()) {
    // Streamed: a 1B model's encodings are ~200 MB of text, ~1 GB as one JSON tree and string.
    fs::path enc = fs::path(dir) / "encodings.json";
    std::ofstream out(enc, std::ios::binary | std::ios::trunc);
    write_encodings(ms, out);
    out << "\n";
    if (!out.flush()) fail(enc.string(), "write failed");
  }
  // The manifest last: a folder without model_set.json is not a model set.
  write_json(fs::path(dir) / "model_set.json",
             {{"format", kFormat}, {"version", 1}, {"graphs", graphs}, {"metadata", meta}});
}

std::unique_ptr<ir::ModelSet> load_model_set(const std::string& dir) {
  fs::path root(dir);
  fs::path manifest = root / "model_set.json";
  json j = read_json(manifest);
  const std::string where = manifest.string();
  if (!j.is_object() || j.value("format", "") != kFormat) fail(where, "not a model set (format is not npuforge-model-set)");
  if (!j.contains("version") || j["version"] != 1) fail(where, "unsupported model set version");
  if (!j.contains("graphs") || !j["graphs"].is_array()) fail(where, "field 'graphs' must be an array");

  auto ms = std::make_unique<ir::ModelSet>();
  detail::ImportContext ctx;
  ctx.base_dir = detail::canonical_dir(dir);
  // Map weights.bin once up front; every graph's external data resolves to this mapping.
  std::error_code ec;
  fs::path weights = fs::canonical(root / kWeights, ec);
  if (!ec && fs::is_regular_file(weights)) {
    try {
      ctx.files[weights.string()] = std::make_shared<ir::MappedFile>(weights.string());
    } catch (const std::exception& e) {
      fail(weights.string(), e.what());
    }
  }
  for (const auto& entry : j["graphs"]) {
    if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string() || !entry.contains("file") ||
        !entry["file"].is_string())
      fail(where, "each graph needs string fields 'name' and 'file'");
    std::string name = entry["name"], file = entry["file"];
    if (!safe_file_stem(file)) fail(where, "graph file '" + file + "' is not a plain file name in the folder");
    if (ms->find(name)) fail(where, "two graphs are named '" + name + "'");
    ctx.origin = (root / file).string();
    auto g = detail::parse_and_import_file(ctx.origin, ctx);
    g->name = name;
    ms->graphs.push_back(std::move(g));
  }
  if (j.contains("metadata")) {
    if (!j["metadata"].is_object()) fail(where, "field 'metadata' must be an object");
    for (const auto& [k, v] : j["metadata"].items()) ms->metadata[k] = v.dump();
  }
  fs::path enc = root / "encodings.json";
  if (fs::exists(enc, ec)) read_encodings_file(enc, *ms);
  return ms;
}

}  // namespace nf::onnx_io

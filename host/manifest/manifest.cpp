#include "manifest/manifest.h"
#include "common/files.h"
#include "manifest/schema.h"
#include "manifest/suggest.h"
#include "manifest/toml.h"

#include <algorithm>
#include <cctype>
#include <climits>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

namespace nf::manifest {

namespace fs = std::filesystem;
using nlohmann::json;

std::string format_error(const Location& where, const std::string& message) {
  std::string out = where.file + ":";
  if (where.line > 0) out += std::to_string(where.line) + ":" + std::to_string(where.column) + ":";
  out += " " + message;
  // One error, one line: the CLI and tools that parse "file:line:col:" rely on it.
  for (char& c : out)
    if (c == '\n' || c == '\r') c = ' ';
  return out;
}

ManifestError::ManifestError(Location where_, const std::string& message)
    : std::runtime_error(format_error(where_, message)), where(std::move(where_)) {}

Location PluginUse::locate(const std::string& pointer) const {
  std::string p = pointer;
  while (!p.empty()) {
    if (auto it = option_locations.find(p); it != option_locations.end()) return it->second;
    p.erase(p.rfind('/'));
  }
  return where;
}

namespace {

const std::vector<std::string> kTopLevel = {"model",   "calibration", "quant",   "transform",
                                            "targets", "speculative", "plugins", "build"};

std::string toml_type(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::string:
      return "string";
    case toml::node_type::integer:
      return "integer";
    case toml::node_type::floating_point:
      return "number";
    case toml::node_type::boolean:
      return "boolean";
    case toml::node_type::array:
      return "list";
    case toml::node_type::table:
      return "table";
    case toml::node_type::date:
      return "date";
    case toml::node_type::time:
      return "time";
    case toml::node_type::date_time:
      return "date-time";
    default:
      return "nothing";
  }
}

// "Error while parsing key-value pair: ..." -> "invalid TOML (key-value pair): ..."
std::string syntax_message(std::string_view description) {
  std::string d(description);
  const std::string prefix = "Error while parsing ";
  if (d.rfind(prefix, 0) == 0) {
    auto colon = d.find(": ", prefix.size());
    if (colon != std::string::npos)
      return "invalid TOML (" + d.substr(prefix.size(), colon - prefix.size()) + "): " + d.substr(colon + 2);
  }
  return "invalid TOML: " + d;
}

class Parser {
 public:
  Parser(std::string file, fs::path dir) : file_(std::move(file)), dir_(std::move(dir)) {}

  Manifest run(std::string_view text) {
    toml::table root = parse_toml(text);
    m_.dir = dir_.string();

    bool have_model = false, have_targets = false;
    for (auto& [key, node] : ordered(root)) {
      const std::string name(key->str());
      if (std::find(kTopLevel.begin(), kTopLevel.end(), name) == kTopLevel.end())
        fail(at(*key), "unknown " + std::string(node->is_table() || node->is_array_of_tables() ? "table" : "key") +
                           " " + quote(name) + did_you_mean(name, kTopLevel) + " (known: " + join(kTopLevel) + ")");
      if (name == "model") {
        parse_model(table_of(*key, *node));
        have_model = true;
      } else if (name == "calibration") {
        parse_calibration(table_of(*key, *node));
      } else if (name == "quant") {
        parse_uses(*key, *node, "quant", "recipe", m_.quant);
      } else if (name == "transform") {
        parse_uses(*key, *node, "transform", "plugin", m_.transforms);
      } else if (name == "targets") {
        parse_targets(*key, table_of(*key, *node));
        have_targets = true;
      } else if (name == "speculative") {
        m_.speculative = plugin_use(table_of(*key, *node), "[speculative]", "decoder");
      } else if (name == "plugins") {
        parse_plugins(table_of(*key, *node));
      } else if (name == "build") {
        parse_build(table_of(*key, *node));
      }
    }
    if (!have_model) fail({file_, 1, 1}, "missing [model] table (it names the ONNX model: onnx = \"model.onnx\")");
    if (!have_targets)
      fail({file_, 1, 1}, "no targets: add a [targets.<name>] table with backend = \"<backend plugin>\"");
    return std::move(m_);
  }

 private:
  Manifest m_;
  std::string file_;
  fs::path dir_;

  using Entry = std::pair<const toml::key*, const toml::node*>;

  [[noreturn]] void fail(const Location& where, const std::string& message) { throw ManifestError(where, message); }

  Location at(const toml::source_region& r) const {
    if (r.begin.line == 0) return {file_, 1, 1};  // nodes made implicitly carry no position
    return {file_, static_cast<int>(r.begin.line), static_cast<int>(r.begin.column)};
  }
  Location at(const toml::key& k) const { return at(k.source()); }
  Location at(const toml::node& n) const { return at(n.source()); }

  toml::table parse_toml(std::string_view text) {
#if TOML_EXCEPTIONS
    try {
      return toml::parse(text, std::string_view(file_));
    } catch (const toml::parse_error& e) {
      fail(at(e.source()), syntax_message(e.description()));
    }
#else
    toml::parse_result r = toml::parse(text, std::string_view(file_));
    if (!r) fail(at(r.error().source()), syntax_message(r.error().description()));
    return std::move(r).table();
#endif
  }

  // toml::table iterates by key; messages and targets follow the file instead.
  static std::vector<Entry> ordered(const toml::table& t) {
    std::vector<Entry> out;
    for (auto& [k, v] : t) out.emplace_back(&k, &v);
    std::stable_sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) {
      auto pa = a.first->source().begin, pb = b.first->source().begin;
      return std::pair(pa.line, pa.column) < std::pair(pb.line, pb.column);
    });
    return out;
  }

  const toml::table& table_of(const toml::key& key, const toml::node& node) {
    if (auto* t = node.as_table()) return *t;
    const std::string name(key.str());
    fail(at(key), quote(name) + " must be a table ([" + name + "]), got " + toml_type(node));
  }

  // Rejects keys outside `allowed`, suggesting the closest one.
  void only_keys(const toml::table& t, const std::string& where, const std::vector<std::string>& allowed) {
    for (auto& [key, node] : ordered(t)) {
      const std::string name(key->str());
      if (std::find(allowed.begin(), allowed.end(), name) == allowed.end())
        fail(at(*key), "unknown key " + quote(name) + " in " + where + did_you_mean(name, allowed) +
                           " (known: " + join(allowed) + ")");
    }
  }

  // A string value; nullopt when absent and not required.
  std::optional<std::string> get_string(const toml::table& t, const std::string& key, const std::string& where,
                                        bool required, const std::string& why) {
    const toml::node* n = t.get(key);
    if (!n) {
      if (required) fail(at(t), where + " needs " + quote(key) + " (" + why + ")");
      return std::nullopt;
    }
    auto* s = n->as_string();
    if (!s) fail(at(key_of(t, key)), quote(key) + " in " + where + " must be a string, got " + toml_type(*n));
    if (s->get().empty()) fail(at(key_of(t, key)), quote(key) + " in " + where + " must not be empty");
    return s->get();
  }

  static const toml::key& key_of(const toml::table& t, const std::string& key) { return t.find(key)->first; }

  int get_positive_int(const toml::table& t, const std::string& key, const std::string& where, int fallback) {
    const toml::node* n = t.get(key);
    if (!n) return fallback;
    auto* i = n->as_integer();
    if (!i) fail(at(key_of(t, key)), quote(key) + " in " + where + " must be an integer, got " + toml_type(*n));
    int64_t v = i->get();
    if (v < 1 || v > INT_MAX)
      fail(at(key_of(t, key)), quote(key) + " in " + where + " must be between 1 and " + std::to_string(INT_MAX) +
                                   ", got " + std::to_string(v));
    return static_cast<int>(v);
  }

  // A manifest-relative path made absolute; remembers where it was written.
  std::string resolve(const std::string& text, const std::string& loc_key, const Location& where) {
    if (text.find('\0') != std::string::npos) fail(where, "path " + quote(text) + " contains a NUL character");
    m_.locations[loc_key] = where;
    return (dir_ / fs::path(text)).lexically_normal().string();
  }

  std::string path_key(const toml::table& t, const std::string& key, const std::string& section, bool required,
                       const std::string& why) {
    auto s = get_string(t, key, "[" + section + "]", required, why);
    return s ? resolve(*s, section + "." + key, at(key_of(t, key))) : std::string();
  }

  void parse_model(const toml::table& t) {
    only_keys(t, "[model]", {"onnx", "config", "tokenizer"});
    m_.model_onnx = path_key(t, "onnx", "model", true, "the ONNX model, e.g. onnx = \"model.onnx\"");
    m_.model_config = path_key(t, "config", "model", false, "");
    m_.model_tokenizer = path_key(t, "tokenizer", "model", false, "");
    // HF exports put config.json and tokenizer.json beside the model.
    const fs::path beside = fs::path(m_.model_onnx).parent_path();
    std::error_code ec;
    if (m_.model_config.empty() && fs::is_regular_file(beside / "config.json", ec))
      m_.model_config = (beside / "config.json").string();
    if (m_.model_tokenizer.empty() && fs::is_regular_file(beside / "tokenizer.json", ec))
      m_.model_tokenizer = (beside / "tokenizer.json").string();
  }

  void parse_calibration(const toml::table& t) {
    only_keys(t, "[calibration]", {"text", "jsonl", "text_field", "ids", "num_samples", "sequence_length", "backend"});
    Manifest::Calibration c;
    c.where = at(t);
    c.text = path_key(t, "text", "calibration", false, "");
    c.jsonl = path_key(t, "jsonl", "calibration", false, "");
    c.ids = path_key(t, "ids", "calibration", false, "");
    if (c.text.empty() + c.jsonl.empty() + c.ids.empty() != 2)
      fail(at(t), "[calibration] needs exactly one of \"text\" (a text file), \"jsonl\" (one JSON object a line) or "
                  "\"ids\" (pre-tokenized ids as JSON), e.g. text = \"calib.txt\"");
    if (auto field = get_string(t, "text_field", "[calibration]", false, "")) {
      if (c.jsonl.empty()) fail(at(key_of(t, "text_field")), "\"text_field\" in [calibration] goes with \"jsonl\"");
      c.text_field = *field;
    }
    c.num_samples = get_positive_int(t, "num_samples", "[calibration]", c.num_samples);
    c.sequence_length = get_positive_int(t, "sequence_length", "[calibration]", c.sequence_length);
    if (auto backend = get_string(t, "backend", "[calibration]", false, "")) {
      c.backend = *backend;
      m_.locations["calibration.backend"] = at(key_of(t, "backend"));
    }
    m_.calibration = std::move(c);
  }

  void parse_uses(const toml::key& key, const toml::node& node, const std::string& section, const std::string& name_key,
                  std::vector<PluginUse>& out) {
    auto* arr = node.as_array();
    if (!arr)
      fail(at(key), quote(section) + " must be an array of tables ([[" + section + "]]), got " + toml_type(node));
    for (size_t i = 0; i < arr->size(); ++i) {
      const toml::node& e = *arr->get(i);
      auto* t = e.as_table();
      if (!t)
        fail(at(e), "each " + quote(section) + " entry must be a table ([[" + section + "]]), got " + toml_type(e));
      out.push_back(plugin_use(*t, "[[" + section + "]] #" + std::to_string(i + 1), name_key));
    }
  }

  void parse_targets(const toml::key& key, const toml::table& t) {
    std::map<std::string, std::string> seen;  // lower-cased -> as written
    for (auto& [name_key, node] : ordered(t)) {
      const std::string name(name_key->str());
      auto* target = node->as_table();
      if (!target)
        fail(at(*name_key),
             "target " + quote(name) + " must be a table ([targets." + name + "]), got " + toml_type(*node));
      // The name becomes a package folder: keep it portable.
      bool portable = !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
      });
      if (!portable) fail(at(*name_key), "target name " + quote(name) + " may only use letters, digits, '_' and '-'");
      std::string lower = name;
      for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (auto [it, fresh] = seen.emplace(lower, name); !fresh)
        fail(at(*name_key), "duplicate target name " + quote(name) + " (same as " + quote(it->second) +
                                " up to case; package folders would collide)");
      m_.targets.emplace_back(name, plugin_use(*target, "[targets." + name + "]", "backend"));
    }
    if (m_.targets.empty())
      fail(at(key), "no targets: add a [targets.<name>] table with backend = \"<backend plugin>\"");
  }

  void parse_build(const toml::table& t) {
    only_keys(t, "[build]", {"executor", "jobs", "shards", "retries", "sbatch_args"});
    Manifest::Build b;
    b.where = at(t);
    if (auto e = get_string(t, "executor", "[build]", false, "")) {
      if (*e != "local" && *e != "slurm")
        fail(at(key_of(t, "executor")), "'executor' in [build] must be 'local' or 'slurm', got " + quote(*e));
      b.executor = *e;
    }
    b.jobs = get_positive_int(t, "jobs", "[build]", b.jobs);
    b.shards = get_positive_int(t, "shards", "[build]", b.shards);
    if (b.shards > 4096) fail(at(key_of(t, "shards")), "'shards' in [build] must be at most 4096, got " + std::to_string(b.shards));
    if (const toml::node* n = t.get("retries")) {
      auto* i = n->as_integer();
      if (!i || i->get() < 0 || i->get() > 100)
        fail(at(key_of(t, "retries")), "'retries' in [build] must be an integer from 0 to 100, got " +
                                           (i ? std::to_string(i->get()) : toml_type(*n)));
      b.retries = static_cast<int>(i->get());
    }
    if (const toml::node* n = t.get("sbatch_args")) {
      auto* arr = n->as_array();
      if (!arr) fail(at(key_of(t, "sbatch_args")), "'sbatch_args' in [build] must be a list of strings, got " + toml_type(*n));
      for (size_t i = 0; i < arr->size(); ++i) {
        auto* s = arr->get(i)->as_string();
        if (!s || s->get().empty()) fail(at(*arr->get(i)), "'sbatch_args' in [build] must be a list of non-empty strings");
        b.sbatch_args.push_back(s->get());
      }
    }
    m_.build = std::move(b);
  }

  void parse_plugins(const toml::table& t) {
    only_keys(t, "[plugins]", {"paths"});
    const toml::node* n = t.get("paths");
    if (!n) return;
    auto* arr = n->as_array();
    if (!arr) fail(at(key_of(t, "paths")), "'paths' in [plugins] must be a list of strings, got " + toml_type(*n));
    for (size_t i = 0; i < arr->size(); ++i) {
      const toml::node& e = *arr->get(i);
      auto* s = e.as_string();
      if (!s || s->get().empty())
        fail(at(e), "'paths' in [plugins] must be a list of non-empty strings, got " + (s ? "\"\"" : toml_type(e)));
      m_.plugin_paths.push_back(resolve(s->get(), "plugins.paths[" + std::to_string(i) + "]", at(e)));
    }
  }

  PluginUse plugin_use(const toml::table& t, const std::string& where, const std::string& name_key) {
    PluginUse use;
    use.name = *get_string(t, name_key, where, true, "which plugin to use");
    use.where = at(key_of(t, name_key));
    for (auto& [key, node] : ordered(t)) {
      const std::string name(key->str());
      if (name == name_key) continue;
      std::string pointer = pointer_append("", name);
      use.option_locations[pointer] = at(*key);
      use.options[name] = to_json(*node, pointer, name, use.option_locations);
    }
    return use;
  }

  // Plugin options travel as JSON; remember where each key and element came from.
  json to_json(const toml::node& n, const std::string& pointer, const std::string& name,
               std::map<std::string, Location>& locations) {
    if (auto* v = n.as_string()) return v->get();
    if (auto* v = n.as_integer()) return v->get();
    if (auto* v = n.as_floating_point()) return v->get();
    if (auto* v = n.as_boolean()) return v->get();
    if (auto* arr = n.as_array()) {
      json out = json::array();
      for (size_t i = 0; i < arr->size(); ++i) {
        const toml::node& e = *arr->get(i);
        std::string p = pointer_append(pointer, i);
        locations[p] = at(e);
        out.push_back(to_json(e, p, name + "[" + std::to_string(i) + "]", locations));
      }
      return out;
    }
    if (auto* t = n.as_table()) {
      json out = json::object();
      for (auto& [key, node] : ordered(*t)) {
        const std::string k(key->str());
        std::string p = pointer_append(pointer, k);
        locations[p] = at(*key);
        out[k] = to_json(*node, p, name + "." + k, locations);
      }
      return out;
    }
    fail(at(n), "option " + quote(name) + " is a " + toml_type(n) + "; plugin options cannot be dates or times");
  }
};

// Deepest nesting a manifest may have: tables, arrays and the parts of dotted keys together.
// Real manifests stay under 10; toml++ and our walk over its tree recurse once per level,
// so a few thousand levels would overflow the stack.
constexpr int kMaxNesting = 64;

// Refuses TOML nested deeper than kMaxNesting before toml++ sees it. Not a TOML parser:
// a scan that skips strings and comments and counts open brackets plus the dots of the
// keys being defined (only in key position: a float's dot is not nesting).
void check_nesting(std::string_view text, const std::string& file) {
  std::vector<char> open;         // '[' array, '{' inline table, 'h' table header
  std::vector<int> dots{0};       // dots of the key being defined, per open level
  bool key = true;                // in key position (line start, after '{' or ',' in '{')
  int line = 1, column = 0;
  auto depth = [&] {
    int d = static_cast<int>(open.size());
    for (int n : dots) d += n;
    return d;
  };
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    ++column;
    if (c == '\n') {
      ++line;
      column = 0;
      if (open.empty() || open.back() == 'h') {
        key = true;
        dots.back() = 0;
      }
      continue;
    }
    if (c == '#') {  // comment: to the end of the line
      while (i + 1 < text.size() && text[i + 1] != '\n') ++i;
      continue;
    }
    if (c == '"' || c == '\'') {  // a string, maybe multi-line: skip to its end
      const bool multi = text.substr(i, 3) == std::string(3, c);
      const std::string_view close = multi ? text.substr(i, 3) : text.substr(i, 1);
      for (i += close.size(); i < text.size(); ++i) {
        if (c == '"' && text[i] == '\\') {
          ++i;
          continue;
        }
        if (text[i] == '\n') {
          ++line;
          column = 0;
        }
        if (text.substr(i, close.size()) == close) {
          i += close.size() - 1;
          break;
        }
      }
      continue;
    }
    if (c == '[' || c == '{') {
      const bool header = c == '[' && key && open.empty();
      if (!header) key = c == '{';
      open.push_back(header ? 'h' : c);
      dots.push_back(0);
      if (header && i + 1 < text.size() && text[i + 1] == '[') ++i;  // [[array of tables]]
    } else if ((c == ']' || c == '}') && !open.empty()) {
      if (open.back() == 'h' && i + 1 < text.size() && text[i + 1] == ']') ++i;
      open.pop_back();
      dots.pop_back();
      key = false;
    } else if (c == '=') {
      key = false;
    } else if (c == ',' && !open.empty() && open.back() == '{') {
      key = true;
      dots.back() = 0;
    } else if (c == '.' && key) {
      ++dots.back();
    }
    if (depth() > kMaxNesting)
      throw ManifestError({file, line, column}, "nested deeper than " + std::to_string(kMaxNesting) +
                                                    " levels (tables, arrays and dotted keys together)");
  }
}

Manifest parse_text(std::string_view text, const std::string& file) {
  check_nesting(text, file);
  fs::path abs = fs::absolute(fs::path(file)).lexically_normal();
  Parser p(file, abs.parent_path());
  Manifest m = p.run(text);
  m.path = abs.string();
  return m;
}

}  // namespace

Manifest parse_manifest(const std::string& path) {
  std::string text;
  try {
    text = nf::host::read_regular_file(path, nf::host::kManifestMax, "manifest");
  } catch (const nf::host::FileError& e) {
    throw ManifestError({path, 0, 0}, e.reason);
  }
  return parse_text(text, path);
}

Manifest parse_manifest_string(std::string_view toml, const std::string& path_for_messages) {
  return parse_text(toml, path_for_messages);
}

std::vector<AssetPath> asset_paths(const PluginUse& use, const json& schema, const std::string& given_base,
                                   const std::string& default_base) {
  json filled = use.options;
  validate_json(schema, filled);  // fills the defaults; errors are the schema check's to report
  std::vector<AssetPath> out;
  for (const std::string& key : asset_properties(schema)) {
    if (!filled.is_object() || !filled.contains(key) || !filled[key].is_string()) continue;
    AssetPath a;
    a.key = key;
    // Given = written in the manifest; validate() fills defaults into use.options, so the
    // options alone cannot tell.
    a.given = use.option_locations.count("/" + key) > 0;
    a.where = a.given ? use.locate("/" + key) : use.where;
    fs::path p = filled[key].get<std::string>();
    if (p.is_relative()) p = fs::path(a.given ? given_base : default_base) / p;
    a.path = fs::absolute(p).lexically_normal().string();
    out.push_back(std::move(a));
  }
  return out;
}

std::vector<std::string> validate(Manifest& m, const SchemaLookup& lookup, const InstalledList& installed) {
  struct Found {
    Location where;
    std::string message;
  };
  std::vector<Found> found;
  auto where = [&](const std::string& key) {
    auto it = m.locations.find(key);
    return it != m.locations.end() ? it->second : Location{m.path, 1, 1};
  };

  auto must_exist = [&](const std::string& path, const std::string& key, const std::string& what) {
    std::error_code ec;
    if (!path.empty() && !fs::exists(path, ec))
      found.push_back({where(key), what + " " + quote(path) + " does not exist"});
  };
  // Files are read whole: a FIFO or a device (/dev/zero) could hang or never end.
  auto must_be_file = [&](const std::string& path, const std::string& key, const std::string& what) {
    std::error_code ec;
    if (path.empty()) return;
    if (!fs::exists(path, ec)) found.push_back({where(key), what + " " + quote(path) + " does not exist"});
    else if (!fs::is_regular_file(path, ec))
      found.push_back({where(key), what + " " + quote(path) + " is not a regular file"});
  };
  must_be_file(m.model_onnx, "model.onnx", "model");
  if (m.locations.count("model.config")) must_be_file(m.model_config, "model.config", "model config");
  if (m.locations.count("model.tokenizer")) must_be_file(m.model_tokenizer, "model.tokenizer", "tokenizer");
  if (m.calibration) {
    must_be_file(m.calibration->text, "calibration.text", "calibration text");
    must_be_file(m.calibration->jsonl, "calibration.jsonl", "calibration dataset");
    must_be_file(m.calibration->ids, "calibration.ids", "calibration ids");
  }
  for (size_t i = 0; i < m.plugin_paths.size(); ++i)
    must_exist(m.plugin_paths[i], "plugins.paths[" + std::to_string(i) + "]", "plugin folder");

  auto check = [&](const std::string& kind, PluginUse& use) {
    std::optional<json> schema = lookup(kind, use.name);
    if (!schema) {
      std::vector<std::string> names = installed(kind);
      std::sort(names.begin(), names.end());
      std::string message = "no " + kind + " plugin named " + quote(use.name);
      // A recipe under [[transform]] and the like: say where it belongs.
      const std::map<std::string, std::string> section = {{"quant", "[[quant]] recipe"},
                                                          {"transform", "[[transform]] plugin"},
                                                          {"backend", "[targets.<name>] backend"},
                                                          {"speculative", "[speculative] decoder"}};
      for (const auto& [other, where] : section) {
        const auto others = other == kind ? std::vector<std::string>{} : installed(other);
        if (std::find(others.begin(), others.end(), use.name) != others.end())
          message += "; " + quote(use.name) + " is a " + other + " plugin (use it as a " + where + ")";
      }
      message += did_you_mean(use.name, names);
      message += names.empty() ? " (none installed)" : " (installed: " + join(names) + ")";
      found.push_back({use.where, message});
      return;
    }
    try {
      for (const auto& e : validate_json(*schema, use.options, SchemaNames{"option", kind + " " + quote(use.name)}))
        found.push_back({use.locate(e.path), e.message});
      // Asset options name files the build copies: a missing one fails here, not mid-build.
      const std::string model_dir = fs::path(m.model_onnx).parent_path().string();
      for (const AssetPath& a : asset_paths(use, *schema, m.dir, model_dir)) {
        std::error_code ec;
        if (fs::exists(a.path, ec)) continue;
        found.push_back({a.where, kind + " " + quote(use.name) + " needs its asset " + quote(a.key) + ": " +
                                      quote(a.path) + " does not exist" +
                                      (a.given ? "" : " (the default, in the model's folder; set " + a.key + " = PATH)")});
      }
    } catch (const json::exception& e) {
      found.push_back(
          {use.where, kind + " plugin " + quote(use.name) + " has a malformed options schema: " + e.what()});
    }
  };
  for (auto& use : m.quant) check("quant", use);
  for (auto& use : m.transforms) check("transform", use);
  for (auto& [name, use] : m.targets) check("backend", use);
  if (m.speculative) check("speculative", *m.speculative);
  if (m.calibration && !lookup("backend", m.calibration->backend)) {
    std::vector<std::string> names = installed("backend");
    std::sort(names.begin(), names.end());
    found.push_back({m.locations.count("calibration.backend") ? where("calibration.backend") : m.calibration->where,
                     "no backend plugin named " + quote(m.calibration->backend) + " to run the calibration" +
                         did_you_mean(m.calibration->backend, names) +
                         (names.empty() ? " (none installed)" : " (installed: " + join(names) + ")")});
  }

  std::stable_sort(found.begin(), found.end(), [](const Found& a, const Found& b) {
    return std::pair(a.where.line, a.where.column) < std::pair(b.where.line, b.where.column);
  });
  std::vector<std::string> out;
  for (const auto& f : found) out.push_back(format_error(f.where, f.message));
  return out;
}

}  // namespace nf::manifest

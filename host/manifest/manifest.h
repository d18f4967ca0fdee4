// The build manifest: one TOML file saying which model, which quantization recipes and
// transforms (in order), which backend per target, which speculative decoder.
// parse_manifest checks syntax and structure; validate checks plugin options against
// each plugin's JSON schema. Every error names file:line:col of the offending TOML node.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace nf::manifest {

struct Location {
  std::string file;  // as given to parse_manifest (so messages stay short)
  int line = 0, column = 0;
};

// what() == "file:line:col: message", always one line.
struct ManifestError : std::runtime_error {
  ManifestError(Location where, const std::string& message);
  Location where;
};

// "file:line:col: message" with any line breaks in `message` flattened.
std::string format_error(const Location& where, const std::string& message);

// One plugin as the manifest names it.
struct PluginUse {
  std::string name;
  nlohmann::json options = nlohmann::json::object();  // every key of the table but the name key
  Location where;                                     // the name key ("plugin = ...")
  // JSON pointer into `options` ("/arn", "/arn/1") -> where that key or array element is.
  std::map<std::string, Location> option_locations;
  // The location for a schema error at `pointer`: the node itself, else its nearest parent.
  Location locate(const std::string& pointer) const;
};

struct Manifest {
  std::string path, dir;                                  // absolute
  std::string model_onnx, model_config, model_tokenizer;  // absolute paths ("" when absent)
  // Exactly one of text / jsonl / ids names the data (absolute paths).
  struct Calibration {
    std::string text;   // plain text, tokenized with the model's tokenizer
    std::string jsonl;  // one JSON object a line; `text_field` holds each document's text
    std::string text_field = "text";
    std::string ids;    // pre-tokenized: a JSON array of token ids, or an array of such arrays
    int num_samples = 16;
    int sequence_length = 128;
    // The backend that runs the float model for the recipes (any with open_model_set,
    // use_encodings and stream_weights; cpu is the float reference).
    std::string backend = "cpu";
    Location where;  // the [calibration] header
  };
  std::optional<Calibration> calibration;
  std::vector<PluginUse> quant, transforms;                // in manifest order
  std::vector<std::pair<std::string, PluginUse>> targets;  // target name -> backend use, in file order
  std::optional<PluginUse> speculative;
  std::vector<std::string> plugin_paths;  // absolute
  // [build]: where the stages run (`build --executor/--jobs/--shards/--retries/--sbatch-arg` override it).
  struct Build {
    std::string executor = "local";        // "local" or "slurm"
    int jobs = 1;                          // local: stage processes at once (1: this process)
    int shards = 0;                        // parts a stage that splits runs in (0: the executor's default)
    int retries = 2;                       // times a failed stage is started again
    std::vector<std::string> sbatch_args;  // slurm: added to every sbatch (--partition=...)
    Location where;
  };
  Build build;
  // Where path-valued keys are, for "does not exist" errors: "model.onnx", "model.config",
  // "model.tokenizer", "calibration.text", "plugins.paths[0]", ...
  std::map<std::string, Location> locations;
};

// Reads and parses a manifest file. Throws ManifestError on syntax and structure errors.
Manifest parse_manifest(const std::string& path);
// The same from text; relative paths resolve against the folder of `path_for_messages`.
Manifest parse_manifest_string(std::string_view toml, const std::string& path_for_messages);

// An option whose schema says "format": "asset" (a file or folder that ships with the
// model: a draft model, learned embeddings), resolved to an absolute path. A value written
// in the manifest is relative to the manifest's folder; a schema default is relative to the
// model's folder. `where` is the option's key, or the plugin's name key for a default.
struct AssetPath {
  std::string key;
  std::string path;
  bool given = false;  // written in the manifest (else the schema's default)
  Location where;
};

// The asset options of `use` under its options schema (defaults filled in), in schema
// order; the paths need not exist. Values that are not strings are skipped (the schema
// check reports them). The one rule for asset paths: check, build and run use it.
std::vector<AssetPath> asset_paths(const PluginUse& use, const nlohmann::json& schema, const std::string& given_base,
                                   const std::string& default_base);

// kind: "quant", "transform", "backend" or "speculative".
using SchemaLookup = std::function<std::optional<nlohmann::json>(const std::string& kind, const std::string& name)>;
using InstalledList = std::function<std::vector<std::string>(const std::string& kind)>;

// Checks that every named plugin is installed and its options fit its schema (filling in
// defaults), and that the files the manifest names exist, asset options included. Returns every error, one line
// each ("file:line:col: message"), in file order; empty means the manifest is good.
std::vector<std::string> validate(Manifest& m, const SchemaLookup& lookup, const InstalledList& installed);

}  // namespace nf::manifest

// Manifest parsing and validation: every error class with its exact file:line:col.
#include "manifest/manifest.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "parse_error.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace nf::manifest;

using nf::manifest::test::parse_error;

namespace {

// A fresh folder per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() /
            ("npuforge_manifest_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string write(const std::string& rel, std::string_view text = "") const {
    fs::path p = path_ / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << text;
    return p.string();
  }
  std::string str(const std::string& rel = "") const {
    return rel.empty() ? path_.string() : (path_ / rel).lexically_normal().string();
  }

 private:
  fs::path path_;
};

// Installed plugins for validate(): kind -> name -> options schema.
const json& plugin_table() {
  static const json table = json::parse(R"({
    "transform": {
      "arcl": {"type": "object", "additionalProperties": false, "properties": {
        "arn": {"oneOf": [{"type": "integer", "minimum": 1},
                          {"type": "array", "items": {"type": "integer", "minimum": 1, "maximum": 4096}}],
                "default": [1, 128]},
        "context_length": {"type": "array", "items": {"type": "integer"}, "default": [4096]}}},
      "split": {"type": "object", "additionalProperties": false, "properties": {
        "num_splits": {"type": "integer", "minimum": 1},
        "split_embedding": {"type": "boolean", "default": true}}}
    },
    "quant": {
      "lpbq": {"type": "object", "additionalProperties": false, "properties": {
        "block_size": {"type": "integer", "enum": [16, 32, 64, 128], "default": 64}}}
    },
    "backend": {
      "htp": {"type": "object", "additionalProperties": false, "required": ["soc_model"], "properties": {
        "soc_model": {"type": "string", "enum": ["sm8650", "sm8750"]}}},
      "cpu": {"type": "object", "additionalProperties": false}
    },
    "speculative": {
      "lade": {"type": "object", "additionalProperties": false, "properties": {
        "window": {"type": "integer", "default": 8}}}
    }
  })");
  return table;
}

std::vector<std::string> run_validate(Manifest& m) {
  return validate(
      m,
      [](const std::string& kind, const std::string& name) -> std::optional<json> {
        if (!plugin_table().contains(kind) || !plugin_table()[kind].contains(name)) return std::nullopt;
        return plugin_table()[kind][name];
      },
      [](const std::string& kind) {
        std::vector<std::string> names;
        if (plugin_table().contains(kind))
          for (const auto& [name, schema] : plugin_table()[kind].items()) names.push_back(name);
        return names;
      });
}

// Validation errors of `text`, parsed in a folder where model.onnx exists.
std::vector<std::string> validate_errors(const TempDir& dir, std::string_view text) {
  dir.write("model.onnx");
  Manifest m = parse_manifest(dir.write("manifest.toml", text));
  auto errors = run_validate(m);
  // Messages name the file as given; strip the folder so expectations stay short.
  for (auto& e : errors)
    if (e.rfind(dir.str(), 0) == 0) e = e.substr(dir.str().size() + 1);
  return errors;
}

using Lines = std::vector<std::string>;

const char* kFull = R"(# every field
[model]
onnx = "models/model.onnx"
config = "models/config.json"
tokenizer = "tok/tokenizer.json"

[calibration]
text = "calib.txt"
num_samples = 4
sequence_length = 256

[[quant]]
recipe = "lpbq"
block_size = 32

[[transform]]
plugin = "arcl"
arn = [1, 128]

[[transform]]
plugin = "split"
num_splits = 4

[targets.zeta]
backend = "htp"
soc_model = "sm8750"

[targets.alpha]
backend = "cpu"

[speculative]
decoder = "lade"
window = 4

[plugins]
paths = ["./my_plugins", "/opt/npuforge/plugins"]
)";

}  // namespace

TEST(Manifest, FullManifestParsesEveryField) {
  TempDir dir;
  const std::string file = dir.write("sub/manifest.toml", kFull);
  Manifest m = parse_manifest(file);
  EXPECT_EQ(m.path, dir.str("sub/manifest.toml"));
  EXPECT_EQ(m.dir, dir.str("sub"));
  EXPECT_EQ(m.model_onnx, dir.str("sub/models/model.onnx"));
  EXPECT_EQ(m.model_config, dir.str("sub/models/config.json"));
  EXPECT_EQ(m.model_tokenizer, dir.str("sub/tok/tokenizer.json"));
  ASSERT_TRUE(m.calibration);
  EXPECT_EQ(m.calibration->text, dir.str("sub/calib.txt"));
  EXPECT_EQ(m.calibration->num_samples, 4);
  EXPECT_EQ(m.calibration->sequence_length, 256);
  EXPECT_EQ(m.calibration->where.line, 7);
  ASSERT_EQ(m.quant.size(), 1u);
  EXPECT_EQ(m.quant[0].name, "lpbq");
  EXPECT_EQ(m.quant[0].options, (json{{"block_size", 32}}));
  ASSERT_EQ(m.transforms.size(), 2u);
  EXPECT_EQ(m.transforms[0].name, "arcl");
  EXPECT_EQ(m.transforms[0].options, (json{{"arn", {1, 128}}}));
  EXPECT_EQ(m.transforms[0].where.file, file);
  EXPECT_EQ(m.transforms[0].where.line, 17);
  EXPECT_EQ(m.transforms[0].where.column, 1);
  EXPECT_EQ(m.transforms[0].option_locations.at("/arn").line, 18);
  EXPECT_EQ(m.transforms[0].option_locations.at("/arn/1").column, 11);
  EXPECT_EQ(m.transforms[1].name, "split");
  // Targets keep file order, not key order.
  ASSERT_EQ(m.targets.size(), 2u);
  EXPECT_EQ(m.targets[0].first, "zeta");
  EXPECT_EQ(m.targets[0].second.name, "htp");
  EXPECT_EQ(m.targets[0].second.options, (json{{"soc_model", "sm8750"}}));
  EXPECT_EQ(m.targets[1].first, "alpha");
  EXPECT_EQ(m.targets[1].second.name, "cpu");
  EXPECT_EQ(m.targets[1].second.options, json::object());
  ASSERT_TRUE(m.speculative);
  EXPECT_EQ(m.speculative->name, "lade");
  EXPECT_EQ(m.speculative->options, (json{{"window", 4}}));
  EXPECT_EQ(m.plugin_paths, (std::vector<std::string>{dir.str("sub/my_plugins"), "/opt/npuforge/plugins"}));
}

TEST(Manifest, OptionalPartsMayBeAbsent) {
  Manifest m = parse_manifest_string("[model]\nonnx = \"m.onnx\"\n[targets.cpu]\nbackend = \"cpu\"\n", "manifest.toml");
  EXPECT_TRUE(m.model_config.empty());
  EXPECT_TRUE(m.model_tokenizer.empty());
  EXPECT_FALSE(m.calibration);
  EXPECT_TRUE(m.quant.empty());
  EXPECT_TRUE(m.transforms.empty());
  EXPECT_FALSE(m.speculative);
  EXPECT_TRUE(m.plugin_paths.empty());
  EXPECT_EQ(m.dir, fs::current_path().lexically_normal().string());
}

TEST(Manifest, CalibrationDefaults) {
  Manifest m = parse_manifest_string(
      "[model]\nonnx = \"m.onnx\"\n[calibration]\ntext = \"c.txt\"\n[targets.cpu]\nbackend = \"cpu\"\n", "m.toml");
  ASSERT_TRUE(m.calibration);
  EXPECT_EQ(m.calibration->num_samples, 16);
  EXPECT_EQ(m.calibration->sequence_length, 128);
}

TEST(Manifest, CalibrationTakesOneOfTextJsonlOrIds) {
  const std::string kCpu = "[targets.cpu]\nbackend = \"cpu\"\n";
  Manifest m = parse_manifest_string("[model]\nonnx = \"m.onnx\"\n[calibration]\njsonl = \"d.jsonl\"\ntext_field = \"content\"\n" + kCpu, "m.toml");
  ASSERT_TRUE(m.calibration);
  EXPECT_TRUE(m.calibration->text.empty());
  EXPECT_EQ(fs::path(m.calibration->jsonl).filename(), "d.jsonl");
  EXPECT_EQ(m.calibration->text_field, "content");
  m = parse_manifest_string("[model]\nonnx = \"m.onnx\"\n[calibration]\nids = \"ids.json\"\n" + kCpu, "m.toml");
  EXPECT_EQ(fs::path(m.calibration->ids).filename(), "ids.json");
  const std::string one_of = "needs exactly one of \"text\" (a text file), \"jsonl\" (one JSON object a line) or \"ids\"";
  std::string e = parse_error("[model]\nonnx = \"m.onnx\"\n[calibration]\ntext = \"a.txt\"\nids = \"b.json\"\n" + kCpu);
  EXPECT_NE(e.find("manifest.toml:3:1: [calibration] " + one_of), std::string::npos) << e;
  e = parse_error("[model]\nonnx = \"m.onnx\"\n[calibration]\nnum_samples = 2\n" + kCpu);
  EXPECT_NE(e.find(one_of), std::string::npos) << e;
  e = parse_error("[model]\nonnx = \"m.onnx\"\n[calibration]\ntext = \"a.txt\"\ntext_field = \"x\"\n" + kCpu);
  EXPECT_NE(e.find("manifest.toml:5:1: \"text_field\" in [calibration] goes with \"jsonl\""), std::string::npos) << e;
}

TEST(Manifest, ConfigAndTokenizerDefaultToBesideTheModel) {
  TempDir dir;
  dir.write("hf/model.onnx");
  dir.write("hf/config.json", "{}");
  dir.write("hf/tokenizer.json", "{}");
  Manifest m = parse_manifest(
      dir.write("manifest.toml", "[model]\nonnx = \"hf/model.onnx\"\n[targets.cpu]\nbackend = \"cpu\"\n"));
  EXPECT_EQ(m.model_config, dir.str("hf/config.json"));
  EXPECT_EQ(m.model_tokenizer, dir.str("hf/tokenizer.json"));
}

TEST(Manifest, AbsolutePathsStayAsWritten) {
  Manifest m =
      parse_manifest_string("[model]\nonnx = \"/data/m.onnx\"\n[targets.cpu]\nbackend = \"cpu\"\n", "x/manifest.toml");
  EXPECT_EQ(m.model_onnx, "/data/m.onnx");
  EXPECT_EQ(m.dir, (fs::current_path() / "x").lexically_normal().string());
}

TEST(Manifest, ErrorIsOneLineWithLocation) {
  try {
    parse_manifest_string("[model]\nonnx = 3\n[targets.cpu]\nbackend = \"cpu\"\n", "dir/manifest.toml");
    FAIL();
  } catch (const ManifestError& e) {
    EXPECT_STREQ(e.what(), "dir/manifest.toml:2:1: 'onnx' in [model] must be a string, got integer");
    EXPECT_EQ(e.where.file, "dir/manifest.toml");
    EXPECT_EQ(e.where.line, 2);
    EXPECT_EQ(e.where.column, 1);
  }
  EXPECT_EQ(format_error({"f", 1, 2}, "a\nb"), "f:1:2: a b");
}

TEST(Manifest, TomlSyntaxError) {
  EXPECT_EQ(parse_error("[model]\nonnx = \"m.onnx\n"),
            "manifest.toml:2:15: invalid TOML (string): unescaped control characters other than TAB (U+0009) are "
            "explicitly prohibited");
  EXPECT_EQ(parse_error("[model\n"), "manifest.toml:1:7: invalid TOML (table header): expected ']', saw '\\n'");
}

TEST(Manifest, KeyGivenTwice) {
  EXPECT_EQ(parse_error("[model]\nonnx = \"a\"\nonnx = \"b\"\n"),
            "manifest.toml:3:8: invalid TOML (key-value pair): cannot redefine existing string 'onnx'");
}

TEST(Manifest, DuplicateTargetNames) {
  EXPECT_EQ(parse_error("[model]\nonnx = \"m\"\n[targets.htp]\nbackend = \"htp\"\n[targets.htp]\nbackend = \"htp\"\n"),
            "manifest.toml:5:1: invalid TOML (table header): cannot redefine existing table 'targets.htp'");
  // Different keys to TOML, the same package folder on a case-insensitive disk.
  EXPECT_EQ(
      parse_error("[model]\nonnx = \"m\"\n[targets.htp]\nbackend = \"htp\"\n[targets.HTP]\nbackend = \"htp\"\n"),
      "manifest.toml:5:10: duplicate target name 'HTP' (same as 'htp' up to case; package folders would collide)");
}

TEST(Manifest, UnknownTopLevelTableSuggests) {
  EXPECT_EQ(parse_error("[model]\nonnx = \"m\"\n\n[target.htp]\nbackend = \"htp\"\n"),
            "manifest.toml:4:2: unknown table 'target'; did you mean 'targets'? "
            "(known: model, calibration, quant, transform, targets, speculative, plugins, build)");
  EXPECT_EQ(parse_error("[[transforms]]\nplugin = \"arcl\"\n"),
            "manifest.toml:1:3: unknown table 'transforms'; did you mean 'transform'? "
            "(known: model, calibration, quant, transform, targets, speculative, plugins, build)");
  EXPECT_EQ(parse_error("name = 1\n"),
            "manifest.toml:1:1: unknown key 'name' (known: model, calibration, quant, transform, targets, speculative, "
            "plugins, build)");
}

TEST(Manifest, BuildTableChoosesTheExecutor) {
  const std::string head = "[model]\nonnx = \"m\"\n[targets.cpu]\nbackend = \"cpu\"\n";
  auto m = parse_manifest_string(head + "[build]\nexecutor = \"slurm\"\nretries = 0\nsbatch_args = [\"--partition=cpu\"]\n",
                                 "manifest.toml");
  EXPECT_EQ(m.build.executor, "slurm");
  EXPECT_EQ(m.build.jobs, 1);
  EXPECT_EQ(m.build.retries, 0);
  EXPECT_EQ(m.build.sbatch_args, std::vector<std::string>{"--partition=cpu"});
  EXPECT_EQ(parse_manifest_string(head, "manifest.toml").build.executor, "local");
  EXPECT_EQ(parse_error(head + "[build]\nexecutor = \"kubernetes\"\n"),
            "manifest.toml:6:1: 'executor' in [build] must be 'local' or 'slurm', got 'kubernetes'");
  EXPECT_EQ(parse_error(head + "[build]\njobs = 0\n"),
            "manifest.toml:6:1: 'jobs' in [build] must be between 1 and 2147483647, got 0");
  EXPECT_EQ(parse_error(head + "[build]\nretries = -1\n"),
            "manifest.toml:6:1: 'retries' in [build] must be an integer from 0 to 100, got -1");
  EXPECT_EQ(parse_error(head + "[build]\nworkers = 2\n"),
            "manifest.toml:6:1: unknown key 'workers' in [build] (known: executor, jobs, shards, retries, sbatch_args)");
  EXPECT_EQ(parse_manifest_string(head + "[build]\nshards = 16\n", "manifest.toml").build.shards, 16);
  EXPECT_EQ(parse_manifest_string(head, "manifest.toml").build.shards, 0);
  EXPECT_EQ(parse_error(head + "[build]\nshards = 5000\n"),
            "manifest.toml:6:1: 'shards' in [build] must be at most 4096, got 5000");
}

TEST(Manifest, UnknownKeyInHostTablesSuggests) {
  EXPECT_EQ(parse_error("[model]\nonnx = \"m\"\ntokeniser = \"t.json\"\n"),
            "manifest.toml:3:1: unknown key 'tokeniser' in [model]; did you mean 'tokenizer'? (known: onnx, config, "
            "tokenizer)");
  EXPECT_EQ(parse_error("[model]\nonnx = \"m\"\n[calibration]\ntext = \"c\"\nnum_sample = 3\n"),
            "manifest.toml:5:1: unknown key 'num_sample' in [calibration]; did you mean 'num_samples'? "
            "(known: text, jsonl, text_field, ids, num_samples, sequence_length, backend)");
  EXPECT_EQ(parse_error("[model]\nonnx = \"m\"\n[plugins]\npath = []\n"),
            "manifest.toml:4:1: unknown key 'path' in [plugins]; did you mean 'paths'? (known: paths)");
}

TEST(Manifest, WrongTypes) {
  const std::string head = "[model]\nonnx = \"m\"\n";  // lines 1-2
  EXPECT_EQ(parse_error(head + "[calibration]\ntext = \"c\"\nnum_samples = \"16\"\n"),
            "manifest.toml:5:1: 'num_samples' in [calibration] must be an integer, got string");
  EXPECT_EQ(parse_error(head + "[calibration]\ntext = \"c\"\nsequence_length = 0\n"),
            "manifest.toml:5:1: 'sequence_length' in [calibration] must be between 1 and 2147483647, got 0");
  EXPECT_EQ(parse_error(head + "[quant]\nrecipe = \"lpbq\"\n"),
            "manifest.toml:3:2: 'quant' must be an array of tables ([[quant]]), got table");
  EXPECT_EQ(parse_error("transform = [1]\n" + head),
            "manifest.toml:1:14: each 'transform' entry must be a table ([[transform]]), got integer");
  EXPECT_EQ(parse_error("targets = 3\n" + head),
            "manifest.toml:1:1: 'targets' must be a table ([targets]), got integer");
  EXPECT_EQ(parse_error(head + "[targets]\nhtp = \"htp\"\n"),
            "manifest.toml:4:1: target 'htp' must be a table ([targets.htp]), got string");
  EXPECT_EQ(parse_error(head + "[targets.cpu]\nbackend = 1\n"),
            "manifest.toml:4:1: 'backend' in [targets.cpu] must be a string, got integer");
  EXPECT_EQ(parse_error(head + "[plugins]\npaths = [\"a\", 2]\n"),
            "manifest.toml:4:15: 'paths' in [plugins] must be a list of non-empty strings, got integer");
  EXPECT_EQ(parse_error(head + "[plugins]\npaths = \"a\"\n"),
            "manifest.toml:4:1: 'paths' in [plugins] must be a list of strings, got string");
  EXPECT_EQ(parse_error("model = \"m.onnx\"\n"), "manifest.toml:1:1: 'model' must be a table ([model]), got string");
}

TEST(Manifest, MissingRequiredKeys) {
  EXPECT_EQ(parse_error("[targets.cpu]\nbackend = \"cpu\"\n"),
            "manifest.toml:1:1: missing [model] table (it names the ONNX model: onnx = \"model.onnx\")");
  EXPECT_EQ(parse_error("[model]\nconfig = \"c.json\"\n"),
            "manifest.toml:1:1: [model] needs 'onnx' (the ONNX model, e.g. onnx = \"model.onnx\")");
  EXPECT_EQ(parse_error("[model]\nonnx = \"\"\n"), "manifest.toml:2:1: 'onnx' in [model] must not be empty");
  EXPECT_EQ(parse_error("[model]\nonnx = \"m\"\n"),
            "manifest.toml:1:1: no targets: add a [targets.<name>] table with backend = \"<backend plugin>\"");
  EXPECT_EQ(parse_error("[model]\nonnx = \"m\"\n[targets]\n"),
            "manifest.toml:3:2: no targets: add a [targets.<name>] table with backend = \"<backend plugin>\"");
  EXPECT_EQ(parse_error("[model]\nonnx = \"m\"\n[[transform]]\narn = 1\n"),
            "manifest.toml:3:1: [[transform]] #1 needs 'plugin' (which plugin to use)");
  EXPECT_EQ(parse_error("[model]\nonnx = \"m\"\n[[quant]]\nrecipe = \"a\"\n[[quant]]\nblock_size = 1\n"),
            "manifest.toml:5:1: [[quant]] #2 needs 'recipe' (which plugin to use)");
  EXPECT_EQ(parse_error("[model]\nonnx = \"m\"\n[targets.htp]\nsoc_model = \"sm8750\"\n"),
            "manifest.toml:3:1: [targets.htp] needs 'backend' (which plugin to use)");
  EXPECT_EQ(parse_error("[model]\nonnx = \"m\"\n[speculative]\nwindow = 8\n"),
            "manifest.toml:3:1: [speculative] needs 'decoder' (which plugin to use)");
  EXPECT_EQ(parse_error("[model]\nonnx = \"m\"\n[calibration]\nnum_samples = 8\n"),
            "manifest.toml:3:1: [calibration] needs exactly one of \"text\" (a text file), \"jsonl\" (one JSON object a line) or "
            "\"ids\" (pre-tokenized ids as JSON), e.g. text = \"calib.txt\"");
}

TEST(Manifest, TargetNamesMustBeFolderNames) {
  EXPECT_EQ(parse_error("[model]\nonnx = \"m\"\n[targets.\"../x\"]\nbackend = \"cpu\"\n"),
            "manifest.toml:3:10: target name '../x' may only use letters, digits, '_' and '-'");
}

TEST(Manifest, DatesAreNotOptions) {
  EXPECT_EQ(parse_error("[model]\nonnx = \"m\"\n[[transform]]\nplugin = \"arcl\"\nwhen = 1979-05-27\n"),
            "manifest.toml:5:8: option 'when' is a date; plugin options cannot be dates or times");
}

TEST(Manifest, NestedOptionsKeepLocations) {
  Manifest m = parse_manifest_string(
      "[model]\nonnx = \"m\"\n[[transform]]\nplugin = \"split\"\nextra = { inner = [1, { deep = 2 }] }\n"
      "[targets.cpu]\nbackend = \"cpu\"\n",
      "m.toml");
  const PluginUse& use = m.transforms.at(0);
  EXPECT_EQ(use.options, (json{{"extra", {{"inner", json::array({1, {{"deep", 2}}})}}}}));
  EXPECT_EQ(use.locate("/extra/inner/1/deep").column, 25);
  EXPECT_EQ(use.locate("/extra/inner/0").column, 20);
  EXPECT_EQ(use.locate("/extra/inner/5").column, 11) << "unknown pointers fall back to the nearest parent";
  EXPECT_EQ(use.locate("").line, 4) << "the whole table points at the plugin key";
}

TEST(Manifest, UnreadableFile) {
  try {
    parse_manifest("/nonexistent/manifest.toml");
    FAIL();
  } catch (const ManifestError& e) {
    EXPECT_STREQ(e.what(), "/nonexistent/manifest.toml: cannot read the manifest (No such file or directory)");
  }
}

// The installed manifest reference (sdk/docs/manifest.md) shows a manifest that parses and
// means what its comments say.
TEST(Manifest, TheReferenceDocExampleParses) {
  std::ifstream in(std::string(NPUFORGE_SOURCE_DIR) + "/sdk/docs/manifest.md");
  std::string doc((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t begin = doc.find("```toml\n"), end = doc.find("```", begin + 7);
  ASSERT_NE(begin, std::string::npos);
  ASSERT_NE(end, std::string::npos);
  TempDir dir;
  Manifest m = parse_manifest(dir.write("manifest.toml", doc.substr(begin + 8, end - begin - 8)));
  EXPECT_EQ(m.model_onnx, dir.str("model.onnx"));
  ASSERT_TRUE(m.calibration);
  EXPECT_EQ(m.calibration->backend, "cpu");
  ASSERT_EQ(m.quant.size(), 1u);
  EXPECT_EQ(m.quant[0].options, (json{{"block_size", 64}}));
  ASSERT_EQ(m.targets.size(), 1u);
  EXPECT_EQ(m.targets[0].first, "htp");
  EXPECT_EQ(m.targets[0].second.options, (json{{"soc_model", "sm8750"}}));
  ASSERT_TRUE(m.speculative);
  EXPECT_EQ(m.speculative->name, "ssd");
  EXPECT_EQ(m.build.jobs, 2);
}

TEST(Validate, GoodManifestFillsDefaults) {
  TempDir dir;
  dir.write("calib.txt", "hello");
  auto errors = validate_errors(dir, R"([model]
onnx = "model.onnx"
[calibration]
text = "calib.txt"
[[quant]]
recipe = "lpbq"
[[transform]]
plugin = "arcl"
[[transform]]
plugin = "split"
num_splits = 2
[targets.htp]
backend = "htp"
soc_model = "sm8650"
[speculative]
decoder = "lade"
)");
  EXPECT_EQ(errors, Lines{});
  Manifest m = parse_manifest(dir.str("manifest.toml"));
  ASSERT_TRUE(run_validate(m).empty());
  EXPECT_EQ(m.quant[0].options, (json{{"block_size", 64}}));
  EXPECT_EQ(m.transforms[0].options, (json{{"arn", {1, 128}}, {"context_length", {4096}}}));
  EXPECT_EQ(m.transforms[1].options, (json{{"num_splits", 2}, {"split_embedding", true}}));
  EXPECT_EQ(m.speculative->options, (json{{"window", 8}}));
}

TEST(Validate, MissingPluginSuggestsAndListsInstalled) {
  TempDir dir;
  auto errors = validate_errors(dir, R"([model]
onnx = "model.onnx"

[targets.cpu]
backend = "cpu"

# a transform whose name is misspelled



[[transform]]
plugin = "arcll"
)");
  EXPECT_EQ(
      errors,
      Lines{"manifest.toml:12:1: no transform plugin named 'arcll'; did you mean 'arcl'? (installed: arcl, split)"});
  EXPECT_EQ(
      validate_errors(
          dir, "[model]\nonnx = \"model.onnx\"\n[targets.x]\nbackend = \"gpu\"\n[speculative]\ndecoder = \"zzz\"\n"),
      (Lines{"manifest.toml:4:1: no backend plugin named 'gpu'; did you mean 'cpu'? (installed: cpu, htp)",
             "manifest.toml:6:1: no speculative plugin named 'zzz' (installed: lade)"}));
}

// [calibration] backend names the backend that runs the float model (cpu by default).
TEST(Validate, CalibrationBackendMustBeInstalled) {
  TempDir dir;
  dir.write("calib.txt", "hello");
  const std::string head = "[model]\nonnx = \"model.onnx\"\n[targets.cpu]\nbackend = \"cpu\"\n[calibration]\ntext = \"calib.txt\"\n";
  EXPECT_EQ(validate_errors(dir, head + "backend = \"cpux\"\n"),
            Lines{"manifest.toml:7:1: no backend plugin named 'cpux' to run the calibration; did you mean 'cpu'? "
                  "(installed: cpu, htp)"});
  EXPECT_EQ(validate_errors(dir, head + "backend = \"htp\"\n"), Lines{});
  EXPECT_EQ(parse_manifest(dir.str("manifest.toml")).calibration->backend, "htp");
  EXPECT_EQ(validate_errors(dir, head), Lines{});
  EXPECT_EQ(parse_manifest(dir.str("manifest.toml")).calibration->backend, "cpu");
}

TEST(Validate, PluginOfAnotherKindSaysWhereItBelongs) {
  TempDir dir;
  EXPECT_EQ(validate_errors(dir, "[model]\nonnx = \"model.onnx\"\n[targets.cpu]\nbackend = \"cpu\"\n"
                                 "[[transform]]\nplugin = \"lpbq\"\n"),
            Lines{"manifest.toml:6:1: no transform plugin named 'lpbq'; 'lpbq' is a quant plugin (use it as a [[quant]] "
                  "recipe) (installed: arcl, split)"});
}

TEST(Validate, UnknownOptionPointsAtTheKey) {
  TempDir dir;
  auto errors = validate_errors(dir,
                                "[model]\nonnx = \"model.onnx\"\n[targets.cpu]\nbackend = \"cpu\"\n"
                                "[[transform]]\nplugin = \"arcl\"\n  arm = [1, 128]\n");
  EXPECT_EQ(errors, Lines{"manifest.toml:7:3: unknown option 'arm' for transform 'arcl'; did you mean 'arn'?"});
}

TEST(Validate, OutOfRangeElementPointsAtTheElement) {
  TempDir dir;
  auto errors = validate_errors(dir,
                                "[model]\nonnx = \"model.onnx\"\n[targets.cpu]\nbackend = \"cpu\"\n"
                                "[[transform]]\nplugin = \"arcl\"\narn = [1, 128,\n       9999]\n");
  EXPECT_EQ(errors, Lines{"manifest.toml:8:8: option 'arn[2]' for transform 'arcl' must be <= 4096, got 9999"});
}

TEST(Validate, WrongTypeEnumAndRequiredOptions) {
  TempDir dir;
  auto errors = validate_errors(dir, R"([model]
onnx = "model.onnx"
[[quant]]
recipe = "lpbq"
block_size = 48
[[transform]]
plugin = "split"
num_splits = "four"
[targets.htp]
backend = "htp"
[targets.htp2]
backend = "htp"
soc_model = "sm8751"
)");
  EXPECT_EQ(errors,
            (Lines{
                "manifest.toml:5:1: option 'block_size' for quant 'lpbq' must be one of 16|32|64|128, got integer 48",
                "manifest.toml:8:1: option 'num_splits' for transform 'split' must be integer, got string \"four\"",
                "manifest.toml:10:1: missing required option 'soc_model' for backend 'htp'",
                "manifest.toml:13:1: option 'soc_model' for backend 'htp' must be one of sm8650|sm8750, got string "
                "\"sm8751\"; did you mean 'sm8750'?",
            }));
}

TEST(Validate, MissingFilesPointAtTheirKeys) {
  TempDir dir;
  Manifest m = parse_manifest(dir.write("manifest.toml", R"([model]
onnx = "nope.onnx"
tokenizer = "tok.json"
[calibration]
text = "calib.txt"
[targets.cpu]
backend = "cpu"
[plugins]
paths = ["here", "missing"]
)"));
  fs::create_directories(dir.str("here"));
  auto errors = run_validate(m);
  const std::string f = dir.str("manifest.toml");
  EXPECT_EQ(errors, (Lines{
                        f + ":2:1: model '" + dir.str("nope.onnx") + "' does not exist",
                        f + ":3:1: tokenizer '" + dir.str("tok.json") + "' does not exist",
                        f + ":5:1: calibration text '" + dir.str("calib.txt") + "' does not exist",
                        f + ":9:18: plugin folder '" + dir.str("missing") + "' does not exist",
                    }));
}

// Options with "format": "asset", of any plugin kind: a written value is relative to the
// manifest, a schema default to the model's folder; a missing one points at its key (or at
// the plugin's name key for a default).
TEST(Validate, MissingAssetsPointAtTheirKeys) {
  const json plugins = json::parse(R"({
    "transform": {"adapter": {"type": "object", "properties": {"weights": {"type": "string", "format": "asset"}}}},
    "backend": {"cpu": {"type": "object"}},
    "speculative": {"ssd": {"type": "object", "properties": {
      "assets": {"type": "string", "format": "asset", "default": "ssd"}}}}
  })");
  auto run_validate = [&](Manifest& m) {
    return validate(
        m, [&](const std::string& kind, const std::string& name) { return std::optional<json>(plugins[kind][name]); },
        [](const std::string&) { return std::vector<std::string>{}; });
  };
  TempDir dir;
  dir.write("models/model.onnx");
  Manifest m = parse_manifest(dir.write("manifest.toml", R"([model]
onnx = "models/model.onnx"
[[transform]]
plugin = "adapter"
weights = "adapters/a.bin"
[targets.cpu]
backend = "cpu"
[speculative]
decoder = "ssd"
)"));
  fs::create_directories(dir.str("ssd"));  // beside the manifest: not where a default looks
  auto errors = run_validate(m);
  const std::string f = dir.str("manifest.toml");
  EXPECT_EQ(errors, (Lines{
                        f + ":5:1: transform 'adapter' needs its asset 'weights': '" + dir.str("adapters/a.bin") +
                            "' does not exist",
                        f + ":9:1: speculative 'ssd' needs its asset 'assets': '" + dir.str("models/ssd") +
                            "' does not exist (the default, in the model's folder; set assets = PATH)",
                    }));

  auto paths = asset_paths(*m.speculative, plugins["speculative"]["ssd"], m.dir, dir.str("models"));
  ASSERT_EQ(paths.size(), 1u);
  EXPECT_FALSE(paths[0].given);  // validate() filled the default into the options
  EXPECT_EQ(paths[0].path, dir.str("models/ssd"));

  dir.write("adapters/a.bin");
  fs::create_directories(dir.str("models/ssd"));
  Manifest ok = parse_manifest(f);
  EXPECT_EQ(run_validate(ok), Lines{});
}

TEST(Validate, MalformedPluginSchemaIsAnErrorNotACrash) {
  // The model is a file that exists, so the schema's is the only error.
  const std::string model = std::string(NPUFORGE_SOURCE_DIR) + "/tests/models/llama_gqa/model.onnx";
  Manifest m = parse_manifest_string("[model]\nonnx = \"" + model + "\"\n[targets.cpu]\nbackend = \"cpu\"\nx = 1\n", "m.toml");
  auto errors = validate(
      m,
      [](const std::string&, const std::string&) -> std::optional<json> {
        return json{{"type", 5}};
      },
      [](const std::string&) { return std::vector<std::string>{}; });
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].rfind("m.toml:4:1: backend plugin 'cpu' has a malformed options schema:", 0), 0u) << errors[0];
}

TEST(Examples, ParseWithoutPlugins) {
  int count = 0;
  for (const auto& entry : fs::directory_iterator(fs::path(NPUFORGE_SOURCE_DIR) / "examples/manifests")) {
    if (entry.path().extension() != ".toml") continue;
    ++count;
    SCOPED_TRACE(entry.path().string());
    Manifest m;
    ASSERT_NO_THROW(m = parse_manifest(entry.path().string()));
    EXPECT_FALSE(m.targets.empty());
  }
  EXPECT_GE(count, 2);
}

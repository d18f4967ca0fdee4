// Unbounded reads: every file npuforge reads whole is a regular file of bounded size. A
// device (/dev/zero), a FIFO, or a file far too large ends in one error line, at once:
// no hang, no memory exhaustion.
#include <sys/stat.h>

#include <functional>

#include "fault_support.h"
#include "onnx/onnx_io.h"
#include "runtime/package.h"

using namespace nf::fault;

namespace {

fs::path fifo(const fs::path& p) {
  fs::create_directories(p.parent_path());
  EXPECT_EQ(::mkfifo(p.c_str(), 0600), 0);
  return p;
}

// A sparse file of `bytes` (reads as zeros; takes no disk).
fs::path sparse(const fs::path& p, uintmax_t bytes) {
  write_file(p, "{");
  fs::resize_file(p, bytes);
  return p;
}

const std::string kTiny = nf::test::model_dir("tiny_llama");

// A manifest over tiny_llama with `model_extra` in [model] and `extra` after.
fs::path tiny_manifest(const fs::path& d, const std::string& model_extra, const std::string& extra = "") {
  std::ofstream(d / "m.toml") << "[model]\nonnx = \"" << kTiny << "/model.onnx\"\n"
                              << model_extra << "\n[targets.cpu]\nbackend = \"cpu\"\n"
                              << extra;
  return d / "m.toml";
}

}  // namespace

// ---- the manifest itself ----------------------------------------------------------------

TEST(FaultInput, ManifestIsDevZero) {
  expect_one_error_line(run({"check", "/dev/zero"}, {}, 30), "/dev/zero: the manifest is a device");
  expect_one_error_line(run({"build", "/dev/zero", "--out", scratch("devzero").string()}, {}, 30), "is a device");
}

TEST(FaultInput, ManifestIsAFifo) {
  fs::path f = fifo(scratch("manifest_fifo") / "m.toml");
  expect_one_error_line(run({"check", f.string()}, {}, 30), "the manifest is a FIFO");
}

TEST(FaultInput, ManifestIsAFolder) {
  expect_one_error_line(run({"check", scratch("manifest_dir").string()}, {}, 30), "the manifest is a folder");
}

// ---- files a manifest names: check refuses them, and build before any work -------------

struct NamedFile {
  std::string name;
  std::string model_extra;  // TOML in [model] (PATH is replaced)
  std::string extra;        // TOML after the targets
  std::string kind;         // "fifo", "devzero", "dir"
  std::string expect;
};
void PrintTo(const NamedFile& n, std::ostream* os) { *os << n.name; }

class FaultNamedFile : public ::testing::TestWithParam<NamedFile> {};

TEST_P(FaultNamedFile, RefusedByCheckAndBuild) {
  const auto& p = GetParam();
  fs::path d = scratch("named_" + p.name);
  std::string path = p.kind == "devzero" ? "/dev/zero" : (d / "input").string();
  if (p.kind == "fifo") fifo(d / "input");
  if (p.kind == "dir") fs::create_directories(d / "input");
  auto sub = [&](std::string s) {
    for (size_t at; (at = s.find("PATH")) != std::string::npos;) s.replace(at, 4, path);
    return s;
  };
  auto m = tiny_manifest(d, sub(p.model_extra), sub(p.extra));
  auto c = run({"check", m.string()}, {}, 60);
  expect_clean_error(c, p.expect);
  EXPECT_NE(c.err.find("is not a regular file"), std::string::npos) << c.err;
  auto b = run({"build", m.string(), "--out", (d / "out").string(), "--no-cache"}, {}, 60);
  expect_clean_error(b, p.expect);
  EXPECT_FALSE(fs::exists(d / "out" / "cpu"));
}

const std::string kQuant = "[[quant]]\nrecipe = \"minmax\"\n";

INSTANTIATE_TEST_SUITE_P(
    Cases, FaultNamedFile,
    ::testing::Values(NamedFile{"ConfigDevZero", "config = \"PATH\"", "", "devzero", "model config"},
                      NamedFile{"ConfigFifo", "config = \"PATH\"", "", "fifo", "model config"},
                      NamedFile{"TokenizerDevZero", "tokenizer = \"PATH\"", "", "devzero", "tokenizer"},
                      NamedFile{"TokenizerFifo", "tokenizer = \"PATH\"", "", "fifo", "tokenizer"},
                      NamedFile{"TokenizerFolder", "tokenizer = \"PATH\"", "", "dir", "tokenizer"},
                      NamedFile{"CalibrationTextDevZero", "", kQuant + "[calibration]\ntext = \"PATH\"\n", "devzero",
                                "calibration text"},
                      NamedFile{"CalibrationTextFifo", "", kQuant + "[calibration]\ntext = \"PATH\"\n", "fifo",
                                "calibration text"},
                      NamedFile{"CalibrationJsonlFifo", "", kQuant + "[calibration]\njsonl = \"PATH\"\n", "fifo",
                                "calibration dataset"},
                      NamedFile{"CalibrationIdsDevZero", "", kQuant + "[calibration]\nids = \"PATH\"\n", "devzero",
                                "calibration ids"}),
    [](const ::testing::TestParamInfo<NamedFile>& info) { return info.param.name; });

// ---- too large ----------------------------------------------------------------------------

TEST(FaultInput, HugeTokenizerIsRefused) {
  fs::path d = scratch("huge_tokenizer");
  sparse(d / "tokenizer.json", uintmax_t{600} << 20);
  auto m = tiny_manifest(d, "tokenizer = \"" + (d / "tokenizer.json").string() + "\"");
  auto r = run({"build", m.string(), "--out", (d / "out").string(), "--no-cache", "-q"}, {}, 120);
  expect_one_error_line(r, "the tokenizer is larger than 512 MiB");
}

TEST(FaultInput, HugeConfigIsRefused) {
  fs::path d = scratch("huge_config");
  sparse(d / "config.json", uintmax_t{100} << 20);
  auto m = tiny_manifest(d, "config = \"" + (d / "config.json").string() + "\"");
  auto r = run({"build", m.string(), "--out", (d / "out").string(), "--no-cache", "-q"}, {}, 120);
  expect_one_error_line(r, "the model config is larger than 64 MiB");
}

// ---- eval --text, run, inspect ---------------------------------------------------------

TEST(FaultInput, EvalTextIsDevZero) {
  auto r = run({"eval", kTiny + "/model.onnx", "--text", "/dev/zero"}, {}, 60);
  expect_one_error_line(r, "/dev/zero: the evaluation text is a device");
}

TEST(FaultInput, EvalTextIsAFifo) {
  fs::path f = fifo(scratch("eval_fifo") / "text.txt");
  auto r = run({"eval", kTiny + "/model.onnx", "--text", f.string()}, {}, 60);
  expect_one_error_line(r, "the evaluation text is a FIFO");
}

TEST(FaultInput, ModelIsAFifo) {
  fs::path f = fifo(scratch("model_fifo") / "model.onnx");
  expect_one_error_line(run({"inspect", f.string()}, {}, 30), "not a regular file");
  expect_clean_error(run({"run", f.string(), "--prompt-ids", "1"}, {}, 30), "model.onnx");
}

TEST(FaultInput, ExternalDataIsAFifo) {
  fs::path d = scratch("data_fifo");
  // A model whose weights live in model.onnx.data, and that file replaced by a FIFO.
  auto g = nf::onnx_io::load_model(nf::test::model_dir("llama_gqa") + "/model.onnx");
  nf::onnx_io::save_model(*g, (d / "model.onnx").string());
  fs::remove(d / "model.onnx.data");
  fifo(d / "model.onnx.data");
  auto r = run({"run", (d / "model.onnx").string(), "--prompt-ids", "1,2"}, {}, 30);
  expect_one_error_line(r, "model.onnx.data");
}

// A fused past_key_values.N.key_value cache is read as pairs on load only when its attention
// has GPT-BigCode's legacy form; here the Softmax is made a LogSoftmax: one error line.
TEST(FaultInput, FusedCacheWithAnotherAttentionIsRefused) {
  fs::path d = scratch("fused_other_attention");
  auto g = nf::onnx_io::load_model(nf::test::model_dir("legacy/gpt_bigcode_fused_kv") + "/model.onnx");
  for (auto& n : g->nodes)
    if (n->op_type == "Softmax") n->op_type = "LogSoftmax";
  nf::onnx_io::save_model(*g, (d / "model.onnx").string());
  auto r = run({"run", (d / "model.onnx").string(), "--prompt-ids", "1,2"}, {}, 30);
  expect_clean_error(r, "the model's fused KV cache: 2 fused-cache layers but 0 attentions of GPT-BigCode's legacy form");
}

// An op npuforge has no operator for (here opset 23's RMSNormalization in place of a Gelu):
// building names the op, not a value it left without a shape (it did before).
TEST(FaultInput, UnknownOperatorIsNamed) {
  fs::path d = scratch("unknown_op");
  const std::string zoo = nf::test::model_dir("zoo/gemma3_opset20");
  auto g = nf::onnx_io::load_model(zoo + "/model.onnx");
  for (auto& n : g->nodes)
    if (n->op_type == "Gelu") n->op_type = "TfIdfVectorizer";  // a standard operator no stage or engine runs
  nf::onnx_io::save_model(*g, (d / "model.onnx").string());
  write_file(d / "m.toml", "[model]\nonnx = \"" + (d / "model.onnx").string() + "\"\nconfig = \"" + zoo +
                               "/config.json\"\n\n[[transform]]\nplugin = \"arcl\"\narn = [1, 4]\n"
                               "context_length = 32\n\n[targets.cpu]\nbackend = \"cpu\"\n");
  expect_clean_error(run({"build", (d / "m.toml").string(), "--out", (d / "out").string(), "--no-cache", "-q"}),
                     "op 'TfIdfVectorizer' of node");
  EXPECT_FALSE(fs::exists(d / "out"));
  expect_clean_error(run({"run", (d / "model.onnx").string(), "--prompt-ids", "1,2"}, {}, 30),
                     "operator 'TfIdfVectorizer'");
}

// ---- package.json names what the host reads -------------------------------------------

namespace {

// A built tiny_llama package (with tokenizer) at `d`/out/cpu.
fs::path tiny_package(const fs::path& d) {
  auto m = tiny_manifest(d, "");
  auto r = run({"build", m.string(), "--out", (d / "out").string(), "--no-cache", "-q"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return d / "out" / "cpu";
}

// Edits package.json and seals it again (as a tool that knows the digest would): what
// the host then refuses, it refuses for the content, not the digest.
void edit_meta(const fs::path& pkg, const std::function<void(nlohmann::json&)>& f) {
  auto meta = nlohmann::json::parse(nf::test::slurp(pkg / "package.json"));
  f(meta);
  meta["digest"] = nf::host::package_digest(meta);
  write_file(pkg / "package.json", meta.dump(2));
}

}  // namespace

struct MetaEdit {
  std::string name;
  std::function<void(nlohmann::json&)> edit;
  std::string expect;
};
void PrintTo(const MetaEdit& m, std::ostream* os) { *os << m.name; }

class FaultPackageMeta : public ::testing::TestWithParam<MetaEdit> {};

TEST_P(FaultPackageMeta, RunRefusesThePackage) {
  fs::path d = scratch("meta_" + GetParam().name);
  fs::path pkg = tiny_package(d);
  edit_meta(pkg, GetParam().edit);
  auto r = run({"run", pkg.string(), "--prompt", "Once upon", "--max-new-tokens", "2"}, {}, 60);
  expect_one_error_line(r, GetParam().expect);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, FaultPackageMeta,
    ::testing::Values(
        MetaEdit{"TokenizerIsDevZero", [](nlohmann::json& m) { m["tokenizer"] = "/dev/zero"; },
                 "'tokenizer' names no file of the package"},
        MetaEdit{"TokenizerOutsidePackage", [](nlohmann::json& m) { m["tokenizer"] = "../../../../etc/passwd"; },
                 "'tokenizer' names no file of the package"},
        MetaEdit{"ConfigOutsidePackage", [](nlohmann::json& m) { m["config"] = "/etc/hostname"; },
                 "'config' names no file of the package"},
        MetaEdit{"FileEntryEscapes",
                 [](nlohmann::json& m) { m["files"]["../../../../etc/hostname"] = "00000000000000000000000000000000"; },
                 "bad file entry"},
        MetaEdit{"FileEntryAbsolute", [](nlohmann::json& m) { m["files"]["/dev/zero"] = "0"; }, "bad file entry"},
        MetaEdit{"FilesNotAnObject", [](nlohmann::json& m) { m["files"] = "all of them"; },
                 "'files' is not an object"},
        MetaEdit{"KvPrefixRoleNamesNoGraph",
                 [](nlohmann::json& m) {
                   m["metadata"]["roles"] = {{"kv_prefix", {{"graphs", {"nope"}}, {"rows", 16}}}};
                 },
                 "roles.kv_prefix names graph \"nope\", which the model lacks"},
        MetaEdit{"KvPrefixRowsNotPositive",
                 [](nlohmann::json& m) {
                   m["metadata"]["roles"] = {{"kv_prefix", {{"graphs", {"nope"}}, {"rows", 0}}}};
                 },
                 "roles.kv_prefix needs one graph and a positive integer 'rows'"}),
    [](const ::testing::TestParamInfo<MetaEdit>& info) { return info.param.name; });

// A static package whose io claims another KV prefix row count than its graphs hold (their
// cache inputs are CL - AR - 16 slots): refused at open, not run with a shifted mask.
TEST(FaultInput, KvPrefixRowsOtherThanTheGraphsHold) {
  fs::path d = scratch("kv_prefix_rows");
  auto m = tiny_manifest(d, "", "\n[[transform]]\nplugin = \"arcl\"\narn = [1, 8]\ncontext_length = [64]\n\n"
                                "[speculative]\ndecoder = \"ssd\"\n");
  auto b = run({"build", m.string(), "--out", (d / "out").string(), "--no-cache", "-q"});
  ASSERT_EQ(b.exit_code, 0) << b.err;
  for (const nlohmann::json& rows : {nlohmann::json(8), nlohmann::json(-16)}) {
    edit_meta(d / "out" / "cpu", [&](nlohmann::json& meta) { meta["metadata"]["io"]["kv_prefix_rows"] = rows; });
    auto r = run({"run", (d / "out" / "cpu").string(), "--prompt-ids", "1,2", "--max-new-tokens", "2"}, {}, 60);
    expect_one_error_line(r, rows == 8 ? "(8 KV prefix rows in the graph)" : "'kv_prefix_rows' must be a non-negative integer");
  }
}

// A static package whose context passes LongRoPE's switch reads each row's sequence length;
// a graph that claims another row count for it than its variant's AR is refused at open.
TEST(FaultInput, SequenceLengthsOfAnotherRowCount) {
  fs::path d = scratch("sequence_lengths");
  write_file(d / "m.toml", "[model]\nonnx = \"" + nf::test::model_dir("legacy/phi3_genai_longrope") +
                               "/model.onnx\"\n\n[[transform]]\nplugin = \"arcl\"\narn = [1, 4]\n"
                               "context_length = 512\n\n[targets.cpu]\nbackend = \"cpu\"\n");
  auto b = run({"build", (d / "m.toml").string(), "--out", (d / "out").string(), "--no-cache", "-q"});
  ASSERT_EQ(b.exit_code, 0) << b.err;
  edit_meta(d / "out" / "cpu", [](nlohmann::json& meta) {
    for (auto& g : meta["graphs"])
      for (auto& in : g["inputs"])
        if (in["name"] == "sequence_lengths" && g["name"] == "ar4_cl512") in["shape"] = {1, 3};
  });
  expect_one_error_line(run({"run", (d / "out" / "cpu").string(), "--prompt-ids", "1,2", "--max-new-tokens", "2"}, {}, 60),
                        "variant 'ar4_cl512': sequence_lengths is [1, 3], expected [1, 4]");
}

// package.json is sealed too: an edit without a new digest is refused, by run and inspect.
TEST(FaultInput, EditedPackageJsonIsRefused) {
  fs::path d = scratch("meta_edited");
  fs::path pkg = tiny_package(d);
  const std::string sealed = nf::test::slurp(pkg / "package.json");
  auto meta = nlohmann::json::parse(sealed);
  meta["backend"]["options"]["threads"] = 64;
  write_file(pkg / "package.json", meta.dump(2));
  expect_one_error_line(run({"run", pkg.string(), "--prompt-ids", "1"}, {}, 60),
                        "changed after the package was sealed");
  expect_one_error_line(run({"inspect", pkg.string()}, {}, 60), "changed after the package was sealed");
  meta.erase("digest");
  write_file(pkg / "package.json", meta.dump(2));
  expect_one_error_line(run({"inspect", pkg.string()}, {}, 60), "not sealed");
  write_file(pkg / "package.json", sealed);
  EXPECT_EQ(run({"inspect", pkg.string()}, {}, 60).exit_code, 0);
}

TEST(FaultInput, PackageJsonIsAFifo) {
  fs::path d = scratch("meta_fifo");
  fs::path pkg = tiny_package(d);
  fs::remove(pkg / "package.json");
  fifo(pkg / "package.json");
  expect_one_error_line(run({"run", pkg.string(), "--prompt-ids", "1"}, {}, 30), "not a package");
}

TEST(FaultInput, PackageFileReplacedByASymlinkOut) {
  fs::path d = scratch("meta_symlink");
  fs::path pkg = tiny_package(d);
  fs::remove(pkg / "tokenizer.json");
  fs::create_symlink("/dev/zero", pkg / "tokenizer.json");
  expect_one_error_line(run({"run", pkg.string(), "--prompt-ids", "1"}, {}, 30), "missing file tokenizer.json");
}

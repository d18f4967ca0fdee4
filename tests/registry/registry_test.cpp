#include "registry/registry.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

using nf::host::Registry;
namespace fs = std::filesystem;

namespace {

std::string case_dir(const std::string& c) { return std::string(NF_TEST_PLUGIN_DIR) + "/" + c; }

// Loads one case folder; returns the registry's single warning ("" when none).
std::string load_case(Registry& reg, const std::string& c) {
  reg.load_directories({case_dir(c)});
  EXPECT_LE(reg.warnings().size(), 1u);
  return reg.warnings().empty() ? "" : reg.warnings()[0];
}

}  // namespace

TEST(Registry, LoadsAGoodPluginWithItsDescriptor) {
  Registry reg;
  EXPECT_EQ(load_case(reg, "good"), "");
  const auto* p = reg.find(NF_KIND_TRANSFORM, "slow_identity");
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->version, "1.0.0");
  EXPECT_EQ(p->schema["properties"]["steps"]["default"], 10);
  EXPECT_NE(p->library.find("nf_test_plugin_good"), std::string::npos);
}

TEST(Registry, RefusesAFileThatIsNotASharedLibrary) {
  fs::path dir = fs::temp_directory_path() / "nf_registry_not_so";
  fs::create_directories(dir);
  std::ofstream(dir / "libfake.so") << "this is text, not ELF\n";
  Registry reg;
  reg.load_directories({dir.string()});
  ASSERT_EQ(reg.warnings().size(), 1u);
  EXPECT_NE(reg.warnings()[0].find("libfake.so: not a loadable shared library"), std::string::npos) << reg.warnings()[0];
  EXPECT_TRUE(reg.plugins().empty());
  fs::remove_all(dir);
}

TEST(Registry, RefusesALibraryWithoutEntryPoint) {
  Registry reg;
  std::string w = load_case(reg, "no_entry");
  EXPECT_NE(w.find("no npuforge entry point"), std::string::npos) << w;
  EXPECT_TRUE(reg.plugins().empty());
}

TEST(Registry, RefusesTooNewAndTooOldAbi) {
  Registry a;
  std::string w = load_case(a, "abi_too_new");
  EXPECT_NE(w.find("is too new"), std::string::npos) << w;
  Registry b;
  w = load_case(b, "abi_too_old");
  EXPECT_NE(w.find("is too old"), std::string::npos) << w;
  EXPECT_TRUE(a.plugins().empty() && b.plugins().empty());
}

TEST(Registry, ReportsTheMessageOfAFailingEntryPoint) {
  Registry reg;
  std::string w = load_case(reg, "entry_fails");
  EXPECT_NE(w.find("entry point failed: license file not found"), std::string::npos) << w;
}

TEST(Registry, RefusesAnInvalidPluginName) {
  Registry reg;
  std::string w = load_case(reg, "bad_name");
  EXPECT_NE(w.find("invalid plugin name 'Bad Name!'"), std::string::npos) << w;
}

TEST(Registry, FirstPluginInSearchOrderWinsAndTheLoserIsNamed) {
  Registry reg;
  reg.load_directories({case_dir("good"), case_dir("duplicate")});
  ASSERT_EQ(reg.warnings().size(), 1u);
  const std::string& w = reg.warnings()[0];
  EXPECT_NE(w.find("nf_test_plugin_duplicate"), std::string::npos) << w;
  EXPECT_NE(w.find("ignored"), std::string::npos) << w;
  EXPECT_NE(w.find("nf_test_plugin_good"), std::string::npos) << w;
  EXPECT_NE(reg.find(NF_KIND_TRANSFORM, "slow_identity")->library.find("nf_test_plugin_good"), std::string::npos);
}

TEST(Registry, SearchPathIsManifestThenEnvironmentThenBuiltin) {
  setenv("NPUFORGE_PLUGIN_PATH", "/env/a:/env/b", 1);
  auto dirs = Registry::search_path({"/manifest/p"});
  unsetenv("NPUFORGE_PLUGIN_PATH");
  ASSERT_EQ(dirs.size(), 4u);
  EXPECT_EQ(dirs[0], "/manifest/p");
  EXPECT_EQ(dirs[1], "/env/a");
  EXPECT_EQ(dirs[2], "/env/b");
  EXPECT_EQ(dirs[3], Registry::builtin_dir());
}

TEST(Registry, BuiltinDirectoryHoldsTheCpuBackend) {
  Registry reg;
  reg.load_directories({std::string(NPUFORGE_BINARY_DIR) + "/lib/npuforge/plugins"});
  EXPECT_NE(reg.find(NF_KIND_BACKEND, "cpu"), nullptr);
}

// One line each, naming the plugin, what it has and what the host needs.
TEST(Registry, RefusesATableOfANewerAbiNamingBothVersions) {
  Registry reg;
  std::string w = load_case(reg, "table_too_new");
  EXPECT_NE(w.find("nf_test_plugin_table_too_new.so: transform 'future_table': function table is for ABI 2, newer "
                   "than this host's ABI 1; update npuforge"),
            std::string::npos)
      << w;
  EXPECT_TRUE(reg.plugins().empty());
}

TEST(Registry, RefusesATableWithoutItsRequiredEntriesGivingSizes) {
  Registry reg;
  std::string w = load_case(reg, "table_too_small");
  EXPECT_NE(w.find(": backend 'tiny_table': function table of 24 bytes, host needs at least 40 (through 'run')"),
            std::string::npos)
      << w;
  Registry b;
  w = load_case(b, "required_null");
  EXPECT_NE(w.find(": backend 'no_run': required entry 'run' is NULL"), std::string::npos) << w;
  EXPECT_TRUE(reg.plugins().empty() && b.plugins().empty());
}

TEST(Registry, RefusesAnUnknownOrMalformedSchemaKeywordNamingPluginAndKeyword) {
  Registry reg;
  std::string w = load_case(reg, "schema_typo");
  EXPECT_NE(w.find(": transform 'bad_schema': options schema: unknown keyword 'maximun' at /properties/steps; did "
                   "you mean 'maximum'?"),
            std::string::npos)
      << w;
  Registry b;
  w = load_case(b, "schema_malformed");
  EXPECT_NE(w.find(": transform 'bad_schema': options schema: keyword 'type' at /properties/steps must be one of "
                   "object|array|integer|number|boolean|string|null or a list of them, got string \"int\""),
            std::string::npos)
      << w;
  ASSERT_EQ(b.refusals_of("bad_schema").size(), 1u);
  EXPECT_EQ(b.refusals_of("bad_schema")[0]->message, w);
  EXPECT_TRUE(reg.plugins().empty() && b.plugins().empty());
}

TEST(Registry, EveryBuiltinPluginLoadsAndItsSchemaPasses) {
  Registry reg;
  reg.load_directories({std::string(NPUFORGE_BINARY_DIR) + "/lib/npuforge/plugins"});
  for (const auto& w : reg.warnings()) ADD_FAILURE() << w;
  EXPECT_GE(reg.plugins().size(), 15u);
}

// `build --out`: nothing that is not a package of ours is ever replaced or removed, a
// package is swapped in whole, a multi-target build commits all packages or none, and the
// leftovers of builds that died are cleaned up.
#include <signal.h>
#include <spawn.h>

#include <chrono>
#include <thread>

#include "fault_support.h"

extern char** environ;

using namespace nf::fault;
using nf::test::slurp;

namespace {

CommandResult build(const fs::path& manifest, const fs::path& out, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args{"build", manifest.string(), "--out", out.string(), "--no-cache", "-q"};
  args.insert(args.end(), extra.begin(), extra.end());
  return run(args);
}

// The manifest's cpu package is built into `out`.
void build_ok(const fs::path& manifest, const fs::path& out) {
  auto r = build(manifest, out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_TRUE(fs::is_regular_file(out / "cpu" / "package.json"));
}

}  // namespace

// The reproduction: mkdir -p v/cpu; echo notes > v/cpu/x.txt; build --out v.
TEST(FaultOut, UserFolderAtTargetIsNotDeleted) {
  fs::path d = scratch("user_folder");
  write_file(d / "v" / "cpu" / "x.txt", "notes\n");
  auto r = build(write_manifest(d, ""), d / "v");
  expect_one_error_line(r, "is not an npuforge package");
  EXPECT_NE(r.err.find("not replacing it"), std::string::npos) << r.err;
  EXPECT_EQ(slurp(d / "v" / "cpu" / "x.txt"), "notes\n");
  EXPECT_EQ(listing(d / "v"), std::vector<std::string>{"cpu"});
}

TEST(FaultOut, UserFileAtTargetIsNotDeleted) {
  fs::path d = scratch("user_file");
  write_file(d / "v" / "cpu", "a file named like the target\n");
  auto r = build(write_manifest(d, ""), d / "v");
  expect_one_error_line(r, "is a file");
  EXPECT_EQ(slurp(d / "v" / "cpu"), "a file named like the target\n");
}

TEST(FaultOut, SymlinkAtTargetIsNotFollowedOrRemoved) {
  fs::path d = scratch("user_symlink");
  write_file(d / "mine" / "keep.txt", "keep\n");
  fs::create_directories(d / "v");
  fs::create_directory_symlink(d / "mine", d / "v" / "cpu");
  auto r = build(write_manifest(d, ""), d / "v");
  expect_one_error_line(r, "symbolic link");
  EXPECT_TRUE(fs::is_symlink(d / "v" / "cpu"));
  EXPECT_EQ(slurp(d / "mine" / "keep.txt"), "keep\n");
}

TEST(FaultOut, FakePackageJsonIsNotEnough) {
  fs::path d = scratch("fake_package");
  write_file(d / "v" / "cpu" / "package.json", "{\"name\": \"my web app\"}\n");
  write_file(d / "v" / "cpu" / "index.js", "console.log(1)\n");
  auto r = build(write_manifest(d, ""), d / "v");
  expect_one_error_line(r, "is not an npuforge package");
  EXPECT_TRUE(fs::exists(d / "v" / "cpu" / "index.js"));
}

TEST(FaultOut, FileAddedToOurPackageIsNotDeleted) {
  fs::path d = scratch("added_file");
  auto manifest = write_manifest(d, "");
  build_ok(manifest, d / "v");
  write_file(d / "v" / "cpu" / "notes.txt", "my measurements\n");
  auto r = build(manifest, d / "v");
  expect_one_error_line(r, "holds 'notes.txt', which is not a file of its package");
  EXPECT_EQ(slurp(d / "v" / "cpu" / "notes.txt"), "my measurements\n");
}

TEST(FaultOut, EmptyFolderAtTargetIsReplaced) {
  fs::path d = scratch("empty_folder");
  fs::create_directories(d / "v" / "cpu");
  build_ok(write_manifest(d, ""), d / "v");
}

TEST(FaultOut, RebuildSwapsOurPackageAndLeavesNothingBehind) {
  fs::path d = scratch("rebuild");
  auto manifest = write_manifest(d, "");
  build_ok(manifest, d / "v");
  const std::string first = slurp(d / "v" / "cpu" / "package.json");
  build_ok(manifest, d / "v");
  EXPECT_EQ(listing(d / "v"), std::vector<std::string>{"cpu"});
  auto r = run({"run", (d / "v" / "cpu").string(), "--prompt-ids", "1,2,3", "--max-new-tokens", "2"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(first.empty());
}

TEST(FaultOut, StaleLeftoversOfDeadBuildsAreRemoved) {
  fs::path d = scratch("leftovers");
  const std::string host = host_name(), dead = std::to_string(dead_pid()), live = std::to_string(::getpid());
  const fs::path out = d / "v", cache = d / "cache";
  const std::vector<std::string> stale{".cpu.partial-" + host + "-" + dead + "-11", ".cpu.old-" + host + "-" + dead + "-12",
                                       ".htp.partial-" + dead + "-13"};  // older builds' names had no host
  const std::vector<std::string> kept{".cpu.partial-" + host + "-" + live + "-14",          // a live build's
                                      ".cpu.partial-other-machine-" + dead + "-15",        // another host's
                                      "notes.partial-" + host + "-" + dead + "-16",        // not our pattern
                                      "mine"};
  for (const auto& n : stale) write_file(out / n / "package.json", "{}");
  for (const auto& n : kept) write_file(out / n / "x", "x");
  write_file(cache / "stages" / (".tmp-" + host + "-" + dead + "-17") / "model_set.json", "{}");
  write_file(cache / "stages" / (".tmp-" + host + "-" + live + "-18") / "model_set.json", "{}");

  auto r = run({"build", write_manifest(d, "").string(), "--out", out.string(), "--cache-dir", cache.string(), "-q"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> want = kept;
  want.push_back("cpu");
  std::sort(want.begin(), want.end());
  EXPECT_EQ(listing(out), want);
  EXPECT_FALSE(fs::exists(cache / "stages" / (".tmp-" + host + "-" + dead + "-17")));
  EXPECT_TRUE(fs::exists(cache / "stages" / (".tmp-" + host + "-" + live + "-18")));
}

// Two targets, the second fails to compile: the first target's package is not written, and
// an older package there stays as it was.
TEST(FaultOut, MultiTargetBuildCommitsAllOrNone) {
  fs::path d = scratch("all_or_none");
  const std::string plugins = "[plugins]\npaths = [\"" + fault_plugins("ok") + "\"]\n";
  auto good = write_manifest(d, "");
  build_ok(good, d / "v");
  const std::string before = slurp(d / "v" / "cpu" / "package.json");

  fs::path two = d / "two";
  fs::create_directories(two);
  auto manifest = write_manifest(two, "[targets.zz_bad]\nbackend = \"bad_backend\"\n" + plugins, "qwen2");
  auto r = build(manifest, d / "v");
  expect_clean_error(r, "always fails to compile");
  EXPECT_EQ(slurp(d / "v" / "cpu" / "package.json"), before);  // still the llama_gqa package
  EXPECT_EQ(listing(d / "v"), std::vector<std::string>{"cpu"});

  // And into an empty folder: nothing at all.
  auto r2 = build(manifest, d / "w");
  expect_clean_error(r2, "always fails to compile");
  EXPECT_TRUE(listing(d / "w").empty());
}

// A folder that may not be replaced is found before any work, for every target.
TEST(FaultOut, SecondTargetFolderRefusedBeforeAnyWork) {
  fs::path d = scratch("second_target");
  write_file(d / "v" / "cpu2" / "thesis.tex", "\\begin{document}\n");
  auto manifest = write_manifest(d, "[targets.cpu2]\nbackend = \"cpu\"\n");
  auto r = build(manifest, d / "v");
  expect_one_error_line(r, "cpu2 is not an npuforge package");
  EXPECT_EQ(listing(d / "v"), std::vector<std::string>{"cpu2"});
  EXPECT_TRUE(fs::exists(d / "v" / "cpu2" / "thesis.tex"));
}

// Readers run the package while it is rebuilt again and again: every run succeeds, with
// the old package or the new one.
TEST(FaultOut, ReadersDuringRebuildsNeverFail) {
  fs::path d = scratch("readers");
  auto manifest = write_manifest(d, "");
  build_ok(manifest, d / "v");
  std::atomic<bool> done{false};
  std::atomic<int> builds{0}, build_failures{0};
  std::string last_build_error;
  std::thread builder([&] {
    for (int i = 0; i < 6; ++i) {
      auto r = build(manifest, d / "v");
      if (r.exit_code != 0) {
        ++build_failures;
        last_build_error = r.err;
      }
      ++builds;
    }
    done = true;
  });
  int reads = 0;
  std::vector<std::string> failures;
  while (!done || reads < 6) {
    auto r = run({"run", (d / "v" / "cpu").string(), "--prompt-ids", "1,2,3", "--max-new-tokens", "1", "-q"});
    ++reads;
    if (r.exit_code != 0) failures.push_back(r.err);
  }
  builder.join();
  EXPECT_EQ(build_failures, 0) << last_build_error;
  EXPECT_TRUE(failures.empty()) << failures.size() << " of " << reads << " runs failed; first:\n"
                                << (failures.empty() ? "" : failures[0]);
  // A replaced package a reader still held stays until a later build finds it free.
  build_ok(manifest, d / "v");
  EXPECT_EQ(listing(d / "v"), std::vector<std::string>{"cpu"});
}

// SIGKILL at many points of a rebuild: afterwards there is always a whole package (the old
// or the new one), never none, and the next build cleans what the killed one left.
TEST(FaultOut, KillAnywhereInARebuildLosesNoPackage) {
  fs::path d = scratch("kill");
  auto manifest = write_manifest(d, "");
  build_ok(manifest, d / "v");
  std::string bin = nf::test::binary(), m = manifest.string(), out = (d / "v").string();
  for (int delay_ms : {5, 20, 50, 100, 150, 200, 300, 400, 600, 800}) {
    std::vector<char*> argv{bin.data(), const_cast<char*>("build"), m.data(), const_cast<char*>("--out"), out.data(),
                            const_cast<char*>("--no-cache"), const_cast<char*>("-q"), nullptr};
    pid_t pid;
    ASSERT_EQ(posix_spawn(&pid, bin.c_str(), nullptr, nullptr, argv.data(), environ), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    auto r = run({"inspect", (d / "v" / "cpu").string()});
    EXPECT_EQ(r.exit_code, 0) << "after a kill at " << delay_ms << " ms: " << r.err;
    auto v = run({"run", (d / "v" / "cpu").string(), "--prompt-ids", "1,2", "--max-new-tokens", "1", "-q"});
    EXPECT_EQ(v.exit_code, 0) << "after a kill at " << delay_ms << " ms: " << v.err;
  }
  build_ok(manifest, d / "v");
  EXPECT_EQ(listing(d / "v"), std::vector<std::string>{"cpu"});
}

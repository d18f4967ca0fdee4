// Faults injected at every file-system call of a rebuild (strace -e inject): a SIGKILL, or
// ENOSPC (disk full). After each, the package that was there is still whole (or the new
// one is), the build either succeeded or said why in one error line, and the next build
// leaves nothing behind. The rebuild has a cached stage, so cache writes are hit too.
#include "fault_support.h"

using namespace nf::fault;

namespace {

bool have_strace() { return std::system("strace -V >/dev/null 2>&1") == 0; }

struct Injection {
  std::string name;
  std::string syscalls;  // strace's list
  std::string action;    // "signal=SIGKILL" or "error=ENOSPC"
};
void PrintTo(const Injection& i, std::ostream* os) { *os << i.name; }

}  // namespace

class FaultInject : public ::testing::TestWithParam<Injection> {};

TEST_P(FaultInject, EveryCallOfARebuild) {
  if (!have_strace()) GTEST_SKIP() << "strace is not installed (scripts/setup.sh installs it)";
  const auto& inj = GetParam();
  fs::path d = scratch("inject_" + inj.name);
  auto m = write_manifest(d, "[[transform]]\nplugin = \"slow_identity\"\nsteps = 1\n[plugins]\npaths = [\"" +
                                 test_plugins() + "\"]\n");
  const std::vector<std::string> build{"build", m.string(), "--out", (d / "v").string(), "--cache-dir",
                                       (d / "cache").string(), "-q"};
  ASSERT_EQ(run(build).exit_code, 0);
  const bool kill = inj.action.find("SIGKILL") != std::string::npos;
  int points = 0;
  for (int n = 1; n <= 400; ++n) {
    fs::remove_all(d / "cache");  // every stage runs and is stored: its writes are hit too
    const fs::path trace = d / "trace.txt";
    std::string cmd = "strace -f -o " + nf::test::quote(trace.string()) + " -e trace=" + inj.syscalls +
                      " -e inject=" + inj.syscalls + ":" + inj.action + ":when=" + std::to_string(n) + " " +
                      nf::test::quote(nf::test::binary());
    for (const auto& a : build) cmd += " " + nf::test::quote(a);
    cmd += " >/dev/null 2>" + nf::test::quote((d / "err.txt").string());
    const int status = std::system(cmd.c_str());
    const std::string err = nf::test::slurp(d / "err.txt");
    const std::string t = nf::test::slurp(trace);
    if (t.find("(INJECTED)") == std::string::npos && t.find("killed by SIGKILL") == std::string::npos)
      break;  // past the last call
    ++points;
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (!kill) {
      // Disk full: success (a cache store only warns) or one clean error, never a crash.
      EXPECT_TRUE(code == 0 || (code == 1 && err.find("npuforge: error:") != std::string::npos))
          << "call " << n << ": exit " << code << "\n" << err;
      EXPECT_EQ(err.find("terminate called"), std::string::npos) << "call " << n << "\n" << err;
    }
    // Whatever happened, a whole package is there, verified by inspect, and it runs.
    auto i = run({"inspect", (d / "v" / "cpu").string()});
    EXPECT_EQ(i.exit_code, 0) << inj.name << " at call " << n << ": " << i.err;
    if (i.exit_code != 0) break;
  }
  EXPECT_GT(points, 0) << "no " << inj.syscalls << " call was hit";
  auto r = run(build);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(listing(d / "v"), std::vector<std::string>{"cpu"});
  auto g = run({"run", (d / "v" / "cpu").string(), "--prompt-ids", "1,2,3", "--max-new-tokens", "2"});
  EXPECT_EQ(g.exit_code, 0) << g.err;
  std::printf("%d injection points\n", points);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, FaultInject,
    ::testing::Values(Injection{"KillAtRename", "rename,renameat,renameat2", "signal=SIGKILL"},
                      Injection{"KillAtWrite", "write,writev,pwrite64", "signal=SIGKILL"},
                      Injection{"KillAtMkdirOrRemove", "mkdir,mkdirat,unlink,unlinkat,rmdir", "signal=SIGKILL"},
                      Injection{"DiskFullAtWrite", "write,writev,pwrite64", "error=ENOSPC"},
                      Injection{"DiskFullAtRename", "rename,renameat,renameat2", "error=ENOSPC"},
                      Injection{"DiskFullAtMkdir", "mkdir,mkdirat", "error=ENOSPC"}),
    [](const ::testing::TestParamInfo<Injection>& info) { return info.param.name; });

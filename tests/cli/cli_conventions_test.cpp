// The command-line conventions every command follows, driven through the real binary: one
// exit-code table (CLI11's parse errors included), SIGINT/SIGTERM stops at the next step
// with what was done reported, the end of the context as a normal stop, progress (a bar on
// a pseudo-terminal, lines with an ETA in logs), -q / -v / -vv, --json on check and build,
// every plugin option documented with its default.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <regex>
#include <thread>

#include "cli_support.h"

using namespace nf::test;
namespace fs = std::filesystem;

extern char** environ;

namespace {

fs::path fresh(const std::string& name) {
  fs::path d = process_dir("cli_conventions") / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// A manifest over the tiny trained model (with its tokenizer); `extra` is appended.
fs::path tiny_manifest(const fs::path& dir, const std::string& extra) {
  const std::string m = model_dir("tiny_llama");
  std::ofstream(dir / "manifest.toml") << "[model]\nonnx = \"" << m << "/model.onnx\"\nconfig = \"" << m
                                       << "/config.json\"\ntokenizer = \"" << m << "/tokenizer.json\"\n"
                                       << extra;
  return dir / "manifest.toml";
}

std::string slow_stage(int steps, int log_every = 0) {
  return "[[transform]]\nplugin = \"slow_identity\"\nsteps = " + std::to_string(steps) +
         "\nlog_every = " + std::to_string(log_every) + "\n[plugins]\npaths = [\"" + test_plugins() + "\"]\n";
}

// A static package of the tiny model with a 64-token context, built once per process.
const fs::path& context64_package() {
  static fs::path pkg = [] {
    fs::path d = fresh("ctx64");
    auto m = tiny_manifest(d, "[[transform]]\nplugin = \"arcl\"\narn = [1, 8]\ncontext_length = [64]\n"
                              "[targets.cpu]\nbackend = \"cpu\"\n");
    auto r = npuforge({"build", m.string(), "--out", (d / "out").string(), "--no-cache", "-q"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return d / "out" / "cpu";
  }();
  return pkg;
}

// A child npuforge whose stdout comes through a pipe (stderr to a file), to signal midway.
struct Child {
  pid_t pid = -1;
  int out_fd = -1;
  fs::path err_file;
  std::string out;

  explicit Child(const std::vector<std::string>& args, const fs::path& err) : err_file(err) {
    int fds[2];
    if (::pipe(fds) != 0) throw std::runtime_error("pipe");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    std::vector<std::string> all{binary()};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (posix_spawn(&pid, binary().c_str(), &fa, nullptr, argv.data(), environ) != 0) throw std::runtime_error("spawn");
    posix_spawn_file_actions_destroy(&fa);
    ::close(fds[1]);
    out_fd = fds[0];
  }

  // Reads stdout until it holds at least `bytes` bytes or `seconds` pass.
  void read_until(size_t bytes, double seconds) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (out.size() < bytes && std::chrono::steady_clock::now() < end) {
      pollfd p{out_fd, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      char buf[4096];
      ssize_t n = ::read(out_fd, buf, sizeof buf);
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
  }

  // Reads stdout to its end and waits; the exit code, or 128 + the signal.
  int finish() {
    char buf[4096];
    for (ssize_t n; (n = ::read(out_fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
    ::close(out_fd);
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  std::string err() const { return slurp(err_file); }
};

// Runs npuforge on a pseudo-terminal (stdout and stderr both on it, as in an interactive
// shell) and returns everything it wrote.
std::string run_on_terminal(const std::vector<std::string>& args, int* exit_code) {
  int master = -1;
  winsize ws{};
  ws.ws_col = 120;
  ws.ws_row = 40;
  pid_t pid = ::forkpty(&master, nullptr, nullptr, &ws);
  if (pid < 0) throw std::runtime_error("forkpty");
  if (pid == 0) {
    std::vector<std::string> all{binary()};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(binary().c_str(), argv.data());
    ::_exit(127);
  }
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(master, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  ::close(master);  // read() ends with EIO once the child is gone
  int status = 0;
  ::waitpid(pid, &status, 0);
  *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return out;
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + what.size())) ++n;
  return n;
}

}  // namespace

// ---- exit codes ----------------------------------------------------------------------------

TEST(ExitCodes, UnknownCommandSuggestsTheClosest) {
  auto r = npuforge({"bild"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(line_count(r.err), 1) << r.err;
  EXPECT_EQ(r.err.rfind("npuforge: error: unknown command 'bild'; did you mean 'build'?", 0), 0u) << r.err;
  auto v = npuforge({"-v", "inspekt", "x"});
  EXPECT_EQ(v.exit_code, 2);
  EXPECT_NE(v.err.find("did you mean 'inspect'?"), std::string::npos) << v.err;
}

// CLI11's own errors (105-109 before) share the table: 2, one "npuforge: error:" line.
TEST(ExitCodes, ParseErrorsAreBadUsage) {
  const std::string model = model_dir("tiny_llama") + "/model.onnx";
  struct Case {
    std::vector<std::string> args;
    std::string expect;
  };
  for (const Case& c : std::vector<Case>{
           {{}, "no command given"},
           {{"run"}, "model is required"},
           {{"build", "m.toml", "--no-cahce"}, "unknown option '--no-cahce' for 'npuforge build'; did you mean '--no-cache'?"},
           {{"run", model, "--max-new-tokens", "abc"}, "--max-new-tokens"},
           {{"run", model, "--prompt", "a", "--prompt-ids", "1"}, "excludes"},
           {{"plugins", "a", "b"}, "unexpected argument 'b'"},
       }) {
    auto r = npuforge(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.expect << ": " << r.err;
    EXPECT_EQ(line_count(r.err), 1) << r.err;
    EXPECT_EQ(r.err.rfind("npuforge: error: ", 0), 0u) << r.err;
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << r.err;
  }
}

TEST(ExitCodes, HelpListsTheTableAndExitsZero) {
  auto r = npuforge({"--help"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (const char* line : {"Exit codes", "0    ok", "1    failed", "2    bad usage or input", "130  interrupted"})
    EXPECT_NE(r.out.find(line), std::string::npos) << line << "\n" << r.out;
  EXPECT_EQ(npuforge({"run", "--help"}).exit_code, 0);
  EXPECT_EQ(npuforge({"--version"}).exit_code, 0);
}

// The same kind of mistake exits the same way, whichever layer finds it.
TEST(ExitCodes, BadInputIsTwoEverywhere) {
  fs::path d = fresh("bad_input");
  std::ofstream(d / "syntax.toml") << "[model\n";
  const std::string model = model_dir("tiny_llama") + "/model.onnx";
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"check", (d / "missing.toml").string()},
           {"check", (d / "syntax.toml").string()},
           {"run", model},                                   // no prompt (a check in the command)
           {"run", "/nonexistent/model.onnx", "--prompt-ids", "1"},
           {"run", model, "--prompt-ids", "1,x"},
           {"eval", model, "--text", (d / "missing.txt").string()},  // CLI11's ExistingFile
           {"plugins", "no_such_plugin"},
       }) {
    auto r = npuforge(args);
    EXPECT_EQ(r.exit_code, 2) << args[0] << " " << args.back() << ": " << r.err;
    EXPECT_EQ(line_count(r.err), 1) << r.err;
  }
}

// ---- package given where a manifest goes; export-qdq of an htp package -----------------

TEST(Build, APackageIsNotAManifest) {
  const fs::path& pkg = context64_package();
  for (const char* cmd : {"build", "check"}) {
    auto r = npuforge({cmd, pkg.string()});
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_EQ(line_count(r.err), 1) << r.err;
    EXPECT_NE(r.err.find(pkg.string() + " is a package (it has package.json), not a manifest"), std::string::npos)
        << r.err;
  }
}

TEST(ExportQdq, HtpPackageIsOneLineAndLeavesNoOut) {
  fs::path d = fresh("qdq_htp");
  auto m = tiny_manifest(d, "[[transform]]\nplugin = \"arcl\"\narn = [1, 8]\ncontext_length = [64]\n"
                            "[targets.htp]\nbackend = \"htp\"\nchipset = \"sm8750\"\n");
  auto b = npuforge({"build", m.string(), "--out", (d / "out").string(), "--no-cache", "-q"});
  ASSERT_EQ(b.exit_code, 0) << b.err;
  auto r = npuforge({"export-qdq", (d / "out" / "htp").string(), "--out", (d / "qdq").string()});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(line_count(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("is a package for backend 'htp'; export-qdq reads cpu packages only"), std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(d / "qdq"));
  // A cpu package without encodings: refused, and no --out either.
  auto plain = npuforge({"export-qdq", context64_package().string(), "--out", (d / "qdq").string()});
  EXPECT_EQ(plain.exit_code, 2) << plain.err;
  EXPECT_NE(plain.err.find("no encodings"), std::string::npos) << plain.err;
  EXPECT_FALSE(fs::exists(d / "qdq"));
}

// A quantized cpu package exports into an empty folder that is there (written aside, then
// renamed over it), and leaves no staging folder beside it.
TEST(ExportQdq, QuantizedCpuPackageIntoAnEmptyFolder) {
  fs::path d = fresh("qdq_cpu");
  const std::string m = model_dir("tiny_llama");
  auto manifest = tiny_manifest(d, "[calibration]\ntext = \"" + m + "/calibration.txt\"\nnum_samples = 2\n"
                                   "sequence_length = 32\n[[quant]]\nrecipe = \"minmax\"\nweight_bw = 8\n"
                                   "[targets.cpu]\nbackend = \"cpu\"\n");
  auto b = npuforge({"build", manifest.string(), "--out", (d / "out").string(), "--no-cache", "-q"});
  ASSERT_EQ(b.exit_code, 0) << b.err;
  fs::create_directories(d / "qdq");
  auto r = npuforge({"export-qdq", (d / "out" / "cpu").string(), "--out", (d / "qdq").string() + "/", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 1u);
  EXPECT_TRUE(fs::is_regular_file(d / "qdq" / "model.onnx")) << j.dump();
  for (const auto& e : fs::directory_iterator(d))
    EXPECT_EQ(e.path().filename().string().find(".partial-"), std::string::npos) << e.path();
  // Now not empty: refused, and what is there stays.
  auto again = npuforge({"export-qdq", (d / "out" / "cpu").string(), "--out", (d / "qdq").string()});
  EXPECT_EQ(again.exit_code, 2) << again.err;
  EXPECT_NE(again.err.find("exists and is not an empty folder"), std::string::npos) << again.err;
  EXPECT_TRUE(fs::is_regular_file(d / "qdq" / "model.onnx"));
}

// htp needs its chip: check says so before any work, and `plugins htp` documents it.
TEST(Check, HtpWithoutAChipIsRefusedUpFront) {
  fs::path d = fresh("htp_nochip");
  auto m = tiny_manifest(d, "[targets.htp]\nbackend = \"htp\"\n");
  auto r = npuforge({"check", m.string()});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("missing required option 'chipset' for backend 'htp'"), std::string::npos) << r.err;
  auto p = npuforge({"plugins", "htp"});
  EXPECT_NE(p.out.find("chipset (string: one of"), std::string::npos) << p.out;
  EXPECT_NE(p.out.find("Required (or soc_model)"), std::string::npos) << p.out;
}

// Options that cannot work on this model (arcl AR >= CL; an lpbq block size that does not
// divide a weight's input channels) are refused by check, at the stage's line, and by build
// before any stage runs: the plugins' validate entries on the model's shapes.
TEST(Check, StageOptionsThatDoNotFitTheModelAreRefusedUpFront) {
  fs::path d = fresh("stage_validate");
  const std::string calib = "[calibration]\ntext = \"" + model_dir("tiny_llama") + "/heldout.txt\"\n";
  const std::string lpbq48 = "[[quant]]\nrecipe = \"lpbq\"\nblock_size = 48\n";  // hidden 256: 256 % 48 != 0
  const std::string arcl64 = "[[transform]]\nplugin = \"arcl\"\narn = [1, 64]\ncontext_length = [64]\n";
  const std::string target = "[targets.cpu]\nbackend = \"cpu\"\n";
  auto m = tiny_manifest(d, calib + lpbq48 + arcl64 + target);
  auto r = npuforge({"check", m.string()});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find(m.string() + ":8:1: quant lpbq: lpbq: block_size 48 does not divide the 256 input channels"),
            std::string::npos) << r.err;
  EXPECT_NE(r.err.find(m.string() + ":11:1: transform arcl: arcl: every 'arn' value must be smaller than every "
                       "'context_length' value (AR 64 >= CL 64)"),
            std::string::npos) << r.err;
  EXPECT_EQ(line_count(r.err), 2) << r.err;

  auto b = npuforge({"build", m.string(), "--out", (d / "out").string(), "--no-cache"});
  EXPECT_EQ(b.exit_code, 2) << b.err;
  EXPECT_NE(b.err.find("AR 64 >= CL 64"), std::string::npos) << b.err;
  EXPECT_EQ(b.err.find("quant lpbq: 1 graph(s)"), std::string::npos) << "no stage ran: " << b.err;
  EXPECT_FALSE(fs::exists(d / "out" / "cpu"));

  // The same stages with options that fit: check passes, and so does build.
  m = tiny_manifest(d, calib + "[[quant]]\nrecipe = \"lpbq\"\nblock_size = 64\n" +
                           "[[transform]]\nplugin = \"arcl\"\narn = [1, 32]\ncontext_length = [64]\n" + target);
  r = npuforge({"check", m.string()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // split before arcl has run: its options and config.json's layer count (tiny_llama: 4).
  for (auto [n, want] : {std::pair<int, const char*>{2, "leaves no part for the decoder layers"},
                         {7, "needs 5 decoder parts, but the graph has only 4 decoder layers"}}) {
    m = tiny_manifest(d, "[[transform]]\nplugin = \"arcl\"\narn = [1, 32]\ncontext_length = [64]\n" +
                             std::string("[[transform]]\nplugin = \"split\"\nnum_splits = ") + std::to_string(n) +
                             "\n" + target);
    r = npuforge({"check", m.string()});
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find(want), std::string::npos) << r.err;
  }
  // seqmse per block: the same rule as lpbq's, for the weights it searches.
  m = tiny_manifest(d, calib + "[[quant]]\nrecipe = \"seqmse\"\ngranularity = \"per_block\"\nblock_size = 48\n" + target);
  r = npuforge({"check", m.string()});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("quant seqmse: seqmse: block_size 48 does not divide the 256 input channels"), std::string::npos)
      << r.err;
  // A 16-bit model is validated on its shapes (its weights are not widened for check).
  std::ofstream(d / "fp16.toml") << "[model]\nonnx = \"" << model_dir("llama_fp16") << "/model.onnx\"\n"
                                 << "[[quant]]\nrecipe = \"lpbq\"\nblock_size = 48\n" << target;
  r = npuforge({"check", (d / "fp16.toml").string()});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("block_size 48 does not divide the 64 input channels"), std::string::npos) << r.err;
}

// ---- the end of the context, stop reasons, the text's newline, -q --------------------------

TEST(Run, ContextEndIsANormalStop) {
  const fs::path& pkg = context64_package();
  auto j = npuforge({"run", pkg.string(), "--prompt-ids", "1,2,3,4", "--max-new-tokens", "200", "--json"});
  ASSERT_EQ(j.exit_code, 0) << j.err;
  auto out = nlohmann::json::parse(j.out);
  EXPECT_EQ(out["stop"], "context_full");
  EXPECT_EQ(out["stats"]["stop_reason"], "context_full");
  EXPECT_EQ(out["tokens"].size(), 64u - 4u + 1u);  // the last token needs no forward
  auto t = npuforge({"run", pkg.string(), "--prompt-ids", "1,2,3,4", "--max-new-tokens", "200"});
  EXPECT_EQ(t.exit_code, 0) << t.err;
  EXPECT_NE(t.err.find("stopped at the end of the context (64 tokens)"), std::string::npos) << t.err;
  auto few = npuforge({"run", pkg.string(), "--prompt-ids", "1,2,3,4", "--max-new-tokens", "5", "--json"});
  EXPECT_EQ(nlohmann::json::parse(few.out)["stop"], "max_new_tokens");
  // A prompt longer than the context is bad input.
  std::string long_prompt;
  for (int i = 0; i < 70; ++i) long_prompt += (i ? "," : "") + std::to_string(i + 1);
  auto over = npuforge({"run", pkg.string(), "--prompt-ids", long_prompt});
  EXPECT_EQ(over.exit_code, 2) << over.err;
  EXPECT_NE(over.err.find("the prompt has 70 tokens, more than the 64"), std::string::npos) << over.err;
}

// stdout and stderr into one log: the text ends its line before the stats line comes.
TEST(Run, StatsLineIsNotGluedToTheText) {
  fs::path d = fresh("glued");
  const std::string cmd = quote(binary()) + " run " + quote(context64_package().string()) +
                          " --prompt 'The SQLite library' --max-new-tokens 12 > " + quote((d / "log").string()) + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  std::string log = slurp(d / "log");
  auto alone = npuforge({"run", context64_package().string(), "--prompt", "The SQLite library", "--max-new-tokens", "12"});
  ASSERT_EQ(alone.exit_code, 0) << alone.err;
  ASSERT_FALSE(alone.out.empty());
  EXPECT_EQ(alone.out.back(), '\n');
  // The text, its newline, then the stats line on its own.
  EXPECT_EQ(log.compare(0, alone.out.size(), alone.out), 0) << log;
  EXPECT_TRUE(std::regex_match(log.substr(alone.out.size()),
                               std::regex("[0-9]+ prompt tokens, 12 new tokens; prefill [0-9.]+ tok/s, decode [0-9.]+ tok/s\n")))
      << log;
}

TEST(Quiet, OnlyResults) {
  auto r = npuforge({"run", context64_package().string(), "--prompt", "The SQLite library", "--max-new-tokens", "8", "-q"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.err, "");
  EXPECT_FALSE(r.out.empty());
  fs::path d = fresh("quiet_build");
  auto m = tiny_manifest(d, slow_stage(3) + "[targets.cpu]\nbackend = \"cpu\"\n");
  auto b = npuforge({"build", m.string(), "--out", (d / "out").string(), "--no-cache", "-q"});
  EXPECT_EQ(b.exit_code, 0);
  EXPECT_EQ(b.err, "");
  EXPECT_EQ(b.out, (d / "out" / "cpu").string() + "\n");
  auto e = npuforge({"eval", context64_package().string(), "--text", model_dir("tiny_llama") + "/heldout.txt",
                     "--window", "32", "-q"});
  EXPECT_EQ(e.exit_code, 0);
  EXPECT_EQ(e.err, "");
  EXPECT_NE(e.out.find("perplexity"), std::string::npos);
}

// ---- signals -----------------------------------------------------------------------------

// Ctrl-C during generation: the tokens so far are printed, the stop says why, exit 130.
TEST(Signals, RunStopsAtTheNextTokenOnSigint) {
  fs::path d = fresh("sig_run");
  // A bare model (no context limit) asked for far more tokens than it makes in the test.
  Child c({"run", model_dir("tiny_llama") + "/model.onnx", "--prompt", "The SQLite library", "--max-new-tokens",
           "1000000"},
          d / "err");
  c.read_until(40, 60);  // generating
  ASSERT_GE(c.out.size(), 40u) << c.err();
  ::kill(c.pid, SIGINT);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(c.finish(), 130) << c.err();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
  EXPECT_EQ(c.out.back(), '\n');
  const std::string err = c.err();
  EXPECT_NE(err.find("new tokens; prefill"), std::string::npos) << err;
  EXPECT_NE(err.find("; interrupted\n"), std::string::npos) << err;
  EXPECT_NE(err.find("npuforge: interrupted: after "), std::string::npos) << err;
}

TEST(Signals, RunJsonSaysInterruptedOnSigterm) {
  fs::path d = fresh("sig_run_json");
  Child c({"run", model_dir("tiny_llama") + "/model.onnx", "--prompt-ids", "1,2,3", "--max-new-tokens", "1000000",
           "--json"},
          d / "err");
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  ::kill(c.pid, SIGTERM);
  EXPECT_EQ(c.finish(), 130) << c.err();
  auto j = nlohmann::json::parse(c.out);
  EXPECT_EQ(j["stop"], "interrupted");
  EXPECT_EQ(j["stats"]["new_tokens"], j["tokens"].size());
}

TEST(Signals, EvalStopsBetweenWindows) {
  fs::path d = fresh("sig_eval");
  {
    std::ofstream text(d / "long.txt");
    const std::string held = slurp(model_dir("tiny_llama") + "/heldout.txt");
    for (int i = 0; i < 2; ++i) text << held;  // about half a minute of windows
  }
  Child c({"eval", model_dir("tiny_llama") + "/model.onnx", "--text", (d / "long.txt").string(), "--window", "64",
           "--json"},
          d / "err");
  std::this_thread::sleep_for(std::chrono::milliseconds(3000));
  ::kill(c.pid, SIGINT);
  EXPECT_EQ(c.finish(), 130) << c.err();
  auto j = nlohmann::json::parse(c.out);
  EXPECT_EQ(j["stop"], "interrupted");
  EXPECT_GT(j["windows"].get<int64_t>(), 0);  // stopped between windows, not before them
  EXPECT_LT(j["windows"].get<int64_t>(), j["windows_total"].get<int64_t>());
  EXPECT_GT(j["perplexity"].get<double>(), 1.0);
  EXPECT_NE(c.err().find("npuforge: interrupted: after "), std::string::npos) << c.err();
}

// An interrupted rebuild leaves the package that was there, and no staging folder.
TEST(Signals, InterruptedRebuildKeepsThePackageThatWasThere) {
  fs::path d = fresh("sig_build");
  auto m = tiny_manifest(d, slow_stage(2) + "[targets.cpu]\nbackend = \"cpu\"\n");
  const fs::path out = d / "out";
  ASSERT_EQ(npuforge({"build", m.string(), "--out", out.string(), "--no-cache", "-q"}).exit_code, 0);
  const std::string before = slurp(out / "cpu" / "package.json");
  tiny_manifest(d, slow_stage(4000) + "[targets.cpu]\nbackend = \"cpu\"\n");
  Child c({"build", m.string(), "--out", out.string(), "--no-cache", "--json"}, d / "err");
  std::this_thread::sleep_for(std::chrono::milliseconds(2000));
  ::kill(c.pid, SIGTERM);
  EXPECT_EQ(c.finish(), 130) << c.err();
  EXPECT_NE(c.err().find("npuforge: interrupted: during stage 'transform slow_identity'"), std::string::npos) << c.err();
  auto j = nlohmann::json::parse(c.out);
  EXPECT_EQ(j["ok"], false);
  EXPECT_EQ(j["stop"], "interrupted");
  EXPECT_EQ(slurp(out / "cpu" / "package.json"), before);
  std::vector<std::string> entries;
  for (const auto& e : fs::directory_iterator(out)) entries.push_back(e.path().filename().string());
  EXPECT_EQ(entries, std::vector<std::string>{"cpu"});
  // A first build interrupted: the out folder it made is gone too.
  fs::path fresh_out = d / "fresh_out";
  Child first({"build", m.string(), "--out", fresh_out.string(), "--no-cache", "-q"}, d / "err2");
  std::this_thread::sleep_for(std::chrono::milliseconds(2000));
  ::kill(first.pid, SIGINT);
  EXPECT_EQ(first.finish(), 130) << first.err();
  EXPECT_FALSE(fs::exists(fresh_out));
}

// ---- progress, -v / -vv ---------------------------------------------------------------------

// On a terminal: a redrawn bar; log lines (the plugin logs every 100 steps) start at
// column 0, never after the bar.
TEST(Progress, BarOnATerminalWithLogLinesOnTheirOwn) {
  fs::path d = fresh("pty");
  auto m = tiny_manifest(d, slow_stage(400, 100) + "[targets.cpu]\nbackend = \"cpu\"\n");
  int code = -1;
  std::string screen = run_on_terminal({"build", m.string(), "--out", (d / "out").string(), "--no-cache"}, &code);
  EXPECT_EQ(code, 0) << screen;
  EXPECT_GT(count(screen, "\r\033[Ktransform slow_identity ["), 3u) << screen;
  EXPECT_NE(screen.find("]  50% step"), std::string::npos) << screen;
  EXPECT_EQ(count(screen, "slow_identity: step "), 3u) << screen;
  // Each log line starts a line: nothing but the (coloured) level between the last newline
  // or line clear and the message; a glued message has the bar ("NN% step") before it.
  for (size_t at = screen.find("slow_identity: step "); at != std::string::npos;
       at = screen.find("slow_identity: step ", at + 1)) {
    size_t line = screen.rfind('\n', at);
    line = line == std::string::npos ? 0 : line + 1;
    const size_t cleared = screen.rfind("\033[K", at);
    if (cleared != std::string::npos && cleared + 3 > line) line = cleared + 3;
    const std::string before = screen.substr(line, at - line);
    EXPECT_EQ(before.find('%'), std::string::npos) << "glued to the bar: " << before;
    EXPECT_NE(before.find("info"), std::string::npos) << before;
  }
}

// Not a terminal (a log file): a line with the elapsed time and an ETA every 10 s.
TEST(Progress, LogLinesWithAnEtaWhenNotATerminal) {
  fs::path d = fresh("log_progress");
  auto m = tiny_manifest(d, slow_stage(2400) + "[targets.cpu]\nbackend = \"cpu\"\n");
  auto r = npuforge({"build", m.string(), "--out", (d / "out").string(), "--no-cache"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(std::regex_search(r.err, std::regex("info: transform slow_identity: [0-9]+% step \\([0-9hms]+ elapsed, "
                                                  "ETA [0-9hms]+\\)\n")))
      << r.err;
  EXPECT_EQ(r.err.find("\r"), std::string::npos) << "no bar in a log";
}

TEST(Verbose, AddsBuildDetail) {
  fs::path d = fresh("verbose");
  auto m = tiny_manifest(d, slow_stage(3) + "[targets.cpu]\nbackend = \"cpu\"\n");
  auto args = [&](const char* flag) {
    std::vector<std::string> a{"build", m.string(), "--out", (d / "out").string(), "--no-cache"};
    if (*flag) a.push_back(flag);
    return a;
  };
  auto plain = npuforge(args(""));
  auto v = npuforge(args("-v"));
  auto vv = npuforge(args("-vv"));
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  ASSERT_EQ(v.exit_code, 0) << v.err;
  ASSERT_EQ(vv.exit_code, 0) << vv.err;
  EXPECT_EQ(plain.err.find("debug:"), std::string::npos) << plain.err;
  EXPECT_NE(v.err.find("debug: transform slow_identity: {\"log_every\":0,\"steps\":3}"), std::string::npos) << v.err;
  EXPECT_NE(v.err.find("debug: stage transform slow_identity"), std::string::npos) << v.err;
  EXPECT_NE(v.err.find("debug: package " + (d / "out" / "cpu").string() + ": backend cpu, 1 graph(s)"), std::string::npos)
      << v.err;
  EXPECT_EQ(v.err.find("trace"), std::string::npos) << v.err;
  EXPECT_TRUE(std::regex_search(vv.err, std::regex("trace \\[[0-9:.]+\\]:   [0-9.]+ MB package\\.json\n"))) << vv.err;
}

// ---- --json on check and build --------------------------------------------------------------

TEST(Json, CheckAndBuildSummaries) {
  fs::path d = fresh("json");
  auto m = tiny_manifest(d, slow_stage(3) + "[targets.cpu]\nbackend = \"cpu\"\n");
  auto c = npuforge({"check", m.string(), "--json"});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  auto cj = nlohmann::json::parse(c.out);
  EXPECT_EQ(cj["ok"], true);
  EXPECT_EQ(cj["transforms"][0]["plugin"], "slow_identity");
  EXPECT_EQ(cj["transforms"][0]["options"]["steps"], 3);
  EXPECT_EQ(cj["targets"][0]["name"], "cpu");
  EXPECT_EQ(cj["targets"][0]["backend"], "cpu");

  auto b = npuforge({"build", m.string(), "--out", (d / "out").string(), "--no-cache", "--json"});
  ASSERT_EQ(b.exit_code, 0) << b.err;
  auto bj = nlohmann::json::parse(b.out);
  EXPECT_EQ(bj["ok"], true);
  ASSERT_EQ(bj["packages"].size(), 1u);
  const auto& p = bj["packages"][0];
  EXPECT_EQ(p["path"], (d / "out" / "cpu").string());
  EXPECT_EQ(p["target"], "cpu");
  EXPECT_EQ(p["backend"], "cpu");
  EXPECT_EQ(p["stages"][0]["name"], "slow_identity");
  EXPECT_EQ(p["stages"][0]["kind"], "transform");
  uint64_t bytes = 0;
  for (const auto& e : fs::recursive_directory_iterator(d / "out" / "cpu"))
    if (e.is_regular_file()) bytes += e.file_size();
  EXPECT_EQ(p["bytes"], bytes);

  // Errors: ok false, every error listed; the exit code of the table.
  std::ofstream(d / "bad.toml") << "[model]\nonnx = \"" << model_dir("tiny_llama") << "/model.onnx\"\n"
                                << "[[transform]]\nplugin = \"arcl\"\narm = [1]\n[targets.cpu]\nbackend = \"cpu\"\nthread = 2\n";
  for (const char* cmd : {"check", "build"}) {
    auto bad = npuforge({cmd, (d / "bad.toml").string(), "--json"});
    EXPECT_EQ(bad.exit_code, 2) << bad.err;
    auto j = nlohmann::json::parse(bad.out);
    EXPECT_EQ(j["ok"], false);
    ASSERT_GE(j["errors"].size(), 2u) << j.dump();
    EXPECT_NE(j["errors"].dump().find("did you mean 'arn'?"), std::string::npos) << j.dump();
    EXPECT_NE(j["errors"].dump().find("did you mean 'threads'?"), std::string::npos) << j.dump();
  }
  auto syntax = npuforge({"check", (d / "missing.toml").string(), "--json"});
  EXPECT_EQ(syntax.exit_code, 2);
  EXPECT_EQ(nlohmann::json::parse(syntax.out)["ok"], false);
}

// ---- plugin options --------------------------------------------------------------------------

// Every option of every installed plugin has a description and says its default: a schema
// default, or the description says what happens when it is left out.
TEST(Plugins, EveryOptionHasADescriptionAndADefault) {
  auto r = npuforge({"plugins", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  size_t options = 0;
  const auto listing = nlohmann::json::parse(r.out);
  for (const auto& p : listing["plugins"])
    for (const auto& o : p["options"]) {
      ++options;
      const std::string where = p["name"].get<std::string>() + " " + o["name"].get<std::string>();
      const std::string description = o["description"];
      EXPECT_FALSE(description.empty()) << where << " has no description";
      const bool has_default = !o["default"].is_null() || o["required"].get<bool>() ||
                               o["type"] == "table" || description.find("default") != std::string::npos ||
                               description.find("Default") != std::string::npos;
      EXPECT_TRUE(has_default) << where << " says no default: " << description;
    }
  EXPECT_GT(options, 50u);
}

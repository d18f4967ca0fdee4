#include "common/util.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>
#include <xxhash.h>

#include <spdlog/spdlog.h>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <regex>
#include <sstream>

#include "ir/ir.h"

namespace fs = std::filesystem;

namespace nf::host {
namespace {
enum class ProgressMode { off, bar, lines };
ProgressMode g_progress_mode = ::isatty(STDERR_FILENO) ? ProgressMode::bar : ProgressMode::lines;
std::atomic<bool> g_bar_on_screen{false};  // a bar is drawn on the current stderr line

std::string hex128(XXH128_hash_t h) {
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(h.high64),
                static_cast<unsigned long long>(h.low64));
  return buf;
}
}  // namespace

std::string hash_bytes(const void* data, size_t n) { return hex128(XXH3_128bits(data, n)); }
std::string hash_string(const std::string& s) { return hash_bytes(s.data(), s.size()); }

namespace {
// hash_bytes' hash of b's bytes [offset, end), piece by piece, dropping each piece's pages
// once `each` (may be empty) has seen it: hashing a mapped multi-GB weights file must not
// leave all of it resident in this process.
std::string hash_pieces(const ir::Buffer& b, size_t offset, size_t end,
                        const std::function<void(const uint8_t*, size_t)>& each) {
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(), &XXH3_freeState);
  XXH3_128bits_reset(state.get());
  constexpr size_t kPiece = size_t{64} << 20;
  for (size_t done = offset; done < end; done += kPiece) {
    const size_t piece = std::min(kPiece, end - done);
    XXH3_128bits_update(state.get(), b.data() + done, piece);
    if (each) each(b.data() + done, piece);
    b.drop_pages(done, piece);
  }
  ir::check_mapped_files();  // a file truncated while read reads as zeros: not its hash
  return hex128(XXH3_128bits_digest(state.get()));
}
}  // namespace

std::string hash_buffer(const ir::Buffer& b, size_t offset, size_t n) {
  if (offset > b.size()) throw std::runtime_error("hash_buffer: offset past the end");
  return hash_pieces(b, offset, offset + std::min(n, b.size() - offset), {});
}

std::string copy_file_hashed(const fs::path& from, const fs::path& to) {
  std::ofstream out(to, std::ios::binary | std::ios::trunc);
  if (!out) throw std::runtime_error(to.string() + ": cannot write");
  if (fs::file_size(from) == 0) return hash_bytes("", 0);
  ir::MappedFile f(from.string());
  std::string h = hash_pieces(f, 0, f.size(), [&](const uint8_t* p, size_t n) {
    if (!out.write(reinterpret_cast<const char*>(p), static_cast<std::streamsize>(n)))
      throw std::runtime_error(to.string() + ": write failed");
  });
  if (!out.flush()) throw std::runtime_error(to.string() + ": write failed");
  return h;
}

std::string hash_file(const fs::path& p) {
  if (fs::file_size(p) == 0) return hash_bytes("", 0);
  ir::MappedFile f(p.string());  // mapped and hashed piece by piece: never all in memory
  return hash_buffer(f);
}

std::string read_text_file(const fs::path& p) { return read_regular_file(p, kTextMax, "file"); }

void write_text_file_atomic(const fs::path& p, const std::string& text) {
  fs::path tmp = p;
  tmp += ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw std::runtime_error(tmp.string() + ": cannot write");
    out << text;
    if (!out.flush()) throw std::runtime_error(tmp.string() + ": write failed");
  }
  fs::rename(tmp, p);
}

std::atomic<bool>& cancel_flag() {
  static std::atomic<bool> flag{false};
  return flag;
}

void install_cancel_handler() {
  // The first Ctrl-C / SIGTERM asks long work to stop and clean up; a second one kills
  // (SA_RESETHAND), so a stuck process can always be ended.
  struct sigaction sa {};
  sa.sa_handler = [](int) { cancel_flag() = true; };
  sa.sa_flags = SA_RESETHAND;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

Progress::Progress(std::string label) : label_(std::move(label)), start_(std::chrono::steady_clock::now()) {}

Progress::~Progress() {
  if (drawn_) clear_bar();
}

void Progress::clear_bar() {
  if (g_bar_on_screen.exchange(false)) {
    std::fputs("\r\033[K", stderr);
    std::fflush(stderr);
  }
}

void Progress::set_enabled(bool enabled) {
  g_progress_mode = !enabled ? ProgressMode::off : ::isatty(STDERR_FILENO) ? ProgressMode::bar : ProgressMode::lines;
}

namespace {
// "1h02m", "3m05s", "42s".
std::string format_duration(double seconds) {
  const long s = std::lround(seconds);
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%ldh%02ldm", s / 3600, s / 60 % 60);
  else if (s >= 60) std::snprintf(buf, sizeof buf, "%ldm%02lds", s / 60, s % 60);
  else std::snprintf(buf, sizeof buf, "%lds", s);
  return buf;
}
}  // namespace

std::optional<double> PhaseEta::update(uint64_t done, uint64_t total, double elapsed) {
  if (done < last_done_) phase_start_ = elapsed;  // the count went back: a new phase
  last_done_ = done;
  const double in_phase = elapsed - phase_start_;
  if (done == 0 || done >= total || in_phase < 2.0) return std::nullopt;
  return in_phase * static_cast<double>(total - done) / static_cast<double>(done);
}

bool Progress::report(uint64_t done, uint64_t total, const std::string& what) {
  if (g_progress_mode != ProgressMode::off && total > 0) {
    const int permille = static_cast<int>(std::min<uint64_t>(done, total) * 1000 / total);
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    std::string eta;
    if (auto left = eta_.update(done, total, elapsed)) eta = ", ETA " + format_duration(*left);
    if (g_progress_mode == ProgressMode::bar && (permille != last_permille_ || !g_bar_on_screen)) {
      last_permille_ = permille;
      constexpr int width = 30;
      int filled = permille * width / 1000;
      std::string bar(static_cast<size_t>(filled), '#');
      bar.resize(width, '.');
      std::fprintf(stderr, "\r\033[K%s [%s] %3d%% %s%s", label_.c_str(), bar.c_str(), permille / 10, what.c_str(),
                   eta.c_str());
      std::fflush(stderr);
      drawn_ = true;
      g_bar_on_screen = true;
    } else if (g_progress_mode == ProgressMode::lines && elapsed - last_line_ >= 10.0) {
      // Logs get a line every 10 s of a long stage, not a redrawn bar.
      last_line_ = elapsed;
      spdlog::info("{}: {}% {} ({} elapsed{})", label_, permille / 10, what, format_duration(elapsed), eta);
    }
  }
  return cancel_flag().load();
}

namespace {
std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || !*buf) return "localhost";
  std::string s = buf;
  for (char& c : s)
    if (c == '/') c = '_';
  return s;
}
}  // namespace

std::string work_dir_name(const std::string& prefix) {
  static std::random_device rd;
  return prefix + host_name() + "-" + std::to_string(::getpid()) + "-" + std::to_string(rd() % 1000000);
}

size_t remove_stale_work_dirs(const fs::path& dir, const std::string& prefix_pattern) {
  // "<prefix><host>-<pid>-<n>"; names of older builds lack "<host>-".
  const std::regex name(prefix_pattern + "(?:(.+)-)?([0-9]+)-[0-9]+");
  const std::string here = host_name();
  size_t removed = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    const std::string file = e.path().filename().string();
    if (!std::regex_match(file, m, name) || !e.is_directory(ec) || e.is_symlink(ec)) continue;
    if (m[1].matched && m[1].str() != here) continue;  // another machine's, on a shared folder
    const long pid = std::stol(m[2].str());
    if (pid == ::getpid() || ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM) continue;  // still at work
    DirLock lock(e.path(), DirLock::exclusive_nowait);
    if (!lock.held()) continue;  // a reader still has the old package open
    fs::remove_all(e.path(), ec);
    if (!ec) {
      ++removed;
      spdlog::debug("removed {}, left behind by process {}", e.path().string(), pid);
    }
  }
  return removed;
}

DirLock::DirLock(const fs::path& dir, Mode mode) {
  fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd_ < 0) return;
  const int op = mode == shared ? LOCK_SH : LOCK_EX | LOCK_NB;
  while (::flock(fd_, op) != 0) {
    if (errno == EINTR) continue;
    ::close(fd_);
    fd_ = -1;
    return;
  }
}

DirLock::~DirLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the lock
}

TempDir::TempDir(const fs::path& parent, const std::string& prefix) {
  fs::create_directories(parent);
  for (int attempt = 0; attempt < 100; ++attempt) {
    fs::path p = parent / work_dir_name(prefix);
    if (fs::create_directory(p)) {
      path_ = p;
      return;
    }
  }
  throw std::runtime_error(parent.string() + ": cannot create a temporary directory");
}

TempDir::~TempDir() {
  if (path_.empty()) return;
  std::error_code ec;
  fs::remove_all(path_, ec);
}

uint64_t peak_rss_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  return 0;
}

}  // namespace nf::host

// Small shared helpers of the pipeline: hashing, files, progress, cancellation.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>

#include "common/files.h"

namespace nf::ir {
class Buffer;
}

namespace nf::host {

// Seconds on the monotonic clock: for durations, not dates.
inline double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// 128-bit XXH3 of bytes / a file's contents, as 32 hex digits.
std::string hash_bytes(const void* data, size_t n);
std::string hash_string(const std::string& s);
std::string hash_file(const std::filesystem::path& p);
// Same hash as hash_bytes over the buffer's bytes [offset, offset + n) (n = SIZE_MAX: to the
// end); a mapping's pages are dropped as it goes.
std::string hash_buffer(const ir::Buffer& b, size_t offset = 0, size_t n = SIZE_MAX);
// Copies regular file `from` to `to` (replaced if there) and returns hash_file's hash of the
// bytes copied: each byte is read once for both.
std::string copy_file_hashed(const std::filesystem::path& from, const std::filesystem::path& to);

// read_regular_file (common/files.h) with the text cap: a file whose role has no name.
std::string read_text_file(const std::filesystem::path& p);
// Writes to a sibling temp file, then renames: readers never see half a file.
void write_text_file_atomic(const std::filesystem::path& p, const std::string& text);

// The user pressed Ctrl-C (SIGINT/SIGTERM); long work checks it through progress callbacks.
struct Cancelled : std::runtime_error {
  Cancelled() : std::runtime_error("cancelled") {}
};
std::atomic<bool>& cancel_flag();
void install_cancel_handler();

// The time left of a count that may start over (a stage's next phase: seqmse searches, then
// calibrates), at the rate of the current phase alone: a slow first phase does not stretch the
// estimate of a fast second one.
class PhaseEta {
 public:
  // `elapsed` in seconds since the stage began; nothing until the phase has run 2 s.
  std::optional<double> update(uint64_t done, uint64_t total, double elapsed);

 private:
  uint64_t last_done_ = 0;
  double phase_start_ = 0;
};

// A progress bar on a terminal (stderr), silent otherwise. report() returns true when the
// build should stop (user cancel).
class Progress {
 public:
  explicit Progress(std::string label);
  ~Progress();
  bool report(uint64_t done, uint64_t total, const std::string& what);
  // Off with -q; a redrawn bar with an ETA on a terminal; else (logs) a line every 10 s.
  static void set_enabled(bool enabled);
  // Takes a drawn bar off the terminal line, so a log line about to be written starts at
  // column 0; the next report draws the bar again.
  static void clear_bar();

 private:
  std::string label_;
  std::chrono::steady_clock::time_point start_;
  int last_permille_ = -1;
  double last_line_ = 0;
  PhaseEta eta_;
  bool drawn_ = false;
};

// Work folders (package staging, cache entries being written) are named
// "<prefix><host>-<pid>-<n>", so a later run can tell which ones a dead process left.
std::string work_dir_name(const std::string& prefix);
// Removes the folders in `dir` named "<prefix><host>-<pid>-<n>" (prefix: a regex) whose
// process is gone: only this host's, only those no reader holds (DirLock). Returns how many.
size_t remove_stale_work_dirs(const std::filesystem::path& dir, const std::string& prefix_pattern);

// flock(2) on a folder: readers of a package hold it shared while they read, so the build
// that replaced it removes the old folder only when no reader is left (exclusive_nowait).
class DirLock {
 public:
  enum Mode { shared, exclusive_nowait };
  DirLock(const std::filesystem::path& dir, Mode mode);
  ~DirLock();
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;
  bool held() const { return fd_ >= 0; }
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
};

// A directory removed on destruction unless released (half-written output never stays).
class TempDir {
 public:
  explicit TempDir(const std::filesystem::path& parent, const std::string& prefix);
  ~TempDir();
  const std::filesystem::path& path() const { return path_; }
  void release() { path_.clear(); }

 private:
  std::filesystem::path path_;
};

// Peak resident set size of this process in bytes (from /proc/self/status VmHWM).
uint64_t peak_rss_bytes();

}  // namespace nf::host

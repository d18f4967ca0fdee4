#include "common/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace nf::host {
namespace {

std::string kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

std::string size_text(uint64_t bytes) {
  if (bytes >= kMiB) return std::to_string(bytes / kMiB) + " MiB";
  return std::to_string(bytes) + " bytes";
}

}  // namespace

std::string read_regular_file(const std::filesystem::path& path, uint64_t max_bytes, const std::string& what) {
  const std::string name = path.string();
  // O_NONBLOCK: opening a FIFO must not wait for a writer; fstat then refuses it.
  int fd = ::open(name.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    throw FileError(name, "cannot read the " + what + " (" + std::strerror(e) + ")");
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw FileError(name, "cannot read the " + what + " (" + std::strerror(errno) + ")");
  if (!S_ISREG(st.st_mode))
    throw FileError(name, "the " + what + " is " + kind_of(st.st_mode) +
                             "; npuforge reads it from a regular file only");
  auto too_big = [&] {
    return FileError(name, "the " + what + " is larger than " + size_text(max_bytes) +
                              ", the limit for a " + what);
  };
  if (static_cast<uint64_t>(st.st_size) > max_bytes) throw too_big();
  std::string data;
  data.resize(static_cast<size_t>(st.st_size));
  size_t have = 0;
  // The file may grow while read: read to its end, but never past the cap.
  for (;;) {
    if (have == data.size()) {
      if (data.size() >= max_bytes + 1) throw too_big();
      data.resize(std::min<uint64_t>(max_bytes + 1, std::max<uint64_t>(data.size() * 2, 4096)));
    }
    ssize_t n = ::read(fd, data.data() + have, data.size() - have);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw FileError(name, "cannot read the " + what + " (" + std::strerror(errno) + ")");
    }
    if (n == 0) break;
    have += static_cast<size_t>(n);
  }
  if (have > max_bytes) throw too_big();
  data.resize(have);
  return data;
}

}  // namespace nf::host

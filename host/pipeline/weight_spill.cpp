#include "pipeline/weight_spill.h"

#include "api/host_api.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <string>
#include <utility>

namespace fs = std::filesystem;

namespace nf::host {

struct ScratchFile {
  int fd = -1;
  uint64_t end = 0;  // where the next weight goes (page aligned)
  uint64_t keep_free = 0;  // bytes the file system keeps free for the packages
  bool failed = false;
  ~ScratchFile() {
    if (fd >= 0) ::close(fd);
  }
};

namespace {

size_t page_size() {
  static const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return page;
}
uint64_t round_up(uint64_t n) { return (n + page_size() - 1) / page_size() * page_size(); }

// One weight's bytes in the scratch file, mapped read-only. A writer gets its own copy
// (Tensor::mutable_data copies buffers that are not writable).
class ScratchBuffer final : public ir::Buffer {
 public:
  ScratchBuffer(std::shared_ptr<ScratchFile> file, uint64_t offset, size_t size, void* addr)
      : file_(std::move(file)), offset_(offset), size_(size), addr_(addr) {}
  ~ScratchBuffer() override {
    ::munmap(addr_, size_);
    // Its blocks go back to the filesystem now; the file itself only grows.
    ::fallocate(file_->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset_),
                static_cast<off_t>(round_up(size_)));
  }
  const uint8_t* data() const override { return static_cast<const uint8_t*>(addr_); }
  size_t size() const override { return size_; }
  // A shared file mapping: the bytes stay in the file, a later read faults them back in.
  void drop_pages(size_t offset, size_t n) const override {
    if (offset >= size_ || n == 0) return;
    size_t begin = offset / page_size() * page_size(), end = std::min(size_, offset + n);
    ::madvise(static_cast<uint8_t*>(addr_) + begin, end - begin, MADV_DONTNEED);
  }

 private:
  std::shared_ptr<ScratchFile> file_;
  uint64_t offset_;
  size_t size_;
  void* addr_;
};

// Appends the bytes and maps them; null (and the file marked failed) when that fails.
std::shared_ptr<ir::Buffer> move_to_file(const std::shared_ptr<ScratchFile>& f, const ir::Buffer& b) {
  struct statvfs st {};
  if (f->keep_free && ::fstatvfs(f->fd, &st) == 0 &&
      static_cast<uint64_t>(st.f_bavail) * st.f_frsize < b.size() + f->keep_free) {
    spdlog::warn("weights made by the build stay in memory from here: the scratch file would leave less than {} MB "
                 "free beside it for the packages",
                 f->keep_free >> 20);
    f->failed = true;
    return nullptr;
  }
  const uint64_t offset = f->end;
  const uint8_t* p = b.data();
  for (size_t done = 0; done < b.size();) {
    ssize_t n = ::pwrite(f->fd, p + done, b.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      spdlog::warn("weights made by the build stay in memory: the scratch file cannot grow ({})",
                   n < 0 ? std::strerror(errno) : "short write");
      f->failed = true;
      return nullptr;
    }
    done += static_cast<size_t>(n);
  }
  void* addr = ::mmap(nullptr, b.size(), PROT_READ, MAP_SHARED, f->fd, static_cast<off_t>(offset));
  if (addr == MAP_FAILED) {
    spdlog::warn("weights made by the build stay in memory: cannot map the scratch file ({})", std::strerror(errno));
    f->failed = true;
    return nullptr;
  }
  f->end = round_up(offset + b.size());
  auto moved = std::make_shared<ScratchBuffer>(f, offset, b.size(), addr);
  moved->drop_pages(0, b.size());  // written through the file: nothing of it need be resident
  return moved;
}

}  // namespace

WeightSpill::WeightSpill(const fs::path& near, uint64_t keep_free) {
  std::error_code ec;
  fs::path dir = fs::absolute(near, ec);
  while (!dir.empty() && !fs::is_directory(dir, ec) && dir != dir.parent_path()) dir = dir.parent_path();
  int fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {
    spdlog::debug("no scratch file in {} ({}): weights made by the build stay in memory", dir.string(),
                  std::strerror(errno));
    return;
  }
  file_ = std::make_shared<ScratchFile>();
  file_->fd = fd;
  file_->keep_free = keep_free;
}

WeightSpill::~WeightSpill() = default;

bool WeightSpill::active() const { return file_ && !file_->failed; }

uint64_t WeightSpill::spill(ir::TensorRef& weight, size_t min_bytes) {
  std::lock_guard lock(mutex_);
  std::shared_ptr<ir::Buffer>& buf = weight.tensor.buffer;
  if (!active() || !buf || !dynamic_cast<const ir::OwnedBuffer*>(buf.get()) || buf->size() < min_bytes) return 0;
  std::shared_ptr<ir::Buffer> copy = move_to_file(file_, *buf);
  if (!copy) return 0;
  const uint64_t bytes = buf->size();
  buf = std::move(copy);
  return bytes;
}

uint64_t WeightSpill::spill(ir::ModelSet& ms, size_t min_bytes) {
  std::lock_guard lock(mutex_);
  if (!active()) return 0;
  // Old buffer -> (old, new): the old one is kept alive until the end, so its address is
  // not reused by another buffer and mistaken for it.
  std::map<const ir::Buffer*, std::pair<std::shared_ptr<ir::Buffer>, std::shared_ptr<ir::Buffer>>> moved;
  uint64_t bytes = 0;
  for (auto& g : ms.graphs)
    for (auto& [name, ref] : g->initializers) {
      std::shared_ptr<ir::Buffer>& buf = ref->tensor.buffer;
      if (!buf || !dynamic_cast<const ir::OwnedBuffer*>(buf.get()) || buf->size() < min_bytes) continue;
      auto it = moved.find(buf.get());
      if (it == moved.end()) {
        std::shared_ptr<ir::Buffer> copy = move_to_file(file_, *buf);
        if (!copy) return bytes;
        bytes += buf->size();
        it = moved.emplace(buf.get(), std::make_pair(buf, std::move(copy))).first;
      }
      buf = it->second.second;
    }
  return bytes;
}

SpillReleasedWeights::SpillReleasedWeights(WeightSpill& spill) {
  set_weight_released_hook([&spill](ir::TensorRef& weight) { spill.spill(weight); });
}
SpillReleasedWeights::~SpillReleasedWeights() { set_weight_released_hook(nullptr); }

}  // namespace nf::host

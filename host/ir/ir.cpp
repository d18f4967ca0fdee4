#include "ir/ir.h"

#include <npuforge/plugin.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <stdexcept>
#include <unordered_map>

namespace nf::ir {

size_t dtype_size(DType t) { return nf::dtype_size(t); }
const char* dtype_name(DType t) { return nf::dtype_name(t); }

MappedFile::MappedFile(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error(path + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    throw std::runtime_error(path + ": " + std::strerror(e));
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    addr_ = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (addr_ == MAP_FAILED) {
      int e = errno;
      addr_ = nullptr;
      ::close(fd);
      throw std::runtime_error(path + ": mmap failed: " + std::strerror(e));
    }
  }
  ::close(fd);
}

MappedFile::~MappedFile() {
  if (addr_) ::munmap(addr_, size_);
}

void MappedFile::drop_pages(size_t offset, size_t n) const {
  if (!addr_ || offset >= size_ || n == 0) return;
  static const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  size_t begin = offset / page * page, end = std::min(size_, offset + n);
  ::madvise(static_cast<uint8_t*>(addr_) + begin, end - begin, MADV_DONTNEED);
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

size_t Tensor::nbytes() const {
  if (dtype == NF_DTYPE_INT4 || dtype == NF_DTYPE_UINT4) return static_cast<size_t>((numel() + 1) / 2);
  return static_cast<size_t>(numel()) * dtype_size(dtype);
}

void* Tensor::mutable_data() {
  size_t n = nbytes();
  if (!buffer) {
    buffer = std::make_shared<OwnedBuffer>(n);
    offset = 0;
  } else if (!buffer->writable() || buffer.use_count() > 1) {
    auto copy = std::make_shared<OwnedBuffer>(n);
    std::memcpy(copy->mutable_data(), buffer->data() + offset, n);
    buffer = std::move(copy);
    offset = 0;
  }
  return buffer->mutable_data() + offset;
}

Tensor Tensor::zeros(DType dtype, std::vector<int64_t> dims) {
  Tensor t;
  t.dtype = dtype;
  t.dims = std::move(dims);
  t.buffer = std::make_shared<OwnedBuffer>(t.nbytes());
  return t;
}

std::unique_ptr<Graph> Graph::clone() const {
  auto g = std::make_unique<Graph>();
  g->name = name;
  for (const auto& n : nodes) g->nodes.push_back(std::make_unique<Node>(*n));
  g->inputs = inputs;
  g->outputs = outputs;
  g->types = types;
  // A new box per initializer so graphs can replace weights independently; bytes are shared.
  for (const auto& [k, v] : initializers) g->initializers[k] = make_tensor_ref(v->tensor);
  g->opsets = opsets;
  g->ir_version = ir_version;
  g->producer_name = producer_name;
  g->doc = doc;
  return g;
}

std::vector<size_t> Graph::execution_order() const {
  std::unordered_map<std::string, size_t> producer_of;
  for (size_t i = 0; i < nodes.size(); ++i)
    for (const auto& o : nodes[i]->outputs)
      if (!o.empty()) producer_of[o] = i;
  std::vector<std::vector<size_t>> users(nodes.size());
  std::vector<size_t> pending(nodes.size(), 0);
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (const auto& in : nodes[i]->inputs) {
      auto it = producer_of.find(in);
      if (in.empty() || it == producer_of.end() || it->second == i) continue;
      users[it->second].push_back(i);
      ++pending[i];
    }
  }
  // Ready nodes are taken in their current order, so a sorted graph keeps its order.
  std::vector<size_t> order;
  std::deque<size_t> queue;
  for (size_t i = 0; i < nodes.size(); ++i)
    if (pending[i] == 0) queue.push_back(i);
  while (!queue.empty()) {
    std::sort(queue.begin(), queue.end());
    size_t i = queue.front();
    queue.pop_front();
    order.push_back(i);
    for (size_t u : users[i])
      if (--pending[u] == 0) queue.push_back(u);
  }
  if (order.size() != nodes.size()) throw std::runtime_error("graph '" + name + "' has a cycle");
  return order;
}

void Graph::sort() {
  std::vector<std::unique_ptr<Node>> sorted;
  sorted.reserve(nodes.size());
  for (size_t i : execution_order()) sorted.push_back(std::move(nodes[i]));
  nodes = std::move(sorted);
}

Node* Graph::producer(const std::string& value) const {
  for (const auto& n : nodes)
    for (const auto& o : n->outputs)
      if (o == value) return n.get();
  return nullptr;
}

const Tensor* Graph::initializer(const std::string& n) const {
  auto it = initializers.find(n);
  return it == initializers.end() ? nullptr : &it->second->tensor;
}

Encoding Encoding::from(const nf_encoding& e) {
  static std::atomic<uint64_t> generations{0};
  Encoding r;
  r.generation = ++generations;
  r.view = e;
  r.view.struct_size = sizeof(nf_encoding);
  if (e.scale) r.scale.assign(e.scale, e.scale + e.num_scales);
  if (e.offset) r.offset.assign(e.offset, e.offset + e.num_scales);
  if (e.per_block_int_scale) r.per_block_int_scale.assign(e.per_block_int_scale, e.per_block_int_scale + e.num_block_ints);
  r.relink();
  return r;
}

Encoding& Encoding::operator=(const Encoding& o) {
  view = o.view;
  generation = o.generation;
  scale = o.scale;
  offset = o.offset;
  per_block_int_scale = o.per_block_int_scale;
  relink();
  return *this;
}

void Encoding::relink() {
  view.num_scales = scale.size();
  view.scale = scale.data();
  view.offset = offset.data();
  view.num_block_ints = per_block_int_scale.size();
  view.per_block_int_scale = per_block_int_scale.data();
}

Graph* ModelSet::find(const std::string& name) const {
  for (const auto& g : graphs)
    if (g->name == name) return g.get();
  return nullptr;
}

std::unique_ptr<ModelSet> ModelSet::clone() const {
  auto m = std::make_unique<ModelSet>();
  for (const auto& g : graphs) m->graphs.push_back(g->clone());
  m->metadata = metadata;
  m->encodings = encodings;
  return m;
}

}  // namespace nf::ir

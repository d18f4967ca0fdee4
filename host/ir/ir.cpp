#include "ir/ir.h"

#include <npuforge/graph_roles.hpp>
#include <npuforge/plugin.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

namespace nf::ir {

size_t dtype_size(DType t) { return nf::dtype_size(t); }
const char* dtype_name(DType t) { return nf::dtype_name(t); }

// ---- mapped files and SIGBUS ---------------------------------------------------------
// A file truncated while mapped makes every read of its lost pages a SIGBUS. The handler
// below finds the mapping in this table, maps zero pages over the rest of it, marks it and
// returns, so the read completes; check_mapped_files() then turns the mark into an error.
// The table is fixed and lock-free: a signal handler may not allocate or lock.
namespace {

struct MapSlot {
  std::atomic<int> state{0};  // 0 free, 1 being set up or torn down, 2 live
  std::atomic<uintptr_t> begin{0}, end{0};
  std::atomic<bool> faulted{false};
};
constexpr int kMapSlots = 4096;
MapSlot g_slots[kMapSlots];
struct sigaction g_previous_sigbus {};

int page_size() {
  static const int page = static_cast<int>(::sysconf(_SC_PAGESIZE));
  return page;
}

void on_sigbus(int sig, siginfo_t* info, void* ucontext) {
  const auto addr = reinterpret_cast<uintptr_t>(info->si_addr);
  for (MapSlot& s : g_slots) {
    if (s.state.load() != 2 || addr < s.begin.load() || addr >= s.end.load()) continue;
    const uintptr_t from = addr / static_cast<uintptr_t>(page_size()) * static_cast<uintptr_t>(page_size());
    const uintptr_t to = s.end.load();
    if (::mmap(reinterpret_cast<void*>(from), to - from, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) ==
        MAP_FAILED)
      break;
    s.faulted.store(true);
    return;
  }
  // Not one of our mappings: what would have happened without us.
  if (g_previous_sigbus.sa_flags & SA_SIGINFO && g_previous_sigbus.sa_sigaction) {
    g_previous_sigbus.sa_sigaction(sig, info, ucontext);
    return;
  }
  if (g_previous_sigbus.sa_handler != SIG_DFL && g_previous_sigbus.sa_handler != SIG_IGN && g_previous_sigbus.sa_handler) {
    g_previous_sigbus.sa_handler(sig);
    return;
  }
  ::signal(SIGBUS, SIG_DFL);  // the faulting read runs again and ends the process as before
}

void install_sigbus_handler() {
  static const bool installed = [] {
    struct sigaction sa {};
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGBUS, &sa, &g_previous_sigbus);
    return true;
  }();
  (void)installed;
}

int claim_slot(uintptr_t begin, uintptr_t end) {
  for (int i = 0; i < kMapSlots; ++i) {
    int free = 0;
    if (!g_slots[i].state.compare_exchange_strong(free, 1)) continue;
    g_slots[i].begin = begin;
    g_slots[i].end = end;
    g_slots[i].faulted = false;
    g_slots[i].state = 2;
    return i;
  }
  return -1;  // table full: this mapping is unguarded, as all were before
}

// Live mappings, for check_mapped_files; and files that faulted but are unmapped since.
std::mutex g_mapped_mutex;
std::unordered_map<const MappedFile*, int> g_mapped;
std::vector<std::string> g_lost;

int64_t mtime_ns(const struct stat& st) { return int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec; }

std::string changed_message(const std::string& path) {
  return path + ": the file changed while npuforge was using it (truncated or rewritten); run again once it is complete";
}

}  // namespace

MappedFile::MappedFile(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);  // a FIFO must not block the open
  if (fd < 0) throw std::runtime_error(path + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    throw std::runtime_error(path + ": " + std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw std::runtime_error(path + ": not a regular file");
  }
  size_ = static_cast<size_t>(st.st_size);
  mtime_ns_ = mtime_ns(st);
  if (size_ > 0) {
    addr_ = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (addr_ == MAP_FAILED) {
      int e = errno;
      addr_ = nullptr;
      ::close(fd);
      throw std::runtime_error(path + ": mmap failed: " + std::strerror(e));
    }
    install_sigbus_handler();
    const auto begin = reinterpret_cast<uintptr_t>(addr_);
    slot_ = claim_slot(begin, begin + size_);
  }
  fd_ = fd;
  std::lock_guard lock(g_mapped_mutex);
  g_mapped[this] = fd_;
}

MappedFile::~MappedFile() {
  {
    std::lock_guard lock(g_mapped_mutex);
    g_mapped.erase(this);
    if (slot_ >= 0 && g_slots[slot_].faulted.load()) g_lost.push_back(path_);
  }
  if (slot_ >= 0) g_slots[slot_].state = 0;  // the handler stops matching it before the range goes
  if (addr_) ::munmap(addr_, size_);
  if (fd_ >= 0) ::close(fd_);
}

void check_mapped_files() {
  std::lock_guard lock(g_mapped_mutex);
  if (!g_lost.empty()) {
    std::string path = g_lost.front();
    g_lost.clear();
    throw std::runtime_error(changed_message(path));
  }
  for (const auto& [file, fd] : g_mapped) {
    struct stat st {};
    const bool faulted = file->slot_ >= 0 && g_slots[file->slot_].faulted.load();
    if (faulted || ::fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != file->size_ ||
        mtime_ns(st) != file->mtime_ns_)
      throw std::runtime_error(changed_message(file->path_));
  }
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

bool is_transpose_of(const Tensor& b, const Tensor& e) {
  if (b.dims.size() != 2 || e.dims.size() != 2 || b.dtype != e.dtype || b.dims[0] != e.dims[1] || b.dims[1] != e.dims[0])
    return false;
  const int64_t H = b.dims[0], V = b.dims[1];
  const size_t es = dtype_size(b.dtype);
  const auto* pb = static_cast<const unsigned char*>(b.data());
  const auto* pe = static_cast<const unsigned char*>(e.data());
  auto same = [&](int64_t h, int64_t v) { return std::memcmp(pb + (h * V + v) * es, pe + (v * H + h) * es, es) == 0; };
  bool nonzero = false;
  for (int64_t i = 0; i < 64; ++i) {
    const int64_t h = (i * 7919) % H, v = (i * 104729) % V;
    if (!same(h, v)) return false;
    for (size_t byte = 0; byte < es; ++byte) nonzero = nonzero || pe[(v * H + h) * es + byte] != 0;
  }
  if (!nonzero) return false;
  constexpr int64_t kTile = 64;
  for (int64_t h0 = 0; h0 < H; h0 += kTile)
    for (int64_t v0 = 0; v0 < V; v0 += kTile)
      for (int64_t h = h0; h < std::min(H, h0 + kTile); ++h)
        for (int64_t v = v0; v < std::min(V, v0 + kTile); ++v)
          if (!same(h, v)) return false;
  return true;
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

std::string graph_problem(const Graph& g) {
  auto who = [](const Node& n) { return "node '" + n.name + "' (" + n.op_type + ")"; };
  std::unordered_map<std::string, const Node*> writer;
  std::unordered_set<std::string> defined(g.inputs.begin(), g.inputs.end());
  for (const auto& [name, t] : g.initializers) defined.insert(name);
  for (const auto& n : g.nodes)
    for (const auto& o : n->outputs) {
      if (o.empty()) continue;
      if (auto [it, fresh] = writer.emplace(o, n.get()); !fresh)
        return "value '" + o + "' is written by two nodes: " + who(*it->second) + " and " + who(*n);
      if (defined.count(o)) return "value '" + o + "' is a graph input or initializer and also written by " + who(*n);
    }
  auto dtype_of = [&](const std::string& v) {
    if (const Tensor* t = g.initializer(v)) return t->dtype;
    auto it = g.types.find(v);
    return it != g.types.end() ? it->second.dtype : NF_DTYPE_UNDEFINED;
  };
  for (const auto& n : g.nodes)
    for (size_t i = 0; i < n->inputs.size(); ++i) {
      const std::string& in = n->inputs[i];
      if (in.empty()) continue;
      if (!defined.count(in) && !writer.count(in)) return who(*n) + " reads '" + in + "', which nothing defines";
      const DType t = dtype_of(in);
      if (t == NF_DTYPE_STRING) return who(*n) + " reads '" + in + "', a STRING tensor; no backend computes on strings";
      if (n->op_type == "Gather" && n->domain.empty() && i == 1 && t != NF_DTYPE_UNDEFINED && t != NF_DTYPE_INT32 &&
          t != NF_DTYPE_INT64)
        return who(*n) + ": indices '" + in + "' are " + dtype_name(t) + ", not int32 or int64";
    }
  for (const auto& o : g.outputs)
    if (!defined.count(o) && !writer.count(o)) return "graph output '" + o + "' is not computed by any node";
  return "";
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

std::set<std::string> value_names(const Graph& g) {
  std::set<std::string> names(g.inputs.begin(), g.inputs.end());
  names.insert(g.outputs.begin(), g.outputs.end());
  for (const auto& [name, _] : g.initializers) names.insert(name);
  for (const auto& [name, _] : g.types) names.insert(name);
  for (const auto& n : g.nodes) {
    for (const auto& v : n->inputs)
      if (!v.empty()) names.insert(v);
    for (const auto& v : n->outputs)
      if (!v.empty()) names.insert(v);
  }
  return names;
}

void rename_values(Graph& g, const std::map<std::string, std::string>& renames) {
  auto rename = [&](std::string& v) {
    if (auto it = renames.find(v); it != renames.end()) v = it->second;
  };
  for (auto& v : g.inputs) rename(v);
  for (auto& v : g.outputs) rename(v);
  auto rekey = [&](auto& map) {
    std::remove_reference_t<decltype(map)> out;
    for (auto& [name, value] : map) {
      auto it = renames.find(name);
      out.emplace(it == renames.end() ? name : it->second, std::move(value));
    }
    map = std::move(out);
  };
  rekey(g.initializers);
  rekey(g.types);
  for (auto& n : g.nodes) {
    for (auto& v : n->inputs) rename(v);
    for (auto& v : n->outputs) rename(v);
    // A subgraph reads outer values by name: rename those it does not define itself.
    for (auto& [_, a] : n->attrs)
      if (a.g) {
        std::set<std::string> own(a.g->inputs.begin(), a.g->inputs.end());
        for (const auto& [name, _t] : a.g->initializers) own.insert(name);
        for (const auto& sn : a.g->nodes) own.insert(sn->outputs.begin(), sn->outputs.end());
        std::map<std::string, std::string> outer;
        for (const auto& r : renames)
          if (!own.count(r.first)) outer.insert(r);
        if (!outer.empty()) rename_values(*a.g, outer);
      }
  }
}

std::vector<Graph*> ModelSet::targets() const {
  auto it = metadata.find(roles::kMetadataKey);
  const nlohmann::json roles = it == metadata.end() ? nlohmann::json() : nlohmann::json::parse(it->second, nullptr, false);
  std::vector<Graph*> out;
  for (const auto& g : graphs)
    if (roles::is_target(roles, g->name)) out.push_back(g.get());
  return out;
}

}  // namespace nf::ir

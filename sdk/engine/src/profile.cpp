#include "profile.h"

#include <npuforge/plugin.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>

#include "npuforge/engine/ops.h"

namespace nf::engine::profile {
namespace {

struct NodeTotal {
  std::string name, op;
  int64_t calls = 0, ns = 0;
};

struct PassTotal {
  int64_t runs = 0, ns = 0;
  std::vector<NodeTotal> nodes;
};

class Table {
 public:
  explicit Table(std::string path) : path_(std::move(path)) {}

  void attach() {
    std::lock_guard<std::mutex> lock(mu_);
    ++live_;
  }
  void detach() {
    std::lock_guard<std::mutex> lock(mu_);
    if (--live_ == 0) write();
  }
  void add(const std::string& graph, int64_t rows, const std::vector<NodeDef>& nodes, const std::vector<int64_t>& ns) {
    std::lock_guard<std::mutex> lock(mu_);
    // Plans of one name but other nodes (another session's graph "model") count apart.
    std::string key = graph;
    for (int copy = 2;; ++copy) {
      auto it = passes_.find({key, rows});
      if (it == passes_.end() || same_nodes(it->second, nodes)) break;
      key = graph + "#" + std::to_string(copy);
    }
    PassTotal& p = passes_[{key, rows}];
    if (p.nodes.empty())
      for (const NodeDef& n : nodes) p.nodes.push_back({n.node_name, n.op});
    ++p.runs;
    for (size_t i = 0; i < ns.size() && i < p.nodes.size(); ++i) {
      if (ns[i] < 0) continue;  // not needed for the outputs asked for
      ++p.nodes[i].calls;
      p.nodes[i].ns += ns[i];
      p.ns += ns[i];
    }
  }

 private:
  static bool same_nodes(const PassTotal& p, const std::vector<NodeDef>& nodes) {
    return p.nodes.size() == nodes.size() &&
           (nodes.empty() || (p.nodes.front().name == nodes.front().node_name && p.nodes.back().name == nodes.back().node_name));
  }

  // The whole table so far (a later session in the process rewrites it with more).
  void write() const {
    auto ms = [](int64_t ns) { return static_cast<double>(ns) * 1e-6; };
    nlohmann::json passes = nlohmann::json::array();
    std::map<std::string, std::pair<int64_t, int64_t>> by_op;  // op -> calls, ns
    int64_t total = 0;
    for (const auto& [key, p] : passes_) {
      std::vector<const NodeTotal*> order;
      for (const NodeTotal& n : p.nodes) order.push_back(&n);
      std::stable_sort(order.begin(), order.end(), [](const NodeTotal* a, const NodeTotal* b) { return a->ns > b->ns; });
      nlohmann::json nodes = nlohmann::json::array();
      for (const NodeTotal* n : order) {
        nodes.push_back({{"node", n->name}, {"op", n->op}, {"calls", n->calls}, {"ms", ms(n->ns)}});
        auto& [calls, ns] = by_op[n->op];
        calls += n->calls;
        ns += n->ns;
      }
      total += p.ns;
      passes.push_back({{"graph", key.first}, {"rows", key.second}, {"runs", p.runs}, {"ms", ms(p.ns)}, {"nodes", nodes}});
    }
    std::vector<std::pair<std::string, std::pair<int64_t, int64_t>>> ops(by_op.begin(), by_op.end());
    std::stable_sort(ops.begin(), ops.end(), [](const auto& a, const auto& b) { return a.second.second > b.second.second; });
    nlohmann::json op_rows = nlohmann::json::array();
    for (const auto& [op, v] : ops)
      op_rows.push_back({{"op", op}, {"calls", v.first}, {"ms", ms(v.second)},
                         {"share", total > 0 ? static_cast<double>(v.second) / static_cast<double>(total) : 0.0}});
    const nlohmann::json j{{"format", "npuforge-profile"}, {"version", 1}, {"ms", ms(total)}, {"ops", op_rows},
                           {"passes", passes}};
    // Written beside and renamed, so a reader never sees half a file.
    const std::string tmp = path_ + ".tmp";
    std::ofstream out(tmp, std::ios::trunc);
    out << j.dump(1) << "\n";
    out.close();
    if (!out || std::rename(tmp.c_str(), path_.c_str()) != 0) {
      std::remove(tmp.c_str());
      std::fprintf(stderr, "npuforge: cannot write the profile to %s (NPUFORGE_PROFILE)\n", path_.c_str());
    }
  }

  std::string path_;
  std::mutex mu_;
  int64_t live_ = 0;
  std::map<std::pair<std::string, int64_t>, PassTotal> passes_;
};

// The table, or null when NPUFORGE_PROFILE is unset or empty (read once).
Table* table() {
  static Table* t = [] {
    const char* path = std::getenv("NPUFORGE_PROFILE");
    return path && *path ? new Table(path) : nullptr;  // lives to the end of the process
  }();
  return t;
}

}  // namespace

std::shared_ptr<void> attach() {
  Table* t = table();
  if (!t) return nullptr;
  t->attach();
  return std::shared_ptr<void>(t, [](void* p) { static_cast<Table*>(p)->detach(); });
}

void add(const std::string& graph, int64_t rows, const std::vector<NodeDef>& nodes, const std::vector<int64_t>& ns) {
  if (Table* t = table()) t->add(graph, rows, nodes, ns);
}

}  // namespace nf::engine::profile

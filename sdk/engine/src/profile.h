// Per-node wall time of the engine's graph runs, on when the environment variable
// NPUFORGE_PROFILE names a file (as ORT's enable_profiling, but outside the options, so a
// package profiles as built). Every plan's runs add to one process-wide table; when the
// last live plan goes (its session closed) the table so far is written to the file as JSON:
// per graph and pass size, each node's calls and milliseconds, and the totals per operator.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace nf::engine {

struct NodeDef;

namespace profile {

// A token a plan holds while it lives (copies share it); null when profiling is off.
std::shared_ptr<void> attach();

// One run of `graph` over `rows` rows (the input_ids' length, 0 when it has none): the
// nanoseconds each node took, in plan order (-1: not run).
void add(const std::string& graph, int64_t rows, const std::vector<NodeDef>& nodes, const std::vector<int64_t>& ns);

}  // namespace profile
}  // namespace nf::engine

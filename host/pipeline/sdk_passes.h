// The sdk graph toolkit's load-time passes run by the host on its own graphs, behind C types:
// plugin.hpp's nf::host() and the host's nf::host namespace cannot meet in one translation
// unit. Each returns what its pass returns; an error goes to `error` (one line) and 0 is
// returned.
#pragma once

#include <npuforge/plugin.h>

#include <cstdint>
#include <string>

// nf::graph::split_fused_caches on `g` through the host's own ABI table.
int64_t split_fused_caches_through_abi(const nf_host_api* api, nf_graph* g, int64_t heads, std::string* error);
// nf::graph::expand_microsoft_ops likewise.
int64_t expand_microsoft_ops_through_abi(const nf_host_api* api, nf_graph* g, std::string* error);

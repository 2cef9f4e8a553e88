// The refusals of GraphBuilder: the Errors custream throws, before calling the driver, for
// bad input to a builder (each names the call, the node and the rule). Internal. Design:
// docs/design/graphs.md, "Builders".
#pragma once

#include <cuda.h>

#include <string>

#include "custream/graph_node.hpp"

namespace custream::detail {

/// "node 0x… (kernel)" for a node custream made; "an empty GraphNode" for none.
std::string node_text(const GraphNode& node);

/// Throws Error (`result`, `call`, subject "graph 0x…") saying `why` and that custream refused
/// without calling the driver.
[[noreturn, gnu::cold]] void refuse_builder(CUresult result, const char* call, CUgraph graph,
                                            const std::string& why);

/// Refuses `call` on an empty builder (no graph).
[[noreturn, gnu::cold]] void refuse_empty_builder(const char* call);

}  // namespace custream::detail

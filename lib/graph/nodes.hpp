// detail::graph_nodes: how custream lists a CUgraph's nodes (the count, then the handles), for
// every file that walks a graph. Internal.
#pragma once

#include <cuda.h>

#include <vector>

#include "driver.hpp"

namespace custream::detail {

/// The top-level nodes of `graph`, in the driver's order. @throws Error naming the graph.
inline std::vector<CUgraphNode> graph_nodes(CUgraph graph) {
  std::size_t count = 0;
  call<&DriverApi::cuGraphGetNodes>(graph_subject(graph), graph, static_cast<CUgraphNode*>(nullptr),
                                    &count);
  std::vector<CUgraphNode> nodes(count);
  if (count > 0) {
    call<&DriverApi::cuGraphGetNodes>(graph_subject(graph), graph, nodes.data(), &count);
    nodes.resize(count);
  }
  return nodes;
}

}  // namespace custream::detail

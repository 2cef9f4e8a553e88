// detail::graph_nodes and node_kind: how custream lists a CUgraph's nodes (the count, then the
// handles) and names a node's type, for every file that walks a graph. Internal.
#pragma once

#include <cuda.h>

#include <vector>

#include "custream/graph_node.hpp"
#include "driver.hpp"

namespace custream::detail {

/// The nodes a driver query `Field` of `of` (a graph or a node of `graph`) lists: the count,
/// then the handles. @throws Error naming the graph.
template <auto Field, typename Of>
std::vector<CUgraphNode> listed_nodes(CUgraph graph, Of of) {
  std::size_t count = 0;
  call<Field>(graph_subject(graph), of, static_cast<CUgraphNode*>(nullptr), &count);
  std::vector<CUgraphNode> nodes(count);
  if (count > 0) {
    call<Field>(graph_subject(graph), of, nodes.data(), &count);
    nodes.resize(count);
  }
  return nodes;
}

/// The top-level nodes of `graph`, in the driver's order. @throws Error naming the graph.
inline std::vector<CUgraphNode> graph_nodes(CUgraph graph) {
  return listed_nodes<&DriverApi::cuGraphGetNodes>(graph, graph);
}

/// The GraphNodeKind of a driver node type (empty for a type custream's builder does not add:
/// external semaphores, batched memory operations).
inline GraphNodeKind node_kind(CUgraphNodeType type) noexcept {
  switch (type) {
    case CU_GRAPH_NODE_TYPE_KERNEL:
      return GraphNodeKind::kernel;
    case CU_GRAPH_NODE_TYPE_MEMCPY:
      return GraphNodeKind::memcpy;
    case CU_GRAPH_NODE_TYPE_MEMSET:
      return GraphNodeKind::memset;
    case CU_GRAPH_NODE_TYPE_HOST:
      return GraphNodeKind::host;
    case CU_GRAPH_NODE_TYPE_GRAPH:
      return GraphNodeKind::child_graph;
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
      return GraphNodeKind::event_wait;
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
      return GraphNodeKind::event_record;
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
      return GraphNodeKind::mem_alloc;
    case CU_GRAPH_NODE_TYPE_MEM_FREE:
      return GraphNodeKind::mem_free;
    case CU_GRAPH_NODE_TYPE_CONDITIONAL:
      return GraphNodeKind::conditional;
    default:
      return GraphNodeKind::empty;
  }
}

/// The type of `node` of `graph` (cuGraphNodeGetType). @throws Error naming the graph.
inline CUgraphNodeType node_type(CUgraph graph, CUgraphNode node) {
  CUgraphNodeType type{};
  call<&DriverApi::cuGraphNodeGetType>(graph_subject(graph), node, &type);
  return type;
}

/// The nodes `node` of `graph` depends on (cuGraphNodeGetDependencies). @throws Error naming
/// the graph.
inline std::vector<CUgraphNode> node_dependencies(CUgraph graph, CUgraphNode node) {
  return listed_nodes<&DriverApi::cuGraphNodeGetDependencies>(graph, node);
}

}  // namespace custream::detail

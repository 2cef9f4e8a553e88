// The add path every GraphBuilder add_… shares, inline in each file that adds nodes (no call
// between files on it): the dependency check, the builder's context current where the node
// needs it, and the one cuGraphAddNode. Internal. Contract: include/custream/graph_builder.hpp;
// design: docs/design/graphs.md, "Builders" (invariants B5, B8, B10).
#pragma once

#include <cuda.h>

#include <string>

#include "context.hpp"
#include "custream/graph_builder.hpp"
#include "driver.hpp"
#include "owner.hpp"
#include "refuse.hpp"

namespace custream::detail {

/// Why `node`, a dependency of a node of `graph` in builder `owner`, is refused (invariant B5).
/// @throws Error, always.
[[noreturn, gnu::cold]] void refuse_dependency(const BuilderOwner& owner, CUgraph graph,
                                               const GraphNode& node, const char* call);

/// Whether a node is added without making the builder's context current (B10): memset, empty
/// and device-to-device memcpy nodes of the root graph, which driver 580 adds with no context
/// current, or another one (test/conformance/no_current_context.cpp).
inline bool adds_without_current(const CUgraphNodeParams& p, bool root) noexcept {
  if (!root) return false;
  switch (p.type) {
    case CU_GRAPH_NODE_TYPE_MEMSET:
    case CU_GRAPH_NODE_TYPE_EMPTY:
      return true;
    case CU_GRAPH_NODE_TYPE_MEMCPY:
      return p.memcpy.copyParams.srcMemoryType == CU_MEMORYTYPE_DEVICE &&
             p.memcpy.copyParams.dstMemoryType == CU_MEMORYTYPE_DEVICE;
    default:
      return false;
  }
}

/// The one cuGraphAddNode of an add, `deps` holding `count` dependencies. @throws Error naming
/// the node's kind and `call`.
inline CUgraphNode add_to_driver(CUgraph graph, const CUgraphNode* deps, std::size_t count,
                                 CUgraphNodeParams& params, GraphNodeKind kind, const char* call) {
  CUgraphNode node = nullptr;
  const CUresult r = try_call<&DriverApi::cuGraphAddNode>(
      &node, graph, count == 0 ? nullptr : deps, static_cast<const CUgraphEdgeData*>(nullptr),
      count, &params);
  if (r != CUDA_SUCCESS) {
    fail<&DriverApi::cuGraphAddNode>(
        r, graph_subject(graph),
        std::string("a ") + to_string(kind) + " node (" + call + "); the builder is unchanged");
  }
  return node;
}

/// add_to_driver with the builder's context current where the node needs it (invariant B10):
/// without a current context, driver 580 crashes adding a kernel node (to a root graph or a
/// body), whatever the node's ctx says; root memset, empty and device-to-device memcpy nodes
/// are added as they are (measured: test/conformance/no_current_context.cpp).
inline CUgraphNode add_in_context(const BuilderOwner& owner, CUgraph graph, const CUgraphNode* deps,
                                  std::size_t count, CUgraphNodeParams& params, GraphNodeKind kind,
                                  const char* call) {
  if (adds_without_current(params, graph == owner.root())) {
    return add_to_driver(graph, deps, count, params, kind, call);
  }
  const MakeCurrent current(owner.context.handle());
  return add_to_driver(graph, deps, count, params, kind, call);
}

/// GraphBuilder::check_add, inline: `graph` (null: an empty builder) takes `after` as its
/// dependencies (B5). @throws Error naming `call` otherwise.
inline void check_dependencies(CUgraph graph, const BuilderOwner* owner, GraphDependencies after,
                               const char* call) {
  if (graph == nullptr) refuse_empty_builder(call);
  for (const GraphNode& node : after) {
    if (!node || node.graph() != graph) refuse_dependency(*owner, graph, node, call);
  }
}

/// add_in_context with more than eight dependencies (their array on the heap).
[[gnu::cold, gnu::noinline]] CUgraphNode add_many(const BuilderOwner& owner, CUgraph graph,
                                                  GraphDependencies after,
                                                  CUgraphNodeParams& params, GraphNodeKind kind,
                                                  const char* call);

}  // namespace custream::detail

namespace custream {

inline GraphNode GraphBuilder::add_checked_node(GraphDependencies after, CUgraphNodeParams& params,
                                                GraphNodeKind kind, const char* call) {
  const detail::BuilderOwner& owner = *owner_.get();
  if (after.size() > 8) {
    return GraphNode(detail::add_many(owner, graph_, after, params, kind, call), graph_, kind);
  }
  // The driver takes an array of CUgraphNode: on the stack up to 8 dependencies (B8).
  CUgraphNode deps[8];
  std::size_t i = 0;
  for (const GraphNode& node : after) deps[i++] = node.handle();
  return GraphNode(detail::add_in_context(owner, graph_, deps, i, params, kind, call), graph_,
                   kind);
}

inline GraphNode GraphBuilder::add_node(GraphDependencies after, CUgraphNodeParams& params,
                                        GraphNodeKind kind, const char* call) {
  detail::check_dependencies(graph_, owner_.get(), after, call);
  return add_checked_node(after, params, kind, call);
}

}  // namespace custream

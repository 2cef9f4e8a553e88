/// @file
/// custream::GraphNode: a typed handle to a node of a GraphBuilder's graph (or of one of its
/// conditional bodies).
#pragma once

#include "custream/detail/cuda.hpp"

#include <cstdint>

namespace custream {

class GraphBuilder;
class Graph;
class ConditionalNode;
class GraphCaptureScope;

/// The kind of a graph node custream made.
enum class GraphNodeKind : std::uint8_t {
  empty,         ///< no work: a join point
  kernel,        ///< a kernel launch (Kernel or LibraryKernel)
  memset,        ///< a 1-, 2- or 4-byte memset of device memory
  memcpy,        ///< a 1-D copy (device, host, pinned)
  host,          ///< a host callable, owned by the graph
  event_record,  ///< records an Event
  event_wait,    ///< waits for an Event
  child_graph,   ///< a copy of another builder's graph
  mem_alloc,     ///< a graph memory allocation (its address fixed for the graph's life)
  mem_free,      ///< frees a graph memory allocation
  conditional,   ///< IF, IF/ELSE, WHILE or SWITCH over a ConditionalHandle
};

/// The kind in words, as errors and GraphBuilder::dot() write it: "empty", "kernel", "memset",
/// "memcpy", "host", "event record", "event wait", "child graph", "memory allocation", "memory
/// free", "conditional" ("unknown" for a value outside the enum). Never null, never throws.
const char* to_string(GraphNodeKind kind) noexcept;

/// A node of a graph under construction: made by GraphBuilder's add_… functions, used as a
/// dependency of later nodes of the same graph, and to update that node in a Graph
/// instantiated from the builder (Graph::update_kernel, set_host, set_enabled, …). A view:
/// it owns nothing, and is valid as long as the builder's graph (or a Graph made from it).
/// Copies compare equal when they name the same CUgraphNode. A GraphNode of one builder (or of
/// one graph of it: the root or a conditional body) is refused, before the driver is called,
/// where a node of another is needed.
class GraphNode {
 public:
  /// No node.
  GraphNode() noexcept = default;

  /// The CUgraphNode (null for no node).
  CUgraphNode handle() const noexcept { return node_; }
  /// The graph it belongs to (a builder's graph, or a conditional body).
  CUgraph graph() const noexcept { return graph_; }
  /// What it does.
  GraphNodeKind kind() const noexcept { return kind_; }
  /// False for no node.
  explicit operator bool() const noexcept { return node_ != nullptr; }

  /// Same node.
  friend bool operator==(const GraphNode& a, const GraphNode& b) noexcept {
    return a.node_ == b.node_;
  }
  /// Different nodes.
  friend bool operator!=(const GraphNode& a, const GraphNode& b) noexcept { return !(a == b); }

 private:
  friend class GraphBuilder;
  friend class Graph;
  friend class ConditionalNode;
  friend class GraphCaptureScope;
  GraphNode(CUgraphNode node, CUgraph graph, GraphNodeKind kind) noexcept
      : node_(node), graph_(graph), kind_(kind) {}

  CUgraphNode node_ = nullptr;
  CUgraph graph_ = nullptr;
  GraphNodeKind kind_ = GraphNodeKind::empty;
};

}  // namespace custream

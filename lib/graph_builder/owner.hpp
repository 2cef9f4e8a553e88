// detail::BuilderOwner: what a GraphBuilder's graph owns, shared by the builder, its copies, its
// conditional bodies' builders and every Graph made from it. Internal. Design:
// docs/design/graphs.md, "Builders".
//
// Contract: the root CUgraph is destroyed with the last reference (invariant B1). Host-node
// payloads are owned by driver user objects that the root graph holds (never this struct), so
// an executable instantiated from it keeps them past every reference here (B2). The libraries
// of library-kernel nodes, the events of event nodes, the modules of kernel nodes and child
// builders' owners are held here (B3, B4). graphs[0] is the root; bodies are added by
// add_body (h-conditional). Nodes and edges are the driver's alone: nothing here records them
// (B7, B8). Nothing here is guarded: one thread at a time adds to a builder.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <vector>

#include "custream/context.hpp"
#include "custream/event.hpp"
#include "custream/graph_node.hpp"
#include "custream/module.hpp"
#include "library.hpp"
#include "shared.hpp"

namespace custream::detail {

struct BuilderOwner : Counted {
  /// Destroys the root graph (cuGraphDestroy: its bodies and its references to user objects go
  /// with it). Never throws.
  ~BuilderOwner();

  /// Whether `graph` is the root or one of the bodies (invariant B5).
  bool owns(CUgraph graph) const noexcept;
  /// Registers `body`, a conditional body of a node of one of this owner's graphs, so that its
  /// nodes may depend on each other and the builder checks know it. @throws std::bad_alloc.
  void add_body(CUgraph body);
  /// The root graph.
  CUgraph root() const noexcept { return graphs.empty() ? nullptr : graphs.front(); }

  /// The root first, then the bodies.
  std::vector<CUgraph> graphs;
  /// The context every node runs in (held: an owned context outlives its graphs).
  Context context;
  /// The libraries that library-kernel nodes launch, and the libraries and modules launched
  /// into its graphs by a capture (support/held_code.hpp).
  GraphCode code;
  /// The modules that kernel nodes launch.
  std::vector<Module> modules;
  /// The events of event record and wait nodes.
  std::vector<Event> events;
  /// Child builders' owners (the child's user objects are retained by the root too, B4).
  std::vector<Shared<BuilderOwner>> children;
  /// The user objects (host payloads) the root graph holds a reference to: its own and its
  /// children's, so that a parent can retain a child's.
  std::vector<CUuserObject> objects;
  /// Graph memory: the addresses alloc nodes of these graphs allocated, and those free nodes
  /// free, each with its node (invariant B6).
  std::vector<std::pair<CUdeviceptr, CUgraphNode>> allocated;
  std::vector<std::pair<CUdeviceptr, CUgraphNode>> freed;
  /// Whether this owner holds `other`, or a child of it does (so `other` cannot also hold it).
  bool holds(const BuilderOwner* other) const noexcept;
};

/// The graph in Graphviz DOT (cuGraphDebugDotPrint through a temporary file), `who` naming the
/// caller in errors (defined in lib/graph.cpp). @throws Error on a driver or file failure.
std::string graph_dot(CUgraph graph, bool verbose, const char* who);

}  // namespace custream::detail

// detail::GraphOwner: what a custream::Graph's copies share (the executable, the graph, what
// they hold). Internal: lib/graph.cpp and lib/graph/node_updates.cpp. Design:
// docs/design/graphs.md.
#pragma once

#include <cuda.h>

#include "custream/context.hpp"
#include "graph/node_updates.hpp"
#include "library.hpp"
#include "shared.hpp"

namespace custream::detail {

struct GraphOwner : Counted {
  // The executable first, then the graph when owned (invariants 1, 5). The keeper, and the
  // payloads it owns, go when the executable's launches are done (per-node updates, U2).
  ~GraphOwner();
  CUgraphExec exec = nullptr;
  CUgraph graph = nullptr;  // the graph this executable was instantiated from
  bool owned = false;       // adopted or from end_capture: destroyed with the last reference
  Context keep;             // the owned context it was instantiated in (contexts.md, invariant 5)
  GraphCode code;           // the libraries and modules `graph`'s kernels come from, held for life
  GraphCode running;        // those of the graph whole updates last gave `exec` (U9; empty before)
  Shared<BuilderOwner> builder;        // the builder it was instantiated from (graphs.md, Builders)
  Shared<BuilderOwner> update_source;  // the builder of the last update's graph (U7)
  CUcontext context = nullptr;         // the context it was instantiated in (memset/memcpy updates)
  NodeUpdates updates;                 // per-node updates (graphs.md, "Per-node updates")
};

}  // namespace custream::detail

// The state of a Graph's per-node updates: the cached kernel nodes, and the keeper, the driver
// user object that owns the payloads the updates gave the executable and those they replaced.
// Internal. Design: docs/design/graphs.md, "Per-node updates".
#pragma once

#include <cuda.h>

#include <atomic>
#include <memory>
#include <utility>
#include <vector>

#include "launch.hpp"

namespace custream::detail {

struct GraphOwner;
struct BuilderOwner;

/// Something an executable's node ran and an update replaced (a host callable, a child
/// builder's graph and payloads), type-erased for the retire list.
struct Payload {
  virtual ~Payload() = default;
};
using PayloadPtr = std::unique_ptr<Payload>;

/// What the keeper owns (per-node updates, invariant U2): freed by the keeper's destructor, that
/// is once the executable has let go of the keeper and its launches have finished. Touched by
/// the Graph's (serialized) update and launch calls only while the executable lives.
struct Kept {
  /// Per node: the payload a per-node update gave it (absent: the builder's original).
  std::vector<std::pair<CUgraphNode, PayloadPtr>> current;
  /// Replaced payloads: released after the next launch of this Graph finishes (U3).
  std::vector<PayloadPtr> retired;
};

/// A kernel node's state for update_kernel (U5): asked of the driver once per node, then one
/// pointer comparison per update.
struct KernelNodeInfo {
  CUgraphNode node = nullptr;
  CUfunction func = nullptr;
  CUkernel kern = nullptr;
  CUcontext ctx = nullptr;
  ParamSizes params;  // its kernel's parameter sizes (the typed launch's check)
  /// The argument sizes (a typed update's static array, one per argument types) last accepted
  /// for this node: the same array again needs no check (U5).
  const std::size_t* accepted = nullptr;
};

/// A Graph's per-node update state, in its GraphOwner.
struct NodeUpdates {
  NodeUpdates() = default;
  NodeUpdates(const NodeUpdates&) = delete;
  NodeUpdates& operator=(const NodeUpdates&) = delete;

  /// Whether `kept->retired` or `retired_code` holds anything: read by every launch (one
  /// relaxed load), set by the update that retires, cleared by the launch that enqueues their
  /// release (U3).
  std::atomic<bool> retire_pending{false};
  /// Whether update()/update_from_capture() must look at this state (a keeper, or cached
  /// kernel nodes): one branch on their path otherwise.
  bool active = false;
  /// The kernel node updated last (U5).
  KernelNodeInfo* last_kernel = nullptr;
  /// The keeper (null for a Graph not made by a GraphBuilder) and what it owns (U2).
  CUuserObject keeper = nullptr;
  Kept* kept = nullptr;
  /// Every kernel node updated so far.
  std::vector<std::unique_ptr<KernelNodeInfo>> kernels;
  /// The code (libraries, modules) whole-graph updates replaced: released after the next
  /// launch finishes, with `kept->retired` (U3), or with the GraphOwner (U9). Any Graph.
  std::vector<PayloadPtr> retired_code;
};

/// Makes the keeper of a graph about to be instantiated: a user object owning an empty Kept,
/// moved to `graph` (the executable takes its own reference when instantiated). @throws Error.
void make_keeper(NodeUpdates& u, CUgraph graph);
/// After instantiation (`instantiated`) or its failure: the graph lets go of the keeper, so that
/// only the executable holds it (U2). Never throws.
void drop_keeper_from_graph(NodeUpdates& u, CUgraph graph) noexcept;
/// Before update()/update_from_capture() of a Graph whose `u.active`: `newer` takes a reference
/// to the keeper, so that the executable takes one again from it (the update drops the ones of
/// the graph it replaces), and room is made to retire every current payload. @throws Error.
void before_whole_update(NodeUpdates& u, CUgraph newer);
/// After that update (`updated`: it succeeded): `newer` lets go of its keeper reference; on
/// success the current payloads are retired (every node now runs `newer`'s parameters) and the
/// cached kernel nodes forgotten. Never throws.
void after_whole_update(NodeUpdates& u, CUgraph newer, bool updated) noexcept;
/// Before a whole-graph update from a builder's graph: room for set_update_source to retire
/// the current source, and the payload it goes into (null when there is none).
/// @throws std::bad_alloc (nothing changed).
PayloadPtr prepare_update_source(GraphOwner& o);
/// After that update succeeded (`o` has a keeper): the executable runs what `source` owns
/// (modules, events, children, graph memory), so `o` holds it as its update source (U7); the
/// source it replaces is retired (released after the next launch finishes, U3). Never throws
/// (`spare` and the room were made before).
void set_update_source(GraphOwner& o, const Shared<BuilderOwner>& source,
                       PayloadPtr spare) noexcept;
/// Undoes make_keeper after the keeper's only reference went with a failed update: `u` has
/// no keeper again, and `was_active` as before. Never throws.
void forget_keeper(NodeUpdates& u, bool was_active) noexcept;
/// Enqueues on `stream` (`special`: a special handle, retried as the launch was), after the
/// launch just made, the release of the retired payloads (U3). Never throws: when the driver
/// refuses, they stay retired (the next launch, the keeper or the GraphOwner).
[[gnu::cold]] void release_retired_after(NodeUpdates& u, CUstream stream, bool special) noexcept;

}  // namespace custream::detail

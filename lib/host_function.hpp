// Host-function payloads inside graphs: what graph construction and capture scopes need of
// host_function.cpp. Internal. Design: docs/design/host_functions.md, invariants 9 and 10.
#pragma once

#include <cuda.h>

#include <mutex>

#include "custream/host_function_error.hpp"

namespace custream::detail {

struct HostTask;

/// What giving a payload to a graph's user object came to.
struct Attached {
  CUresult result = CUDA_SUCCESS;
  const char* call = nullptr;     ///< the failing entry
  bool object_made = false;       ///< the user object owns the payload (frees it when released)
  CUuserObject object = nullptr;  ///< the user object `graph` now holds (on success)
};

/// Gives `task` to a new user object (CU_USER_OBJECT_NO_DESTRUCTOR_SYNC; its destructor frees
/// the payload, never calling the driver) and moves that object's reference to `graph`
/// (CU_GRAPH_USER_OBJECT_MOVE), invariant 3: the payload then lives as long as the graph and
/// every executable of it. When the move fails, the object is released (which frees the
/// payload) only when `release_object`; otherwise it is kept: a leak rather than a dangling
/// node. Never throws for a driver failure (the result says it).
Attached give_to_graph(CUgraph graph, HostTask* task, bool release_object);

/// The replayable trampoline of a graph-owned host node: runs the task (an exception goes to
/// the host-function error handler, invariant 6) and keeps it.
void CUDA_CB run_host_task_replayable(void* task);

/// Makes every host node of `graph` that runs the run-once trampoline graph-owned: a heap
/// host function whose capture check said "not capturing" just before another thread began a
/// capture of the same stream was captured with the trampoline that frees it after one run.
/// Each such payload moves to a user object that `graph` holds, and its node runs the
/// replayable trampoline instead (invariant 9). Called before `graph` is instantiated.
/// When this fails and `owned` (the graph is destroyed right after and never runs), the
/// payloads not yet moved are freed; a graph not owned keeps them (they leak rather than
/// dangle). @throws Error naming the failing driver call.
void own_run_once_nodes(CUgraph graph, bool owned);

/// Hands `error` to the process's host-function error handler (invariant 6); the completion
/// engine reports its callbacks' exceptions here too. Never throws.
void report_host_function_error(const HostFunctionError& error) noexcept;

/// Held by every cold-path host-function enqueue from its capture query to its launch, and by
/// custream's begin and end of a capture around the driver call (invariant 10).
std::mutex& capture_transitions();

/// Frees the payloads of run-once host nodes of `graph`, a graph about to be destroyed
/// without ever being instantiated (a discarded capture). Never throws; a failed query
/// leaves them (a leak, never a dangling node) and is reported to the release-error handler.
void free_run_once_nodes(CUgraph graph) noexcept;

}  // namespace custream::detail

// Host-function payloads inside graphs: what graph construction and capture scopes need of
// host_function.cpp. Internal. Design: docs/design/host_functions.md, invariants 9 and 10.
#pragma once

#include <cuda.h>

#include <mutex>

#include "custream/host_function_error.hpp"

namespace custream::detail {

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

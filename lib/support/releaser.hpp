// detail::release_later: releases a driver callback must not make itself, made on custream's
// releasing thread. Internal. Design: docs/design/graphs.md, "Per-node updates" (U8).
//
// Contract: the driver refuses CUDA calls made from a host function or a user object's
// destructor (cuGraphDestroy answers CUDA_ERROR_NOT_PERMITTED there, and the graph leaks). A
// callback of custream's whose release may call the driver (a retired child builder's graph,
// a module, an event) hands the release to release_later(): one thread, started on first use
// and never stopped, runs the releases in the order they were handed over. Where that thread
// cannot be had, the release runs on the calling thread. The child of a fork() starts anew:
// what the parent had queued is dropped there (the driver is unusable in a forked child).
#pragma once

#include <functional>

namespace custream::detail {

/// Runs `release` on custream's releasing thread, soon; on this thread when the releasing
/// thread cannot be started or no memory is left. Never throws (nor may `release`).
void release_later(std::function<void()> release) noexcept;

}  // namespace custream::detail

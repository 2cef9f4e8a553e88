// Internals shared by streams, events and the current-stream machinery.
//
// Design note — invariants:
//  1. A Stream is {handle, context, device, kind, flags, owner}. Only created streams and
//     wrappers with a keep-alive owner have an owner; copying any other Stream copies five
//     words: no atomic, no allocation.
//  2. A StreamOwner is allocated before the stream is created (a failure leaks no handle) and
//     freed by the release that drops its count to zero; for a created stream that release
//     calls cuStreamDestroy (which needs no current context) and hands a failure other than
//     CUDA_ERROR_DEINITIALIZED (process exit) to the release-error handler.
//  3. Device and context of a wrapped stream are inferred once, with cuStreamGetCtx only
//     (capture-safe), never with cuStreamGetDevice / cuStreamQuery (they invalidate a capture).
//  4. Each thread keeps one current Stream per device in a thread-local array, allocated on
//     first use; its slots hold references, so a current stream stays alive. A StreamScope's
//     entry is borrowed (not counted, so enter + exit make no atomic operation). Dropping a
//     counted reference in a thread first looks for a borrowed entry of the same stream in
//     that thread's slots and, when there is one, moves the reference into it instead of
//     decrementing: a scoped variable reassigned or destroyed inside its scope cannot destroy
//     the current stream. (A borrowed entry whose last counted reference another thread
//     drops is not covered: the scoped variable belongs to this thread.)
#pragma once

#include <atomic>
#include <memory>

#include "custream/detail/current_streams.hpp"
#include "custream/stream.hpp"
#include "driver.hpp"

namespace custream::detail {

struct StreamOwner {
  std::atomic<long> refs{1};
  CUstream destroy = nullptr;        // created streams: destroyed with the last reference
  std::shared_ptr<void> keep_alive;  // wrappers: the caller's owner
};

}  // namespace custream::detail

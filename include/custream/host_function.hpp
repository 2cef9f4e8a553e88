/// @file
/// Host functions and stream callbacks: custream::launch_host_func and custream::add_callback,
/// whose payloads live as long as any graph that captured them.
#pragma once

#include "custream/detail/cuda.hpp"

#include <type_traits>
#include <utility>

#include "custream/detail/host_task.hpp"
#include "custream/stream.hpp"
#include "custream/stream_ref.hpp"

namespace custream {
namespace detail {

/// Enqueues `task` as a host function on `s`; owns it from the call on (destroys it on
/// failure). Inline fast path (docs/design/host_functions.md, invariant 2): one capture check
/// and the launch; capturing, failures and a driver not loaded yet go to the cold paths.
inline void launch_host_task(StreamRef s, HostTask* task) {
  task->stream = s;
  const Loaded* l = g_loaded.load(std::memory_order_acquire);
  if (l == nullptr) return enqueue_host_task(s, task);
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  const CUresult capturing = l->api.cuStreamIsCapturing(s.handle(), &status);  // raw: hot path
  CUresult launched = CUDA_SUCCESS;
  if (capturing == CUDA_SUCCESS && status == CU_STREAM_CAPTURE_STATUS_NONE) {
    launched = l->api.cuLaunchHostFunc(s.handle(), &run_host_task_once, task);  // raw: hot path
    if (launched == CUDA_SUCCESS) return;  // the trampoline frees it after running it
  }
  host_task_not_launched(s, task, capturing, status, launched);
}

}  // namespace detail

/// Enqueues `f()` to run on the host, in stream order, on the driver's host-function thread
/// (cuLaunchHostFunc). `f` is moved to the heap first (one allocation), except a small plain
/// callable (below).
///
/// Not capturing: `f` runs once and is destroyed right after it ran. Capturing (this stream
/// began the capture, or was joined into another stream's capture through an event, or the
/// capture was begun by code that is not custream): `f` becomes a host node of the capture
/// graph, runs on every replay, and is destroyed exactly once, when the graph and every
/// executable made from it are gone (it is owned by a CUDA user object that the capture graph
/// holds).
///
/// `f` must not call the driver and must not own the last reference to a custream Stream,
/// Event or Graph (its destructor runs on a driver thread, where destroying them would call
/// the driver). An exception escaping `f` is caught on the driver thread and handed to the
/// host-function error handler (host_function_error_handler.hpp).
///
/// Costs one capture check (cuStreamIsCapturing; cuStreamGetCaptureInfo for the graph only
/// while capturing) and one cuLaunchHostFunc.
///
/// A small plain callable skips all of that: when `f` is trivially copyable and trivially
/// destructible without padding, no larger than a pointer, and callable as const and noexcept
/// (e.g. `[ctx]() noexcept { ctx->done(); }` with a pointer `ctx`; not a `mutable` lambda),
/// its bytes travel as the driver's `userData`. No allocation and no capture check: there is
/// nothing to free, and a captured node carries its own copy, valid on every replay. The cost
/// is the raw call's. Each run re-creates `f` from those bytes: the changes a `mutable` data
/// member would see do not carry over from one run to the next, and `this` differs between
/// runs. On the special handles 0, 1 and 2 such a callable takes the heap path, whose capture
/// check refuses a launch on the legacy stream while another stream captures (the driver
/// would invalidate that capture).
/// @throws Error when a driver call fails (naming it and the stream; on an invalidated capture
/// CUDA_ERROR_STREAM_CAPTURE_INVALIDATED). `f` is destroyed then, and nothing stays enqueued.
template <typename F, typename = detail::enable_if_host_function<F>>
void launch_host_func(const StreamRef& stream, F&& f) {
  using T = std::decay_t<F>;
  if constexpr (detail::fits_in_pointer<T>) {
    if (!stream.is_special()) {  // also ExternalStream(0), ExternalStream(CU_STREAM_LEGACY)
      detail::stream_call<&detail::DriverApi::cuLaunchHostFunc>(
          stream, stream.handle(), &detail::run_in_pointer<T>, detail::to_pointer<T>(f));
      return;
    }
  }
  detail::launch_host_task(stream, new detail::HostFunctionTask<T>(std::forward<F>(f)));
}

/// Enqueues `fn(arg)` (cuLaunchHostFunc, one driver call and nothing else). While capturing it
/// becomes a host node that runs on every replay: `arg` must then stay valid as long as the
/// graph and its executables (the caller owns it).
/// @throws Error on a driver failure.
inline void launch_host_func(StreamRef stream, CUhostFn fn, void* arg) {
  detail::stream_call<&detail::DriverApi::cuLaunchHostFunc>(stream, stream.handle(), fn, arg);
}

/// Enqueues `f(stream, status)` in stream order (cuStreamAddCallback); `stream` is a StreamRef
/// (or, for a callable that takes a `const Stream&`, a Stream that does not own the stream)
/// and `status` the driver's status. Lifetime, threading and exceptions as for
/// launch_host_func(const StreamRef&, F&&).
///
/// While the stream captures (the driver would refuse cuStreamAddCallback and invalidate the
/// capture) the callback is captured as a host node instead, like launch_host_func: it runs on
/// every replay with status CUDA_SUCCESS, and the capture stays valid.
/// @throws Error on a driver failure (`f` is destroyed then).
template <typename F, typename = detail::enable_if_stream_callback<F, Stream>>
void add_callback(StreamRef stream, F&& f) {
  detail::add_callback_task(stream,
                            new detail::StreamCallbackTask<std::decay_t<F>>(std::forward<F>(f)));
}

/// Enqueues `fn(stream.handle(), status, arg)` in stream order (cuStreamAddCallback). While the
/// stream captures it is captured as a host node (status CUDA_SUCCESS, `arg` owned by the
/// caller and needed as long as the graph and its executables), never passed to the driver's
/// cuStreamAddCallback, which would invalidate the capture.
/// @throws Error (CUDA_ERROR_INVALID_VALUE) for a null `fn`; Error on a driver failure.
void add_callback(StreamRef stream, CUstreamCallback fn, void* arg);

namespace detail {
/// What Stream's host-function members forward to (declared in custream/stream.hpp).
struct HostFunctions {
  template <typename F>
  static void launch(const StreamRef& stream, F&& f) {
    custream::launch_host_func(stream, std::forward<F>(f));
  }
  template <typename F>
  static void add_callback(StreamRef stream, F&& f) {
    custream::add_callback(stream, std::forward<F>(f));
  }
};
}  // namespace detail

}  // namespace custream

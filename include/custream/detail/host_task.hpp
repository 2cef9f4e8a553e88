/// @file
/// Internal: the heap payload of a host function or callback. Used by the templates of
/// custream/host_function.hpp; not part of the public API. Design:
/// docs/design/host_functions.md.
#pragma once

#include <cstddef>
#include <cstring>
#include <new>
#include <type_traits>
#include <utility>

#include "custream/detail/block_pool.hpp"
#include "custream/detail/cuda.hpp"
#include "custream/stream_ref.hpp"

namespace custream {

class Stream;

namespace detail {

/// A host function or callback moved to the heap before the committing driver call.
/// Type-erased with two function pointers: one allocation, no virtual table, no driver call
/// on destruction (custream's part; the callable's own destructor is the caller's business).
struct HostTask {
  /// Runs the callable; `stream` is the stream it was enqueued on.
  using Invoke = void (*)(HostTask& self, StreamRef stream, CUresult status);
  /// Destroys the callable and frees the task.
  using Destroy = void (*)(HostTask* self) noexcept;

  HostTask(Invoke invoke_fn, Destroy destroy_fn) noexcept
      : invoke(invoke_fn), destroy(destroy_fn) {}
  HostTask(const HostTask&) = delete;
  HostTask& operator=(const HostTask&) = delete;

  /// Tasks of up to kPooledBytes come from a recycling pool (host_functions.md, 7): a host
  /// function is allocated by the enqueueing thread and freed by the driver's thread, and
  /// malloc's arenas turned that hand-over into ~1 µs of contention per enqueue on the H200.
  /// The pool is shared with the completion engine's tasks (custream/detail/block_pool.hpp).
  static constexpr std::size_t kPooledBytes = kPoolBlockBytes;
  /// Pooled allocation (falls back to ::operator new above kPooledBytes): pops this
  /// thread's list, inline, and prefetches the next block (host_functions.md, invariant 8).
  static void* operator new(std::size_t size) {
    if (size > kPooledBytes) return ::operator new(size);
    return take_pool_block();
  }
  /// Returns a block to the pool (::operator delete above kPooledBytes).
  static void operator delete(void* p, std::size_t size) noexcept;
  /// Over-aligned callables bypass the pool.
  static void* operator new(std::size_t size, std::align_val_t align) {
    return ::operator new(size, align);
  }
  /// Over-aligned callables bypass the pool.
  static void operator delete(void* p, std::size_t, std::align_val_t align) noexcept {
    ::operator delete(p, align);  // not the sized form: clang has it only with -fsized-deallocation
  }

  Invoke invoke;
  Destroy destroy;
  /// The stream it was enqueued on (filled by the enqueueing call; owns nothing).
  StreamRef stream;
  /// True when it became a node of a capture graph (runs on every replay).
  bool captured = false;

 protected:
  ~HostTask() = default;
};

/// A `void()` callable.
template <typename F>
struct HostFunctionTask final : HostTask {
  template <typename G>
  explicit HostFunctionTask(G&& g) : HostTask(&call, &free), f(std::forward<G>(g)) {}
  static void call(HostTask& self, StreamRef, CUresult) {
    static_cast<HostFunctionTask&>(self).f();
  }
  static void free(HostTask* self) noexcept { delete static_cast<HostFunctionTask*>(self); }
  F f;
};

/// A `void(StreamRef, CUresult)` callable, or a `void(const Stream&, CUresult)` one (given a
/// non-owning Stream: S is custream::Stream, complete where the task is made).
template <typename F, typename S = Stream>
struct StreamCallbackTask final : HostTask {
  template <typename G>
  explicit StreamCallbackTask(G&& g) : HostTask(&call, &free), f(std::forward<G>(g)) {}
  static void call(HostTask& self, StreamRef stream, CUresult status) {
    F& fn = static_cast<StreamCallbackTask&>(self).f;
    if constexpr (std::is_invocable_v<F&, StreamRef, CUresult>) {
      fn(stream, status);
    } else {
      fn(S(stream), status);
    }
  }
  static void free(HostTask* self) noexcept { delete static_cast<StreamCallbackTask*>(self); }
  F f;
};

/// Accepts F for launch_host_func: a callable `void()` that can be moved (or copied) into
/// the task.
template <typename F>
using enable_if_host_function = std::enable_if_t<std::is_invocable_v<std::decay_t<F>&> &&
                                                 std::is_constructible_v<std::decay_t<F>, F&&>>;

/// Accepts F for add_callback: a callable `void(StreamRef, CUresult)` or
/// `void(const Stream&, CUresult)` (S: custream::Stream).
template <typename F, typename S>
using enable_if_stream_callback =
    std::enable_if_t<(std::is_invocable_v<std::decay_t<F>&, StreamRef, CUresult> ||
                      std::is_invocable_v<std::decay_t<F>&, const S&, CUresult>)&&std::
                         is_constructible_v<std::decay_t<F>, F&&>>;

/// The run-once trampoline (cuLaunchHostFunc, not capturing): runs the task, then frees it.
void CUDA_CB run_host_task_once(void* task);

/// launch_host_task before the driver is loaded: loads it (or throws), then enqueues `task`
/// on `s`. Owns `task`.
[[gnu::cold]] void enqueue_host_task(StreamRef s, HostTask* task);
/// Where launch_host_task's fast path stopped: the capture check failed (`capturing`) or
/// found a capture (`status`), or the launch failed (`launched`). Captures `task`, retries a
/// special handle with the current device's context, or throws. Owns `task`.
[[gnu::cold]] void host_task_not_launched(StreamRef s, HostTask* task, CUresult capturing,
                                          CUstreamCaptureStatus status, CUresult launched);
/// Enqueues `task` on `s` as a callback (or a host node while capturing); owns it likewise.
void add_callback_task(StreamRef s, HostTask* task);

/// True when a host function of type T can travel as cuLaunchHostFunc's `userData` itself:
/// its bytes are all it is (trivially copyable and destructible, no padding bits), they fit in
/// a pointer, and calling it cannot throw, as const or not (so a closure's call operator is
/// const: a `mutable` lambda does not qualify). Each run re-creates it from the bytes, so
/// every replay of a captured node sees the callable as it was enqueued.
template <typename T>
inline constexpr bool fits_in_pointer =
    std::conjunction_v<std::is_trivially_copyable<T>, std::is_trivially_destructible<T>,
                       std::has_unique_object_representations<T>,
                       std::bool_constant<sizeof(T) <= sizeof(void*)>,
                       std::bool_constant<alignof(T) <= alignof(void*)>,
                       std::is_nothrow_invocable<const T&>, std::is_nothrow_invocable<T&>>;

/// The bytes of `f` as a pointer value (fits_in_pointer<T>).
template <typename T>
void* to_pointer(const T& f) noexcept {
  static_assert(fits_in_pointer<T>);
  void* p = nullptr;
  std::memcpy(&p, &f, sizeof(T));
  return p;
}

/// The trampoline of a callable carried in `userData`: re-creates it from the bytes and calls
/// it as a non-const lvalue, as the heap path (HostFunctionTask::call) does.
template <typename T>
void CUDA_CB run_in_pointer(void* p) noexcept {
  alignas(T) unsigned char bytes[sizeof(T)];
  std::memcpy(bytes, &p, sizeof(T));
  T& f = *std::launder(reinterpret_cast<T*>(bytes));
  f();
}

}  // namespace detail
}  // namespace custream

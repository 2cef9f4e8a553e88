/// @file
/// Internal: the engine types that a completion registration compiles into user code (the
/// templates of custream/completions.hpp): the task a callable is stored in, the operations on
/// a small callable kept in a ring record, the task blocks, and the testing hooks. Not part of
/// the public API; their layouts are part of the ABI (docs/design/abi.md). Design:
/// docs/design/completions.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <thread>
#include <type_traits>
#include <utility>

#include "custream/detail/cuda.hpp"
#include "custream/stream_ref.hpp"

namespace custream {

class Completions;
class Stream;

namespace detail {
/// How often a Completions' watcher went to sleep, and how often a registration woke it
/// (custream/testing.hpp).
struct CompletionWakes {
  std::size_t sleeps = 0;  ///< times the watcher began a sleep (with nothing pending, or a backoff)
  std::size_t wakes = 0;   ///< registrations that notified it (at most one a sleep)
};
/// The counts of `c` now (takes its mutex). Never throws: {0, 0} if the mutex cannot be taken.
CompletionWakes completion_wakes(const Completions& c) noexcept;
/// The id of `c`'s watcher thread (custream/testing.hpp).
std::thread::id completion_thread(const Completions& c) noexcept;

/// One registration: a type-erased callable, run once and destroyed once.
struct CompletionTask {
  /// Runs the callable with the stream's result (CUDA_SUCCESS, or the driver's error).
  void (*invoke)(CompletionTask* self, CUresult result);
  /// Destroys the callable and frees the task, never calling the driver.
  void (*destroy)(CompletionTask* self) noexcept;
  StreamRef view;                 // the stream registered on (its device: -1 for a special one)
  std::uintptr_t thread = 0;      // the registering thread (an identity unique while it runs)
  CUstream stream = nullptr;      // its handle (the watcher's queue)
  CUevent event = nullptr;        // recorded at registration (the engine's), or
  std::uint64_t* word = nullptr;  // host-mapped, written 1 by the stream at registration
  bool pooled = false;            // the event returns to its device's pool
  bool immediate = false;  // runs on the completion thread whatever the delivery (no user code)
  // A registration on a Stream of a created or green context: a copy of it, which keeps the
  // stream and its owned context alive until the callable is destroyed and the event with it
  // (docs/design/completions.md, invariant 14). Null for every other registration.
  Stream* keep = nullptr;
  CompletionTask* next = nullptr;
};

/// Throws the Error of a completion whose stream failed, for a callback that takes no result.
[[noreturn]] void throw_completion_failure(CUresult result, CUstream stream, int device);

/// Memory for a task of at most kTaskBlock bytes, from the calling thread's cache of blocks.
/// Tasks are freed on another thread (the watcher) than the one that made them; blocks return
/// to a shared pool a batch at a time and are handed out again, so that registering does not
/// pay the allocator's cost of memory freed elsewhere. @throws std::bad_alloc.
void* allocate_task_block();
/// Gives a block of allocate_task_block() back. Never throws.
void free_task_block(void* block) noexcept;
/// The size of a task block.
inline constexpr std::size_t kTaskBlock = 128;

/// A registration's callable, stored in its task.
template <typename F>
struct CompletionTaskOf final : CompletionTask {
  static void* operator new(std::size_t bytes) {
    return bytes <= kTaskBlock ? allocate_task_block() : ::operator new(bytes);
  }
  static void operator delete(void* p, std::size_t bytes) noexcept {
    if (bytes <= kTaskBlock) {
      free_task_block(p);
    } else {
      ::operator delete(p);
    }
  }
  // Over-aligned callables: the allocator's aligned memory, not a block.
  static void* operator new(std::size_t bytes, std::align_val_t alignment) {
    return ::operator new(bytes, alignment);
  }
  static void operator delete(void* p, std::size_t, std::align_val_t alignment) noexcept {
    ::operator delete(p, alignment);
  }

  explicit CompletionTaskOf(F&& f) : fn(std::forward<F>(f)) {
    invoke = [](CompletionTask* self, CUresult result) {
      auto& fn_ = static_cast<CompletionTaskOf*>(self)->fn;
      if constexpr (std::is_invocable_v<std::decay_t<F>&, CUresult>) {
        fn_(result);
      } else {
        if (result != CUDA_SUCCESS) {
          throw_completion_failure(result, self->stream, self->view.device_id());
        }
        fn_();
      }
    };
    destroy = [](CompletionTask* self) noexcept { delete static_cast<CompletionTaskOf*>(self); };
  }
  std::decay_t<F> fn;
};
/// How the engine handles a small callable stored in the registering thread's ring
/// (docs/design/completions.md, invariant 11).
struct InlineCallableOps {
  /// Moves the callable at `storage` into a new task and destroys it there. @throws
  /// std::bad_alloc (the callable then stays at `storage`).
  CompletionTask* (*materialize)(void* storage);
  /// Destroys the callable at `storage` without running it. Never throws.
  void (*destroy)(void* storage) noexcept;
};

/// The most bytes of a callable kept in a ring record.
inline constexpr std::size_t kInlineCallable = 16;

/// Whether a callable D, made from an Arg, is kept in a ring record: small, aligned to at most
/// 8, and made and moved without throwing.
template <typename D, typename Arg>
inline constexpr bool fits_inline =
    sizeof(D) <= kInlineCallable && alignof(D) <= 8 &&
    std::is_nothrow_move_constructible_v<D>&& std::is_nothrow_constructible_v<D, Arg>;

/// The InlineCallableOps of a callable type D.
template <typename D>
struct InlineOf {
  static CompletionTask* materialize(void* storage) {
    D* fn = std::launder(static_cast<D*>(storage));
    CompletionTask* task = new CompletionTaskOf<D>(std::move(*fn));
    fn->~D();
    return task;
  }
  static void destroy(void* storage) noexcept { std::launder(static_cast<D*>(storage))->~D(); }
  static constexpr InlineCallableOps ops{&materialize, &destroy};
};
}  // namespace detail

}  // namespace custream

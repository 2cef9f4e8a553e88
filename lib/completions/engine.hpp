// The completion engine behind a custream::Completions: its life (start, drain, stop, orphan,
// fork) and its registering side. It composes the parts (channel.hpp, owner_ring.hpp,
// incoming_stack.hpp, marks.hpp, watcher.hpp); no part includes it. Internal.
//
// Contract: a registration takes no lock (invariant 4): add() marks the stream, then hands the
// task to the watcher on the owner's ring or the incoming stack (11), and wakes the watcher
// only when it sleeps, once a sleep. The registering side is inline here, so that the facade
// (completions.cpp) compiles it into the public API's functions; its rare paths are out of
// line. Destroying the engine drains it (6); in the child of a fork() it has no watcher and
// refuses registrations (15). Design: docs/design/completions.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <thread>

#include "channel.hpp"
#include "custream/completions.hpp"
#include "marks.hpp"
#include "owner_ring.hpp"
#include "tasks.hpp"
#include "watcher.hpp"

#pragma GCC visibility push(hidden)
namespace custream::detail {

// Hidden: calls between its members are direct (no PLT), so that they can be inlined.
class __attribute__((visibility("hidden"))) CompletionEngine {
 public:
  /// Starts the watcher. @throws Error (CUDA_ERROR_OPERATING_SYSTEM), std::bad_alloc.
  explicit CompletionEngine(const CompletionOptions& options);
  /// Drains (invariant 6), or abandons what is pending in a fork() child (15).
  ~CompletionEngine();
  CompletionEngine(const CompletionEngine&) = delete;
  CompletionEngine& operator=(const CompletionEngine&) = delete;

  /// Stops the watcher; `abandon`: at once, leaving pending registrations (process exit).
  void stop(bool abandon) noexcept;
  /// standard()'s exit handler (invariant 15).
  void close_at_exit() noexcept;
  /// The Completions is destroyed from one of its callbacks (invariant 6).
  void orphan() noexcept;
  /// True on the watcher thread (in a callback).
  bool on_watcher_thread() const noexcept { return thread_.get_id() == std::this_thread::get_id(); }
  std::thread::id thread_id() const noexcept { return thread_.get_id(); }

  /// A registration by `task` (made by the registering thread): marks the stream, then hands
  /// the task to the watcher (the owner's ring, else the shared stack; invariant 11).
  void add(const StreamRef& s, CompletionTask* task, Stream* keep = nullptr) {
    const bool ring = on_ring(s);
    if (ring) {
      owner_.reserve();
    } else {
      // The line of the incoming stack, which the watcher reads on every pass: asked for now,
      // so that the push at the end does not wait for it.
      prefetch_for_write(ch_.incoming.line());
    }
    const Mark m = mark(s, ch_.read.memory, ch_.probes);
    fill(task, s, this_thread_identity(), m, keep);
    if (ring) {
      ring_push(s, m, reinterpret_cast<std::uintptr_t>(task) | kRecordTask, nullptr, nullptr);
    } else {
      push(task);
    }
  }

  /// A registration of a small callable (custream/completions.hpp): on the owner's ring it is
  /// made in the ring's record; otherwise in a task, pushed on the stack (invariant 11).
  [[gnu::always_inline]] void add_inline(const StreamRef& s, const InlineCallableOps& ops,
                                         void (*construct)(void*, void*) noexcept, void* source) {
    // With caller delivery no code of the callable's (its move) runs on the watcher
    // (invariant 7): it is moved into its task here, and the task goes on the ring.
    if (ch_.read.options.delivery == CompletionDelivery::thread && on_ring(s)) {
      owner_.reserve();
      const Mark m = mark(s, ch_.read.memory, ch_.probes);
      ring_push(s, m, reinterpret_cast<std::uintptr_t>(&ops) | kRecordInline, construct, source);
      return;
    }
    alignas(8) unsigned char storage[kInlineCallable];
    construct(storage, source);
    CompletionTask* task;
    try {
      task = ops.materialize(storage);
    } catch (...) {
      ops.destroy(storage);
      throw;
    }
    TaskPtr<CompletionTask> guard(task);  // destroyed, not run, when the registration fails
    add(s, task);
    (void)guard.release();
  }

  /// Hands a registered task to the watcher on the stack (invariant 4): lock-free; the watcher
  /// is woken only when it sleeps.
  void push(CompletionTask* task) noexcept {
    ch_.registered.fetch_add(1, std::memory_order_relaxed);
    ch_.incoming.push(task);
    if (const std::uint64_t sleep = ch_.sleeps.current(std::memory_order_seq_cst)) wake(sleep);
  }

  /// Ends the watcher's sleep numbered `sleep`: the first registration to claim it notifies,
  /// under the mutex; those after it, until the watcher runs, make no call (invariant 4).
  [[gnu::cold, gnu::noinline]] void wake(std::uint64_t sleep) noexcept;
  /// How often the watcher went to sleep and how often a registration woke it.
  CompletionWakes wakes();

  /// Caller delivery: runs the ready callbacks (invariant 6, 7).
  std::size_t run_ready();
  /// The destructor's side of run_ready()'s frames on this thread (invariant 6).
  std::size_t finish_frames() noexcept;

  int fd() const noexcept { return ch_.fd; }
  std::size_t pending() const noexcept {
    const std::size_t finished = ch_.finished.load(std::memory_order_acquire);
    return ch_.registered.load(std::memory_order_acquire) + owner_.registered() - finished;
  }

  /// fork() (invariant 15), with every engine's mutex held by the forking thread.
  void lock_for_fork() { ch_.guarded.mutex.lock(); }
  void unlock_after_fork() noexcept;
  void become_forked_child() noexcept;

 private:
  // Whether this thread's registrations go on the ring: it is the engine's owner (the first
  // thread that registered) and no other thread has registered (invariant 11). A closed engine
  // (invariant 15) refuses the registration here: its owner is kClosed, which no thread is, so
  // the owner's path pays nothing for the check.
  bool on_ring(const StreamRef& s) {
    ReadMostly& read = ch_.read;
    const std::uintptr_t self = this_thread_identity();
    std::uintptr_t owner = read.owner.load(std::memory_order_relaxed);
    if (owner == 0 && read.owner.compare_exchange_strong(owner, self, std::memory_order_relaxed)) {
      owner = self;
    }
    if (owner == self) return !read.shared.load(std::memory_order_relaxed);
    if (owner == kClosed) refuse_closed(s);
    // Another thread: from now on every registration goes on the stack, whose order is the
    // order of the pushes across threads.
    if (!read.shared.load(std::memory_order_relaxed)) {
      read.shared.store(true, std::memory_order_seq_cst);
    }
    return false;
  }

  // Writes a registration's records on the owner's ring, and wakes the watcher when it sleeps.
  [[gnu::always_inline]] void ring_push(const StreamRef& s, const Mark& m, std::uintptr_t head,
                                        void (*construct)(void*, void*) noexcept,
                                        void* source) noexcept {
    const std::uint64_t sleep =
        owner_.push(s, m, head, construct, source, ch_.read.expedited, ch_.sleeps);
    if (sleep != 0) wake(sleep);
  }

  [[noreturn, gnu::cold, gnu::noinline]] void refuse_closed(const StreamRef& s) const;
  void close(Closed why) noexcept;

  Channel ch_;
  OwnerRing owner_;  // the owner's side, on a line of its own
  Watcher watcher_;  // the watcher's side
  std::thread thread_;
  bool forked_ = false;  // in the child of a fork(): no watcher
};

/// Every engine of the process, for fork() (invariant 15; fork.cpp).
void enlist(CompletionEngine* engine);  // @throws std::bad_alloc
void delist(CompletionEngine* engine) noexcept;

}  // namespace custream::detail
#pragma GCC visibility pop

/// @file
/// custream::Completions: being told when GPU work is done without a host function.
#pragma once

#include <chrono>
#include <cstddef>
#include <future>
#include <memory>
#include <thread>
#include <type_traits>
#include <utility>

#include "custream/detail/completion_task.hpp"
#include "custream/detail/cuda.hpp"
#include "custream/stream.hpp"
#include "custream/stream_ref.hpp"

namespace custream {

namespace detail {
/// The engine behind a Completions (lib/completions/engine.hpp).
class CompletionEngine;
}  // namespace detail

/// Where the callbacks of a Completions run.
enum class CompletionDelivery : unsigned char {
  /// On the engine's completion thread (never the driver's host-function thread), in
  /// registration order per stream.
  thread,
  /// On the thread that calls Completions::run_ready(), which the engine signals through a
  /// Linux eventfd (Completions::eventfd()): for epoll, io_uring, Asio and libuv loops.
  caller,
};

/// How a Completions learns that a stream reached a registration.
enum class CompletionMechanism : unsigned char {
  /// `event` on every device: measured on an H200, it costs the enqueueing thread and the GPU
  /// least (docs/performance.md, "Completion notifications").
  automatic,
  /// Each registration records an event on the stream (cuEventRecord); the watcher queries the
  /// pending events (cuEventQuery). Works for every stream.
  event,
  /// Each registration has the stream write a word of host-mapped memory
  /// (cuStreamWriteValue64); the watcher reads the words with plain loads, making no driver
  /// calls while it watches. Sees completion sooner, but enqueueing the write costs the
  /// registering thread more and the stream holds the next kernel back longer (measured on an
  /// H200: docs/performance.md). Used for streams of primary contexts on devices with
  /// 64-bit stream memory operations and unified addressing; other streams (a created or
  /// green context's, a special handle) use events. A stream whose work fails never writes its
  /// word:
  /// the watcher asks the driver for the context's error once a word has waited `spin`, and
  /// completes that device's word-waiting registrations with it.
  memory_write,
};

/// How a Completions watches.
struct CompletionOptions {
  /// Where callbacks run.
  CompletionDelivery delivery = CompletionDelivery::thread;
  /// How completion is seen.
  CompletionMechanism mechanism = CompletionMechanism::automatic;
  /// How long the watcher spins on pending work without seeing any completion before it backs
  /// off (to sleeps growing from 50 µs to 1 ms); with nothing pending it sleeps (after
  /// `linger`) until a registration wakes it, using no CPU. An event is first asked a
  /// microsecond after the watcher took its registration (asking sooner costs the thread that
  /// just recorded it); the watcher spins through that microsecond whatever `spin`.
  std::chrono::microseconds spin{2000};
  /// While spinning, how long the watcher waits between two passes over the pending events
  /// that found none complete (without driver calls): longer leaves the driver more to the
  /// threads that enqueue, at the cost of as much latency. The pauses grow to it from a
  /// microsecond after new work or a completion (doubling each pass that finds nothing), so
  /// work already done when registered is told without waiting an interval; a pause over
  /// 50 µs is a sleep that a registration or the destructor ends.
  std::chrono::nanoseconds poll_interval{500};
  /// Whether the watcher, before it sleeps with nothing pending, may make every running thread
  /// of the process pass a memory barrier (Linux `membarrier`, an interrupt to each CPU running
  /// one of its threads), so that the thread owning the engine's ring registers without a
  /// fence. false: no such interrupts; that thread makes a full fence per registration instead
  /// (as it does where `membarrier` is unavailable).
  bool process_barrier = true;
  /// How long the watcher keeps looking for new registrations after its last completion before
  /// it sleeps (busy, without driver calls, a pass every `poll_interval`; not before the first
  /// completion). 0, the default: it sleeps as soon as nothing is pending, and the next
  /// registration wakes it with a system call, which costs that registration microseconds and
  /// its notification the watcher's wake-up (tens of microseconds on a virtual machine;
  /// docs/performance.md). A registration within `linger` of the last completion is taken
  /// without either, and spun on for `spin` from then, at the cost of a core kept busy that
  /// long after each completion; its passes also read the registration stack (when several
  /// threads register) every time. `spin`, `poll_interval` and `linger` count up to a day.
  std::chrono::microseconds linger{0};
};

/// Tells you when the work enqueued so far on a stream is done, without putting a host node
/// in the stream: each registration records an event on the stream (between two kernels on an
/// H200 it adds no measurable gap, a host function tens of microseconds), and a watcher thread
/// of custream's queries the pending events, spinning while any is pending, so a callback
/// starts a few microseconds after the work ends instead of the tens of microseconds of the
/// driver's host-function thread (docs/performance.md has the measured figures).
///
/// @code
/// custream::Completions& done = custream::Completions::standard();
/// kernel.launch(stream, grid, block, 0, args...);
/// done.when_done(stream, [&] { publish(result); });        // on custream's completion thread
/// std::future<void> ready = done.future(stream);           // or a future
/// @endcode
///
/// Callbacks take nothing, or the stream's result (`void(CUresult)`): CUDA_SUCCESS, or the
/// driver's error when the stream's work failed (a sticky error). A callback that takes nothing
/// is not run after a failure; the error goes to the host-function error handler instead, as
/// does anything a callback throws. A future becomes ready, or holds an Error. A callback may
/// register further completions. Each callable is destroyed exactly once, after it ran (or was
/// not run), on the thread that ran it or the completion thread.
///
/// Registration on a capturing stream is refused (the notification would be a node of the
/// graph, not of this launch): register after `graph.launch(stream)`, or put a host function in
/// the graph. Destroying a Completions waits for every pending registration and runs it (on the
/// destroying thread for CompletionDelivery::caller, also what those callbacks register, and
/// also when destroyed from one of its callbacks), so none is lost or run twice; a stream may
/// be destroyed with registrations pending (they run when its work is done), and a registration
/// on a Stream of a created or green context keeps that stream and its owned Context until it
/// ran. fork(): in the child, a Completions made before the fork has no watcher thread (and the
/// child's driver is unusable): it refuses registrations (Error, CUDA_ERROR_NOT_PERMITTED), and
/// destroying it abandons what was pending, without waiting.
/// Thread-safe: any thread may register. The first thread to register hands its registrations
/// to the watcher on a ring of its own, with plain stores; with thread delivery a callable of
/// at most 16 bytes, aligned to at most 8 and moved without throwing, is made in the ring and
/// moved into a task by the watcher (the registering thread allocates nothing for it). Once
/// another thread has registered, every registration goes through a shared lock-free stack,
/// which costs a registering thread more. For the cheapest registrations from several threads,
/// give each its own Completions.
class Completions {
 public:
  /// Starts an engine with its watcher thread. @throws Error (CUDA_ERROR_OPERATING_SYSTEM) when
  /// the thread or the eventfd cannot be made.
  explicit Completions(CompletionOptions options = {});
  /// Waits for every pending registration and runs it (see the class). Never throws.
  ~Completions();
  Completions(const Completions&) = delete;
  Completions& operator=(const Completions&) = delete;

  /// The process-wide engine (thread delivery), made on first use and never destroyed; at
  /// process exit (an atexit handler) its watcher stops, and registrations still pending are
  /// abandoned (neither run nor destroyed: their work may still be running). A callback may
  /// call exit(). Registrations after that handler ran (a later atexit handler, a static
  /// object's destructor) throw Error (CUDA_ERROR_DEINITIALIZED) rather than never complete.
  static Completions& standard();

  /// Calls `callback` (`void()` or `void(CUresult)`) once the work enqueued so far on `stream`
  /// is done. One cuEventRecord (or cuStreamWriteValue64, see CompletionMechanism) on the
  /// stream, in the stream's context (or the current one for a special handle).
  /// @throws Error (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) saying what to do when the stream
  /// captures (also a capture begun by foreign code); Error naming the stream when the driver
  /// refuses the record or the write, or (CUDA_ERROR_INVALID_CONTEXT) when a special handle has no
  /// current context; Error (CUDA_ERROR_NOT_PERMITTED) in the child of a fork() for an engine
  /// made before it, (CUDA_ERROR_DEINITIALIZED) on standard() after its exit handler. The
  /// callback is destroyed, not run, when this throws. A StreamRef keeps nothing alive: register
  /// on the Stream (below) to keep a created or green context's stream until the callback ran.
  template <typename F>
  void when_done(const StreamRef& stream, F&& callback) {
    static_assert(
        std::is_invocable_v<std::decay_t<F>&> || std::is_invocable_v<std::decay_t<F>&, CUresult>,
        "a completion callback takes nothing or the stream's CUresult");
    using D = std::decay_t<F>;
    if constexpr (std::is_function_v<std::remove_reference_t<F>>) {
      when_done(stream, static_cast<D>(callback));  // a function: its pointer
    } else if constexpr (detail::fits_inline<D, F&&>) {
      // Made straight into the registering thread's ring where it can be (no task block).
      register_inline(
          stream, detail::InlineOf<D>::ops,
          [](void* storage, void* source) noexcept {
            ::new (storage) D(std::forward<F>(*static_cast<std::remove_reference_t<F>*>(source)));
          },
          const_cast<void*>(static_cast<const void*>(std::addressof(callback))));
    } else {
      register_task(stream, new detail::CompletionTaskOf<F>(std::forward<F>(callback)));
    }
  }

  /// when_done(StreamRef, callback) on a Stream. A Stream of a created or green context is
  /// kept (a copy of it, holding the stream and the Context it owns) until the callback has run
  /// and the registration's event is destroyed, so the Stream and its Context may be dropped
  /// while the registration is pending; a primary context's stream needs nothing kept (its
  /// context is never released, and a stream destroyed with work pending finishes it), and is
  /// registered as a StreamRef is, at the same cost. @throws as when_done(StreamRef, F).
  template <typename F>
  void when_done(const Stream& stream, F&& callback) {
    if (stream.context_kind() == ContextKind::primary) {
      when_done(static_cast<const StreamRef&>(stream), std::forward<F>(callback));
    } else if constexpr (std::is_function_v<std::remove_reference_t<F>>) {
      when_done(stream, static_cast<std::decay_t<F>>(callback));  // a function: its pointer
    } else {
      static_assert(
          std::is_invocable_v<std::decay_t<F>&> || std::is_invocable_v<std::decay_t<F>&, CUresult>,
          "a completion callback takes nothing or the stream's CUresult");
      register_kept(stream, new detail::CompletionTaskOf<F>(std::forward<F>(callback)));
    }
  }

  /// A future that becomes ready once the work enqueued so far on `stream` is done, or holds an
  /// Error naming the stream when it failed. @throws as when_done.
  std::future<void> future(const StreamRef& stream);
  /// future(StreamRef) on a Stream, which the registration keeps as when_done(Stream, F) does.
  /// @throws as when_done.
  std::future<void> future(const Stream& stream);

  /// For CompletionDelivery::caller: a Linux eventfd (non-blocking, close-on-exec, owned by
  /// this object) that is readable while callbacks are ready for run_ready(); -1 with thread
  /// delivery.
  int eventfd() const noexcept;
  /// Runs the callbacks ready so far on this thread (clearing the eventfd) and returns how
  /// many ran; 0 with thread delivery.
  std::size_t run_ready();
  /// Registrations not yet run (pending on the GPU, or ready for run_ready()).
  std::size_t pending() const noexcept;

 private:
  friend detail::CompletionWakes detail::completion_wakes(const Completions& c) noexcept;
  friend std::thread::id detail::completion_thread(const Completions& c) noexcept;
  void register_task(const StreamRef& stream, detail::CompletionTask* task);
  void register_kept(const Stream& stream, detail::CompletionTask* task);
  void register_inline(const StreamRef& stream, const detail::InlineCallableOps& ops,
                       void (*construct)(void* storage, void* source) noexcept, void* source);
  std::unique_ptr<detail::CompletionEngine> engine_;
};

}  // namespace custream

// The completion engine's life: starting the watcher, draining and stopping it, orphaning it
// to its own thread, caller delivery's run_ready() and its frames, and what fork() leaves.
// Contract: engine.hpp. Design: docs/design/completions.md, invariants 4, 6, 7 and 15.
#include "engine.hpp"

#include <fcntl.h>
#include <linux/membarrier.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <system_error>

#include "custream/error.hpp"
#include "fork_safe.hpp"

namespace custream::detail {

namespace {

// Whether this process is registered for membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)
// (Linux 4.14), registering it on first use: the watcher's side of the owner's fence-free
// hand-off (invariant 11).
bool expedited_barrier_registered() noexcept {
  static const bool registered =
      ::syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
  return registered;
}

// Compared with clock differences in nanoseconds: a day at most, so that none overflows (a
// negative one is none).
CompletionOptions clamped(CompletionOptions o) noexcept {
  constexpr std::chrono::microseconds kDay = std::chrono::hours(24);
  o.spin = std::clamp(o.spin, std::chrono::microseconds(0), kDay);
  o.linger = std::clamp(o.linger, std::chrono::microseconds(0), kDay);
  o.poll_interval =
      std::clamp(o.poll_interval, std::chrono::nanoseconds(0), std::chrono::nanoseconds(kDay));
  return o;
}

[[noreturn]] void throw_os_error(const std::string& what) {
  throw Error(CUDA_ERROR_OPERATING_SYSTEM, "custream::Completions", {}, what);
}

}  // namespace

CompletionEngine::CompletionEngine(const CompletionOptions& options)
    : ch_(clamped(options)), owner_(new Ring), watcher_(ch_, owner_.ring()) {
  enlist(this);  // for fork() (invariant 15); taken off again below when this throws
  ch_.read.expedited = options.process_barrier && expedited_barrier_registered();
  if (ch_.read.options.delivery == CompletionDelivery::caller) {
    ch_.fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (ch_.fd < 0) {
      delist(this);
      throw_os_error(std::string("eventfd failed: ") + std::strerror(errno));
    }
  }
  try {
    thread_ = std::thread([this] {
      watcher_.run();
      bool orphaned;
      {
        std::lock_guard<std::mutex> lock(ch_.guarded.mutex);
        orphaned = ch_.guarded.orphaned;
      }
      if (orphaned) delete this;  // the last use of the engine (orphan())
    });
  } catch (const std::system_error& e) {
    delist(this);
    if (ch_.fd >= 0) ::close(ch_.fd);
    throw_os_error(std::string("cannot start the completion thread: ") + e.what());
  }
}

// Drains (invariant 6): the watcher runs every pending registration, then stops. With caller
// delivery this thread runs them, also those its callbacks register meanwhile, and the rest of
// the run_ready() calls it is inside of (destroyed from a callback). In the child of a fork()
// (invariant 15) there is no watcher: what is pending is abandoned. The rings go with the
// watcher's side (RingReader): the watcher took every record.
CompletionEngine::~CompletionEngine() {
  delist(this);
  if (!forked_) {
    if (ch_.fd >= 0) {
      const std::size_t running = finish_frames();  // their callbacks are not finished yet
      while (pending() > running) {
        if (run_ready() == 0) {
          pollfd p{ch_.fd, POLLIN, 0};
          (void)::poll(&p, 1, 1);  // futures complete without a signal: look again soon
        }
      }
    }
    stop(false);
    for (std::size_t n = run_ready(); n > 0; n = run_ready()) {
    }
    // What the registrations kept goes before the engine (invariant 14).
    while (ch_.kept_releasing.load(std::memory_order_acquire) != 0) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    for (std::size_t d = 0; d < ch_.probes.size(); ++d) {
      if (CUevent e = ch_.probes[d].load(std::memory_order_acquire)) {
        give_back_event(static_cast<int>(d), e);
      }
    }
  }
  if (ch_.fd >= 0) ::close(ch_.fd);
}

// Joins the watcher, except from the watcher itself: a standard() engine's exit handler run by
// exit() in one of its callbacks, which never returns to the watcher (invariant 15; a
// destructor there orphans instead). Nothing to stop in the child of a fork().
void CompletionEngine::stop(bool abandon) noexcept {
  if (forked_) return;
  {
    std::lock_guard<std::mutex> lock(ch_.guarded.mutex);
    ch_.guarded.stop = true;
    ch_.guarded.abandon = abandon;
  }
  ch_.guarded.wake.notify_all();
  if (thread_.joinable() && !on_watcher_thread()) thread_.join();
}

// Registrations from now on are refused, and the watcher stops, abandoning what is pending.
void CompletionEngine::close_at_exit() noexcept {
  close(Closed::exited);
  stop(true);
}

// The watcher goes on with what is pending and then deletes the engine itself, when nothing
// of it is in use (invariant 6).
void CompletionEngine::orphan() noexcept {
  {
    std::lock_guard<std::mutex> lock(ch_.guarded.mutex);
    ch_.guarded.stop = true;
    ch_.guarded.orphaned = true;
  }
  thread_.detach();
}

void CompletionEngine::wake(std::uint64_t sleep) noexcept {
  if (!ch_.sleeps.claim(sleep)) return;
  std::lock_guard<std::mutex> lock(ch_.guarded.mutex);
  ++ch_.guarded.wakes;
  ch_.guarded.wake.notify_one();
}

CompletionWakes CompletionEngine::wakes() {
  std::lock_guard<std::mutex> lock(ch_.guarded.mutex);
  return {static_cast<std::size_t>(ch_.sleeps.count()),
          static_cast<std::size_t>(ch_.guarded.wakes)};
}

// The registration on a closed engine (invariant 15), refused without calling the driver.
void CompletionEngine::refuse_closed(const StreamRef& s) const {
  if (ch_.closed_why.load(std::memory_order_relaxed) == Closed::forked) {
    throw_stream_error(
        CUDA_ERROR_NOT_PERMITTED, "custream::Completions", s,
        "this Completions was made before fork(): the child process has no watcher thread, "
        "and its CUDA driver is unusable after fork (custream refused it without calling the "
        "driver)");
  }
  throw_stream_error(
      CUDA_ERROR_DEINITIALIZED, "custream::Completions", s,
      "the process is exiting: Completions::standard() stopped its watcher at exit, and a "
      "registration now would never be delivered (custream refused it without calling the "
      "driver)");
}

// From now on every registration is refused (on_ring()).
void CompletionEngine::close(Closed why) noexcept {
  ch_.closed_why.store(why, std::memory_order_relaxed);
  ch_.read.owner.store(kClosed, std::memory_order_seq_cst);
}

void CompletionEngine::unlock_after_fork() noexcept {
  release_after_fork(ch_.guarded.mutex, false);
}

}  // namespace custream::detail

// The sleep counter: which sleep of the completion watcher registrations have woken. Internal.
//
// Contract: each sleep has a number, and only its first claim notifies; a late claim never takes
// a newer sleep; a sleep waits once (invariant 4). Design: docs/design/completions.md.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>

namespace custream::detail {

/// The watcher's sleeps, numbered from 1, and the newest one a registration claimed. A
/// registration that finds the watcher asleep claims that sleep's number; only the first claim
/// of a number notifies, so that a burst of registrations into a sleeping watcher makes one
/// wake-up call, not one per registration until the watcher runs. Numbers only grow: a
/// registration that read an older sleep's number (the watcher woke, took its record and fell
/// asleep again meanwhile) claims nothing newer. A claim may come from a registration whose
/// record the watcher took before it began the sleep (the registration stalled between
/// publishing and reading the number): its notification finds nothing new, and a watcher that
/// waited on in the same sleep would leave its number claimed and no later registration would
/// wake it. So a sleep waits once (wait_once()): any notification ends it, and the watcher
/// begins a new one, with a new number, to wait again.
class WatcherSleeps {
 public:
  /// The watcher, under its mutex, before it looks for work a last time: begins its next sleep.
  /// Sequentially consistent, against the registrations' reads.
  void begin() noexcept { asleep_.store(++count_, std::memory_order_seq_cst); }
  /// The watcher, awake again.
  void end() noexcept { asleep_.store(0, std::memory_order_relaxed); }
  /// A registration, after it published: the number of the watcher's sleep, 0 while it is awake.
  std::uint64_t current(std::memory_order order) const noexcept { return asleep_.load(order); }
  /// A registration that read `sleep` (nonzero): true when it is the first to claim that sleep
  /// and must notify the watcher (under the watcher's mutex); false when another registration
  /// claimed it, or a newer sleep was claimed (then `sleep` is over).
  bool claim(std::uint64_t sleep) noexcept {
    std::uint64_t claimed = claimed_.load(std::memory_order_relaxed);
    do {
      if (claimed >= sleep) return false;
    } while (!claimed_.compare_exchange_weak(claimed, sleep, std::memory_order_relaxed));
    return true;
  }
  /// The watcher's wait in a sleep it began, holding `lock`: until a notification, `timeout`
  /// (when given) or a spurious wake-up, unless `ready()` already holds. Returns `ready()`.
  /// Never waits a second time: the caller begins a new sleep for that.
  template <typename Ready>
  static bool wait_once(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                        std::optional<std::chrono::microseconds> timeout, Ready&& ready) {
    if (ready()) return true;
    if (timeout) {
      (void)cv.wait_for(lock, *timeout);
    } else {
      cv.wait(lock);
    }
    return ready();
  }
  /// The sleeps begun so far (the watcher, or under its mutex).
  std::uint64_t count() const noexcept { return count_; }

 private:
  std::atomic<std::uint64_t> asleep_{0};   // read by every registration
  std::atomic<std::uint64_t> claimed_{0};  // written once a sleep
  std::uint64_t count_ = 0;                // the watcher's
};

}  // namespace custream::detail

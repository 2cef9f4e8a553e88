// Which sleep of the completion watcher registrations have woken. Internal.
// Design: docs/design/completions.md, invariant 4.
#pragma once

#include <atomic>
#include <cstdint>

namespace custream::detail {

/// The watcher's sleeps, numbered from 1, and the newest one a registration claimed. A
/// registration that finds the watcher asleep claims that sleep's number; only the first claim
/// of a number notifies, so that a burst of registrations into a sleeping watcher makes one
/// wake-up call, not one per registration until the watcher runs. Numbers only grow: a
/// registration that read an older sleep's number (the watcher woke, took its record and fell
/// asleep again meanwhile) claims nothing newer, and the sleep after it is still woken by the
/// next registration that finds it.
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
  /// The sleeps begun so far (the watcher, or under its mutex).
  std::uint64_t count() const noexcept { return count_; }

 private:
  std::atomic<std::uint64_t> asleep_{0};   // read by every registration
  std::atomic<std::uint64_t> claimed_{0};  // written once a sleep
  std::uint64_t count_ = 0;                // the watcher's
};

}  // namespace custream::detail

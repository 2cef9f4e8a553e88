// The channel: the only state that registering threads and the watcher both touch, grouped so
// that what each side writes often sits on cache lines of its own (invariant 12). Internal to
// the completion engine.
//
// Contract: `read` is written before the first registration and, after it, only when the
// engine is closed (invariant 15) or another thread first registers (`shared`, once); every
// registration reads it. `guarded` is the watcher's lock and what it guards, taken on every
// pass, read by no registration. The sleep numbers, the counts, the incoming stack and the
// devices' probes each sit on lines of their own. The static_asserts below keep the groups
// apart. Design: docs/design/completions.md, invariants 4, 11, 12 and 15.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "custream/completions.hpp"
#include "incoming_stack.hpp"
#include "marks.hpp"
#include "watcher_sleeps.hpp"

#pragma GCC visibility push(hidden)
namespace custream::detail {

/// Why an engine is closed (invariant 15).
enum class Closed : unsigned char { open, forked, exited };
/// The owner of a closed engine: no thread's identity (an address of a thread's byte).
inline constexpr std::uintptr_t kClosed = 1;

/// What every registration reads, on a line that nothing writes after the first registration
/// (invariant 12): the options, and who owns the ring (invariant 11) and whether another
/// thread has registered since (then every registration goes on the stack).
struct alignas(64) ReadMostly {
  explicit ReadMostly(const CompletionOptions& o) noexcept
      : options(o), memory(o.mechanism == CompletionMechanism::memory_write) {}
  CompletionOptions options;
  bool memory;             // CompletionMechanism::memory_write
  bool expedited = false;  // membarrier(PRIVATE_EXPEDITED) serves the watcher
  std::atomic<bool> shared{false};
  std::atomic<std::uintptr_t> owner{0};
};

/// The watcher's lock, taken on every pass, and what it guards: on lines of their own, which
/// no registration reads (invariant 12).
struct alignas(64) WatcherLock {
  std::mutex mutex;
  std::condition_variable wake;
  // Caller delivery: completed, with their results, waiting for run_ready().
  std::vector<std::pair<CompletionTask*, CUresult>> ready;
  bool stop = false;
  bool abandon = false;
  bool orphaned = false;    // destroyed from a callback: the watcher deletes the engine
  std::uint64_t wakes = 0;  // the registrations that woke the watcher
};

/// The state both sides touch.
struct Channel {
  explicit Channel(const CompletionOptions& o) noexcept : read(o) {}
  ReadMostly read;
  WatcherLock guarded;
  // Read by every registration, written by the watcher around its sleeps.
  alignas(64) WatcherSleeps sleeps;
  // Counted apart, on lines of their own: registering threads do not share a cache line with
  // the watcher on every registration.
  alignas(64) std::atomic<std::size_t> registered{0};
  alignas(64) std::atomic<std::size_t> finished{0};
  alignas(64) IncomingStack incoming;  // newest first (lock-free)
  // Every word registration reads its device's probe; the watcher writes the fields above on
  // every pass (invariant 12).
  alignas(64) Probes probes{};
  int fd = -1;  // caller delivery's eventfd
  // Streams kept by registrations that the watcher ran, not yet released (KeptReleaser).
  std::atomic<std::size_t> kept_releasing{0};
  std::atomic<Closed> closed_why{Closed::open};
};

static_assert(sizeof(ReadMostly) == 64 && alignof(ReadMostly) == 64,
              "what every registration reads is one cache line");
static_assert(sizeof(WatcherLock) % 64 == 0 && alignof(WatcherLock) == 64,
              "the watcher's lock and what it guards on lines of their own");
static_assert(sizeof(WatcherSleeps) <= 64 && sizeof(IncomingStack) <= 64,
              "the sleep numbers and the stack's top each fit a line");
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winvalid-offsetof"  // exact with GCC and Clang
static_assert(offsetof(Channel, read) == 0 && offsetof(Channel, guarded) == 64 &&
                  offsetof(Channel, sleeps) == offsetof(Channel, guarded) + sizeof(WatcherLock) &&
                  offsetof(Channel, registered) == offsetof(Channel, sleeps) + 64 &&
                  offsetof(Channel, finished) == offsetof(Channel, registered) + 64 &&
                  offsetof(Channel, incoming) == offsetof(Channel, finished) + 64 &&
                  offsetof(Channel, probes) == offsetof(Channel, incoming) + 64,
              "each group of the channel on cache lines of its own");
#pragma GCC diagnostic pop

}  // namespace custream::detail
#pragma GCC visibility pop

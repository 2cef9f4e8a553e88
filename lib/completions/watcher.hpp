// The watcher: the engine's thread that takes registrations from the owner's ring and the
// incoming stack, queues them per stream, asks whether the streams reached them, and runs (or
// readies) their callbacks. Internal to the completion engine.
//
// Contract: run() is the loop; it returns when the engine stops (after draining what is
// pending, unless abandoned) and never throws: out of memory it loses nothing (invariant 13).
// It reads a registering thread's task and never writes it (8). Its queries leave another
// thread's capture valid (10). It pauses without driver calls between passes, spins for
// `spin` after work, then backs off, and sleeps with nothing pending until a registration
// wakes it (2, 4, 16). Design: docs/design/completions.md.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "channel.hpp"
#include "custream/detail/driver.hpp"
#include "incoming_stack.hpp"
#include "owner_ring.hpp"
#include "task_queue.hpp"

#pragma GCC visibility push(hidden)
namespace custream::detail {

class alignas(64) Watcher {
 public:
  using Clock = std::chrono::steady_clock;
  /// A watcher of `channel`, whose owner's ring begins with `first`.
  Watcher(Channel& channel, Ring* first) noexcept : ch_(channel), ring_(first) {}
  /// The watcher's loop (invariants 2, 4, 9).
  void run() noexcept;

 private:
  // The longest pause between passes that is busy, and the first pause after new work or a
  // completion (invariant 2).
  static constexpr std::chrono::microseconds kBusyPause{50};
  static constexpr std::chrono::nanoseconds kFirstGap{1000};
  // While registrations are pending and none completes, the stack and the ring are read every
  // kTakeEvery passes only (invariant 4).
  static constexpr int kTakeEvery = 4;

  // What a pass completed, given back to the pools after it.
  struct Returned {
    std::vector<std::pair<int, CUevent>> events;  // pooled events, by device
    std::vector<std::uint64_t*> words;
  };
  // The loop's own state, on the watcher's stack (nothing of it is touched across fork()).
  struct State {
    std::unordered_map<CUstream, TaskQueue> queues;
    // What the last pass could not queue (out of memory), ahead of what comes.
    std::vector<CompletionTask*> batch;
    Returned returned;
    Clock::time_point last_progress = Clock::now();
    Clock::time_point last_probe = last_progress;
    // The last completion, where `linger` counts from (none yet: no linger at start).
    std::optional<Clock::time_point> last_completion;
    long backoff_us = 0;
    // The next pause while spinning (invariant 2): from kFirstGap after new work or a
    // completion, doubling with each pass that finds nothing, up to poll_interval.
    std::chrono::nanoseconds gap = kFirstGap;
    int passes_without_taking = 0;
  };
  // What a pass over the queues found.
  struct Pass {
    bool progress = false;
    // When the soonest event left unqueried (taken less than kFresh ago) may be asked.
    std::optional<Clock::time_point> ripens;
  };

  // The loop's steps (watcher.cpp).
  bool stopping(bool* abandon);
  void take_when_due(State& st);
  bool nothing_pending(const State& st) const noexcept;
  void rest(State& st);
  Pass work(State& st);
  void queue_batch(State& st, Clock::time_point now);
  void probe_when_due(State& st, Clock::time_point now);
  void note_progress(State& st, Clock::time_point now) noexcept;
  void spin(State& st, Clock::time_point now, std::optional<Clock::time_point> ripens, bool stop);
  void back_off(State& st, bool stop);
  void take_incoming(std::vector<CompletionTask*>& out);
  bool held_back() const noexcept { return stack_.holds() || ring_.pending(); }
  bool sleep(std::optional<std::chrono::microseconds> timeout, bool stop_ends = true);
  bool pause(Clock::time_point now, Clock::time_point until, bool stopping);

  // Completing (watcher_poll.cpp).
  bool poll(const DriverApi& api, TaskQueue& q, Returned& returned, Clock::time_point now,
            std::optional<Clock::time_point>& ripens);
  void probe(std::unordered_map<CUstream, TaskQueue>& queues, Returned& returned,
             Clock::time_point now);
  bool complete(TaskQueue& q, CUresult r, Returned& returned, Clock::time_point now) noexcept;
  static void give_back(Returned& returned) noexcept;

  Channel& ch_;
  RingReader ring_;
  StackReader stack_;
  bool starved_ = false;  // this pass of the watcher's could not allocate
};

}  // namespace custream::detail
#pragma GCC visibility pop

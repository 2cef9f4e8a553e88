// The watcher's loop, as a sequence of named steps, and its sleeps and pauses.
// Contract: watcher.hpp. Design: docs/design/completions.md, invariants 2, 4, 11, 13 and 16.
#include "watcher.hpp"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include "tasks.hpp"

namespace custream::detail {

namespace {

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

void Watcher::run() noexcept {
  // The watcher's queries are made behind the application's back (invariant 10).
  relax_capture_mode();
  State st;
  for (;;) {
    bool abandon = false;
    const bool stop = stopping(&abandon);
    if (abandon) break;
    starved_ = false;
    take_when_due(st);
    if (nothing_pending(st)) {
      if (stop) break;
      rest(st);
      continue;
    }
    const Pass pass = work(st);
    const Clock::time_point now = Clock::now();
    if (pass.progress) {
      note_progress(st, now);
      continue;
    }
    // Spinning for `spin` after the last completion, and while an event waits to ripen
    // (whatever `spin`: a backoff would hold a registration the driver may have done).
    if (pass.ripens || now - st.last_progress < ch_.read.options.spin) {
      spin(st, now, pass.ripens, stop);
      continue;
    }
    back_off(st, stop);
  }
  give_back(st.returned);
}

bool Watcher::stopping(bool* abandon) {
  std::lock_guard<std::mutex> lock(ch_.guarded.mutex);
  *abandon = ch_.guarded.abandon;
  return ch_.guarded.stop;
}

// `st.batch` keeps what the last pass could not queue (out of memory), ahead of what comes.
// While registrations are pending and none completes, the incoming stack is read every
// kTakeEvery passes only: each read takes its line from the registering threads, whose next
// push then waits for it (invariant 4).
void Watcher::take_when_due(State& st) {
  if (st.queues.empty() || st.passes_without_taking >= kTakeEvery - 1) {
    take_incoming(st.batch);
    st.passes_without_taking = 0;
  } else {
    ++st.passes_without_taking;
  }
}

// Nothing pending, nothing waiting for memory (invariant 13).
bool Watcher::nothing_pending(const State& st) const noexcept {
  return st.queues.empty() && st.batch.empty() && !held_back();
}

// Nothing pending: sleep until a registration, after lingering `linger` past the last
// completion, taking registrations without a wake-up call (invariant 4). What waits for
// memory is retried after the backoff's timed sleeps instead (invariant 13).
void Watcher::rest(State& st) {
  const Clock::time_point idle = Clock::now();
  if (st.last_completion && idle - *st.last_completion < ch_.read.options.linger) {
    // What this takes is spun on for `spin` from then, as after a wake-up.
    st.last_progress = idle;
    st.backoff_us = 0;
    (void)pause(idle, idle + ch_.read.options.poll_interval, false);
    return;
  }
  (void)sleep(std::nullopt);
  st.last_progress = Clock::now();
  st.backoff_us = 0;
}

// One pass over the pending registrations: queues what came, completes what the streams
// reached, probes failed contexts when due, and gives the marks back.
Watcher::Pass Watcher::work(State& st) {
  const Clock::time_point now = Clock::now();
  queue_batch(st, now);
  Pass pass;
  const DriverApi& api = loaded().api;
  for (auto& [key, q] : st.queues) {
    pass.progress = poll(api, q, st.returned, now, pass.ripens) || pass.progress;
  }
  probe_when_due(st, now);
  for (auto it = st.queues.begin(); it != st.queues.end();) {
    it = it->second.empty() ? st.queues.erase(it) : std::next(it);
  }
  give_back(st.returned);
  return pass;
}

void Watcher::queue_batch(State& st, Clock::time_point now) {
  std::size_t queued = 0;
  try {
    for (; queued < st.batch.size(); ++queued)
      st.queues[st.batch[queued]->stream].push(st.batch[queued], now);
  } catch (const std::bad_alloc&) {  // the rest wait, in order, for a later pass
    starved_ = true;
  }
  st.batch.erase(st.batch.begin(), st.batch.begin() + static_cast<std::ptrdiff_t>(queued));
  if (queued > 0) st.gap = kFirstGap;
}

// At most once per `spin`, whatever completes elsewhere (invariant 9).
void Watcher::probe_when_due(State& st, Clock::time_point now) {
  if (!ch_.read.memory || now - st.last_probe < ch_.read.options.spin) return;
  try {
    probe(st.queues, st.returned, now);
    st.last_probe = now;
  } catch (const std::bad_alloc&) {  // asked again on the next pass
    starved_ = true;
  }
}

void Watcher::note_progress(State& st, Clock::time_point now) noexcept {
  st.last_progress = now;
  st.last_completion = now;
  st.backoff_us = 0;
  st.gap = kFirstGap;
  st.passes_without_taking = kTakeEvery;  // the next pass takes what came meanwhile
}

// Between passes a pause without driver calls, so that the queries leave the driver to the
// threads that enqueue; no longer than until an event ripens (invariant 2).
void Watcher::spin(State& st, Clock::time_point now, std::optional<Clock::time_point> ripens,
                   bool stop) {
  const std::chrono::nanoseconds interval = ch_.read.options.poll_interval;
  Clock::time_point until = now + std::min(st.gap, interval);
  st.gap = std::min(2 * st.gap, interval);
  if (ripens && *ripens < until) until = *ripens;
  if (pause(now, until, stop)) st.passes_without_taking = kTakeEvery;
}

// Backing off: sleeps growing to 1 ms; a registration wakes it at once.
void Watcher::back_off(State& st, bool stop) {
  st.backoff_us = st.backoff_us == 0 ? 50 : std::min<long>(st.backoff_us * 2, 1000);
  if (starved_) {
    // Out of memory (invariant 13): what waits on the ring would end a sleep at once.
    std::this_thread::sleep_for(std::chrono::microseconds(st.backoff_us));
  } else if (sleep(std::chrono::microseconds(st.backoff_us), !stop)) {
    st.last_progress = Clock::now();
    st.backoff_us = 0;
  }
  st.passes_without_taking = kTakeEvery;  // after a sleep, take at once
}

// Appends the registrations made since the last call to `out`, in registration order: the
// stack is taken first, then the owner's ring, whose records go before the stack's (a
// registration on the ring never follows one on the stack: invariant 11). Out of memory,
// nothing is lost (invariant 13): what was taken waits for a later pass.
void Watcher::take_incoming(std::vector<CompletionTask*>& out) {
  if (!stack_.gather(ch_.incoming, starved_)) return;
  std::vector<CompletionTask*>& stacked = stack_.waiting();
  // The ring's records go before the stack's tasks: while any is left on the ring, or `out`
  // has no room for the stack's (out of memory), the stack's wait (invariant 11).
  const std::uintptr_t owner = ch_.read.owner.load(std::memory_order_relaxed);
  if (!ring_.take(out, stacked.size(), owner, starved_)) return;
  out.insert(out.end(), stacked.begin(), stacked.end());  // room made by take()
  stacked.clear();
}

// Sleeps until a registration, stop (unless `stop_ends` is false: the watcher is already
// draining), or a notification (at most `timeout` when given); true when there is work or
// stop.
bool Watcher::sleep(std::optional<std::chrono::microseconds> timeout, bool stop_ends) {
  WatcherLock& g = ch_.guarded;
  {
    std::lock_guard<std::mutex> lock(g.mutex);
    ch_.sleeps.begin();
  }
  // Against a registrant's full fence (stack pushes, and the ring without membarrier): the
  // looks below come after the store above in the fences' single order.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  // The ring's owner publishes without a fence (invariant 11): before a sleep that only a
  // registration ends, make every running thread of the process pass a full barrier, so that
  // a record published before it is seen below, and a registration after it sees the sleep.
  // Not before a timed sleep of a millisecond or less (a backoff while work is pending): a
  // wake-up missed there costs at most the sleep, and the interrupts would cost every thread
  // of the process. If the barrier fails, sleep at most a millisecond at a time.
  constexpr std::chrono::microseconds kMs = std::chrono::milliseconds(1);
  if ((!timeout || *timeout > kMs) && ch_.read.expedited &&
      ::syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) != 0) {
    timeout = timeout ? std::min(*timeout, kMs) : kMs;
  }
  std::unique_lock<std::mutex> lock(g.mutex);
  const auto ready = [&] {
    return !ch_.incoming.empty(std::memory_order_seq_cst) || ring_.pending() ||
           (g.stop && stop_ends);
  };
  // One wait a sleep: a notification that finds nothing new ends it too, and the watcher
  // begins a new sleep (a new number) to wait again (invariant 4).
  const bool woken = WatcherSleeps::wait_once(g.wake, lock, timeout, ready);
  ch_.sleeps.end();
  return woken;
}

// Pauses between passes until `until` (invariant 2): busy, without driver calls, when that is
// kBusyPause away or less; else a timed sleep that a registration or stop ends. While
// stopping (draining), a millisecond at most. True when it slept: the next pass takes what
// came.
bool Watcher::pause(Clock::time_point now, Clock::time_point until, bool stopping) {
  if (stopping) until = std::min(until, now + std::chrono::milliseconds(1));
  if (until - now <= kBusyPause) {
    while (Clock::now() < until) cpu_relax();
    return false;
  }
  (void)sleep(std::chrono::ceil<std::chrono::microseconds>(until - now), !stopping);
  return true;
}

}  // namespace custream::detail

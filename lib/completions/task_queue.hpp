// The task queue: the completion watcher's FIFO of one stream's registrations. Internal.
//
// Contract: tasks leave in the order they came (invariant 2); the queue holds pointers and
// times outside the tasks, which it never writes (8); an event is ripe for a query kFresh after
// the watcher took it (2); `head_since` says how long the head has waited (9); `mixed` says
// that more than one thread's registrations are queued. Design: docs/design/completions.md.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <deque>

#include "custream/completions.hpp"

namespace custream::detail {

// A FIFO of tasks held by the watcher, outside the tasks' memory: the watcher only reads a task
// until it runs it, so that the registering thread that reuses the block finds it unshared
// (invariant 8).
struct TaskQueue {
  using Clock = std::chrono::steady_clock;
  // How long an event stays unqueried after the watcher took it (invariant 2): querying an
  // event its thread has just recorded costs that thread the event's driver state.
  static constexpr std::chrono::microseconds kFresh{1};

  struct Entry {
    CompletionTask* task;
    Clock::time_point taken;
  };
  std::deque<Entry> tasks;  // oldest first; `taken` never decreases
  // Registrations of more than one thread are queued: their push order need not be their
  // order in the stream (invariant 2). Cleared when the queue empties.
  bool mixed = false;
  Clock::time_point head_since;  // when the present head became the head (invariant 9)
  CompletionTask* head() const noexcept { return tasks.front().task; }
  CompletionTask* at(std::size_t i) const noexcept { return tasks[i].task; }
  void push(CompletionTask* t, Clock::time_point now) {
    const bool first = tasks.empty();
    const bool other_thread = !first && tasks.back().task->thread != t->thread;
    tasks.push_back({t, now});  // nothing changes when it throws
    if (first) head_since = now;
    if (other_thread) mixed = true;
  }
  CompletionTask* pop(Clock::time_point now) noexcept {
    CompletionTask* t = tasks.front().task;
    tasks.pop_front();
    head_since = now;
    if (tasks.empty()) mixed = false;
    return t;
  }
  // How many tasks, from the head, were taken kFresh or longer before `now`.
  std::size_t ripe(Clock::time_point now) const noexcept {
    const auto first_fresh = std::partition_point(
        tasks.begin(), tasks.end(), [&](const Entry& e) { return now - e.taken >= kFresh; });
    return static_cast<std::size_t>(first_fresh - tasks.begin());
  }
  // When the head may be asked (kFresh after it was taken).
  Clock::time_point head_ripens() const noexcept { return tasks.front().taken + kFresh; }
  bool empty() const noexcept { return tasks.empty(); }
  std::size_t size() const noexcept { return tasks.size(); }
};

}  // namespace custream::detail

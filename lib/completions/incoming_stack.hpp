// The incoming stack: every registration that is not the ring owner's (invariant 11) is pushed
// here, lock-free, newest first; the watcher takes the whole stack with one exchange and
// reverses it (StackReader). Internal to the completion engine.
//
// Contract: push() is one compare-exchange loop (sequentially consistent, against the
// watcher's sleep: invariant 4) and writes only the task's `next`. The reader reads the tasks
// without writing them (8); out of memory, a list taken off the stack waits whole, in
// order, for a later pass (13). Design: docs/design/completions.md, invariants 4, 8, 11, 13.
#pragma once

#include <algorithm>
#include <atomic>
#include <new>
#include <vector>

#include "custream/completions.hpp"

#pragma GCC visibility push(hidden)
namespace custream::detail {

/// The stack's top, on a line of its own (the channel's).
class IncomingStack {
 public:
  /// Pushes `task` (lock-free). Never throws.
  void push(CompletionTask* task) noexcept {
    CompletionTask* head = top_.load(std::memory_order_relaxed);
    do {
      task->next = head;
    } while (!top_.compare_exchange_weak(head, task, std::memory_order_seq_cst,
                                         std::memory_order_relaxed));
  }
  /// Whether anything was pushed and not taken (`order`: relaxed for a look, sequentially
  /// consistent against the registrations' pushes before a sleep).
  bool empty(std::memory_order order) const noexcept { return top_.load(order) == nullptr; }
  /// Takes every task pushed so far, newest first.
  CompletionTask* take_all() noexcept { return top_.exchange(nullptr, std::memory_order_acquire); }
  /// The line a push writes, for a prefetch before the registration's driver calls.
  const void* line() const noexcept { return &top_; }

 private:
  std::atomic<CompletionTask*> top_{nullptr};
};

/// The watcher's side: what it took off the stack and has not yet handed on.
class StackReader {
 public:
  /// Takes the stack into waiting(), in registration order, unless tasks still wait there from
  /// an earlier pass. False (setting `starved`) when there is no room to reverse what it took:
  /// the list then waits whole, and nothing after it may be taken. Watcher only.
  bool gather(IncomingStack& stack, bool& starved) {
    if (!stacked_.empty()) return true;  // those from an earlier pass wait
    if (held_ == nullptr && !stack.empty(std::memory_order_relaxed)) held_ = stack.take_all();
    if (held_ == nullptr) return true;
    std::size_t n = 0;
    for (const CompletionTask* t = held_; t != nullptr; t = t->next) ++n;
    try {
      stacked_.reserve(n);
    } catch (const std::bad_alloc&) {
      starved = true;
      return false;  // the ring waits too: its records go before these tasks
    }
    for (CompletionTask* t = held_; t != nullptr; t = t->next) {
      stacked_.push_back(t);  // the stack is newest first
    }
    held_ = nullptr;
    std::reverse(stacked_.begin(), stacked_.end());
    return true;
  }
  /// The tasks taken off the stack, oldest first, not yet handed on.
  std::vector<CompletionTask*>& waiting() noexcept { return stacked_; }
  /// Whether tasks wait here (taken off the stack but not handed on: invariant 13).
  bool holds() const noexcept { return held_ != nullptr || !stacked_.empty(); }

 private:
  // Taken off the stack, in registration order, not yet handed to the watch loop (out of
  // memory: invariant 13); otherwise empty between passes.
  std::vector<CompletionTask*> stacked_;
  CompletionTask* held_ = nullptr;  // a list taken off the stack that stacked_ had no room for
};

}  // namespace custream::detail
#pragma GCC visibility pop

// TaskPtr: owns a task (a host function's HostTask, a completion's CompletionTask) until it is
// handed on, and releases it unrun when the hand-over throws. Shared by the host-function
// layer and the completion engine.
//
// Contract: a task family provides `void release_task(Task*) noexcept` in the task's namespace
// (found by argument-dependent lookup), which destroys the task without running it and frees
// what the task keeps; it never throws and never reports.
#pragma once

#include <memory>

namespace custream::detail {

/// Calls the family's release_task() on the task it is given.
template <typename Task>
struct TaskRelease {
  void operator()(Task* task) const noexcept { release_task(task); }
};

/// A task owned until `release()` hands it on.
template <typename Task>
using TaskPtr = std::unique_ptr<Task, TaskRelease<Task>>;

}  // namespace custream::detail

// The life of a registration's task after it was handed on: run once with the stream's result
// (its exceptions to the host-function error handler), destroyed once, and what it keeps (a
// created context's event, a copy of its Stream) released after it. Internal to the completion
// engine.
//
// Contract: run_task() and finish_task() never throw. finish_task() destroys the task, then
// its event, then its kept Stream, so that an owned context goes last (invariant 14); with
// `releasing` (the watcher's engine's count) the Stream is released on the KeptReleaser's
// thread, never the watcher's. relax_capture_mode() is for custream's own threads that call the
// driver behind the application's back (invariant 10). Design: docs/design/completions.md,
// invariants 5, 6, 10 and 14.
#pragma once

#include <atomic>
#include <cstddef>

#include "custream/completions.hpp"
#include "support/task_ptr.hpp"

#pragma GCC visibility push(hidden)
namespace custream::detail {

/// Destroys `task` (run, or not to be run), then what it keeps (invariant 14).
void finish_task(CompletionTask* task, std::atomic<std::size_t>* releasing = nullptr) noexcept;

/// A task released unrun (TaskPtr): finish_task().
inline void release_task(CompletionTask* task) noexcept { finish_task(task); }

/// Runs `task` with `result`, reporting what it throws (invariant 5), then destroys it
/// (`releasing`: see finish_task()).
void run_task(CompletionTask* task, CUresult result,
              std::atomic<std::size_t>* releasing = nullptr) noexcept;

/// Sets this thread's stream-capture mode to relaxed (invariant 10). Never throws.
void relax_capture_mode() noexcept;

/// fork() (invariant 15): the KeptReleaser's mutex, held by the forking thread across it; the
/// child has no releaser thread, and what was queued is the parent's (abandoned there).
void lock_kept_releaser_for_fork();
void unlock_kept_releaser_after_fork(bool child) noexcept;

}  // namespace custream::detail
#pragma GCC visibility pop

// Running and finishing registrations' tasks, and the KeptReleaser thread that releases the
// Streams registrations kept. Contract: tasks.hpp. Design: docs/design/completions.md,
// invariants 5, 10 and 14.
#include "tasks.hpp"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

#include "driver.hpp"
#include "fork_safe.hpp"
#include "host_function.hpp"

namespace custream::detail {

namespace {

// The Streams that registrations kept (invariant 14), released on a thread of their own when
// the watcher is done with them: the last release of a created or green context waits for the
// context's work (cuCtxDestroy, or the drain before a green context is kept), which on the
// watcher would hold back every other registration of its engine, and wait forever for work
// that waits on one of them. Started on first use, never stopped (it waits, using no CPU);
// what it has not released at exit is abandoned with the process.
class KeptReleaser {
 public:
  static KeptReleaser& instance() {
    static auto* releaser = new KeptReleaser;  // never destroyed: its thread may outlive statics
    return *releaser;
  }
  // Releases `keep` on the releaser's thread, counting it in `releasing` until it is released;
  // here when it cannot be handed on (no thread or no memory).
  void release(Stream* keep, std::atomic<std::size_t>& releasing) noexcept {
    try {
      std::unique_lock<std::mutex> lock(mutex_);
      if (!started_) {
        std::thread([this] { run(); }).detach();
        started_ = true;
      }
      queue_.emplace_back(keep, &releasing);
      releasing.fetch_add(1, std::memory_order_relaxed);
      lock.unlock();
      ready_.notify_one();
      return;
    } catch (...) {
    }
    delete keep;
  }
  void lock_for_fork() { mutex_.lock(); }
  void unlock_after_fork(bool child) noexcept {
    release_after_fork(mutex_, child);
    if (!child) return;
    ::new (&ready_) std::condition_variable();
    // The parent's copies: leaked, never released here.
    ::new (&queue_) std::deque<std::pair<Stream*, std::atomic<std::size_t>*>>();
    started_ = false;
  }

 private:
  [[noreturn]] void run() noexcept {
    relax_capture_mode();  // a context's release may synchronize it
    for (;;) {
      std::pair<Stream*, std::atomic<std::size_t>*> item;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        ready_.wait(lock, [this] { return !queue_.empty(); });
        item = queue_.front();
        queue_.pop_front();
      }
      delete item.first;
      item.second->fetch_sub(1, std::memory_order_release);  // its engine may go now
    }
  }
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::pair<Stream*, std::atomic<std::size_t>*>> queue_;
  bool started_ = false;
};

}  // namespace

// In the default (global) capture mode a thread's capture-unsafe calls (queries,
// cuCtxSynchronize) would be refused, and would invalidate the capture, while another thread
// captures in global mode (invariant 10). A driver without the entry (before 10.1) has no
// capture modes; a failure leaves the thread in global mode.
void relax_capture_mode() noexcept {
  if (const auto exchange = loaded().api.cuThreadExchangeStreamCaptureMode) {
    CUstreamCaptureMode relaxed = CU_STREAM_CAPTURE_MODE_RELAXED;
    (void)exchange(&relaxed);  // raw: a thread's own setting, no error to report
  }
}

void finish_task(CompletionTask* task, std::atomic<std::size_t>* releasing) noexcept {
  Stream* const keep = task->keep;
  const CUevent event =
      keep != nullptr && task->word == nullptr && !task->pooled ? task->event : nullptr;
  task->destroy(task);
  if (keep == nullptr) return;
  if (event != nullptr) release_call<&DriverApi::cuEventDestroy>("event", event, event);
  if (releasing != nullptr) {
    KeptReleaser::instance().release(keep, *releasing);
  } else {
    delete keep;
  }
}

void run_task(CompletionTask* task, CUresult result, std::atomic<std::size_t>* releasing) noexcept {
  try {
    task->invoke(task, result);
  } catch (...) {
    report_host_function_error(
        HostFunctionError{task->view, std::current_exception(), false, /*completion=*/true});
  }
  finish_task(task, releasing);
}

void lock_kept_releaser_for_fork() { KeptReleaser::instance().lock_for_fork(); }
void unlock_kept_releaser_after_fork(bool child) noexcept {
  KeptReleaser::instance().unlock_after_fork(child);
}

}  // namespace custream::detail

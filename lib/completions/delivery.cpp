// Caller delivery (CompletionDelivery::caller): run_ready() runs the callbacks the watcher
// readied, from a frame on the calling thread's list, so that the engine's destructor, called
// from one of them, runs the rest in order and tells the frame the engine is gone; and what a
// fork() child makes of the ready list and the eventfd. Contract: engine.hpp.
// Design: docs/design/completions.md, invariants 6, 7 and 15.
#include <fcntl.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <utility>
#include <vector>

#include "engine.hpp"
#include "fork_safe.hpp"

namespace custream::detail {

namespace {

// A run_ready() in progress on this thread: the batch it took and how far it got, on a list of
// this thread's (innermost first) that the engine's destructor reads (invariant 6).
struct RunFrame {
  explicit RunFrame(CompletionEngine* e) noexcept : engine(e), outer(t_innermost) {
    t_innermost = this;
  }
  ~RunFrame() { t_innermost = outer; }
  RunFrame(const RunFrame&) = delete;
  RunFrame& operator=(const RunFrame&) = delete;
  static RunFrame* innermost() noexcept { return t_innermost; }

  CompletionEngine* const engine;
  RunFrame* const outer;
  std::vector<std::pair<CompletionTask*, CUresult>> batch;
  std::size_t next = 0;  // the next to run
  bool gone = false;     // the engine was destroyed, and ran the rest of the batch

 private:
  static thread_local RunFrame* t_innermost;
};
thread_local RunFrame* RunFrame::t_innermost = nullptr;

}  // namespace

std::size_t CompletionEngine::run_ready() {
  if (ch_.fd < 0) return 0;
  std::uint64_t count = 0;
  (void)!::read(ch_.fd, &count, sizeof count);  // clears it; EAGAIN when nothing was signalled
  RunFrame frame(this);
  {
    std::lock_guard<std::mutex> lock(ch_.guarded.mutex);
    frame.batch.swap(ch_.guarded.ready);
  }
  std::size_t ran = 0;
  while (frame.next < frame.batch.size()) {
    const auto [task, result] = frame.batch[frame.next++];
    run_task(task, result);
    ++ran;
    if (frame.gone) break;  // the callback destroyed the engine, which ran the rest
    ch_.finished.fetch_add(1, std::memory_order_release);
  }
  return ran;
}

// Runs the rest of each run_ready() of this engine that this thread is inside of, the oldest
// first, and marks them gone. Returns how many there were: each is running a callback, not yet
// counted as finished.
std::size_t CompletionEngine::finish_frames() noexcept {
  std::size_t running = 0;
  for (;;) {
    RunFrame* oldest = nullptr;
    for (RunFrame* f = RunFrame::innermost(); f != nullptr; f = f->outer) {
      if (f->engine == this && !f->gone) oldest = f;
    }
    if (oldest == nullptr) return running;
    while (oldest->next < oldest->batch.size()) {
      const auto [task, result] = oldest->batch[oldest->next++];
      run_task(task, result);
      ch_.finished.fetch_add(1, std::memory_order_release);
    }
    oldest->gone = true;
    ++running;
  }
}

// In the child: the engine has no watcher (fork copies the forking thread only); its mutex and
// condition variable are made anew (the watcher may have been waiting on it: destroying it
// would wait for that waiter), its thread forgotten, and registrations refused. Caller
// delivery: the ready list and the eventfd are the parent's too (the child would clear the
// parent's signal and run what the parent runs): the list is forgotten (leaked) and the
// child's descriptor made a new eventfd; a run_ready() this thread is inside of stops after
// its callback (its frame gone), so a callback that forks and destroys the engine in the child
// leaves nothing that touches it.
void CompletionEngine::become_forked_child() noexcept {
  WatcherLock& g = ch_.guarded;
  release_after_fork(g.mutex, true);
  ::new (&g.wake) std::condition_variable();
  ::new (&thread_) std::thread();
  ::new (&g.ready) std::vector<std::pair<CompletionTask*, CUresult>>();
  if (ch_.fd >= 0) {
    const int fresh = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (fresh < 0 || ::dup3(fresh, ch_.fd, O_CLOEXEC) < 0) {
      ::close(ch_.fd);  // no eventfd of its own: none (run_ready() then runs nothing)
      ch_.fd = -1;
    }
    if (fresh >= 0) ::close(fresh);
  }
  for (RunFrame* f = RunFrame::innermost(); f != nullptr; f = f->outer) {
    if (f->engine == this) f->gone = true;
  }
  forked_ = true;
  close(Closed::forked);
}

}  // namespace custream::detail

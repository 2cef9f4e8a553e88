// custream's releasing thread: a queue of releases and the one thread that runs them. Contract
// on top of releaser.hpp.
#include "releaser.hpp"

#include <pthread.h>

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "custream/testing.hpp"
#include "fork_safe.hpp"

namespace custream::detail {
namespace {

struct Releaser {
  std::mutex mutex;
  std::condition_variable work;  // a release was queued
  std::condition_variable done;  // a batch was released
  std::vector<std::function<void()>> queue;
  std::uint64_t queued = 0;
  std::uint64_t released = 0;
  bool started = false;
};

// Never destroyed: a late callback may still hand over a release during static destruction.
Releaser& releaser() {
  static auto* r = new Releaser;
  return *r;
}

std::mutex& releaser_mutex() { return releaser().mutex; }

// The child of a fork() has no releasing thread: it starts one if it needs one, and drops (never
// runs) the parent's queue.
void forget_in_child() noexcept {
  Releaser& r = releaser();
  // The parent's queue and condition variables (its thread may have waited on them), leaked.
  ::new (&r.queue) std::vector<std::function<void()>>();
  ::new (&r.work) std::condition_variable();
  ::new (&r.done) std::condition_variable();
  r.started = false;
  r.released = r.queued;
}

[[noreturn]] void run(Releaser* r) {
  std::vector<std::function<void()>> batch;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(r->mutex);
      r->work.wait(lock, [r] { return !r->queue.empty(); });
      batch.swap(r->queue);
    }
    for (auto& release : batch) release();
    const std::uint64_t n = batch.size();
    batch.clear();
    {
      std::lock_guard<std::mutex> lock(r->mutex);
      r->released += n;
    }
    r->done.notify_all();
  }
}

}  // namespace

void release_later(std::function<void()> release) noexcept {
  Releaser& r = releaser();
  try {
    guard_across_fork<releaser_mutex>();  // fork_safe.hpp
    static std::once_flag once;
    std::call_once(once, [] { (void)::pthread_atfork(nullptr, nullptr, forget_in_child); });
    std::lock_guard<std::mutex> lock(r.mutex);
    if (!r.started) {
      std::thread(run, &r).detach();  // process lifetime
      r.started = true;
    }
    r.queue.push_back(std::move(release));
    ++r.queued;
  } catch (...) {  // no thread or no memory: released here (a driver refusal is reported)
    if (release) release();
    return;
  }
  r.work.notify_one();
}

bool wait_released(std::chrono::milliseconds timeout) noexcept {
  Releaser& r = releaser();
  std::unique_lock<std::mutex> lock(r.mutex);
  const std::uint64_t target = r.queued;
  return r.done.wait_for(lock, timeout, [&] { return r.released >= target; });
}

}  // namespace custream::detail

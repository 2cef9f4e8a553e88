// The engines of the process and what fork() must find unlocked in the child: every engine's
// mutex, the mark pools', the KeptReleaser's, taken by the forking thread before fork and let
// go after it in both processes; in the child each engine becomes forked. Contract: engine.hpp
// (enlist, delist). Design: docs/design/completions.md, invariant 15.
#include <pthread.h>

#include <algorithm>
#include <mutex>
#include <new>
#include <vector>

#include "engine.hpp"
#include "fork_safe.hpp"

namespace custream::detail {

namespace {

struct EngineList {
  std::mutex mutex;
  std::vector<CompletionEngine*> engines;
};
EngineList& engine_list() {
  static auto* list = new EngineList;  // never destroyed: engines may outlive static objects
  return *list;
}

void before_fork() noexcept {
  engine_list().mutex.lock();
  for (CompletionEngine* e : engine_list().engines) e->lock_for_fork();
  lock_mark_pools_for_fork();
  lock_kept_releaser_for_fork();
}

void after_fork_in_parent() noexcept {
  unlock_kept_releaser_after_fork(false);
  unlock_mark_pools_after_fork(false);
  for (CompletionEngine* e : engine_list().engines) e->unlock_after_fork();
  release_after_fork(engine_list().mutex, false);
}

void after_fork_in_child() noexcept {
  unlock_kept_releaser_after_fork(true);
  unlock_mark_pools_after_fork(true);
  for (CompletionEngine* e : engine_list().engines) e->become_forked_child();
  release_after_fork(engine_list().mutex, true);
}

}  // namespace

void enlist(CompletionEngine* engine) {
  static std::once_flag once;
  std::call_once(once, [] {
    if (::pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child) != 0) {
      throw std::bad_alloc();  // ENOMEM, its only error
    }
  });
  std::lock_guard<std::mutex> lock(engine_list().mutex);
  engine_list().engines.push_back(engine);
}

void delist(CompletionEngine* engine) noexcept {
  try {
    std::lock_guard<std::mutex> lock(engine_list().mutex);
    auto& v = engine_list().engines;
    v.erase(std::remove(v.begin(), v.end(), engine), v.end());
  } catch (...) {
  }
}

}  // namespace custream::detail

// A process-wide mutex that the child of a fork() finds usable: the forking thread holds it
// across fork(), and the child makes it anew (another thread of the parent may have held it,
// and the child has no such thread to let it go). For the never-destroyed tables of names and
// kept green contexts; the completion engines do the same for theirs (completions.md,
// invariant 15).
#pragma once

#include <pthread.h>

#include <mutex>
#include <new>

namespace custream::detail {

/// After fork(), a mutex the forking thread held across it: let go in the parent, made anew in
/// the child (whose other threads are gone). Never throws.
inline void release_after_fork(std::mutex& mutex, bool child) noexcept {
  if (child) {
    ::new (&mutex) std::mutex();
  } else {
    mutex.unlock();
  }
}

/// Registers the fork handlers of the mutex `Get()` returns, once. Call it where the mutex's
/// owner is first made. Never throws (without memory for the handlers, a child may find the
/// mutex held, as before).
template <std::mutex& (*Get)()>
void guard_across_fork() noexcept {
  static std::once_flag once;
  try {
    std::call_once(once, [] {
      (void)::pthread_atfork([] { Get().lock(); }, [] { release_after_fork(Get(), false); },
                             [] { release_after_fork(Get(), true); });
    });
  } catch (...) {
  }
}

}  // namespace custream::detail

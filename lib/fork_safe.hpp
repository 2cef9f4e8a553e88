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

/// Registers the fork handlers of the mutex `Get()` returns, once. Call it where the mutex's
/// owner is first made. Never throws (without memory for the handlers, a child may find the
/// mutex held, as before).
template <std::mutex& (*Get)()>
void guard_across_fork() noexcept {
  static std::once_flag once;
  try {
    std::call_once(once, [] {
      (void)::pthread_atfork([] { Get().lock(); }, [] { Get().unlock(); },
                             [] { ::new (&Get()) std::mutex(); });
    });
  } catch (...) {
  }
}

}  // namespace custream::detail

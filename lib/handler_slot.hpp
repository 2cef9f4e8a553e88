// A process-wide, replaceable handler (host-function errors, release errors). Internal.
// Design: docs/design/error_handlers.md.
#pragma once

#include <cstdio>
#include <mutex>
#include <utility>

namespace custream::detail {

/// One replaceable handler of type `Handler` (a std::function); an empty one means the
/// default. One slot per `Handler` type, leaked (invariant 1).
template <typename Handler>
class HandlerSlot {
 public:
  static HandlerSlot& instance() {
    static HandlerSlot* slot = new HandlerSlot;  // leaked on purpose
    return *slot;
  }
  /// Installs `handler`; returns the previous one.
  Handler exchange(Handler handler) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::swap(handler_, handler);
    return handler;
  }
  /// Calls the installed handler, or `fallback` when none is, with `args` (invariant 2).
  template <typename Fallback, typename... Args>
  void report(Fallback fallback, const Args&... args) noexcept {
    try {
      Handler handler;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        handler = handler_;
      }
      if (handler) {
        handler(args...);
      } else {
        fallback(args...);
      }
    } catch (...) {
      std::fputs("custream: an error handler threw; exception dropped\n", stderr);
    }
  }

 private:
  HandlerSlot() = default;
  std::mutex mutex_;
  Handler handler_;
};

}  // namespace custream::detail

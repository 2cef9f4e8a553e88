/// @file
/// custream::StreamScope: `with stream:` for C++.
#pragma once

#include "custream/detail/current_streams.hpp"
#include "custream/stream.hpp"

namespace custream {

/// Makes a stream the current stream of its device in this thread for the scope, and on exit
/// restores whatever was current before, also a stream selected with Stream::use() (CuPy
/// #8377 lost it).
///
/// The scope holds a reference to the stream, so the current stream stays valid whatever
/// happens to the variable it was made from (reassigned or destroyed inside the scope). A
/// temporary is still refused at compile time: `StreamScope s(Stream(true));` is almost
/// always a mistake. Enter + exit cost one cuCtxGetCurrent, plus one atomic increment and
/// decrement for a stream custream created (none for wrapped and special streams).
class StreamScope {
 public:
  /// Makes `stream` current. @throws Error when its device is not the current device
  /// (naming both).
  explicit StreamScope(const Stream& stream)
      : device_(stream.device_for_use("custream::StreamScope")) {
    Stream& slot = detail::current_slot(device_);
    previous_ = std::move(slot);
    slot = stream;  // counted: the variable `stream` may be reassigned inside the scope
  }
  /// Refused: the scope would outlive a temporary stream.
  explicit StreamScope(Stream&&) = delete;
  /// Restores the previous current stream. Never throws.
  ~StreamScope() { detail::current_slot(device_) = std::move(previous_); }

  StreamScope(const StreamScope&) = delete;
  StreamScope& operator=(const StreamScope&) = delete;

 private:
  int device_;
  Stream previous_;
};

}  // namespace custream

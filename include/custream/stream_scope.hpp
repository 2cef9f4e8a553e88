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
/// The scope borrows the stream (no atomic operation), and the current stream stays valid
/// whatever this thread does with the variable it was made from: a reference dropped in this
/// thread while the scope runs (the variable reassigned or destroyed) moves into the scope's
/// entry instead of destroying the stream. A temporary is refused at compile time. Copies
/// taken with current_stream() inside the scope are full references. Enter + exit cost one
/// cuCtxGetCurrent and no atomic operation.
class StreamScope {
 public:
  /// Makes `stream` current. @throws Error when its device is not the current device
  /// (naming both).
  explicit StreamScope(const Stream& stream)
      : device_(stream.device_for_use("custream::StreamScope")) {
    Stream& slot = detail::current_slot(device_);
    previous_ = std::move(slot);
    slot.borrow(stream);  // see detail::release(): a reference dropped meanwhile moves here
  }
  /// Refused: the scope would outlive a temporary stream.
  explicit StreamScope(Stream&&) = delete;
  /// Restores the previous current stream. Never throws.
  ~StreamScope() { detail::current_slot(device_).restore(std::move(previous_)); }

  StreamScope(const StreamScope&) = delete;
  StreamScope& operator=(const StreamScope&) = delete;

 private:
  int device_;
  Stream previous_;
};

}  // namespace custream

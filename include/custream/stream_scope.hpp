/// @file
/// custream::StreamScope: `with stream:` for C++.
#pragma once

#include "custream/stream.hpp"

namespace custream {

/// Makes a stream the current stream of its device in this thread for the scope, and on exit
/// restores whatever was current before, also a stream selected with Stream::use() (CuPy
/// #8377 lost it). The scope holds a reference, so the stream lives at least as long.
class StreamScope {
 public:
  /// Makes `stream` current. @throws Error when its device is not the current device.
  explicit StreamScope(const Stream& stream);
  /// Restores the previous current stream. Never throws.
  ~StreamScope();

  StreamScope(const StreamScope&) = delete;
  StreamScope& operator=(const StreamScope&) = delete;

 private:
  int device_;
  Stream previous_;
};

}  // namespace custream

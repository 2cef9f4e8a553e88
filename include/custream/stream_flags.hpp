/// @file
/// custream::StreamFlags: how a stream custream creates behaves.
#pragma once

namespace custream {

/// Creation flags of a custream::Stream. A flag enum rather than a `bool`, so that a literal
/// cannot create a non-blocking stream by accident (`Stream s(1)` does not compile).
enum class StreamFlags : unsigned {
  none = 0,          ///< CU_STREAM_DEFAULT: synchronises implicitly with the legacy stream
  non_blocking = 1,  ///< CU_STREAM_NON_BLOCKING: no implicit synchronisation with it
};

}  // namespace custream

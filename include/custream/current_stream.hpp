/// @file
/// The current stream of this thread, per device.
#pragma once

#include "custream/detail/current_streams.hpp"
#include "custream/stream.hpp"

namespace custream {

/// The current stream of this thread for `device_id` (default: the current device). Until
/// changed with Stream::use() or a StreamScope it is the null stream, or the per-thread
/// default stream when the environment has CUSTREAM_PER_THREAD_DEFAULT_STREAM=1.
/// For an explicit device it is a thread-local array read, no driver call.
/// @throws Error (CUDA_ERROR_INVALID_DEVICE) for an ordinal out of range.
inline Stream current_stream(int device_id = -1) {
  // Two thread-local loads once this thread has its array (which implies a loaded driver).
  if (static_cast<unsigned>(device_id) < static_cast<unsigned>(detail::t_current_count)) {
    return detail::t_current_streams[device_id];
  }
  return detail::current_stream_slow(device_id);
}

}  // namespace custream

/// @file
/// The current stream of this thread, per device.
#pragma once

#include "custream/stream.hpp"

namespace custream {

/// The current stream of this thread for `device_id` (default: the current device). Until
/// changed with Stream::use() or a StreamScope it is the null stream, or the per-thread
/// default stream when the environment has CUSTREAM_PER_THREAD_DEFAULT_STREAM=1.
/// @throws Error (CUDA_ERROR_INVALID_DEVICE) for an ordinal out of range.
Stream current_stream(int device_id = -1);

}  // namespace custream

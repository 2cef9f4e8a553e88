/// @file
/// custream::CaptureStatus: whether a stream captures.
#pragma once

#include "custream/detail/cuda.hpp"

namespace custream {

/// A stream's capture status (CUstreamCaptureStatus).
enum class CaptureStatus : int {
  none = CU_STREAM_CAPTURE_STATUS_NONE,      ///< not capturing
  active = CU_STREAM_CAPTURE_STATUS_ACTIVE,  ///< capturing; work is recorded into a graph
  /// the capture was invalidated (by a capture-unsafe call); end_capture() ends it and fails
  invalidated = CU_STREAM_CAPTURE_STATUS_INVALIDATED,
};

}  // namespace custream

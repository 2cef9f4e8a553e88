/// @file
/// custream::CaptureInfo: a stream's capture status and id, as a non-throwing query answers.
#pragma once

#include "custream/detail/cuda.hpp"

#include "custream/capture_status.hpp"

namespace custream {

/// What Stream::capture_info() found. On a failed query `result` is the driver's error
/// (e.g. CUDA_ERROR_STREAM_CAPTURE_IMPLICIT for the legacy stream while a blocking stream
/// captures), `status` is none and `id` is 0.
struct CaptureInfo {
  /// The capture status (none when the query failed).
  CaptureStatus status = CaptureStatus::none;
  /// The driver's unique id of the capture sequence; 0 when not capturing. A stream joined
  /// into another stream's capture (through an event) reports that capture's id.
  unsigned long long id = 0;
  /// CUDA_SUCCESS, or why the status is unknown.
  CUresult result = CUDA_SUCCESS;
};

}  // namespace custream

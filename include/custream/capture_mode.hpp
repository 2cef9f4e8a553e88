/// @file
/// custream::CaptureMode: how a stream capture treats capture-unsafe calls of other threads.
#pragma once

#include "custream/detail/cuda.hpp"

namespace custream {

/// The capture mode of Stream::begin_capture() (CUstreamCaptureMode).
enum class CaptureMode : int {
  /// CU_STREAM_CAPTURE_MODE_GLOBAL: capture-unsafe calls (cuMalloc, synchronisation, …) of
  /// every thread fail while this capture is active (unless that thread is relaxed).
  global = CU_STREAM_CAPTURE_MODE_GLOBAL,
  /// CU_STREAM_CAPTURE_MODE_THREAD_LOCAL: only this thread's unsafe calls are refused.
  thread_local_ = CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
  /// CU_STREAM_CAPTURE_MODE_RELAXED: no call is refused for being capture-unsafe, and the
  /// capture may be ended from another thread. custream's default (CuPy's is global).
  relaxed = CU_STREAM_CAPTURE_MODE_RELAXED,
};

}  // namespace custream

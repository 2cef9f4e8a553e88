/// @file
/// Stream capture: begin_capture, end_capture and the capture-state queries.
#pragma once

#include "custream/capture_info.hpp"
#include "custream/capture_mode.hpp"
#include "custream/graph.hpp"
#include "custream/instantiate_flags.hpp"
#include "custream/stream_ref.hpp"

namespace custream {

/// Begins capturing `stream`'s work into a graph (cuStreamBeginCapture). The null and legacy
/// streams (handles 0 and 1) cannot capture: they are refused before the driver is called.
/// CU_STREAM_PER_THREAD (2) can.
/// @throws Error (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) for handle 0 or 1; Error on a driver
/// failure (e.g. CUDA_ERROR_ILLEGAL_STATE when already capturing).
void begin_capture(StreamRef stream, CaptureMode mode = CaptureMode::relaxed);

/// Ends the capture `stream` began (cuStreamEndCapture) and instantiates the graph with
/// `flags` (by default uploaded on `stream`, so the first launch costs what a repeat launch
/// costs). Afterwards the stream has left capture mode, also on failure.
/// @throws Error naming the driver's error: CUDA_ERROR_ILLEGAL_STATE (not capturing),
/// CUDA_ERROR_STREAM_CAPTURE_UNMATCHED (a joined stream, not the origin),
/// CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, CUDA_ERROR_STREAM_CAPTURE_UNJOINED; an instantiation
/// failure (GraphInstantiateError). Nothing leaks on failure.
Graph end_capture(StreamRef stream, InstantiateFlags flags = InstantiateFlags::upload);

/// True while `stream` captures (also as a stream joined into another stream's capture).
/// Capture-safe (cuStreamGetCaptureInfo).
/// @throws Error (CUDA_ERROR_STREAM_CAPTURE_INVALIDATED) when the capture was invalidated;
/// Error on a driver failure.
bool is_capturing(StreamRef stream);

/// The capture status and id of `stream`, never throwing: a failed query reports its result.
CaptureInfo capture_info(StreamRef stream) noexcept;

/// The id of `stream`'s active or invalidated capture, 0 when not capturing.
/// @throws Error on a driver failure.
unsigned long long capture_id(StreamRef stream);

}  // namespace custream

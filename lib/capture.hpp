// What graph.cpp needs of capture.cpp. Internal. Design: docs/design/capture.md.
#pragma once

#include <cuda.h>

#include "custream/stream_ref.hpp"

namespace custream::detail {

/// Ends the capture `stream` began (cuStreamEndCapture, invariant 5) and returns the graph,
/// which the caller owns. @throws Error as custream::end_capture (nothing leaks).
CUgraph end_capture_graph(StreamRef stream);

}  // namespace custream::detail

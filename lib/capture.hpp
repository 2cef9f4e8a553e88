// What graph.cpp needs of capture.cpp. Internal. Design: docs/design/capture.md.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "custream/stream_ref.hpp"

namespace custream::detail {

/// A graph a capture ended with, and the capture epoch its libraries are held from
/// (libraries.md, invariant 5): the capture's own when custream began it, else kAnyCapture.
struct CapturedGraph {
  CUgraph graph;
  std::uint64_t code_since;
};

/// Ends the capture `stream` began (cuStreamEndCapture, invariant 5) and returns the graph,
/// which the caller owns. @throws Error as custream::end_capture (nothing leaks).
CapturedGraph end_capture_graph(StreamRef stream);

}  // namespace custream::detail

/// @file
/// custream::GraphCaptureScope: captures a stream's work into a GraphBuilder (or a conditional
/// body) after given nodes (cuStreamBeginCaptureToGraph).
#pragma once

// CONTRACT SKETCH (lead): owned by the conditional-nodes helper.

#include <vector>

#include "custream/capture_mode.hpp"
#include "custream/graph_builder.hpp"
#include "custream/graph_dependencies.hpp"
#include "custream/graph_node.hpp"

namespace custream {

class Stream;

/// While it lives, work enqueued on `stream` (kernels, copies, host functions, library calls
/// such as cuBLAS or NCCL) is appended to `into`'s graph after `after`. end() ends the capture
/// and returns the nodes captured last (what later nodes should depend on); the destructor ends
/// it if end() was not called.
class GraphCaptureScope {
 public:
  GraphCaptureScope(const Stream& stream, GraphBuilder& into, GraphDependencies after = {},
                    CaptureMode mode = CaptureMode::relaxed);
  ~GraphCaptureScope();
  GraphCaptureScope(const GraphCaptureScope&) = delete;
  GraphCaptureScope& operator=(const GraphCaptureScope&) = delete;
  std::vector<GraphNode> end();
};

}  // namespace custream

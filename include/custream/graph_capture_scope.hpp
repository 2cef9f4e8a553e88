/// @file
/// custream::GraphCaptureScope: captures a stream's work into a GraphBuilder (or a conditional
/// body) after given nodes (cuStreamBeginCaptureToGraph).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "custream/capture_mode.hpp"
#include "custream/graph_builder.hpp"
#include "custream/graph_dependencies.hpp"
#include "custream/graph_node.hpp"
#include "custream/nvtx_range.hpp"
#include "custream/stream.hpp"

namespace custream {

/// While it lives, work enqueued on `stream` (kernels, copies, memsets, host functions, library
/// calls such as cuBLAS or NCCL) is appended to `into`'s graph after `after`
/// (cuStreamBeginCaptureToGraph, driver >= 12.3). end() ends the capture and returns the nodes
/// captured last (what later nodes should depend on); the destructor ends it if end() was not
/// called. Unlike CaptureScope, the nodes go into the builder's graph as they are captured:
/// ending early (an exception) leaves those captured so far in it.
///
/// custream's own operations behave as in any capture: host functions become host nodes owned
/// by the builder's graph (freed with it and every Graph made from it), libraries launched
/// through a LibraryKernel are held by the builder. Into a conditional body, where the driver
/// accepts no host node, a host function or callback that custream checks (a callable,
/// add_callback) is refused by custream with an Error naming the body and the rule; the raw
/// and small noexcept forms reach the driver, which refuses them (docs/guide.md, "Graphs as
/// programs").
///
/// @code
/// custream::ConditionalNode loop = builder.add_while({}, condition);
/// custream::GraphBuilder body = loop.body();
/// {
///   custream::GraphCaptureScope capture(stream, body);
///   library_call(stream);                       // e.g. a cuBLAS call on `stream`
///   std::vector<custream::GraphNode> last = capture.end();
///   body.add_set_condition(last, condition, flag);
/// }
/// @endcode
class GraphCaptureScope {
 public:
  /// Begins capturing `stream` into `into`'s graph, the first captured work depending on
  /// `after` (nodes of that graph). The scope keeps `into`'s graph alive.
  /// @throws Error (CUDA_ERROR_INVALID_VALUE) for an empty builder or a dependency of another
  /// graph, (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) for the null or legacy stream, all refused
  /// without calling the driver; Error naming the minimum driver (12.3) on an older one; Error
  /// naming cuStreamBeginCaptureToGraph on a driver failure (e.g. the stream already captures).
  GraphCaptureScope(const Stream& stream, GraphBuilder& into, GraphDependencies after = {},
                    CaptureMode mode = CaptureMode::relaxed);
  /// As above, inside an NVTX range named `range` (see NvtxRange), open until the capture ends.
  GraphCaptureScope(const Stream& stream, GraphBuilder& into, GraphDependencies after,
                    CaptureMode mode, std::string_view range);
  /// Ends the capture unless end() did; what was captured stays in the graph. Never throws.
  ~GraphCaptureScope();
  GraphCaptureScope(const GraphCaptureScope&) = delete;
  GraphCaptureScope& operator=(const GraphCaptureScope&) = delete;

  /// Ends the capture and returns the nodes captured last (the capture's dependencies at its
  /// end: `after` itself when nothing was captured), each with its kind (a captured node of a
  /// kind custream does not make, e.g. a batch memory operation, reads as
  /// GraphNodeKind::empty).
  /// @throws Error (CUDA_ERROR_ILLEGAL_STATE) when already ended; Error naming
  /// cuStreamEndCapture when the capture was invalidated (the stream has left capture mode;
  /// the nodes captured before the invalidating call stay in the graph); Error naming a
  /// driver query that failed after the end (the capture has ended then).
  std::vector<GraphNode> end();

  /// The stream being captured.
  const Stream& stream() const noexcept { return stream_; }
  /// True until end() ended the capture.
  bool active() const noexcept { return active_; }

 private:
  void begin(GraphDependencies after, CaptureMode mode);
  /// After the capture ended: the NVTX range, run-once nodes, libraries, the nodes' records.
  /// @throws Error naming the failing driver call.
  void settle();
  /// settle(), its failure reported to the release-error handler. Never throws.
  void settle_quietly() noexcept;

  Stream stream_;
  GraphBuilder into_;  // shares the builder's owner: the graph outlives the capture
  NvtxRange range_;
  bool active_ = false;
  unsigned long long id_ = 0;
  std::uint64_t epoch_ = 0;          // the capture epoch it began at (libraries.md, invariant 5)
};

}  // namespace custream

// GraphCaptureScope: a stream capture into a GraphBuilder's graph or a conditional body
// (cuStreamBeginCaptureToGraph). Design: docs/design/graphs.md, "Conditional nodes",
// invariant 6; docs/design/capture.md.
//
// Contract: the capture begins and ends under the capture-transitions lock with a fresh capture
// epoch, as custream's other captures (capture.cpp): host functions enqueued meanwhile become
// host nodes the builder's graph owns (a run-once node that slipped in is made graph-owned at
// the end), and libraries and modules launched during the capture are held by the builder. The
// graph is the builder's: ending never destroys it. A host function enqueued while capturing into a
// body is refused by host_function.cpp through conditional.cpp's check_capture_accepts_host.
#include <mutex>
#include <optional>

#include "conditional.hpp"
#include "custream/capture.hpp"
#include "custream/context_scope.hpp"
#include "custream/error.hpp"
#include "custream/graph_capture_scope.hpp"
#include "driver.hpp"
#include "error.hpp"
#include "graph/nodes.hpp"
#include "host_function.hpp"
#include "library.hpp"
#include "owner.hpp"

namespace custream {

using detail::DriverApi;

namespace {

constexpr const char* kScope = "custream::GraphCaptureScope";
constexpr const char* kGetCaptureInfo = detail::EntryInfo<&DriverApi::cuStreamGetCaptureInfo>::name;
constexpr const char* kEndCapture = detail::EntryInfo<&DriverApi::cuStreamEndCapture>::name;

struct Sink {
  CUgraphNode node;
  GraphNodeKind kind;
};

// The capture's current dependencies: the nodes captured last. @throws Error.
std::vector<Sink> capture_sinks(StreamRef s, CUgraph graph) {
  std::optional<ContextScope> scope;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  const CUgraphNode* deps = nullptr;
  std::size_t count = 0;
  const CUresult r = detail::on_stream<&DriverApi::cuStreamGetCaptureInfo>(
      s.is_special(), scope, s.handle(), &status, static_cast<cuuint64_t*>(nullptr),
      static_cast<CUgraph*>(nullptr), &deps, &count);
  if (r != CUDA_SUCCESS) detail::throw_stream_error(r, kGetCaptureInfo, s);
  std::vector<Sink> sinks;
  if (status != CU_STREAM_CAPTURE_STATUS_ACTIVE) return sinks;  // the end says why
  sinks.reserve(count);
  for (std::size_t i = 0; i < count; ++i) {
    sinks.push_back({deps[i], detail::node_kind(detail::node_type(graph, deps[i]))});
  }
  return sinks;
}

// Ends the capture of `s` (its graph is the builder's: never destroyed). Returns the result.
CUresult end_capture_into(StreamRef s) {
  std::lock_guard<std::mutex> lock(detail::capture_transitions());  // capture.md, invariant 5
  std::optional<ContextScope> scope;
  CUgraph graph = nullptr;
  return detail::on_stream<&DriverApi::cuStreamEndCapture>(s.is_special(), scope, s.handle(),
                                                           &graph);
}

}  // namespace

GraphCaptureScope::GraphCaptureScope(const Stream& stream, GraphBuilder& into,
                                     GraphDependencies after, CaptureMode mode)
    : GraphCaptureScope(stream, into, after, mode, std::string_view()) {}

GraphCaptureScope::GraphCaptureScope(const Stream& stream, GraphBuilder& into,
                                     GraphDependencies after, CaptureMode mode,
                                     std::string_view range)
    : stream_(stream), into_(into) {
  range_ = NvtxRange(range);  // no NVTX call without a range name
  try {
    begin(after, mode);
  } catch (...) {
    range_.end();
    throw;
  }
}

void GraphCaptureScope::begin(GraphDependencies after, CaptureMode mode) {
  const CUgraph graph = into_.handle();
  if (graph == nullptr) {
    detail::throw_error(CUDA_ERROR_INVALID_VALUE, kScope, "empty custream::GraphBuilder",
                        "custream refused it without calling the driver: the GraphBuilder holds no "
                        "graph (default-constructed or moved from)");
  }
  if (stream_.handle() == nullptr || stream_.handle() == CU_STREAM_LEGACY) {
    detail::throw_stream_error(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, kScope, stream_,
                               "custream refused it without calling the driver: the null and "
                               "legacy streams cannot be captured; use a created stream");
  }
  std::vector<CUgraphNode> deps;
  deps.reserve(after.size());
  for (const GraphNode& node : after) {
    if (node.graph() != graph) {
      detail::throw_error(CUDA_ERROR_INVALID_VALUE, kScope, "graph " + detail::pointer_text(graph),
                          "custream refused it without calling the driver: the dependency " +
                              detail::pointer_text(node.handle()) + " is a node of graph " +
                              detail::pointer_text(node.graph()) + ", not of the builder's");
    }
    deps.push_back(node.handle());
  }
  std::optional<ContextScope> scope;
  CUresult r = CUDA_SUCCESS;
  {
    std::lock_guard<std::mutex> lock(detail::capture_transitions());  // capture.md, inv. 5
    epoch_ = detail::next_capture_epoch();  // every launch into it is stamped with it or later
    r = detail::on_stream<&DriverApi::cuStreamBeginCaptureToGraph>(
        stream_.is_special(), scope, stream_.handle(), graph,
        static_cast<const CUgraphNode*>(deps.data()), static_cast<const CUgraphEdgeData*>(nullptr),
        deps.size(), static_cast<CUstreamCaptureMode>(mode));
  }
  if (r != CUDA_SUCCESS) {
    detail::throw_stream_error(
        r, detail::EntryInfo<&DriverApi::cuStreamBeginCaptureToGraph>::name, stream_,
        r == CUDA_ERROR_ILLEGAL_STATE ? "the stream is already capturing" : "");
  }
  const CaptureInfo info = capture_info(stream_);
  if (info.result != CUDA_SUCCESS) {  // no id to guard the end with: end the capture now
    (void)end_capture_into(stream_);
    settle_quietly();
    detail::throw_stream_error(info.result, kGetCaptureInfo, stream_);
  }
  id_ = info.id;
  active_ = true;
}

void GraphCaptureScope::settle() {
  range_.end();                                                             // the capture has ended
  if (!into_.is_body()) detail::own_run_once_nodes(into_.handle(), false);  // host_functions 9
  into_.owner_.get()->code.hold_since(epoch_);  // libraries.md 5, modules.md 7
}

void GraphCaptureScope::settle_quietly() noexcept {
  try {
    settle();
  } catch (const Error& e) {  // reported under the failing call's name
    detail::report_release_failure(e.result(), e.call().c_str(), "graph", into_.handle());
  } catch (...) {  // std::bad_alloc: the code stays held by its other owners
  }
}

GraphCaptureScope::~GraphCaptureScope() {
  if (!active_) return;
  const CaptureInfo info = capture_info(stream_);
  if (info.result != CUDA_SUCCESS) {  // unknown whether it is ours: leave it, and say so
    detail::report_release_failure(info.result, kGetCaptureInfo, "stream", stream_.handle());
  } else if (info.status != CaptureStatus::none && info.id == id_) {
    try {
      const CUresult r = end_capture_into(stream_);
      detail::report_release_failure(r, kEndCapture, "stream", stream_.handle());
    } catch (const Error& e) {  // no context could be made current for a special handle
      detail::report_release_failure(e.result(), kEndCapture, "stream", stream_.handle());
    }
  }
  settle_quietly();
}

std::vector<GraphNode> GraphCaptureScope::end() {
  if (!active_) {
    detail::throw_stream_error(CUDA_ERROR_ILLEGAL_STATE, "custream::GraphCaptureScope::end",
                               stream_, "the capture was already ended");
  }
  const CUgraph graph = into_.handle();
  std::vector<GraphNode> sinks;
  for (const Sink& sink : capture_sinks(stream_, graph)) {
    sinks.push_back(GraphNode(sink.node, graph, sink.kind));
  }
  const CUresult r = end_capture_into(stream_);
  if (r == CUDA_SUCCESS) {
    active_ = false;
    settle();  // throws what fails: the capture has ended either way
    return sinks;
  }
  // Ask rather than assume, as CaptureScope::end: a refused end may have ended it or not.
  const CaptureInfo after = capture_info(stream_);
  active_ =
      after.result != CUDA_SUCCESS || (after.status != CaptureStatus::none && after.id == id_);
  if (!active_) settle_quietly();
  detail::throw_stream_error(r, kEndCapture, stream_,
                             r == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
                                 ? "the capture was invalidated by an earlier call (one the "
                                   "driver refused, or a capture-unsafe one); the stream has "
                                   "left capture mode, and the nodes captured before it stay "
                                   "in the builder's graph"
                                 : "");
}

}  // namespace custream

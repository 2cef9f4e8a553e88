// Stream capture: begin/end, status queries, and CaptureScope. Design: docs/design/capture.md.
#include "custream/capture.hpp"

#include <mutex>
#include <optional>
#include <unordered_map>

#include "capture.hpp"
#include "context.hpp"
#include "custream/capture_scope.hpp"
#include "custream/context_scope.hpp"
#include "custream/error.hpp"
#include "custream/graph.hpp"
#include "driver.hpp"
#include "host_function.hpp"
#include "library.hpp"
#include "nvtx.hpp"

namespace custream {

using detail::DriverApi;

namespace {

// Status and id of `s`'s capture (invariant 1). @throws Error only when there is no driver
// or no context can be made current for a special handle.
CUresult query_capture(StreamRef s, CUstreamCaptureStatus* status, cuuint64_t* id) {
  std::optional<ContextScope> scope;
  return detail::on_stream<&DriverApi::cuStreamGetCaptureInfo>(
      s.is_special(), scope, s.handle(), status, id, static_cast<CUgraph*>(nullptr),
      static_cast<const CUgraphNode**>(nullptr), static_cast<std::size_t*>(nullptr));
}

const char* end_capture_advice(CUresult r) {
  switch (r) {
    case CUDA_ERROR_ILLEGAL_STATE:
      return "the stream is not capturing";
    case CUDA_ERROR_STREAM_CAPTURE_UNMATCHED:
      return "this stream was joined into a capture another stream began; end it on that "
             "stream (the driver has invalidated the capture)";
    case CUDA_ERROR_STREAM_CAPTURE_INVALIDATED:
      return "the capture was invalidated by an earlier capture-unsafe call; the stream has "
             "left capture mode and the graph is discarded";
    case CUDA_ERROR_STREAM_CAPTURE_UNJOINED:
      return "a stream forked from the capture was not joined back (record an event on it "
             "and wait for it on the origin stream before ending); the stream has left "
             "capture mode and the graph is discarded";
    case CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD:
      return "a global or thread-local capture must be ended by the thread that began it";
    default:
      return "";
  }
}

}  // namespace

namespace {
// The capture epoch each stream's current custream-begun capture started at (libraries.md,
// invariant 5), guarded by capture_transitions(). Special handles are not recorded: the
// per-thread stream's handle is the same in every thread.
std::unordered_map<CUstream, std::uint64_t>& capture_epochs() {
  static auto* epochs = new std::unordered_map<CUstream, std::uint64_t>;  // never destroyed
  return *epochs;
}

// The epoch `s`'s capture began at, forgotten; kAnyCapture when custream did not begin it. The
// caller holds capture_transitions().
std::uint64_t take_capture_epoch(StreamRef s) {
  auto& epochs = capture_epochs();
  const auto it = s.is_special() ? epochs.end() : epochs.find(s.handle());
  if (it == epochs.end()) return detail::kAnyCapture;
  const std::uint64_t epoch = it->second;
  epochs.erase(it);
  return epoch;
}
}  // namespace

void begin_capture(StreamRef s, CaptureMode mode) {
  if (s.handle() == nullptr || s.handle() == CU_STREAM_LEGACY) {  // invariant 2
    detail::throw_stream_error(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "custream::begin_capture", s,
                               "custream refused it without calling the driver: the null and "
                               "legacy streams cannot be captured; use a created stream or "
                               "Stream::per_thread()");
  }
  std::optional<ContextScope> scope;
  CUresult r = CUDA_SUCCESS;
  {
    std::lock_guard<std::mutex> lock(detail::capture_transitions());  // invariant 5
    // A new epoch before the capture begins: every launch into it is stamped with it or later.
    const std::uint64_t epoch = detail::next_capture_epoch();
    r = detail::on_stream<&DriverApi::cuStreamBeginCapture>(s.is_special(), scope, s.handle(),
                                                            static_cast<CUstreamCaptureMode>(mode));
    if (r == CUDA_SUCCESS && !s.is_special()) capture_epochs()[s.handle()] = epoch;
  }
  if (r != CUDA_SUCCESS) {
    detail::throw_stream_error(
        r, detail::EntryInfo<&DriverApi::cuStreamBeginCapture>::name, s,
        r == CUDA_ERROR_ILLEGAL_STATE ? "the stream is already capturing" : "");
  }
}

detail::CapturedGraph detail::end_capture_graph(StreamRef s) {
  std::optional<ContextScope> scope;
  CUgraph graph = nullptr;
  CUresult r = CUDA_SUCCESS;
  std::uint64_t since = kAnyCapture;
  {
    std::lock_guard<std::mutex> lock(detail::capture_transitions());  // invariant 5
    r = detail::on_stream<&DriverApi::cuStreamEndCapture>(s.is_special(), scope, s.handle(),
                                                          &graph);
    since = take_capture_epoch(s);
  }
  if (r != CUDA_SUCCESS) {
    // The driver returns no graph on failure (invariant 3); be safe if one came anyway.
    if (graph != nullptr) detail::release_call<&DriverApi::cuGraphDestroy>("graph", graph, graph);
    detail::throw_stream_error(r, detail::EntryInfo<&DriverApi::cuStreamEndCapture>::name, s,
                               end_capture_advice(r));
  }
  return {graph, since};
}

Graph end_capture(StreamRef s, InstantiateFlags flags) {
  const detail::CapturedGraph ended = detail::end_capture_graph(s);
  return Graph::from_capture(ended.graph, flags, s, ended.code_since);
}

CaptureInfo capture_info(StreamRef s) noexcept {
  CaptureInfo info;
  try {
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    cuuint64_t id = 0;
    info.result = query_capture(s, &status, &id);
    if (info.result == CUDA_SUCCESS) {
      info.status = static_cast<CaptureStatus>(status);
      info.id = status == CU_STREAM_CAPTURE_STATUS_NONE ? 0 : id;
    }
  } catch (const Error& e) {  // no driver, or no context could be made current
    info.result = e.result();
  } catch (...) {
    info.result = CUDA_ERROR_UNKNOWN;
  }
  return info;
}

bool is_capturing(StreamRef s) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  cuuint64_t id = 0;
  if (CUresult r = query_capture(s, &status, &id); r != CUDA_SUCCESS) {
    detail::throw_stream_error(r, detail::EntryInfo<&DriverApi::cuStreamGetCaptureInfo>::name, s);
  }
  if (status == CU_STREAM_CAPTURE_STATUS_INVALIDATED) {
    detail::throw_stream_error(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
                               "custream::Stream::is_capturing", s,
                               "the stream's capture was invalidated by a capture-unsafe call; "
                               "end_capture() ends it");
  }
  return status == CU_STREAM_CAPTURE_STATUS_ACTIVE;
}

unsigned long long capture_id(StreamRef s) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  cuuint64_t id = 0;
  if (CUresult r = query_capture(s, &status, &id); r != CUDA_SUCCESS) {
    detail::throw_stream_error(r, detail::EntryInfo<&DriverApi::cuStreamGetCaptureInfo>::name, s);
  }
  return status == CU_STREAM_CAPTURE_STATUS_NONE ? 0 : id;
}

// --- CaptureScope (invariant 4) ---

namespace {
// Ends the capture of `s` and destroys its graph, freeing the payloads of run-once nodes in
// it (the graph never runs). Never throws: the driver is loaded (a capture began) and never
// unloaded; a failed end (e.g. CUDA_ERROR_DEINITIALIZED at exit) leaves nothing to do.
void discard_capture(StreamRef s) noexcept {
  CUgraph graph = nullptr;
  CUresult r = CUDA_SUCCESS;
  try {
    std::lock_guard<std::mutex> lock(detail::capture_transitions());  // invariant 5
    std::optional<ContextScope> scope;                                // the special-handle retry
    r = detail::on_stream<&DriverApi::cuStreamEndCapture>(s.is_special(), scope, s.handle(),
                                                          &graph);
    (void)take_capture_epoch(s);
  } catch (const Error& e) {  // no context could be made current for a special handle
    r = e.result();
  }
  detail::report_release_failure(r, detail::EntryInfo<&DriverApi::cuStreamEndCapture>::name,
                                 "stream", s.handle());
  if (r == CUDA_SUCCESS && graph != nullptr) {
    detail::free_run_once_nodes(graph);
    detail::release_call<&DriverApi::cuGraphDestroy>("graph", graph, graph);
  }
}
}  // namespace

CaptureScope::CaptureScope(const Stream& stream, CaptureMode mode)
    : CaptureScope(stream, mode, std::string_view()) {}

CaptureScope::CaptureScope(const Stream& stream, CaptureMode mode, std::string_view range)
    : stream_(stream) {
  range_ = NvtxRange(range);  // no NVTX call without a range name (streams.md, invariant 6)
  try {
    begin_capture(stream_, mode);
  } catch (...) {
    end_range();
    throw;
  }
  try {
    id_ = capture_id(stream_);  // throws the failing call's own error
  } catch (...) {               // no id to guard the end with: end the capture now
    discard_capture(stream_);
    end_range();
    throw;
  }
  active_ = true;
}

CaptureScope::~CaptureScope() {
  if (active_) {
    const CaptureInfo info = capture_info(stream_);
    if (info.result != CUDA_SUCCESS) {  // unknown whether it is ours: leave it, and say so
      detail::report_release_failure(info.result,
                                     detail::EntryInfo<&DriverApi::cuStreamGetCaptureInfo>::name,
                                     "stream", stream_.handle());
    } else if (info.status != CaptureStatus::none && info.id == id_) {
      discard_capture(stream_);
    }
  }
  end_range();  // after the capture's end
}

void CaptureScope::end_range() noexcept { range_.end(); }

Graph CaptureScope::end(InstantiateFlags flags) {
  if (!active_) {
    detail::throw_stream_error(CUDA_ERROR_ILLEGAL_STATE, "custream::CaptureScope::end", stream_,
                               "the capture was already ended");
  }
  try {
    Graph graph = stream_.end_capture(flags);  // keeps the stream's owned context
    active_ = false;
    end_range();  // the capture and its instantiation are done
    return graph;
  } catch (...) {
    // Ask rather than assume (invariant 4): a refused end (e.g. from the wrong thread) may
    // have ended the capture or not. While it still runs, or when the driver cannot say, the
    // scope stays responsible and its destructor asks again.
    const CaptureInfo info = capture_info(stream_);
    active_ = info.result != CUDA_SUCCESS || (info.status != CaptureStatus::none && info.id == id_);
    throw;
  }
}

}  // namespace custream

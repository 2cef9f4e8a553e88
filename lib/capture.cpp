// Stream capture: begin/end, status queries, and CaptureScope (SPEC §3 capture rows).
//
// Design note — invariants:
//  1. Only capture-safe queries are issued behind the user's back: cuStreamGetCaptureInfo
//     (status, id and graph in one call). Never cuStreamQuery/GetDevice/GetId/GetFlags,
//     which would invalidate the capture.
//  2. begin_capture refuses handles 0 and 1 before the driver is called (the driver would
//     answer CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED); CU_STREAM_PER_THREAD may capture.
//  3. end_capture hands the CUgraph to Graph::adopt at once, so it is destroyed (with every
//     host-function payload it owns) also when instantiation fails. When cuStreamEndCapture
//     fails the driver has already discarded the graph and left capture mode.
//  4. A CaptureScope that began a capture always ends it: end() or, failing that, its
//     destructor, which discards the graph (freeing the payloads of run-once host nodes in
//     it, lib/host_function.cpp invariant 9) and never throws. It remembers the capture id:
//     after a failed end it asks the driver whether that capture still runs (a refused end
//     from the wrong thread has ended it on the real driver; an injected fault has not)
//     instead of assuming. A failed query leaves the scope active, so its destructor asks
//     again; the destructor never ends a capture that is not the one it began.
//  5. begin_capture and end_capture hold detail::capture_transitions around the driver call,
//     so no custream host-function enqueue sees a capture that ends or begins before its
//     launch (lib/host_function.cpp, invariant 10); the graph an end returns is made
//     graph-owned for run-once host nodes before instantiation (lib/graph.cpp, invariant 6).
#include <mutex>
#include <optional>

#include "context.hpp"
#include "custream/capture_scope.hpp"
#include "custream/context_scope.hpp"
#include "custream/error.hpp"
#include "custream/graph.hpp"
#include "custream/stream.hpp"
#include "driver.hpp"
#include "host_function.hpp"

namespace custream {
namespace {

// Runs `call` (returning CUresult) with the special-handle retry (kept in `scope`).
template <typename Call>
CUresult with_context(const Stream& s, std::optional<ContextScope>& scope, Call call) {
  return detail::retry_on_current_device(call(), s.is_special(), scope, call);
}

// Status and id of `s`'s capture (invariant 1). @throws Error only when there is no driver
// or no context can be made current for a special handle.
CUresult query_capture(const Stream& s, CUstreamCaptureStatus* status, cuuint64_t* id) {
  const detail::DriverApi& api = detail::api();
  std::optional<ContextScope> scope;
  const CUstream h = s.handle();
  return with_context(s, scope, [&] {
    return api.cuStreamGetCaptureInfo(h, status, id, nullptr, nullptr, nullptr);
  });
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

void Stream::begin_capture(CaptureMode mode) const {
  if (handle_ == nullptr || handle_ == CU_STREAM_LEGACY) {  // invariant 2
    throw Error(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "cuStreamBeginCapture", to_string(),
                "custream refused it without calling the driver: the null and legacy streams "
                "cannot be captured; use a created stream or Stream::per_thread()");
  }
  const detail::DriverApi& api = detail::api();
  std::optional<ContextScope> scope;
  const CUstream h = handle_;
  const auto m = static_cast<CUstreamCaptureMode>(mode);
  CUresult r = CUDA_SUCCESS;
  {
    std::lock_guard<std::mutex> lock(detail::capture_transitions());  // invariant 5
    r = with_context(*this, scope, [&] { return api.cuStreamBeginCapture(h, m); });
  }
  if (r != CUDA_SUCCESS) {
    detail::throw_error(r, "cuStreamBeginCapture", to_string(),
                        r == CUDA_ERROR_ILLEGAL_STATE ? "the stream is already capturing" : "");
  }
}

Graph Stream::end_capture(InstantiateFlags flags) const {
  const detail::DriverApi& api = detail::api();
  std::optional<ContextScope> scope;
  const CUstream h = handle_;
  CUgraph graph = nullptr;
  CUresult r = CUDA_SUCCESS;
  {
    std::lock_guard<std::mutex> lock(detail::capture_transitions());  // invariant 5
    r = with_context(*this, scope, [&] { return api.cuStreamEndCapture(h, &graph); });
  }
  if (r != CUDA_SUCCESS) {
    // The driver returns no graph on failure (invariant 3); be safe if one came anyway.
    if (graph != nullptr) {
      detail::report_release_failure(api.cuGraphDestroy(graph), "cuGraphDestroy", "graph", graph);
    }
    detail::throw_error(r, "cuStreamEndCapture", to_string(), end_capture_advice(r));
  }
  scope.reset();
  return Graph::adopt(graph, flags, *this);
}

CaptureInfo Stream::capture_info() const noexcept {
  CaptureInfo info;
  try {
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    cuuint64_t id = 0;
    info.result = query_capture(*this, &status, &id);
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

bool Stream::is_capturing() const {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  cuuint64_t id = 0;
  if (CUresult r = query_capture(*this, &status, &id); r != CUDA_SUCCESS) {
    fail(r, "cuStreamGetCaptureInfo");
  }
  if (status == CU_STREAM_CAPTURE_STATUS_INVALIDATED) {
    throw Error(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "custream::Stream::is_capturing",
                to_string(),
                "the stream's capture was invalidated by a capture-unsafe call; end_capture() "
                "ends it");
  }
  return status == CU_STREAM_CAPTURE_STATUS_ACTIVE;
}

unsigned long long Stream::capture_id() const {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  cuuint64_t id = 0;
  if (CUresult r = query_capture(*this, &status, &id); r != CUDA_SUCCESS) {
    fail(r, "cuStreamGetCaptureInfo");
  }
  return status == CU_STREAM_CAPTURE_STATUS_NONE ? 0 : id;
}

// --- CaptureScope (invariant 4) ---

namespace {
// Ends the capture of `s` and destroys its graph, freeing the payloads of run-once nodes in
// it (the graph never runs). Never throws: the driver is loaded (a capture began) and never
// unloaded; a failed end (e.g. CUDA_ERROR_DEINITIALIZED at exit) leaves nothing to do.
void discard_capture(const Stream& s) noexcept {
  const detail::DriverApi& api = detail::g_loaded.load(std::memory_order_acquire)->api;
  CUgraph graph = nullptr;
  CUresult r = CUDA_SUCCESS;
  try {
    std::lock_guard<std::mutex> lock(detail::capture_transitions());  // invariant 5
    std::optional<ContextScope> scope;                                // the special-handle retry
    r = with_context(s, scope, [&] { return api.cuStreamEndCapture(s.handle(), &graph); });
  } catch (const Error& e) {  // no context could be made current for a special handle
    r = e.result();
  }
  detail::report_release_failure(r, "cuStreamEndCapture", "stream", s.handle());
  if (r == CUDA_SUCCESS && graph != nullptr) {
    detail::free_run_once_nodes(graph);
    detail::report_release_failure(api.cuGraphDestroy(graph), "cuGraphDestroy", "graph", graph);
  }
}
}  // namespace

CaptureScope::CaptureScope(const Stream& stream, CaptureMode mode) : stream_(stream) {
  stream_.begin_capture(mode);
  try {
    id_ = stream_.capture_id();  // throws the failing call's own error
  } catch (...) {                // no id to guard the end with: end the capture now
    discard_capture(stream_);
    throw;
  }
  active_ = true;
}

CaptureScope::~CaptureScope() {
  if (!active_) return;
  const CaptureInfo info = stream_.capture_info();
  if (info.result != CUDA_SUCCESS) {  // unknown whether it is ours: leave it, and say so
    detail::report_release_failure(info.result, "cuStreamGetCaptureInfo", "stream",
                                   stream_.handle());
  } else if (info.status != CaptureStatus::none && info.id == id_) {
    discard_capture(stream_);
  }
}

Graph CaptureScope::end(InstantiateFlags flags) {
  if (!active_) {
    throw Error(CUDA_ERROR_ILLEGAL_STATE, "custream::CaptureScope::end", stream_.to_string(),
                "the capture was already ended");
  }
  try {
    Graph graph = stream_.end_capture(flags);
    active_ = false;
    return graph;
  } catch (...) {
    // Ask rather than assume (invariant 4): a refused end (e.g. from the wrong thread) may
    // have ended the capture or not. While it still runs, or when the driver cannot say, the
    // scope stays responsible and its destructor asks again.
    const CaptureInfo info = stream_.capture_info();
    active_ = info.result != CUDA_SUCCESS || (info.status != CaptureStatus::none && info.id == id_);
    throw;
  }
}

}  // namespace custream

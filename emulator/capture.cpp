// Stream capture: begin/end, status queries, capture modes, fork/join bookkeeping.
#include <algorithm>

#include "emu.hpp"

namespace emu {
namespace {

thread_local CUstreamCaptureMode t_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

bool valid_mode(CUstreamCaptureMode m) {
  return m == CU_STREAM_CAPTURE_MODE_GLOBAL || m == CU_STREAM_CAPTURE_MODE_THREAD_LOCAL ||
         m == CU_STREAM_CAPTURE_MODE_RELAXED;
}

// Begins a capture into a graph of its own, or (cuStreamBeginCaptureToGraph) into the user's
// graph `into` after `deps`.
CUresult begin_capture(CUstream h, CUstreamCaptureMode mode, CUgraph into = nullptr,
                       const CUgraphNode* deps = nullptr, size_t ndeps = 0) {
  if (!valid_mode(mode)) return CUDA_ERROR_INVALID_VALUE;
  // As on the H200: capture is refused on the legacy handles, allowed on the per-thread one.
  if (h == nullptr || h == CU_STREAM_LEGACY) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  State& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  Stream* st = nullptr;
  if (CUresult r = resolve_stream(h, &st)) return r;
  if (st->capture) return CUDA_ERROR_ILLEGAL_STATE;
  std::vector<Node*> frontier;
  if (into) {
    if (!valid(s.graphs, into)) return CUDA_ERROR_INVALID_VALUE;
    if (ndeps && !deps) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < ndeps; ++i) {
      auto* d = reinterpret_cast<Node*>(deps[i]);
      if (!valid(s.nodes, deps[i]) || d->graph != reinterpret_cast<Graph*>(into) ||
          std::find(frontier.begin(), frontier.end(), d) != frontier.end())
        return CUDA_ERROR_INVALID_VALUE;
      frontier.push_back(d);
    }
  }
  auto cap = std::make_shared<Capture>();
  cap->id = s.next_id++;
  if (into) {
    cap->graph = reinterpret_cast<Graph*>(into);
    cap->into_graph = true;
  } else {
    cap->graph = new_graph();
    cap->graph->owned_by_capture = true;
  }
  cap->mode = mode;
  cap->origin = st;
  cap->streams.insert(st);
  cap->thread = std::this_thread::get_id();
  cap->ctx = st->ctx;
  s.captures.insert(cap);
  st->capture = cap;
  st->frontier = frontier;
  st->frontier_edges.assign(frontier.size(), CUgraphEdgeData{});
  return CUDA_SUCCESS;
}

CUresult stream_begin_capture_to_graph(CUstream h, CUgraph g, const CUgraphNode* deps,
                                       const CUgraphEdgeData* edges, size_t n,
                                       CUstreamCaptureMode mode) {
  EMU_ENTER("cuStreamBeginCaptureToGraph");
  for (size_t i = 0; edges && i < n; ++i) {  // only default edges are modeled
    if (edges[i].from_port || edges[i].to_port || edges[i].type != CU_GRAPH_DEPENDENCY_TYPE_DEFAULT)
      return CUDA_ERROR_INVALID_VALUE;
  }
  if (!g) return CUDA_ERROR_INVALID_VALUE;
  return begin_capture(h, mode, g, deps, n);
}

CUresult stream_begin_capture(CUstream h, CUstreamCaptureMode mode) {
  EMU_ENTER("cuStreamBeginCapture");
  return begin_capture(h, mode);
}

CUresult stream_begin_capture_v1(CUstream h) {
  EMU_ENTER("cuStreamBeginCapture");
  return begin_capture(h, CU_STREAM_CAPTURE_MODE_GLOBAL);
}

// True when some stream of the capture has work the origin stream did not join back.
bool unjoined(const Capture& c) {
  std::set<const Node*> reach;
  std::vector<const Node*> todo(c.origin->frontier.begin(), c.origin->frontier.end());
  while (!todo.empty()) {
    const Node* n = todo.back();
    todo.pop_back();
    if (!reach.insert(n).second) continue;
    for (const Node* d : n->deps) todo.push_back(d);
  }
  for (Stream* st : c.streams) {
    if (st == c.origin) continue;
    for (const Node* n : st->frontier)
      if (!reach.count(n)) return true;
  }
  return false;
}

CUresult stream_end_capture(CUstream h, CUgraph* ph) {
  EMU_ENTER("cuStreamEndCapture");
  if (!ph) return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  Stream* st = nullptr;
  if (CUresult r = resolve_stream(h, &st)) return r;
  if (st->kind == Stream::kLegacy && legacy_conflict(st->ctx))
    return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
  std::shared_ptr<Capture> cap = st->capture;
  if (!cap) return CUDA_ERROR_ILLEGAL_STATE;
  *ph = nullptr;
  if (cap->origin != st) {
    invalidate(cap.get());
    return CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
  }
  if (cap->mode != CU_STREAM_CAPTURE_MODE_RELAXED && cap->thread != std::this_thread::get_id()) {
    // As on the H200 (driver 580): refused, and yet the capture is over and its graph (with
    // the user objects it holds) discarded.
    discard_capture(cap);
    return CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
  }
  CUresult result = CUDA_SUCCESS;
  if (cap->invalidated) {
    result = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  } else if (unjoined(*cap)) {
    result = CUDA_ERROR_STREAM_CAPTURE_UNJOINED;
  }
  end_capture_streams(cap);
  if (cap->into_graph) {  // the user's graph: kept, with what was captured, either way
    if (result == CUDA_SUCCESS) *ph = reinterpret_cast<CUgraph>(cap->graph);
  } else if (result != CUDA_SUCCESS) {
    destroy_graph(cap->graph);
  } else {
    cap->graph->owned_by_capture = false;
    s.live.fetch_add(1);
    *ph = reinterpret_cast<CUgraph>(cap->graph);
  }
  cap->graph = nullptr;
  return result;
}

// `invalidates`: whether a refused query of the legacy stream invalidates the blocking
// capture (cuStreamIsCapturing documents that it does not).
CUresult capture_status(CUstream h, Stream** out, CUstreamCaptureStatus* status, bool invalidates) {
  if (CUresult r = resolve_stream(h, out)) return r;
  if ((*out)->kind == Stream::kLegacy && legacy_conflict((*out)->ctx, invalidates))
    return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
  const Capture* c = (*out)->capture.get();
  *status = !c               ? CU_STREAM_CAPTURE_STATUS_NONE
            : c->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                             : CU_STREAM_CAPTURE_STATUS_ACTIVE;
  return CUDA_SUCCESS;
}

CUresult stream_is_capturing(CUstream h, CUstreamCaptureStatus* status) {
  EMU_ENTER("cuStreamIsCapturing");
  if (!status) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(state().mu);
  Stream* st = nullptr;
  return capture_status(h, &st, status, false);
}

CUresult capture_info(CUstream h, CUstreamCaptureStatus* status, cuuint64_t* id, CUgraph* graph,
                      const CUgraphNode** deps, const CUgraphEdgeData** edges, size_t* ndeps) {
  if (!status) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(state().mu);
  Stream* st = nullptr;
  if (CUresult r = capture_status(h, &st, status, true)) return r;
  const Capture* c = st->capture.get();
  const bool active = *status == CU_STREAM_CAPTURE_STATUS_ACTIVE;
  if (id) *id = c ? c->id : 0;
  if (graph) *graph = active ? reinterpret_cast<CUgraph>(c->graph) : nullptr;
  if (deps) {
    *deps = active && !st->frontier.empty()
                ? reinterpret_cast<const CUgraphNode*>(st->frontier.data())
                : nullptr;
  }
  if (edges) *edges = active && !st->frontier.empty() ? st->frontier_edges.data() : nullptr;
  if (ndeps) *ndeps = active ? st->frontier.size() : 0;
  return CUDA_SUCCESS;
}

CUresult get_capture_info_v1(CUstream h, CUstreamCaptureStatus* status, cuuint64_t* id) {
  EMU_ENTER("cuStreamGetCaptureInfo");
  return capture_info(h, status, id, nullptr, nullptr, nullptr, nullptr);
}

CUresult get_capture_info_v2(CUstream h, CUstreamCaptureStatus* status, cuuint64_t* id,
                             CUgraph* graph, const CUgraphNode** deps, size_t* ndeps) {
  EMU_ENTER("cuStreamGetCaptureInfo");
  return capture_info(h, status, id, graph, deps, nullptr, ndeps);
}

CUresult get_capture_info_v3(CUstream h, CUstreamCaptureStatus* status, cuuint64_t* id,
                             CUgraph* graph, const CUgraphNode** deps,
                             const CUgraphEdgeData** edges, size_t* ndeps) {
  EMU_ENTER("cuStreamGetCaptureInfo");
  return capture_info(h, status, id, graph, deps, edges, ndeps);
}

CUresult thread_exchange_capture_mode(CUstreamCaptureMode* mode) {
  EMU_ENTER("cuThreadExchangeStreamCaptureMode");
  if (!mode || !valid_mode(*mode)) return CUDA_ERROR_INVALID_VALUE;
  std::swap(*mode, t_mode);
  return CUDA_SUCCESS;
}

}  // namespace

CUstreamCaptureMode thread_capture_mode() { return t_mode; }

void invalidate(Capture* c) {
  if (c) c->invalidated = true;
}

// A capture-unsafe call, as the H200 treats cuLibraryUnload and cuEventQuery: refused, and the
// captures that forbid it invalidated, when the calling thread (unless its own mode is relaxed,
// cuThreadExchangeStreamCaptureMode) captures in global or thread-local mode, or, in global
// mode itself, another thread captures in global mode.
bool refused_by_capture() {
  const CUstreamCaptureMode mine = thread_capture_mode();
  if (mine == CU_STREAM_CAPTURE_MODE_RELAXED) return false;
  bool refused = false;
  for (const auto& cap : state().captures) {
    if (cap->invalidated || cap->mode == CU_STREAM_CAPTURE_MODE_RELAXED) continue;
    const bool own = cap->thread == std::this_thread::get_id();
    if (own ||
        (cap->mode == CU_STREAM_CAPTURE_MODE_GLOBAL && mine == CU_STREAM_CAPTURE_MODE_GLOBAL)) {
      invalidate(cap.get());
      refused = true;
    }
  }
  return refused;
}

bool legacy_conflict(Context* ctx, bool invalidates) {
  bool conflict = false;
  for (const auto& cap : state().captures) {
    if (cap->ctx != ctx) continue;  // an invalidated capture still holds its streams
    for (Stream* st : cap->streams) {
      if (st->blocking()) {
        // Using the legacy stream would create an implicit dependency on the capture: the
        // call fails and (except for cuStreamIsCapturing) the capture is invalidated.
        if (invalidates) invalidate(cap.get());
        conflict = true;
        break;
      }
    }
  }
  return conflict;
}

void discard_capture(const std::shared_ptr<Capture>& c) {
  std::shared_ptr<Capture> keep = c;  // c may alias a stream's member reset below
  end_capture_streams(keep);
  if (!keep->into_graph) destroy_graph(keep->graph);  // the user's graph stays the user's
  keep->graph = nullptr;
}

void end_capture_streams(const std::shared_ptr<Capture>& c) {
  std::shared_ptr<Capture> keep = c;  // c may alias a stream's member reset below
  for (Stream* st : keep->streams) {
    st->capture.reset();
    st->frontier.clear();
    st->frontier_edges.clear();
  }
  keep->streams.clear();
  state().captures.erase(keep);
}

void register_capture_entries(std::vector<Entry>& out) {
  out.insert(out.end(),
             {
                 EMU_ENTRY(cuStreamBeginCapture, 10000, stream_begin_capture_v1),
                 EMU_ENTRY(cuStreamBeginCapture, 10010, stream_begin_capture),
                 EMU_ENTRY(cuStreamBeginCaptureToGraph, 12030, stream_begin_capture_to_graph),
                 EMU_ENTRY(cuStreamEndCapture, 10000, stream_end_capture),
                 EMU_ENTRY(cuStreamIsCapturing, 10000, stream_is_capturing),
                 EMU_ENTRY(cuStreamGetCaptureInfo, 10010, get_capture_info_v1),
                 EMU_ENTRY(cuStreamGetCaptureInfo, 11030, get_capture_info_v2),
                 EMU_ENTRY(cuStreamGetCaptureInfo, 12030, get_capture_info_v3),
                 EMU_ENTRY(cuThreadExchangeStreamCaptureMode, 10010, thread_exchange_capture_mode),
             });
}

}  // namespace emu

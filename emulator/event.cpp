// Events: record, query, synchronize, wait, elapsed time, IPC handles; capture fork/join
// through events.
#include <algorithm>
#include <cstring>

#include "emu.hpp"

namespace emu {
namespace {

constexpr char kIpcMagic[8] = {'c', 's', 'e', 'm', 'u', 'e', 'v', 0};

Event* as_event(CUevent e) {
  return valid(state().events, e) ? reinterpret_cast<Event*>(e) : nullptr;
}

// The active capture an event was last recorded into, or nullptr.
std::shared_ptr<Capture> captured_in(const EventState& es) {
  auto cap = es.capture.lock();
  if (cap && state().captures.count(cap)) return cap;
  return nullptr;
}

CUresult event_create(CUevent* ph, unsigned int flags) {
  EMU_ENTER("cuEventCreate");
  if (!ph) return CUDA_ERROR_INVALID_VALUE;
  const unsigned known = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
  if (flags & ~known) return CUDA_ERROR_INVALID_VALUE;
  if ((flags & CU_EVENT_INTERPROCESS) && !(flags & CU_EVENT_DISABLE_TIMING))
    return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  Context* ctx = nullptr;
  if (CUresult r = usable_current_context(&ctx)) return r;
  auto* e = new Event;
  e->state = std::make_shared<EventState>();
  e->state->flags = flags;
  e->ctx = ctx;
  s.events.insert(e);
  s.live.fetch_add(1);
  *ph = reinterpret_cast<CUevent>(e);
  return CUDA_SUCCESS;
}

CUresult event_destroy(CUevent h) {
  EMU_ENTER("cuEventDestroy");
  State& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  Event* e = as_event(h);
  if (!e) return CUDA_ERROR_INVALID_HANDLE;
  s.events.erase(e);
  s.live.fetch_sub(1);
  delete e;  // pending records keep their Signal alive through the Op
  return CUDA_SUCCESS;
}

CUresult event_record_impl(CUevent h, CUstream hs) {
  State& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  Event* e = as_event(h);
  if (!e) return CUDA_ERROR_INVALID_HANDLE;
  Stream* st = nullptr;
  if (CUresult r = resolve_stream(hs, &st)) return r;
  // As on the H200: an event made in one context cannot be recorded on another context's
  // stream (waiting on it from another context is allowed). A green context uses the primary
  // context's events, and the primary context its green contexts' (resource_owner).
  if (e->ctx != nullptr && resource_owner(st->ctx) != resource_owner(e->ctx))
    return CUDA_ERROR_INVALID_HANDLE;
  if (st->capture) {
    // Recording in a capture marks the capture position; it creates no node (fork point).
    if (st->capture->invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    e->state->capture = st->capture;
    e->state->capture_nodes = st->frontier;
    return CUDA_SUCCESS;
  }
  if (st->kind == Stream::kLegacy && legacy_conflict(st->ctx))
    return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
  e->state->capture.reset();
  e->state->capture_nodes.clear();
  Op op;
  op.done = std::make_shared<Signal>();
  e->state->sig = op.done;
  e->state->recorded = true;
  push_op(st, std::move(op));
  return CUDA_SUCCESS;
}

CUresult event_record(CUevent h, CUstream hs) {
  EMU_ENTER("cuEventRecord");
  return event_record_impl(h, hs);
}

CUresult event_record_with_flags(CUevent h, CUstream hs, unsigned int flags) {
  EMU_ENTER("cuEventRecordWithFlags");
  if (flags & ~static_cast<unsigned>(CU_EVENT_RECORD_EXTERNAL)) return CUDA_ERROR_INVALID_VALUE;
  return event_record_impl(h, hs);
}

// Querying or waiting for an event recorded in an active capture is not allowed.
CUresult captured_event_check(Event* e) {
  if (auto cap = captured_in(*e->state)) {
    invalidate(cap.get());
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  return CUDA_SUCCESS;
}

CUresult event_query(CUevent h) {
  EMU_ENTER("cuEventQuery");
  std::lock_guard<std::mutex> lk(state().mu);
  Event* e = as_event(h);
  if (!e) return CUDA_ERROR_INVALID_HANDLE;
  if (CUresult r = captured_event_check(e)) return r;
  if (refused_by_capture()) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (!e->state->recorded || e->state->sig->done) return CUDA_SUCCESS;
  return CUDA_ERROR_NOT_READY;
}

CUresult event_synchronize(CUevent h) {
  EMU_ENTER("cuEventSynchronize");
  State& s = state();
  std::unique_lock<std::mutex> lk(s.mu);
  Event* e = as_event(h);
  if (!e) return CUDA_ERROR_INVALID_HANDLE;
  if (CUresult r = captured_event_check(e)) return r;
  if (!e->state->recorded) return CUDA_SUCCESS;
  SignalPtr sig = e->state->sig;
  s.cv.wait(lk, [&] { return sig->done; });
  return sticky_error();  // a fault while it waited (invariant 13)
}

CUresult event_elapsed_time(float* ms, CUevent hstart, CUevent hend) {
  EMU_ENTER("cuEventElapsedTime");
  if (!ms) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(state().mu);
  Event* a = as_event(hstart);
  Event* b = as_event(hend);
  if (!a || !b) return CUDA_ERROR_INVALID_HANDLE;
  // Documented: timing disabled or never recorded -> invalid handle; incomplete -> not ready.
  for (Event* e : {a, b}) {
    if (e->state->flags & CU_EVENT_DISABLE_TIMING) return CUDA_ERROR_INVALID_HANDLE;
    if (!e->state->recorded) return CUDA_ERROR_INVALID_HANDLE;
  }
  if (!a->state->sig->done || !b->state->sig->done) return CUDA_ERROR_NOT_READY;
  const auto d = b->state->sig->when - a->state->sig->when;
  *ms = std::chrono::duration<float, std::milli>(d).count();
  return CUDA_SUCCESS;
}

CUresult stream_wait_event(CUstream hs, CUevent he, unsigned int flags) {
  EMU_ENTER("cuStreamWaitEvent");
  if (flags & ~static_cast<unsigned>(CU_EVENT_WAIT_EXTERNAL)) return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  Stream* st = nullptr;
  if (CUresult r = resolve_stream(hs, &st)) return r;
  Event* e = as_event(he);
  if (!e) return CUDA_ERROR_INVALID_HANDLE;
  std::shared_ptr<Capture> cap = captured_in(*e->state);
  if (st->capture) {
    if (st->capture->invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    if (cap == st->capture) {  // join within the capture: add the event's position
      for (Node* n : e->state->capture_nodes) {
        if (std::find(st->frontier.begin(), st->frontier.end(), n) == st->frontier.end()) {
          st->frontier.push_back(n);
          st->frontier_edges.push_back(CUgraphEdgeData{});
        }
      }
      return CUDA_SUCCESS;
    }
    if (cap) {  // an event of another capture
      invalidate(st->capture.get());
      return CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
    }
    if (flags & CU_EVENT_WAIT_EXTERNAL) {
      Work w;
      w.type = CU_GRAPH_NODE_TYPE_WAIT_EVENT;
      w.event = e->state;
      return enqueue(st, std::move(w));
    }
    return CUDA_SUCCESS;  // an event from outside the capture adds no dependency
  }
  if (cap) {
    // Fork: the stream joins the capture of the event, after the event's position.
    if (cap->invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    if (st->kind == Stream::kLegacy) {
      if (legacy_conflict(st->ctx)) return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
      invalidate(cap.get());
      return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    st->capture = cap;
    cap->streams.insert(st);
    st->frontier = e->state->capture_nodes;
    st->frontier_edges.assign(st->frontier.size(), CUgraphEdgeData{});
    return CUDA_SUCCESS;
  }
  if (st->kind == Stream::kLegacy && legacy_conflict(st->ctx))
    return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
  if (!e->state->recorded || e->state->sig->done) return CUDA_SUCCESS;
  Op op;
  op.deps.push_back(e->state->sig);
  push_op(st, std::move(op));
  return CUDA_SUCCESS;
}

struct IpcPayload {
  char magic[8];
  unsigned long long id;
};
static_assert(sizeof(IpcPayload) <= sizeof(CUipcEventHandle), "IPC handle too small");

CUresult ipc_get_event_handle(CUipcEventHandle* ph, CUevent he) {
  EMU_ENTER("cuIpcGetEventHandle");
  if (!ph) return CUDA_ERROR_INVALID_VALUE;
  // Measured on the H200: without a current context the driver answers INVALID_CONTEXT.
  if (!current_context()) return CUDA_ERROR_INVALID_CONTEXT;
  State& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  Event* e = as_event(he);
  if (!e) return CUDA_ERROR_INVALID_HANDLE;
  if (!(e->state->flags & CU_EVENT_INTERPROCESS)) return CUDA_ERROR_INVALID_VALUE;
  IpcPayload p{};
  std::memcpy(p.magic, kIpcMagic, sizeof p.magic);
  p.id = s.next_id++;
  s.ipc_events[p.id] = e->state;
  std::memset(ph, 0, sizeof *ph);
  std::memcpy(ph->reserved, &p, sizeof p);
  return CUDA_SUCCESS;
}

CUresult ipc_open_event_handle(CUevent* phe, CUipcEventHandle handle) {
  EMU_ENTER("cuIpcOpenEventHandle");
  if (!phe) return CUDA_ERROR_INVALID_VALUE;
  if (!current_context()) return CUDA_ERROR_INVALID_CONTEXT;
  IpcPayload p{};
  std::memcpy(&p, handle.reserved, sizeof p);
  if (std::memcmp(p.magic, kIpcMagic, sizeof p.magic) != 0) return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  Context* ctx = nullptr;
  if (CUresult r = usable_current_context(&ctx)) return r;
  auto it = s.ipc_events.find(p.id);
  if (it == s.ipc_events.end()) return CUDA_ERROR_INVALID_VALUE;
  auto es = it->second.lock();
  if (!es) {
    s.ipc_events.erase(it);
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto* e = new Event;
  e->state = std::move(es);
  e->ctx = ctx;
  s.events.insert(e);
  s.live.fetch_add(1);
  *phe = reinterpret_cast<CUevent>(e);
  return CUDA_SUCCESS;
}

}  // namespace

void register_event_entries(std::vector<Entry>& out) {
  out.insert(out.end(), {
                            EMU_ENTRY(cuEventCreate, 2000, event_create),
                            EMU_ENTRY(cuEventDestroy, 2000, event_destroy),
                            EMU_ENTRY(cuEventDestroy, 4000, event_destroy),
                            EMU_ENTRY(cuEventRecord, 2000, event_record),
                            EMU_ENTRY(cuEventRecordWithFlags, 11010, event_record_with_flags),
                            EMU_ENTRY(cuEventQuery, 2000, event_query),
                            EMU_ENTRY(cuEventSynchronize, 2000, event_synchronize),
                            EMU_ENTRY(cuEventElapsedTime, 2000, event_elapsed_time),
                            EMU_ENTRY(cuEventElapsedTime, 12080, event_elapsed_time),
                            EMU_ENTRY(cuStreamWaitEvent, 3020, stream_wait_event),
                            EMU_ENTRY(cuIpcGetEventHandle, 4010, ipc_get_event_handle),
                            EMU_ENTRY(cuIpcOpenEventHandle, 4010, ipc_open_event_handle),
                        });
}

}  // namespace emu

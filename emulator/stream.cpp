// Streams: FIFO workers, legacy/per-thread default streams, the shared callback thread,
// stream queries and host functions.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "emu.hpp"

namespace emu {
namespace {

// ---- the shared callback thread (invariant 4) ----
void callback_thread_main() {
  State& s = state();
  std::unique_lock<std::mutex> lk(s.mu);
  for (;;) {
    s.callback_cv.wait(lk, [&s] { return !s.callbacks.empty(); });
    State::CallbackJob job = std::move(s.callbacks.front());
    s.callbacks.pop_front();
    s.callback_busy = true;
    lk.unlock();
    job.fn();
    job.fn = nullptr;
    lk.lock();
    s.callback_busy = false;
    *job.done = true;
    s.cv.notify_all();
  }
}

// ---- per-thread default streams ----
struct PerThreadStreams {
  std::map<Context*, Stream*> by_ctx;
  ~PerThreadStreams() {
    if (by_ctx.empty()) return;
    State& s = state();
    std::lock_guard<std::mutex> lk(s.mu);
    for (auto& [ctx, st] : by_ctx) {
      auto& v = ctx->streams;
      v.erase(std::remove(v.begin(), v.end(), st), v.end());
      if (st->capture) {
        invalidate(st->capture.get());
        st->capture->streams.erase(st);
        if (st->capture->origin == st) st->capture->origin = nullptr;
        st->capture.reset();
      }
      retire_stream(st);
      st->destroyed = true;
      if (!st->worker_running) delete st;
    }
  }
};
thread_local PerThreadStreams t_ptds;

Stream* per_thread_stream(Context* ctx) {
  auto it = t_ptds.by_ctx.find(ctx);
  if (it != t_ptds.by_ctx.end()) return it->second;
  auto* st = new Stream;
  st->kind = Stream::kPerThread;
  st->ctx = ctx;
  st->id = state().next_id++;
  ctx->streams.push_back(st);
  t_ptds.by_ctx[ctx] = st;
  return st;
}

void worker_loop(Stream* st) {
  State& s = state();
  std::unique_lock<std::mutex> lk(s.mu);
  while (!st->queue.empty()) {
    Op op = std::move(st->queue.front());
    st->queue.pop_front();
    s.cv.wait(lk, [&] {
      for (const auto& d : op.deps)
        if (!d->done) return false;
      return true;
    });
    lk.unlock();
    // After a device fault the work not yet started never runs (invariant 13).
    if (const CUresult fault = sticky_error()) {
      if (op.abandon) op.abandon(fault);
    } else if (op.run) {
      op.run();
    }
    op.run = nullptr;
    op.abandon = nullptr;
    op.deps.clear();
    const auto when = Clock::now();
    lk.lock();
    op.done->when = when;
    op.done->done = true;
    s.cv.notify_all();
  }
  st->worker_running = false;
  --s.workers_running;
  const bool free_it = st->destroyed;
  s.cv.notify_all();
  lk.unlock();
  if (free_it) delete st;
}

// The list of signals that must be done for a stream to be idle.
std::vector<SignalPtr> pending_signals(Stream* st) {
  std::vector<SignalPtr> v;
  if (st->tail && !st->tail->done) v.push_back(st->tail);
  if (st->kind == Stream::kLegacy) {
    for (Stream* b : st->ctx->streams)
      if (b->blocking() && b->tail && !b->tail->done) v.push_back(b->tail);
  }
  return v;
}

// Rejects capture-unsafe queries on a capturing stream (as the H200 does): invalidates the capture.
CUresult capture_unsafe(Stream* st) {
  if (!st->capture) return CUDA_SUCCESS;
  invalidate(st->capture.get());
  return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

// Resolves + capture-unsafe check + legacy-implicit check, for queries that "use" a stream.
CUresult resolve_for_use(CUstream h, Stream** out) {
  if (CUresult r = resolve_stream(h, out)) return r;
  if ((*out)->kind == Stream::kLegacy && legacy_conflict((*out)->ctx))
    return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
  return CUDA_SUCCESS;
}

CUresult stream_create(CUstream* ph, unsigned int flags) {
  EMU_ENTER("cuStreamCreate");
  return create_stream_in(nullptr, ph, flags, 0);
}

CUresult stream_create_with_priority(CUstream* ph, unsigned int flags, int priority) {
  EMU_ENTER("cuStreamCreateWithPriority");
  return create_stream_in(nullptr, ph, flags, priority);
}

CUresult stream_destroy(CUstream h) {
  EMU_ENTER("cuStreamDestroy");
  State& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  if (!valid(s.streams, h)) return CUDA_ERROR_INVALID_HANDLE;
  auto* st = reinterpret_cast<Stream*>(h);
  // Its context was destroyed: kept registered, it answers this (invariant 8).
  if (st->ctx->destroyed) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  s.streams.erase(st);
  auto& v = st->ctx->streams;
  v.erase(std::remove(v.begin(), v.end(), st), v.end());
  leave_capture(st);  // as on the H200: a capture it originated goes, with its payloads
  retire_stream(st);  // its queued work runs on; cuCtxSynchronize and frees wait for it
  st->destroyed = true;
  s.live.fetch_sub(1);
  if (!st->worker_running) delete st;  // else the worker frees it after draining
  return CUDA_SUCCESS;
}

CUresult stream_get_ctx(CUstream h, CUcontext* pctx) {
  EMU_ENTER("cuStreamGetCtx");
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(state().mu);
  Stream* st = nullptr;
  if (CUresult r = resolve_stream(h, &st)) return r;
  *pctx = reinterpret_cast<CUcontext>(st->ctx);  // a green context's: its converted context
  return CUDA_SUCCESS;
}

// As on the H200: a green context's stream answers the primary context and the green context.
CUresult stream_get_ctx_v2(CUstream h, CUcontext* pctx, CUgreenCtx* pgreen) {
  EMU_ENTER("cuStreamGetCtx");
  if (!pctx && !pgreen) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(state().mu);
  Stream* st = nullptr;
  if (CUresult r = resolve_stream(h, &st)) return r;
  if (pctx) *pctx = reinterpret_cast<CUcontext>(resource_owner(st->ctx));
  if (pgreen) *pgreen = reinterpret_cast<CUgreenCtx>(st->ctx->green);
  return CUDA_SUCCESS;
}

// The green context of a stream, or NULL (a stream of a primary or created context).
CUresult stream_get_green_ctx(CUstream h, CUgreenCtx* pgreen) {
  EMU_ENTER("cuStreamGetGreenCtx");
  if (!pgreen) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(state().mu);
  Stream* st = nullptr;
  if (CUresult r = resolve_stream(h, &st)) return r;
  *pgreen = reinterpret_cast<CUgreenCtx>(st->ctx->green);
  return CUDA_SUCCESS;
}

CUresult stream_get_device(CUstream h, CUdevice* dev) {
  EMU_ENTER("cuStreamGetDevice");
  if (!dev) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(state().mu);
  Stream* st = nullptr;
  if (CUresult r = resolve_stream(h, &st)) return r;
  if (CUresult r = capture_unsafe(st)) return r;
  *dev = st->ctx->device;
  return CUDA_SUCCESS;
}

CUresult stream_get_priority(CUstream h, int* priority) {
  EMU_ENTER("cuStreamGetPriority");
  if (!priority) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(state().mu);
  Stream* st = nullptr;
  if (CUresult r = resolve_stream(h, &st)) return r;
  *priority = st->priority;
  return CUDA_SUCCESS;
}

CUresult stream_get_flags(CUstream h, unsigned int* flags) {
  EMU_ENTER("cuStreamGetFlags");
  if (!flags) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(state().mu);
  Stream* st = nullptr;
  if (CUresult r = resolve_stream(h, &st)) return r;
  if (CUresult r = capture_unsafe(st)) return r;
  *flags = st->flags;
  return CUDA_SUCCESS;
}

CUresult stream_get_id(CUstream h, unsigned long long* id) {
  EMU_ENTER("cuStreamGetId");
  if (!id) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(state().mu);
  Stream* st = nullptr;
  if (CUresult r = resolve_stream(h, &st)) return r;
  if (CUresult r = capture_unsafe(st)) return r;
  *id = st->id;
  return CUDA_SUCCESS;
}

CUresult stream_query(CUstream h) {
  EMU_ENTER("cuStreamQuery");
  std::lock_guard<std::mutex> lk(state().mu);
  Stream* st = nullptr;
  if (CUresult r = resolve_for_use(h, &st)) return r;
  if (CUresult r = capture_unsafe(st)) return r;
  return stream_idle(st) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult stream_synchronize(CUstream h) {
  EMU_ENTER("cuStreamSynchronize");
  std::unique_lock<std::mutex> lk(state().mu);
  Stream* st = nullptr;
  if (CUresult r = resolve_for_use(h, &st)) return r;
  if (CUresult r = capture_unsafe(st)) return r;
  stream_wait(lk, st);
  return sticky_error();  // a fault while it waited (invariant 13)
}

CUresult stream_add_callback(CUstream h, CUstreamCallback cb, void* arg, unsigned int flags) {
  EMU_ENTER("cuStreamAddCallback");
  if (!cb || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(state().mu);
  Stream* st = nullptr;
  if (CUresult r = resolve_for_use(h, &st)) return r;
  if (st->capture) {  // As on the H200: unsupported during capture, and the capture is invalidated
    invalidate(st->capture.get());
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  Work w;
  w.type = CU_GRAPH_NODE_TYPE_HOST;
  w.cb = cb;
  w.cb_stream = h;
  w.arg = arg;
  return enqueue(st, std::move(w));
}

CUresult launch_host_func(CUstream h, CUhostFn fn, void* arg) {
  EMU_ENTER("cuLaunchHostFunc");
  if (!fn) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(state().mu);
  Stream* st = nullptr;
  if (CUresult r = resolve_stream(h, &st)) return r;
  Work w;
  w.type = CU_GRAPH_NODE_TYPE_HOST;
  w.fn = fn;
  w.arg = arg;
  return enqueue(st, std::move(w));
}

}  // namespace

CUresult create_stream_in(Context* ctx, CUstream* ph, unsigned flags, int priority) {
  if (!ph) return CUDA_ERROR_INVALID_VALUE;
  if (flags & ~static_cast<unsigned>(CU_STREAM_NON_BLOCKING)) return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  if (!ctx) {
    if (CUresult r = usable_current_context(&ctx)) return r;
  } else if (ctx->destroyed) {
    return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  }
  auto* st = new Stream;
  st->kind = Stream::kCreated;
  st->ctx = ctx;
  st->flags = flags;
  st->priority = std::min(kLeastPriority, std::max(kGreatestPriority, priority));
  st->id = s.next_id++;
  ctx->streams.push_back(st);
  s.streams.insert(st);
  s.live.fetch_add(1);
  *ph = reinterpret_cast<CUstream>(st);
  return CUDA_SUCCESS;
}

void leave_capture(Stream* st) {
  if (st->capture && st->capture->origin == st) {
    discard_capture(st->capture);  // the capture and its payloads go
  } else if (st->capture) {
    invalidate(st->capture.get());
    st->capture->streams.erase(st);
    st->capture.reset();
  }
}

void run_host_work(const Work& w, CUresult status) {
  State& s = state();
  std::unique_lock<std::mutex> lk(s.mu);
  if (!s.callback_thread_started) {
    s.callback_thread_started = true;
    std::thread(callback_thread_main).detach();  // process lifetime (invariant 5)
  }
  bool done = false;
  State::CallbackJob job;
  job.done = &done;
  job.fn = [&w, status] {
    const CallbackScope in_callback;
    if (w.cb) {
      w.cb(w.cb_stream, status, w.arg);
    } else if (w.fn) {
      w.fn(w.arg);
    }
  };
  s.callbacks.push_back(std::move(job));
  s.callback_cv.notify_one();
  s.cv.wait(lk, [&] { return done; });
}

void execute_data_work(const Work& w) {
  switch (w.type) {
    case CU_GRAPH_NODE_TYPE_MEMSET: {
      for (size_t row = 0; row < w.height; ++row) {
        auto* p = reinterpret_cast<unsigned char*>(w.dst + row * w.pitch);
        if (w.elem_size == 1) {
          std::memset(p, static_cast<int>(w.value & 0xff), w.width);
        } else if (w.elem_size == 2) {
          auto v = static_cast<uint16_t>(w.value);
          for (size_t i = 0; i < w.width; ++i) std::memcpy(p + 2 * i, &v, 2);
        } else {
          auto v = static_cast<uint32_t>(w.value);
          for (size_t i = 0; i < w.width; ++i) std::memcpy(p + 4 * i, &v, 4);
        }
      }
      break;
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY:
      if (w.bytes)
        std::memmove(reinterpret_cast<void*>(w.dst), reinterpret_cast<const void*>(w.src), w.bytes);
      break;
    case CU_GRAPH_NODE_TYPE_KERNEL:
      if (w.kernel) run_kernel(*w.kernel);
      break;
    case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP:
      run_mem_op(w);
      break;
    default:
      break;
  }
  if (w.free_memory) std::free(reinterpret_cast<void*>(w.dst));
}

CUresult resolve_stream(CUstream h, Stream** out) {
  if (h == nullptr || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD) {
    Context* ctx = nullptr;
    if (CUresult r = usable_current_context(&ctx)) return r;
    // cuda.h (cuStreamGetCtx_v2): a green context has no per-thread stream.
    if (h == CU_STREAM_PER_THREAD && ctx->kind == Context::kGreen) return CUDA_ERROR_INVALID_HANDLE;
    *out = h == CU_STREAM_PER_THREAD ? per_thread_stream(ctx) : ctx->legacy;
    return CUDA_SUCCESS;
  }
  if (!valid(state().streams, h)) return CUDA_ERROR_INVALID_HANDLE;
  auto* st = reinterpret_cast<Stream*>(h);
  // A stream of a destroyed context (invariant 8). On the H200 a stream of a destroyed created
  // context makes the driver crash; a green context's answers this.
  if (st->ctx->destroyed) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  *out = st;
  return CUDA_SUCCESS;
}

std::vector<SignalPtr> implicit_deps(Stream* st) {
  std::vector<SignalPtr> v;
  if (st->kind == Stream::kLegacy) {
    for (Stream* b : st->ctx->streams)
      if (b->blocking() && b->tail && !b->tail->done) v.push_back(b->tail);
  } else if (st->blocking()) {
    const SignalPtr& t = st->ctx->legacy->tail;
    if (t && !t->done) v.push_back(t);
  }
  return v;
}

namespace {
// Adds the context waits (cuCtxWaitEvent, cuGreenCtxWaitEvent) of c to op, pruning done ones.
void add_context_waits(Context* c, Op& op) {
  auto& w = c->waits;
  w.erase(std::remove_if(w.begin(), w.end(), [](const SignalPtr& p) { return p->done; }), w.end());
  op.deps.insert(op.deps.end(), w.begin(), w.end());
}
}  // namespace

void push_op(Stream* st, Op op) {
  State& s = state();
  for (auto& d : implicit_deps(st)) op.deps.push_back(std::move(d));
  add_context_waits(st->ctx, op);
  if (st->ctx->kind == Context::kGreen) add_context_waits(resource_owner(st->ctx), op);
  if (!op.done) op.done = std::make_shared<Signal>();
  st->tail = op.done;
  st->queue.push_back(std::move(op));
  if (!st->worker_running) {
    st->worker_running = true;
    ++s.workers_running;
    std::thread(worker_loop, st).detach();
  }
}

CUresult enqueue(Stream* st, Work w, std::function<void()> run, SignalPtr* done_out) {
  if (st->capture) {
    if (st->capture->invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    Node* n = add_node(st->capture->graph, std::move(w), st->frontier);
    st->frontier.assign(1, n);
    st->frontier_edges.assign(1, CUgraphEdgeData{});
    return CUDA_SUCCESS;
  }
  if (st->kind == Stream::kLegacy && legacy_conflict(st->ctx))
    return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
  Op op;
  if (run) {
    op.run = std::move(run);
  } else if (w.type == CU_GRAPH_NODE_TYPE_HOST) {
    op.run = [w] { run_host_work(w); };
    // cuda.h: a callback is called exactly once, with the error after a device fault; a host
    // function is not called then.
    if (w.cb) op.abandon = [w](CUresult fault) { run_host_work(w, fault); };
  } else {
    op.run = [w] { execute_data_work(w); };
    // cuMemFreeAsync's memory is already unregistered: abandoned, it is still released (a dead
    // context's memory goes with it).
    if (w.free_memory) op.abandon = [w](CUresult) { std::free(reinterpret_cast<void*>(w.dst)); };
  }
  if (done_out) {
    op.done = std::make_shared<Signal>();
    *done_out = op.done;
  }
  push_op(st, std::move(op));
  return CUDA_SUCCESS;
}

bool stream_idle(Stream* st) { return pending_signals(st).empty(); }

void retire_stream(Stream* st) {
  if (st->tail && !st->tail->done) st->ctx->retired.push_back(st->tail);
}

void stream_wait(std::unique_lock<std::mutex>& lk, Stream* st) {
  auto sigs = pending_signals(st);
  state().cv.wait(lk, [&] {
    for (const auto& d : sigs)
      if (!d->done) return false;
    return true;
  });
}

void register_stream_entries(std::vector<Entry>& out) {
  out.insert(out.end(),
             {
                 EMU_ENTRY(cuStreamCreate, 2000, stream_create),
                 EMU_ENTRY(cuStreamCreateWithPriority, 5050, stream_create_with_priority),
                 EMU_ENTRY(cuStreamDestroy, 2000, stream_destroy),
                 EMU_ENTRY(cuStreamDestroy, 4000, stream_destroy),
                 EMU_ENTRY(cuStreamGetCtx, 9020, stream_get_ctx),
                 EMU_ENTRY(cuStreamGetCtx, 12050, stream_get_ctx_v2),
                 EMU_ENTRY(cuStreamGetGreenCtx, 12040, stream_get_green_ctx),
                 EMU_ENTRY(cuStreamGetDevice, 12080, stream_get_device),
                 EMU_ENTRY(cuStreamGetPriority, 5050, stream_get_priority),
                 EMU_ENTRY(cuStreamGetFlags, 5050, stream_get_flags),
                 EMU_ENTRY(cuStreamGetId, 12000, stream_get_id),
                 EMU_ENTRY(cuStreamQuery, 2000, stream_query),
                 EMU_ENTRY(cuStreamSynchronize, 2000, stream_synchronize),
                 EMU_ENTRY(cuStreamAddCallback, 5000, stream_add_callback),
                 EMU_ENTRY(cuLaunchHostFunc, 10000, launch_host_func),
             });
}

}  // namespace emu

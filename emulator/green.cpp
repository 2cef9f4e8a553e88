// Green contexts: SM resources and their splits, resource descriptors, green contexts with
// their converted contexts and streams, and recording / waiting on a (green) context.
//
// Model (each rule measured on an H200, driver 580; the memory kept per green context on an
// H100, driver 580): a green context's CUcontext
// (cuCtxFromGreenCtx) is a Context of kind kGreen owning the green context's streams and its
// own default (legacy) stream; it shares the primary context's events and modules
// (resource_owner). cuStreamGetCtx answers it for a green stream, cuStreamGetCtx_v2 the primary
// context and the green context. SM splits use the granularity of compute capability 9.x (8,
// or 2 with CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING) and make floor(smCount / size)
// groups at most (the H200 makes fewer: its topology limits them). Every cuGreenCtxCreate keeps
// 4 MiB of device memory for the process, destroyed or not, as the driver does
// (custream_emu_green_contexts_created, custream_emu_green_context_bytes).
#include <algorithm>
#include <cstring>

#include "emu.hpp"

#define EMU_EXPORT extern "C" __attribute__((visibility("default")))

namespace emu {
namespace {

constexpr unsigned kGranularity = 8;          // compute capability 9.x: multiples of 8 SMs
constexpr unsigned kFineGranularity = 2;      // ... of 2 when co-scheduling is ignored
constexpr unsigned kRemaining = 0xffffffffu;  // ResourceTag::index of a split's remaining SMs
constexpr char kTagMagic[4] = {'c', 's', 'r', 's'};

/// What the emulator keeps in a CUdevResource's internal bytes (copied with it by value).
struct ResourceTag {
  char magic[4];
  int device;                // -1: unknown
  unsigned long long split;  // 0: a device's or a context's resources; else the split's number
  unsigned index;            // the group's index in its split, or kRemaining
};
static_assert(sizeof(ResourceTag) <= sizeof(CUdevResource::_internal_padding),
              "ResourceTag does not fit in CUdevResource");

std::atomic<unsigned long long> g_next_split{1};

// What the driver keeps of every green context it creates and never gives back, destroyed or
// not (measured on an H100, driver 580: 100 cuGreenCtxCreate / cuGreenCtxDestroy cycles cost
// 400 MiB of free device memory and 168 MB of resident host memory).
constexpr long long kGreenKeptDeviceBytes = 4ll << 20;
std::atomic<long> g_green_created{0};

bool device_exists(CUdevice dev) { return dev >= 0 && dev < state().device_count; }

ResourceTag tag_of(const CUdevResource& r) {
  ResourceTag t{};
  std::memcpy(&t, r._internal_padding, sizeof t);
  if (std::memcmp(t.magic, kTagMagic, sizeof t.magic) != 0) {
    t = ResourceTag{};  // made by the program, not by the emulator
    t.device = -1;
  }
  return t;
}

// As on the H200: a device's or a context's SM resource says minSmPartitionSize 8 and
// smCoscheduledAlignment 8 (also for its 132 SMs); an output of a split (split != 0) says 0 and 0.
void make_sm_resource(CUdevResource* out, unsigned sms, int device, unsigned long long split,
                      unsigned index) {
  std::memset(out, 0, sizeof *out);
  out->type = CU_DEV_RESOURCE_TYPE_SM;
  out->sm.smCount = sms;
  if (split == 0) {
    out->sm.minSmPartitionSize = kGranularity;
    out->sm.smCoscheduledAlignment = kGranularity;
  }
  ResourceTag t{};
  std::memcpy(t.magic, kTagMagic, sizeof t.magic);
  t.device = device;
  t.split = split;
  t.index = index;
  std::memcpy(out->_internal_padding, &t, sizeof t);
}

/// The green context of a handle (mu held): INVALID_CONTEXT when it is none (NULL included),
/// CONTEXT_IS_DESTROYED when it was destroyed (invariant 8).
CUresult lookup_green(CUgreenCtx h, GreenCtx** out) {
  State& s = state();
  {
    std::lock_guard<std::mutex> lk(s.ctx_mu);
    if (!valid(s.green_contexts, h)) return CUDA_ERROR_INVALID_CONTEXT;
  }
  auto* g = reinterpret_cast<GreenCtx*>(h);
  if (g->ctx->destroyed) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  *out = g;
  return CUDA_SUCCESS;
}

Event* lookup_event(CUevent h) {
  return valid(state().events, h) ? reinterpret_cast<Event*>(h) : nullptr;
}

// ---- resources ----

CUresult device_get_dev_resource(CUdevice dev, CUdevResource* res, CUdevResourceType type) {
  EMU_ENTER("cuDeviceGetDevResource");
  if (!device_exists(dev)) return CUDA_ERROR_INVALID_DEVICE;
  if (!res) return CUDA_ERROR_INVALID_VALUE;
  if (type != CU_DEV_RESOURCE_TYPE_SM) return CUDA_ERROR_INVALID_RESOURCE_TYPE;
  make_sm_resource(res, device_sm_count(dev), dev, 0, 0);
  return CUDA_SUCCESS;
}

// A primary or created context: the whole device; a green context's: its SMs. NULL: the current
// context.
CUresult ctx_get_dev_resource(CUcontext ctx, CUdevResource* res, CUdevResourceType type) {
  EMU_ENTER("cuCtxGetDevResource");
  auto* c = ctx ? reinterpret_cast<Context*>(ctx) : current_context();
  if (CUresult r = context_status(c)) return r;
  if (!res) return CUDA_ERROR_INVALID_VALUE;
  if (type != CU_DEV_RESOURCE_TYPE_SM) return CUDA_ERROR_INVALID_RESOURCE_TYPE;
  const unsigned sms = c->kind == Context::kGreen ? c->green->sm_count : device_sm_count(c->device);
  make_sm_resource(res, sms, c->device, 0, 0);
  return CUDA_SUCCESS;
}

CUresult green_ctx_get_dev_resource(CUgreenCtx h, CUdevResource* res, CUdevResourceType type) {
  EMU_ENTER("cuGreenCtxGetDevResource");
  std::lock_guard<std::mutex> lk(state().mu);
  GreenCtx* g = nullptr;
  if (CUresult r = lookup_green(h, &g)) return r;
  if (!res) return CUDA_ERROR_INVALID_VALUE;
  if (type != CU_DEV_RESOURCE_TYPE_SM) return CUDA_ERROR_INVALID_RESOURCE_TYPE;
  make_sm_resource(res, g->sm_count, g->device, 0, 0);
  return CUDA_SUCCESS;
}

// Groups of minCount SMs rounded up to the granularity (at least the granularity); as many as
// asked for and possible (floor(smCount / size)); the rest in `remaining`. When the rounding
// leaves no whole group, one group of every SM of the input (the H200: minCount 130 or 132 of
// its 132 SMs, one group of 132). The outputs of a split (groups and remaining) cannot be split
// again (cuda.h; the H200 answers INVALID_RESOURCE_CONFIGURATION, also to the count): a green
// context's resources can.
CUresult dev_sm_resource_split_by_count(CUdevResource* result, unsigned int* nb_groups,
                                        const CUdevResource* input, CUdevResource* remaining,
                                        unsigned int use_flags, unsigned int min_count) {
  EMU_ENTER("cuDevSmResourceSplitByCount");
  if (!nb_groups || !input) return CUDA_ERROR_INVALID_VALUE;
  if (input->type != CU_DEV_RESOURCE_TYPE_SM) return CUDA_ERROR_INVALID_RESOURCE_TYPE;
  const ResourceTag in = tag_of(*input);
  if (in.split != 0) return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
  if (result && *nb_groups == 0) return CUDA_ERROR_INVALID_VALUE;
  const unsigned total = input->sm.smCount;
  if (total == 0 || min_count > total) return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
  // Flag bits the emulator does not know (and MAX_POTENTIAL_CLUSTER_SIZE) change nothing, as on
  // the H200, where unknown bits are ignored.
  const unsigned gran = (use_flags & CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING)
                            ? kFineGranularity
                            : kGranularity;
  unsigned size = std::max(gran, (min_count + gran - 1) / gran * gran);
  unsigned possible = total / size;
  if (possible == 0) {
    size = total;
    possible = 1;
  }
  if (!result) {
    *nb_groups = possible;
    return CUDA_SUCCESS;
  }
  const unsigned n = std::min(*nb_groups, possible);
  const unsigned long long split = g_next_split.fetch_add(1);
  for (unsigned i = 0; i < n; ++i) make_sm_resource(&result[i], size, in.device, split, i);
  if (remaining) make_sm_resource(remaining, total - n * size, in.device, split, kRemaining);
  *nb_groups = n;
  return CUDA_SUCCESS;
}

// One descriptor of SM resources: one resource, or several outputs of one split (cuda.h).
CUresult dev_resource_generate_desc(CUdevResourceDesc* ph, CUdevResource* resources,
                                    unsigned int n) {
  EMU_ENTER("cuDevResourceGenerateDesc");
  if (!ph || !resources || n == 0) return CUDA_ERROR_INVALID_VALUE;
  const ResourceTag first = tag_of(resources[0]);
  std::vector<unsigned> indices;
  unsigned sms = 0;
  for (unsigned i = 0; i < n; ++i) {
    if (resources[i].type != CU_DEV_RESOURCE_TYPE_SM) return CUDA_ERROR_INVALID_RESOURCE_TYPE;
    const ResourceTag t = tag_of(resources[i]);
    if (n > 1) {
      if (t.device != first.device || t.split == 0 || t.split != first.split ||
          std::find(indices.begin(), indices.end(), t.index) != indices.end())
        return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
      indices.push_back(t.index);
    }
    sms += resources[i].sm.smCount;
  }
  if (sms == 0) return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
  auto* d = new ResourceDesc;  // kept for the process (invariant 8): no call destroys one
  d->device = first.device;
  d->sm_count = sms;
  State& s = state();
  {
    std::lock_guard<std::mutex> lk(s.ctx_mu);
    s.resource_descs.insert(d);
  }
  *ph = reinterpret_cast<CUdevResourceDesc>(d);
  return CUDA_SUCCESS;
}

// ---- green contexts ----

// Retains the primary context (cuda.h) and leaves the current context alone (as on the H200).
CUresult green_ctx_create(CUgreenCtx* ph, CUdevResourceDesc desc, CUdevice dev,
                          unsigned int flags) {
  EMU_ENTER("cuGreenCtxCreate");
  if (!ph) return CUDA_ERROR_INVALID_VALUE;
  if (!device_exists(dev)) return CUDA_ERROR_INVALID_DEVICE;
  // CU_GREEN_CTX_DEFAULT_STREAM is required (the H200 refuses 0).
  if (flags != CU_GREEN_CTX_DEFAULT_STREAM) return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  {
    std::lock_guard<std::mutex> clk(s.ctx_mu);
    if (!valid(s.resource_descs, desc)) return CUDA_ERROR_INVALID_VALUE;
  }
  const auto* d = reinterpret_cast<const ResourceDesc*>(desc);
  if (d->device >= 0 && d->device != dev) return CUDA_ERROR_INVALID_VALUE;  // another device's
  auto* g = new GreenCtx;
  g->device = dev;
  g->sm_count = d->sm_count;
  auto* c = new Context;
  c->kind = Context::kGreen;
  c->device = dev;
  c->id = s.next_id++;
  c->green = g;
  c->legacy = new Stream;
  c->legacy->kind = Stream::kLegacy;
  c->legacy->ctx = c;
  c->legacy->id = s.next_id++;
  g->ctx = c;
  Context* primary = s.primary[static_cast<size_t>(dev)];
  ++primary->refcount;
  primary->greens.push_back(c);
  {
    std::lock_guard<std::mutex> clk(s.ctx_mu);
    s.contexts.insert(c);
    s.green_contexts.insert(g);
  }
  s.live.fetch_add(1);
  g_green_created.fetch_add(1);  // its memory kept for the process (custream_emu_green_*)
  *ph = reinterpret_cast<CUgreenCtx>(g);
  return CUDA_SUCCESS;
}

// Waits for the green context's work and destroys it, releasing the primary context. Its
// streams are not destroyed (cuda.h: they leak, and stay counted as live objects): they, its
// handle and its converted context answer CUDA_ERROR_CONTEXT_IS_DESTROYED. Where the converted
// context is current it stays current (dangling), as on the H200.
CUresult green_ctx_destroy(CUgreenCtx h) {
  EMU_ENTER("cuGreenCtxDestroy");
  State& s = state();
  std::unique_lock<std::mutex> lk(s.mu);
  GreenCtx* g = nullptr;
  if (CUresult r = lookup_green(h, &g)) return r;
  Context* c = g->ctx;
  context_wait(lk, c);
  if (c->destroyed) return CUDA_ERROR_CONTEXT_IS_DESTROYED;  // raced with another destroy
  {
    std::lock_guard<std::mutex> clk(s.ctx_mu);
    c->destroyed = true;
  }
  for (Stream* st : c->streams) leave_capture(st);
  c->waits.clear();
  Context* primary = resource_owner(c);
  auto& greens = primary->greens;
  greens.erase(std::remove(greens.begin(), greens.end(), c), greens.end());
  if (primary->refcount > 0) --primary->refcount;
  s.live.fetch_sub(1);
  return CUDA_SUCCESS;
}

// The same CUcontext every time for one green context.
CUresult ctx_from_green_ctx(CUcontext* pctx, CUgreenCtx h) {
  EMU_ENTER("cuCtxFromGreenCtx");
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(state().mu);
  GreenCtx* g = nullptr;
  if (CUresult r = lookup_green(h, &g)) return r;
  *pctx = reinterpret_cast<CUcontext>(g->ctx);
  return CUDA_SUCCESS;
}

// Ignores the current context (cuda.h); CU_STREAM_NON_BLOCKING is required (the H200 refuses
// 0); the priority is clamped as for every stream.
CUresult green_ctx_stream_create(CUstream* ph, CUgreenCtx h, unsigned int flags, int priority) {
  EMU_ENTER("cuGreenCtxStreamCreate");
  if (!ph) return CUDA_ERROR_INVALID_VALUE;
  Context* c = nullptr;
  {
    std::lock_guard<std::mutex> lk(state().mu);
    GreenCtx* g = nullptr;
    if (CUresult r = lookup_green(h, &g)) return r;
    c = g->ctx;
  }
  if (!(flags & CU_STREAM_NON_BLOCKING)) return CUDA_ERROR_INVALID_VALUE;
  return create_stream_in(c, ph, flags, priority);  // checks again that c is not destroyed
}

// NULL: the green context whose converted context is current (cuda.h).
CUresult green_ctx_get_id(CUgreenCtx h, unsigned long long* id) {
  EMU_ENTER("cuGreenCtxGetId");
  if (!id) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(state().mu);
  if (!h) {
    Context* c = current_context();
    if (!c || c->kind != Context::kGreen) return CUDA_ERROR_INVALID_CONTEXT;
    if (c->destroyed) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    *id = c->id;
    return CUDA_SUCCESS;
  }
  GreenCtx* g = nullptr;
  if (CUresult r = lookup_green(h, &g)) return r;
  *id = g->ctx->id;
  return CUDA_SUCCESS;
}

// ---- recording and waiting on a context (mu held) ----

// cuda.h: refused (and the captures invalidated) while a stream of the context captures.
bool refuse_for_capture(const std::vector<Context*>& covered) {
  bool refused = false;
  for (const auto& cap : state().captures) {
    for (Stream* st : cap->streams) {
      if (std::find(covered.begin(), covered.end(), st->ctx) != covered.end()) {
        invalidate(cap.get());
        refused = true;
        break;
      }
    }
  }
  return refused;
}

// The event completes when the work submitted so far to the streams of c (for a primary
// context, also of its green contexts) has completed: an Op depending on their tails, run by a
// one-op stream of its own that its worker frees.
CUresult record_on_context(Context* c, Event* e) {
  State& s = state();
  const std::vector<Context*> covered = covered_contexts(c);
  if (refuse_for_capture(covered)) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  Op op;
  for (Context* x : covered) {
    if (x->legacy->tail && !x->legacy->tail->done) op.deps.push_back(x->legacy->tail);
    for (Stream* st : x->streams)
      if (st->tail && !st->tail->done) op.deps.push_back(st->tail);
  }
  op.done = std::make_shared<Signal>();
  e->state->sig = op.done;
  e->state->recorded = true;
  e->state->capture.reset();
  e->state->capture_nodes.clear();
  auto* st = new Stream;  // not registered: no handle; freed by its worker (destroyed)
  st->kind = Stream::kCreated;
  st->flags = CU_STREAM_NON_BLOCKING;
  st->ctx = c;
  st->id = s.next_id++;
  st->destroyed = true;
  push_op(st, std::move(op));  // also after the context's earlier waits
  return CUDA_SUCCESS;
}

// Work submitted later to the streams of c (for a primary context, also of its green
// contexts) waits for the event's latest record.
CUresult wait_on_context(Context* c, Event* e) {
  State& s = state();
  if (refuse_for_capture(covered_contexts(c))) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  auto cap = e->state->capture.lock();
  if (cap && s.captures.count(cap)) {  // recorded in an active capture
    invalidate(cap.get());
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  if (!e->state->recorded || e->state->sig->done) return CUDA_SUCCESS;
  c->waits.push_back(e->state->sig);
  return CUDA_SUCCESS;
}

// An event of the context, or of a context sharing its resources (a green context's and its
// primary context's), as on the H200; another's: CUDA_ERROR_INVALID_HANDLE (cuda.h).
CUresult recordable(Context* c, Event* e) {
  if (!e) return CUDA_ERROR_INVALID_HANDLE;
  if (e->ctx && resource_owner(e->ctx) != resource_owner(c)) return CUDA_ERROR_INVALID_HANDLE;
  return CUDA_SUCCESS;
}

CUresult ctx_record_event(CUcontext ctx, CUevent ev) {
  EMU_ENTER("cuCtxRecordEvent");
  auto* c = ctx ? reinterpret_cast<Context*>(ctx) : current_context();
  if (CUresult r = context_status(c)) return r;
  std::lock_guard<std::mutex> lk(state().mu);
  if (c->destroyed) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  Event* e = lookup_event(ev);
  if (CUresult r = recordable(c, e)) return r;
  return record_on_context(c, e);
}

CUresult ctx_wait_event(CUcontext ctx, CUevent ev) {
  EMU_ENTER("cuCtxWaitEvent");
  auto* c = ctx ? reinterpret_cast<Context*>(ctx) : current_context();
  if (CUresult r = context_status(c)) return r;
  std::lock_guard<std::mutex> lk(state().mu);
  if (c->destroyed) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  Event* e = lookup_event(ev);
  if (!e) return CUDA_ERROR_INVALID_HANDLE;  // of any context or device (cuda.h)
  return wait_on_context(c, e);
}

CUresult green_ctx_record_event(CUgreenCtx h, CUevent ev) {
  EMU_ENTER("cuGreenCtxRecordEvent");
  std::lock_guard<std::mutex> lk(state().mu);
  GreenCtx* g = nullptr;
  if (CUresult r = lookup_green(h, &g)) return r;
  Event* e = lookup_event(ev);
  if (CUresult r = recordable(g->ctx, e)) return r;
  return record_on_context(g->ctx, e);
}

CUresult green_ctx_wait_event(CUgreenCtx h, CUevent ev) {
  EMU_ENTER("cuGreenCtxWaitEvent");
  std::lock_guard<std::mutex> lk(state().mu);
  GreenCtx* g = nullptr;
  if (CUresult r = lookup_green(h, &g)) return r;
  Event* e = lookup_event(ev);
  if (!e) return CUDA_ERROR_INVALID_HANDLE;
  return wait_on_context(g->ctx, e);
}

}  // namespace

void register_green_entries(std::vector<Entry>& out) {
  out.insert(out.end(),
             {
                 EMU_ENTRY(cuDeviceGetDevResource, 12040, device_get_dev_resource),
                 EMU_ENTRY(cuCtxGetDevResource, 12040, ctx_get_dev_resource),
                 EMU_ENTRY(cuGreenCtxGetDevResource, 12040, green_ctx_get_dev_resource),
                 EMU_ENTRY(cuDevSmResourceSplitByCount, 12040, dev_sm_resource_split_by_count),
                 EMU_ENTRY(cuDevResourceGenerateDesc, 12040, dev_resource_generate_desc),
                 EMU_ENTRY(cuGreenCtxCreate, 12040, green_ctx_create),
                 EMU_ENTRY(cuGreenCtxDestroy, 12040, green_ctx_destroy),
                 EMU_ENTRY(cuCtxFromGreenCtx, 12040, ctx_from_green_ctx),
                 EMU_ENTRY(cuGreenCtxRecordEvent, 12040, green_ctx_record_event),
                 EMU_ENTRY(cuGreenCtxWaitEvent, 12040, green_ctx_wait_event),
                 EMU_ENTRY(cuGreenCtxGetId, 12090, green_ctx_get_id),
                 EMU_ENTRY(cuCtxRecordEvent, 12050, ctx_record_event),
                 EMU_ENTRY(cuCtxWaitEvent, 12050, ctx_wait_event),
                 EMU_ENTRY(cuGreenCtxStreamCreate, 12050, green_ctx_stream_create),
             });
}

}  // namespace emu

EMU_EXPORT long custream_emu_green_contexts_created(void) { return emu::g_green_created.load(); }

EMU_EXPORT long long custream_emu_green_context_bytes(void) {
  return emu::g_green_created.load() * emu::kGreenKeptDeviceBytes;
}

// Devices, primary contexts and the per-thread context stack.
#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>

#include "emu.hpp"

namespace emu {
namespace {

// The thread's context stack. Trivially destructible on purpose: no heap block is freed at
// thread exit, where ThreadSanitizer cannot see glibc's TLS teardown and reported races.
struct ContextStack {
  static constexpr int kCapacity = 64;
  Context* items[kCapacity];
  int size;
  bool empty() const { return size == 0; }
  Context*& back() { return items[size - 1]; }
  void pop_back() { --size; }
  bool push_back(Context* c) {
    if (size == kCapacity) return false;
    items[size++] = c;
    return true;
  }
};
thread_local ContextStack t_stack;  // zero-initialised

constexpr size_t kTotalMem = size_t{150} * 1024 * 1024 * 1024;  // ~H200 (141 GiB usable)

bool valid_device(CUdevice d) { return d >= 0 && d < state().device_count; }

CUresult device_get_count(int* count) {
  EMU_ENTER("cuDeviceGetCount");
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  *count = state().device_count;
  return CUDA_SUCCESS;
}

CUresult device_get(CUdevice* dev, int ordinal) {
  EMU_ENTER("cuDeviceGet");
  if (!dev) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *dev = ordinal;
  return CUDA_SUCCESS;
}

CUresult device_get_name(char* name, int len, CUdevice dev) {
  EMU_ENTER("cuDeviceGetName");
  if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::snprintf(name, static_cast<size_t>(len), "custream emulated device %d", dev);
  return CUDA_SUCCESS;
}

bool attribute_value(CUdevice_attribute a, CUdevice dev, int* v) {
  switch (a) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
      *v = 9;
      return true;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
      *v = 0;
      return true;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
      *v = 132;
      return true;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
      *v = 1024;
      return true;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X:
      *v = 1024;
      return true;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y:
      *v = 1024;
      return true;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z:
      *v = 64;
      return true;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X:
      *v = INT_MAX;
      return true;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y:
      *v = 65535;
      return true;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z:
      *v = 65535;
      return true;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE:
      *v = 32;
      return true;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK:
      *v = 49152;
      return true;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
      *v = 232448;
      return true;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR:
      *v = 233472;
      return true;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK:
      *v = 65536;
      return true;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR:
      *v = 65536;
      return true;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR:
      *v = 2048;
      return true;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR:
      *v = 32;
      return true;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY:
      *v = 65536;
      return true;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE:
      *v = 1980000;
      return true;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE:
      *v = 2619000;
      return true;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH:
      *v = 6144;
      return true;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE:
      *v = 62914560;
      return true;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT:
      *v = 5;
      return true;
    case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP:
      *v = 1;
      return true;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
      *v = 1;
      return true;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS:
      *v = 1;
      return true;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY:
      *v = 1;
      return true;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM:
      *v = 1;
      return true;
    // Stream memory operations (memops.cpp): the v2 ones with 64-bit words and NOR; not the
    // v1 ABIs (the H200 reads 0 for them, unless the kernel module enables them), and no
    // remote-write flush.
    case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1:
    case CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS_V1:
    case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR_V1:
    case CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES:
      *v = 0;
      return true;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS:
    case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR:
      *v = 1;
      return true;
    case CU_DEVICE_ATTRIBUTE_INTEGRATED:
      *v = 0;
      return true;
    case CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT:
      *v = 0;
      return true;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE:
      *v = CU_COMPUTEMODE_DEFAULT;
      return true;
    case CU_DEVICE_ATTRIBUTE_ECC_ENABLED:
      *v = 1;
      return true;
    case CU_DEVICE_ATTRIBUTE_TCC_DRIVER:
      *v = 0;
      return true;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID:
      *v = 0x18 + dev;
      return true;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID:
      *v = 0;
      return true;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID:
      *v = 0;
      return true;
    case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED:
      *v = 1;
      return true;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED:
      *v = 1;
      return true;
    case CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED:
      *v = 1;
      return true;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY:
      *v = 1;
      return true;
    case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD:
      *v = 0;
      return true;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS:
      *v = 1;
      return true;
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH:
    case CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH:  // compute capability 9.0, as the H200
      *v = 1;
      return true;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
      *v = 1;
      return true;
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
      *v = 1;
      return true;
    case CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED:
      *v = 0;
      return true;
    case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS:
      *v = 0;
      return true;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT:
      *v = 512;
      return true;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT:
      *v = 32;
      return true;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH:
      *v = INT_MAX;
      return true;
    default:
      return false;
  }
}

CUresult device_get_attribute(int* pi, CUdevice_attribute attrib, CUdevice dev) {
  EMU_ENTER("cuDeviceGetAttribute");
  if (!pi) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  return attribute_value(attrib, dev, pi) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult device_total_mem(size_t* bytes, CUdevice dev) {
  EMU_ENTER("cuDeviceTotalMem");
  if (!bytes) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = kTotalMem;
  return CUDA_SUCCESS;
}

CUresult device_total_mem_v1(unsigned int* bytes, CUdevice dev) {
  EMU_ENTER("cuDeviceTotalMem");
  if (!bytes) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  return CUDA_ERROR_NOT_SUPPORTED;  // the 32-bit ABI cannot describe this device
}

CUresult primary_retain(CUcontext* pctx, CUdevice dev) {
  EMU_ENTER("cuDevicePrimaryCtxRetain");
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  State& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  Context* c = s.primary[static_cast<size_t>(dev)];
  ++c->refcount;
  *pctx = reinterpret_cast<CUcontext>(c);
  return CUDA_SUCCESS;
}

CUresult primary_release(CUdevice dev) {
  EMU_ENTER("cuDevicePrimaryCtxRelease");
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  State& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  Context* c = s.primary[static_cast<size_t>(dev)];
  if (c->refcount == 0) return CUDA_ERROR_INVALID_CONTEXT;
  --c->refcount;
  return CUDA_SUCCESS;
}

CUresult primary_get_state(CUdevice dev, unsigned int* flags, int* active) {
  EMU_ENTER("cuDevicePrimaryCtxGetState");
  if (!flags || !active) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  State& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  Context* c = s.primary[static_cast<size_t>(dev)];
  *flags = c->flags;
  *active = c->refcount > 0 ? 1 : 0;
  return CUDA_SUCCESS;
}

CUresult primary_reset(CUdevice dev) {
  EMU_ENTER("cuDevicePrimaryCtxReset");
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  return CUDA_SUCCESS;
}

CUresult ctx_get_current(CUcontext* pctx) {
  EMU_ENTER("cuCtxGetCurrent");
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  *pctx = reinterpret_cast<CUcontext>(current_context());
  return CUDA_SUCCESS;
}

// A destroyed context answers CUDA_ERROR_CONTEXT_IS_DESTROYED. (The H200 answers CUDA_SUCCESS
// for the converted context of a destroyed green context, and the process then aborts on a
// double free inside the driver, in one run of three: the emulator reports the error instead.)
CUresult ctx_set_current(CUcontext ctx) {
  EMU_ENTER("cuCtxSetCurrent");
  auto* c = reinterpret_cast<Context*>(ctx);
  if (c) {
    if (CUresult r = context_status(c)) return r;
  }
  if (!c) {
    if (!t_stack.empty()) t_stack.pop_back();
  } else if (t_stack.empty()) {
    (void)t_stack.push_back(c);  // an empty stack has room
  } else {
    t_stack.back() = c;
  }
  return CUDA_SUCCESS;
}

CUresult ctx_push_current(CUcontext ctx) {
  EMU_ENTER("cuCtxPushCurrent");
  auto* c = reinterpret_cast<Context*>(ctx);
  if (CUresult r = context_status(c)) return r;                // as cuCtxSetCurrent
  if (!t_stack.push_back(c)) return CUDA_ERROR_OUT_OF_MEMORY;  // 64 contexts deep
  return CUDA_SUCCESS;
}

CUresult ctx_pop_current(CUcontext* pctx) {
  EMU_ENTER("cuCtxPopCurrent");
  if (t_stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  if (pctx) *pctx = reinterpret_cast<CUcontext>(t_stack.back());
  t_stack.pop_back();
  return CUDA_SUCCESS;
}

CUresult ctx_get_device(CUdevice* dev) {
  EMU_ENTER("cuCtxGetDevice");
  if (!dev) return CUDA_ERROR_INVALID_VALUE;
  Context* c = current_context();
  if (CUresult r = context_status(c)) return r;
  *dev = c->device;
  return CUDA_SUCCESS;
}

CUresult ctx_get_device_v2(CUdevice* dev, CUcontext ctx) {
  EMU_ENTER("cuCtxGetDevice");
  if (!dev) return CUDA_ERROR_INVALID_VALUE;
  auto* c = ctx ? reinterpret_cast<Context*>(ctx) : current_context();
  // A destroyed created context: the H200 crashes here (SIGSEGV); the emulator says so.
  if (CUresult r = context_status(c)) return r;
  *dev = c->device;
  return CUDA_SUCCESS;
}

// Synchronises c and, for a primary context, its green contexts (cuda.h).
CUresult ctx_synchronize_impl(Context* c) {
  if (CUresult r = context_status(c)) return r;
  State& s = state();
  std::unique_lock<std::mutex> lk(s.mu);
  // Synchronising the context while a capture that forbids it is under way is unsupported
  // and invalidates that capture (as on the H200: global mode; thread-local mode of this thread).
  const std::vector<Context*> covered = covered_contexts(c);
  bool refused = false;
  for (const auto& cap : s.captures) {
    if (cap->invalidated || std::find(covered.begin(), covered.end(), cap->ctx) == covered.end())
      continue;
    if (cap->mode == CU_STREAM_CAPTURE_MODE_GLOBAL ||
        (cap->mode == CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
         cap->thread == std::this_thread::get_id())) {
      invalidate(cap.get());
      refused = true;
    }
  }
  if (refused) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  context_wait(lk, c);
  return sticky_error();  // a fault while it waited (invariant 13)
}

CUresult ctx_synchronize() {
  EMU_ENTER("cuCtxSynchronize");
  return ctx_synchronize_impl(current_context());
}

CUresult ctx_synchronize_v2(CUcontext ctx) {
  EMU_ENTER("cuCtxSynchronize");
  auto* c = ctx ? reinterpret_cast<Context*>(ctx) : current_context();
  return ctx_synchronize_impl(c);
}

// cuCtxCreate's flags (cuda.h, CUctx_flags): bits of CU_CTX_FLAGS_MASK only, and at most one
// scheduling policy.
bool valid_ctx_flags(unsigned flags) {
  if (flags & ~static_cast<unsigned>(CU_CTX_FLAGS_MASK)) return false;
  const unsigned sched = flags & CU_CTX_SCHED_MASK;
  return (sched & (sched - 1)) == 0;  // AUTO, SPIN, YIELD or BLOCKING_SYNC
}

// cuCtxCreate: a new context of `dev`, pushed onto the calling thread's stack (as the
// driver does), with its own legacy stream. Flags it does not know: CUDA_ERROR_INVALID_VALUE,
// as the driver.
CUresult ctx_create_impl(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  if (!pctx || !valid_ctx_flags(flags)) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  if (t_stack.size == ContextStack::kCapacity) return CUDA_ERROR_OUT_OF_MEMORY;  // 64 deep
  State& s = state();
  auto* c = new Context;
  {
    std::lock_guard<std::mutex> lk(s.mu);
    c->kind = Context::kCreated;
    c->device = dev;
    c->flags = flags;
    c->refcount = 1;
    c->id = s.next_id++;
    c->legacy = new Stream;
    c->legacy->kind = Stream::kLegacy;
    c->legacy->ctx = c;
    c->legacy->id = s.next_id++;
  }
  {
    std::lock_guard<std::mutex> lk(s.ctx_mu);
    s.contexts.insert(c);
  }
  (void)t_stack.push_back(c);  // room checked above
  s.live.fetch_add(1);
  *pctx = reinterpret_cast<CUcontext>(c);
  return CUDA_SUCCESS;
}

CUresult ctx_create_v2(CUcontext* pctx, unsigned int flags, CUdevice_v1 dev) {
  EMU_ENTER("cuCtxCreate");
  return ctx_create_impl(pctx, flags, dev);
}

CUresult ctx_create_v3(CUcontext* pctx, CUexecAffinityParam* params, int count, unsigned int flags,
                       CUdevice_v1 dev) {
  EMU_ENTER("cuCtxCreate");
  if (count < 0 || (count > 0 && !params)) return CUDA_ERROR_INVALID_VALUE;
  if (count > 0) return CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY;  // not emulated
  return ctx_create_impl(pctx, flags, dev);
}

CUresult ctx_create_v4(CUcontext* pctx, CUctxCreateParams* params, unsigned int flags,
                       CUdevice dev) {
  EMU_ENTER("cuCtxCreate");
  if (params && (params->numExecAffinityParams != 0 || params->cigParams != nullptr))
    return CUDA_ERROR_NOT_SUPPORTED;  // execution affinity and CIG are not emulated
  return ctx_create_impl(pctx, flags, dev);
}

// cuCtxDestroy: waits for the context's work, then destroys it with its streams, events and
// modules, and pops it from the calling thread's stack where it is current. The context and
// its streams are kept (invariant 8): its handle, and its streams (also cuStreamDestroy), answer
// CUDA_ERROR_CONTEXT_IS_DESTROYED (on the H200, such a stream makes the driver crash); its
// events and modules are released (their handles answer CUDA_ERROR_INVALID_HANDLE).
CUresult ctx_destroy(CUcontext ctx) {
  EMU_ENTER("cuCtxDestroy");
  auto* c = reinterpret_cast<Context*>(ctx);
  if (CUresult r = context_status(c)) return r;  // destroyed: CONTEXT_IS_DESTROYED, as the H200
  if (c->kind != Context::kCreated) return CUDA_ERROR_INVALID_CONTEXT;  // a primary or green one
  if (CUresult r = ctx_synchronize_impl(c); r != CUDA_SUCCESS) return r;
  State& s = state();
  {
    std::lock_guard<std::mutex> lk(s.mu);
    {
      std::lock_guard<std::mutex> clk(s.ctx_mu);
      if (c->destroyed) return CUDA_ERROR_CONTEXT_IS_DESTROYED;  // raced with another destroy
      c->destroyed = true;
    }
    for (Stream* st : c->streams) {
      leave_capture(st);
      if (st->kind == Stream::kCreated) s.live.fetch_sub(1);  // destroyed with the context
    }
    for (auto it = s.events.begin(); it != s.events.end();) {
      auto* e = static_cast<Event*>(const_cast<void*>(*it));
      if (e->ctx != c) {
        ++it;
        continue;
      }
      it = s.events.erase(it);
      s.live.fetch_sub(1);
      delete e;  // pending records keep their Signal alive through the Op
    }
    release_context_modules(c);
  }
  if (!t_stack.empty() && t_stack.back() == c) t_stack.pop_back();
  s.live.fetch_sub(1);
  return CUDA_SUCCESS;
}

// cuCtxGetId: NULL is the current context. A green context's converted context has the green
// context's id.
CUresult ctx_get_id(CUcontext ctx, unsigned long long* id) {
  EMU_ENTER("cuCtxGetId");
  if (!id) return CUDA_ERROR_INVALID_VALUE;
  auto* c = ctx ? reinterpret_cast<Context*>(ctx) : current_context();
  if (CUresult r = context_status(c)) return r;
  *id = c->id;
  return CUDA_SUCCESS;
}

CUresult ctx_get_stream_priority_range(int* least, int* greatest) {
  EMU_ENTER("cuCtxGetStreamPriorityRange");
  if (least) *least = kLeastPriority;
  if (greatest) *greatest = kGreatestPriority;
  return CUDA_SUCCESS;
}

}  // namespace

Context* current_context() { return t_stack.empty() ? nullptr : t_stack.back(); }

unsigned device_sm_count(int dev) {
  int v = 0;
  (void)attribute_value(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev, &v);
  return static_cast<unsigned>(v);
}

Context* context_of_device(int dev) {
  State& s = state();
  if (dev < 0 || dev >= s.device_count) return nullptr;
  return s.primary[static_cast<size_t>(dev)];
}

CUresult context_status(Context* ctx) {
  if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
  State& s = state();
  for (Context* c : s.primary)  // immutable after state() construction
    if (c == ctx) return CUDA_SUCCESS;
  std::lock_guard<std::mutex> lk(s.ctx_mu);  // never held while taking mu (invariant 8)
  if (s.contexts.count(ctx) == 0) return CUDA_ERROR_INVALID_CONTEXT;
  return ctx->destroyed ? CUDA_ERROR_CONTEXT_IS_DESTROYED : CUDA_SUCCESS;
}

CUresult usable_current_context(Context** out) {
  Context* c = current_context();
  if (!c) return CUDA_ERROR_INVALID_CONTEXT;
  if (c->destroyed) return CUDA_ERROR_CONTEXT_IS_DESTROYED;  // current elsewhere, or dangling
  *out = c;
  return CUDA_SUCCESS;
}

Context* resource_owner(Context* ctx) {
  return ctx && ctx->kind == Context::kGreen ? state().primary[static_cast<size_t>(ctx->device)]
                                             : ctx;
}

std::vector<Context*> covered_contexts(Context* ctx) {
  std::vector<Context*> out{ctx};
  if (ctx->kind == Context::kPrimary) out.insert(out.end(), ctx->greens.begin(), ctx->greens.end());
  return out;
}

namespace {

// Adds the completions of the work enqueued so far on c's streams, its destroyed streams'
// included, to tails (mu held; pruning the retired ones that are done).
void add_outstanding_work(Context* c, std::vector<SignalPtr>& tails) {
  if (c->legacy->tail) tails.push_back(c->legacy->tail);
  for (Stream* st : c->streams)
    if (st->tail) tails.push_back(st->tail);
  auto& r = c->retired;
  r.erase(std::remove_if(r.begin(), r.end(), [](const SignalPtr& p) { return p->done; }), r.end());
  tails.insert(tails.end(), r.begin(), r.end());
}

void wait_for(std::unique_lock<std::mutex>& lk, const std::vector<SignalPtr>& tails) {
  state().cv.wait(lk, [&] {
    for (const auto& t : tails)
      if (!t->done) return false;
    return true;
  });
}

}  // namespace

void context_wait(std::unique_lock<std::mutex>& lk, Context* ctx) {
  std::vector<SignalPtr> tails;
  for (Context* c : covered_contexts(ctx)) add_outstanding_work(c, tails);
  wait_for(lk, tails);
}

void wait_all_contexts(std::unique_lock<std::mutex>& lk) {
  State& s = state();
  std::vector<SignalPtr> tails;
  for (Context* c : s.primary) add_outstanding_work(c, tails);
  {
    std::lock_guard<std::mutex> clk(s.ctx_mu);  // created and green contexts (invariant 8)
    for (const void* p : s.contexts)
      add_outstanding_work(static_cast<Context*>(const_cast<void*>(p)), tails);
  }
  wait_for(lk, tails);
}

void register_context_entries(std::vector<Entry>& out) {
  out.insert(out.end(),
             {
                 EMU_ENTRY(cuDeviceGetCount, 2000, device_get_count),
                 EMU_ENTRY(cuDeviceGet, 2000, device_get),
                 EMU_ENTRY(cuDeviceGetName, 2000, device_get_name),
                 EMU_ENTRY(cuDeviceGetAttribute, 2000, device_get_attribute),
                 EMU_ENTRY(cuDeviceTotalMem, 2000, device_total_mem_v1),
                 EMU_ENTRY(cuDeviceTotalMem, 3020, device_total_mem),
                 EMU_ENTRY(cuDevicePrimaryCtxRetain, 7000, primary_retain),
                 EMU_ENTRY(cuDevicePrimaryCtxRelease, 7000, primary_release),
                 EMU_ENTRY(cuDevicePrimaryCtxRelease, 11000, primary_release),
                 EMU_ENTRY(cuDevicePrimaryCtxGetState, 7000, primary_get_state),
                 EMU_ENTRY(cuDevicePrimaryCtxReset, 7000, primary_reset),
                 EMU_ENTRY(cuDevicePrimaryCtxReset, 11000, primary_reset),
                 EMU_ENTRY(cuCtxCreate, 2000, ctx_create_v2),
                 EMU_ENTRY(cuCtxCreate, 3020, ctx_create_v2),
                 EMU_ENTRY(cuCtxCreate, 11040, ctx_create_v3),
                 EMU_ENTRY(cuCtxCreate, 12050, ctx_create_v4),
                 EMU_ENTRY(cuCtxDestroy, 2000, ctx_destroy),
                 EMU_ENTRY(cuCtxDestroy, 4000, ctx_destroy),
                 EMU_ENTRY(cuCtxGetCurrent, 4000, ctx_get_current),
                 EMU_ENTRY(cuCtxSetCurrent, 4000, ctx_set_current),
                 EMU_ENTRY(cuCtxPushCurrent, 2000, ctx_push_current),
                 EMU_ENTRY(cuCtxPushCurrent, 4000, ctx_push_current),
                 EMU_ENTRY(cuCtxPopCurrent, 2000, ctx_pop_current),
                 EMU_ENTRY(cuCtxPopCurrent, 4000, ctx_pop_current),
                 EMU_ENTRY(cuCtxGetDevice, 2000, ctx_get_device),
                 EMU_ENTRY(cuCtxGetDevice, 13000, ctx_get_device_v2),
                 EMU_ENTRY(cuCtxSynchronize, 2000, ctx_synchronize),
                 EMU_ENTRY(cuCtxSynchronize, 13000, ctx_synchronize_v2),
                 EMU_ENTRY(cuCtxGetStreamPriorityRange, 5050, ctx_get_stream_priority_range),
                 EMU_ENTRY(cuCtxGetId, 12000, ctx_get_id),
             });
}

}  // namespace emu

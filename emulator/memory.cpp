// Device memory backed by host memory: allocation, host-mapped memory, stream-ordered memset
// and memcpy.
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "emu.hpp"

namespace emu {
namespace {

constexpr size_t kAlign = 256;

CUdeviceptr allocate(size_t bytes) {
  const size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  void* p = std::aligned_alloc(kAlign, rounded);
  if (!p) return 0;
  std::memset(p, 0, rounded);
  return reinterpret_cast<CUdeviceptr>(p);
}

CUresult mem_alloc(CUdeviceptr* dptr, size_t bytes) {
  EMU_ENTER("cuMemAlloc");
  if (!dptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  if (!current_context()) return CUDA_ERROR_INVALID_CONTEXT;
  CUdeviceptr p = allocate(bytes);
  if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
  State& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  s.allocations[p] = bytes;
  s.live.fetch_add(1);
  *dptr = p;
  return CUDA_SUCCESS;
}

CUresult mem_alloc_v1(CUdeviceptr_v1* dptr, unsigned int) {
  EMU_ENTER("cuMemAlloc");
  if (dptr) *dptr = 0;
  return CUDA_ERROR_NOT_SUPPORTED;  // 32-bit device pointers cannot hold host addresses
}

// Waits (releasing the lock) for the work submitted so far to every stream of every context,
// destroyed streams' included: a free synchronises with outstanding work, which may still use
// the memory (invariant 13).
void wait_outstanding_work(std::unique_lock<std::mutex>& lk) { wait_all_contexts(lk); }

CUresult mem_free(CUdeviceptr p) {
  EMU_ENTER("cuMemFree");
  if (p == 0) return CUDA_SUCCESS;
  State& s = state();
  std::unique_lock<std::mutex> lk(s.mu);
  auto it = s.allocations.find(p);
  if (it == s.allocations.end())
    return graph_allocation_freeable(p) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  s.allocations.erase(it);
  s.live.fetch_sub(1);
  wait_outstanding_work(lk);
  lk.unlock();
  std::free(reinterpret_cast<void*>(p));
  return CUDA_SUCCESS;
}

CUresult mem_free_v1(CUdeviceptr_v1) {
  EMU_ENTER("cuMemFree");
  return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult mem_alloc_async(CUdeviceptr* dptr, size_t bytes, CUstream h) {
  EMU_ENTER("cuMemAllocAsync");
  if (!dptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  Stream* st = nullptr;
  if (CUresult r = resolve_stream(h, &st)) return r;
  if (st->capture) return CUDA_ERROR_NOT_SUPPORTED;  // no memory-allocation nodes here
  CUdeviceptr p = allocate(bytes);
  if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
  s.allocations[p] = bytes;
  s.live.fetch_add(1);
  *dptr = p;
  return CUDA_SUCCESS;
}

CUresult mem_free_async(CUdeviceptr p, CUstream h) {
  EMU_ENTER("cuMemFreeAsync");
  State& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  Stream* st = nullptr;
  if (CUresult r = resolve_stream(h, &st)) return r;
  if (st->capture) return CUDA_ERROR_NOT_SUPPORTED;
  auto it = s.allocations.find(p);
  if (it == s.allocations.end())
    return graph_allocation_freeable(p) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  Work w;
  w.type = CU_GRAPH_NODE_TYPE_EMPTY;
  w.dst = p;
  w.free_memory = true;
  if (CUresult r = enqueue(st, w)) return r;
  s.allocations.erase(p);
  s.live.fetch_sub(1);
  return CUDA_SUCCESS;
}

// ---- host-mapped memory (invariant 12) ----

constexpr unsigned kHostAllocFlags =
    CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED;

// The host allocation that contains address p, or end() (mu held).
std::map<std::uintptr_t, size_t>::const_iterator host_allocation_of(const void* p) {
  const auto& m = state().host_allocations;
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  auto it = m.upper_bound(addr);
  if (it == m.begin()) return m.end();
  --it;
  return addr - it->first < it->second ? it : m.end();
}

// Host memory, every flag accepted (the emulator's host memory is device-accessible whatever
// they say); like the H200, it needs a usable current context.
CUresult mem_host_alloc(void** pp, size_t bytes, unsigned int flags) {
  EMU_ENTER("cuMemHostAlloc");
  if (!pp || (flags & ~kHostAllocFlags)) return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  {
    std::lock_guard<std::mutex> lk(s.mu);
    Context* ctx = nullptr;
    if (CUresult r = usable_current_context(&ctx)) return r;
  }
  // The H200 answers CUDA_SUCCESS for 0 bytes (unlike cuMemAlloc). What pointer it hands back
  // was not recorded: NULL here, which cuMemFreeHost accepts as the H200 does.
  if (bytes == 0) {
    *pp = nullptr;
    return CUDA_SUCCESS;
  }
  CUdeviceptr p = allocate(bytes);  // outside the lock: it zeroes the memory
  if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
  std::lock_guard<std::mutex> lk(s.mu);
  s.host_allocations[static_cast<std::uintptr_t>(p)] = bytes;
  s.live.fetch_add(1);
  *pp = reinterpret_cast<void*>(p);
  return CUDA_SUCCESS;
}

CUresult mem_free_host(void* p) {
  EMU_ENTER("cuMemFreeHost");
  if (!p) return CUDA_SUCCESS;  // as the H200 (and cuMemFree of 0)
  State& s = state();
  std::unique_lock<std::mutex> lk(s.mu);
  auto it = s.host_allocations.find(reinterpret_cast<std::uintptr_t>(p));
  if (it == s.host_allocations.end()) return CUDA_ERROR_INVALID_VALUE;
  s.host_allocations.erase(it);
  s.live.fetch_sub(1);
  wait_outstanding_work(lk);  // a stream may still write or wait on it
  lk.unlock();
  std::free(p);
  return CUDA_SUCCESS;
}

// With unified addressing the device pointer is the host address (any address inside the
// allocation); host memory cuMemHostAlloc did not make is refused.
CUresult mem_host_get_device_pointer(CUdeviceptr* pdptr, void* p, unsigned int flags) {
  EMU_ENTER("cuMemHostGetDevicePointer");
  if (!pdptr || !p || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  Context* ctx = nullptr;
  if (CUresult r = usable_current_context(&ctx)) return r;
  if (host_allocation_of(p) == s.host_allocations.end()) return CUDA_ERROR_INVALID_VALUE;
  *pdptr = reinterpret_cast<CUdeviceptr>(p);
  return CUDA_SUCCESS;
}

CUresult mem_host_get_device_pointer_v1(CUdeviceptr_v1* pdptr, void*, unsigned int) {
  EMU_ENTER("cuMemHostGetDevicePointer");
  if (pdptr) *pdptr = 0;
  return CUDA_ERROR_NOT_SUPPORTED;  // 32-bit device pointers cannot hold host addresses
}

Work memset_work(CUdeviceptr dst, unsigned value, unsigned elem, size_t n) {
  Work w;
  w.type = CU_GRAPH_NODE_TYPE_MEMSET;
  w.dst = dst;
  w.value = value;
  w.elem_size = elem;
  w.width = n;
  w.height = 1;
  w.pitch = n * elem;
  return w;
}

Work memcpy_work(CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
  Work w;
  w.type = CU_GRAPH_NODE_TYPE_MEMCPY;
  w.dst = dst;
  w.src = src;
  w.bytes = bytes;
  return w;
}

CUresult submit(CUstream h, const Work& w, bool wait) {
  State& s = state();
  std::unique_lock<std::mutex> lk(s.mu);
  Stream* st = nullptr;
  if (CUresult r = resolve_stream(h, &st)) return r;
  if (wait && st->capture) {
    invalidate(st->capture.get());
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  if (CUresult r = enqueue(st, w)) return r;
  if (!wait) return CUDA_SUCCESS;
  stream_wait(lk, st);
  return sticky_error();  // a fault while it waited (invariant 13)
}

CUresult memset_d8_async(CUdeviceptr dst, unsigned char v, size_t n, CUstream h) {
  EMU_ENTER("cuMemsetD8Async");
  if (!dst) return CUDA_ERROR_INVALID_VALUE;
  return submit(h, memset_work(dst, v, 1, n), false);
}

CUresult memset_d32_async(CUdeviceptr dst, unsigned int v, size_t n, CUstream h) {
  EMU_ENTER("cuMemsetD32Async");
  if (!dst || dst % 4) return CUDA_ERROR_INVALID_VALUE;
  return submit(h, memset_work(dst, v, 4, n), false);
}

CUresult memset_d8(CUdeviceptr dst, unsigned char v, size_t n) {
  EMU_ENTER("cuMemsetD8");
  if (!dst) return CUDA_ERROR_INVALID_VALUE;
  return submit(CU_STREAM_LEGACY, memset_work(dst, v, 1, n), true);
}

CUresult memset_d32(CUdeviceptr dst, unsigned int v, size_t n) {
  EMU_ENTER("cuMemsetD32");
  if (!dst || dst % 4) return CUDA_ERROR_INVALID_VALUE;
  return submit(CU_STREAM_LEGACY, memset_work(dst, v, 4, n), true);
}

CUresult memset_d8_v1(CUdeviceptr_v1, unsigned char, unsigned int) {
  EMU_ENTER("cuMemsetD8");
  return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult memset_d32_v1(CUdeviceptr_v1, unsigned int, unsigned int) {
  EMU_ENTER("cuMemsetD32");
  return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult memcpy_async(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h) {
  EMU_ENTER("cuMemcpyAsync");
  if (n && (!dst || !src)) return CUDA_ERROR_INVALID_VALUE;
  return submit(h, memcpy_work(dst, src, n), false);
}

CUresult memcpy_htod_async(CUdeviceptr dst, const void* src, size_t n, CUstream h) {
  EMU_ENTER("cuMemcpyHtoDAsync");
  if (n && (!dst || !src)) return CUDA_ERROR_INVALID_VALUE;
  return submit(h, memcpy_work(dst, reinterpret_cast<CUdeviceptr>(src), n), false);
}

CUresult memcpy_dtoh_async(void* dst, CUdeviceptr src, size_t n, CUstream h) {
  EMU_ENTER("cuMemcpyDtoHAsync");
  if (n && (!dst || !src)) return CUDA_ERROR_INVALID_VALUE;
  return submit(h, memcpy_work(reinterpret_cast<CUdeviceptr>(dst), src, n), false);
}

CUresult memcpy_dtod_async(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h) {
  EMU_ENTER("cuMemcpyDtoDAsync");
  if (n && (!dst || !src)) return CUDA_ERROR_INVALID_VALUE;
  return submit(h, memcpy_work(dst, src, n), false);
}

CUresult memcpy_htod(CUdeviceptr dst, const void* src, size_t n) {
  EMU_ENTER("cuMemcpyHtoD");
  if (n && (!dst || !src)) return CUDA_ERROR_INVALID_VALUE;
  return submit(CU_STREAM_LEGACY, memcpy_work(dst, reinterpret_cast<CUdeviceptr>(src), n), true);
}

CUresult memcpy_dtoh(void* dst, CUdeviceptr src, size_t n) {
  EMU_ENTER("cuMemcpyDtoH");
  if (n && (!dst || !src)) return CUDA_ERROR_INVALID_VALUE;
  return submit(CU_STREAM_LEGACY, memcpy_work(reinterpret_cast<CUdeviceptr>(dst), src, n), true);
}

CUresult memcpy_htod_v1(CUdeviceptr_v1, const void*, unsigned int) {
  EMU_ENTER("cuMemcpyHtoD");
  return CUDA_ERROR_NOT_SUPPORTED;
}
CUresult memcpy_dtoh_v1(void*, CUdeviceptr_v1, unsigned int) {
  EMU_ENTER("cuMemcpyDtoH");
  return CUDA_ERROR_NOT_SUPPORTED;
}
CUresult memcpy_htod_async_v1(CUdeviceptr_v1, const void*, unsigned int, CUstream) {
  EMU_ENTER("cuMemcpyHtoDAsync");
  return CUDA_ERROR_NOT_SUPPORTED;
}
CUresult memcpy_dtoh_async_v1(void*, CUdeviceptr_v1, unsigned int, CUstream) {
  EMU_ENTER("cuMemcpyDtoHAsync");
  return CUDA_ERROR_NOT_SUPPORTED;
}
CUresult memcpy_dtod_async_v1(CUdeviceptr_v1, CUdeviceptr_v1, unsigned int, CUstream) {
  EMU_ENTER("cuMemcpyDtoDAsync");
  return CUDA_ERROR_NOT_SUPPORTED;
}

}  // namespace

void register_memory_entries(std::vector<Entry>& out) {
  out.insert(out.end(),
             {
                 EMU_ENTRY(cuMemAlloc, 2000, mem_alloc_v1),
                 EMU_ENTRY(cuMemAlloc, 3020, mem_alloc),
                 EMU_ENTRY(cuMemFree, 2000, mem_free_v1),
                 EMU_ENTRY(cuMemFree, 3020, mem_free),
                 EMU_ENTRY(cuMemHostAlloc, 2020, mem_host_alloc),
                 EMU_ENTRY(cuMemFreeHost, 2000, mem_free_host),
                 EMU_ENTRY(cuMemHostGetDevicePointer, 2020, mem_host_get_device_pointer_v1),
                 EMU_ENTRY(cuMemHostGetDevicePointer, 3020, mem_host_get_device_pointer),
                 EMU_ENTRY(cuMemAllocAsync, 11020, mem_alloc_async),
                 EMU_ENTRY(cuMemFreeAsync, 11020, mem_free_async),
                 EMU_ENTRY(cuMemsetD8Async, 3020, memset_d8_async),
                 EMU_ENTRY(cuMemsetD32Async, 3020, memset_d32_async),
                 EMU_ENTRY(cuMemsetD8, 2000, memset_d8_v1),
                 EMU_ENTRY(cuMemsetD8, 3020, memset_d8),
                 EMU_ENTRY(cuMemsetD32, 2000, memset_d32_v1),
                 EMU_ENTRY(cuMemsetD32, 3020, memset_d32),
                 EMU_ENTRY(cuMemcpyAsync, 4000, memcpy_async),
                 EMU_ENTRY(cuMemcpyHtoDAsync, 2000, memcpy_htod_async_v1),
                 EMU_ENTRY(cuMemcpyHtoDAsync, 3020, memcpy_htod_async),
                 EMU_ENTRY(cuMemcpyDtoHAsync, 2000, memcpy_dtoh_async_v1),
                 EMU_ENTRY(cuMemcpyDtoHAsync, 3020, memcpy_dtoh_async),
                 EMU_ENTRY(cuMemcpyDtoDAsync, 3000, memcpy_dtod_async_v1),
                 EMU_ENTRY(cuMemcpyDtoDAsync, 3020, memcpy_dtod_async),
                 EMU_ENTRY(cuMemcpyHtoD, 2000, memcpy_htod_v1),
                 EMU_ENTRY(cuMemcpyHtoD, 3020, memcpy_htod),
                 EMU_ENTRY(cuMemcpyDtoH, 2000, memcpy_dtoh_v1),
                 EMU_ENTRY(cuMemcpyDtoH, 3020, memcpy_dtoh),
             });
}

}  // namespace emu

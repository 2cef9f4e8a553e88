// Memory pools: each device's default pool (cuDeviceGetDefaultMemPool), its attributes
// (cuMemPoolGetAttribute / cuMemPoolSetAttribute) and cuMemPoolTrimTo. cuMemAllocAsync and
// cuMemFreeAsync (memory.cpp) account their bytes here (pool_allocated, pool_freed); the
// memory itself is host memory as everywhere (invariant 12). The model (README.md, "Memory
// pools"): used = bytes of the device's live cuMemAllocAsync allocations; reserved = used +
// freed bytes the pool keeps, at most up to the release threshold (kept at the free, the
// emulator's synchronization point); an allocation takes from the kept bytes first.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>

#include "emu.hpp"

namespace emu {
namespace {

// A device's default pool (guarded by State::mu). Never freed: handles stay valid for the
// process (invariant 5).
struct Pool {
  int device = 0;
  cuuint64_t threshold = 0;
  cuuint64_t used = 0;
  cuuint64_t kept = 0;  // freed bytes still reserved
  cuuint64_t used_high = 0;
  cuuint64_t reserved_high = 0;
  int reuse_follow_event_dependencies = 1;
  int reuse_allow_opportunistic = 1;
  int reuse_allow_internal_dependencies = 1;

  cuuint64_t reserved() const { return used + kept; }
  // Gives kept bytes back until at most `keep` are reserved (never below used).
  void trim(cuuint64_t keep) { kept = std::min(kept, keep > used ? keep - used : 0); }
};

struct Pools {
  std::map<int, Pool*> by_device;
  std::map<CUdeviceptr, std::pair<Pool*, size_t>> allocations;  // cuMemAllocAsync's
};

Pools& pools() {
  static Pools* p = new Pools;  // leaked: process lifetime (invariant 5)
  return *p;
}

// The default pool of device `dev` (mu held), made at its first use.
Pool* pool_of(int dev) {
  Pool*& p = pools().by_device[dev];
  if (!p) {
    p = new Pool;
    p->device = dev;
  }
  return p;
}

// The pool a handle names (mu held), or nullptr.
Pool* valid_pool(CUmemoryPool h) {
  for (const auto& [dev, p] : pools().by_device)
    if (reinterpret_cast<CUmemoryPool>(p) == h) return p;
  return nullptr;
}

CUresult device_get_default_mem_pool(CUmemoryPool* out, CUdevice dev) {
  EMU_ENTER("cuDeviceGetDefaultMemPool");
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  if (dev < 0 || dev >= s.device_count) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> lk(s.mu);
  *out = reinterpret_cast<CUmemoryPool>(pool_of(dev));
  return CUDA_SUCCESS;
}

CUresult mem_pool_get_attribute(CUmemoryPool h, CUmemPool_attribute attr, void* value) {
  EMU_ENTER("cuMemPoolGetAttribute");
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  Pool* p = valid_pool(h);
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  auto put64 = [value](cuuint64_t v) { std::memcpy(value, &v, sizeof v); };
  auto put_int = [value](int v) { std::memcpy(value, &v, sizeof v); };
  switch (attr) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      put64(p->threshold);
      break;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
      put64(p->used);
      break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      put64(p->used_high);
      break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
      put64(p->reserved());
      break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
      put64(p->reserved_high);
      break;
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
      put_int(p->reuse_follow_event_dependencies);
      break;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
      put_int(p->reuse_allow_opportunistic);
      break;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
      put_int(p->reuse_allow_internal_dependencies);
      break;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult mem_pool_set_attribute(CUmemoryPool h, CUmemPool_attribute attr, void* value) {
  EMU_ENTER("cuMemPoolSetAttribute");
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  Pool* p = valid_pool(h);
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  cuuint64_t v64 = 0;
  int v_int = 0;
  std::memcpy(&v64, value, sizeof v64);
  std::memcpy(&v_int, value, sizeof v_int);
  switch (attr) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      p->threshold = v64;  // memory goes back at the next free, not now
      break;
    // cuda.h: the watermarks can only be reset, to the current value, by setting 0.
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      if (v64 != 0) return CUDA_ERROR_INVALID_VALUE;
      p->used_high = p->used;
      break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
      if (v64 != 0) return CUDA_ERROR_INVALID_VALUE;
      p->reserved_high = p->reserved();
      break;
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
      p->reuse_follow_event_dependencies = v_int != 0;
      break;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
      p->reuse_allow_opportunistic = v_int != 0;
      break;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
      p->reuse_allow_internal_dependencies = v_int != 0;
      break;
    default:  // the current values are read-only
      return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult mem_pool_trim_to(CUmemoryPool h, size_t keep) {
  EMU_ENTER("cuMemPoolTrimTo");
  State& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  Pool* p = valid_pool(h);
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  p->trim(keep);
  return CUDA_SUCCESS;
}

}  // namespace

void pool_allocated(int dev, CUdeviceptr p, size_t bytes) {
  Pool* pool = pool_of(dev);
  pool->kept -= std::min<cuuint64_t>(pool->kept, bytes);  // reused first
  pool->used += bytes;
  pool->used_high = std::max(pool->used_high, pool->used);
  pool->reserved_high = std::max(pool->reserved_high, pool->reserved());
  pools().allocations[p] = {pool, bytes};
}

void pool_freed(CUdeviceptr p) {
  auto& m = pools().allocations;
  auto it = m.find(p);
  if (it == m.end()) return;  // cuMemAlloc's
  Pool* pool = it->second.first;
  pool->used -= it->second.second;
  pool->kept += it->second.second;
  pool->trim(pool->threshold);
  m.erase(it);
}

void register_mempool_entries(std::vector<Entry>& out) {
  out.insert(out.end(),
             {
                 EMU_ENTRY(cuDeviceGetDefaultMemPool, 11020, device_get_default_mem_pool),
                 EMU_ENTRY(cuMemPoolGetAttribute, 11020, mem_pool_get_attribute),
                 EMU_ENTRY(cuMemPoolSetAttribute, 11020, mem_pool_set_attribute),
                 EMU_ENTRY(cuMemPoolTrimTo, 11020, mem_pool_trim_to),
             });
}

}  // namespace emu

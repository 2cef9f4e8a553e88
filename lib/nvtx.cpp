// Names of streams, events and contexts, and NVTX ranges (custream::NvtxRange). Design:
// docs/design/streams.md, "Names". Every NVTX call of custream is in this file.
#include "nvtx.hpp"

#include <atomic>
#include <cstddef>
#include <functional>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "custream/nvtx_range.hpp"
#include "fork_safe.hpp"

#if CUSTREAM_HAVE_NVTX
#include <cuda.h>
#include <nvtx3/nvToolsExt.h>
#include <nvtx3/nvToolsExtCuda.h>
#endif

namespace custream {
namespace detail {
namespace {

struct Key {
  Named kind;
  const void* handle;
  bool operator==(const Key& other) const noexcept {
    return kind == other.kind && handle == other.handle;
  }
};
struct KeyHash {
  std::size_t operator()(const Key& k) const noexcept {
    return std::hash<const void*>()(k.handle) ^ static_cast<std::size_t>(k.kind);
  }
};

// The names custream keeps, one process-wide table under one mutex (invariant 5 of
// streams.md). `count` mirrors its size, so creating a handle while no name is kept takes no
// lock.
struct Names {
  std::mutex mutex;
  std::unordered_map<Key, std::string, KeyHash> table;
  std::atomic<std::size_t> count{0};
};
Names& names();
std::mutex& names_mutex() { return names().mutex; }
Names& names() {
  static Names* n = [] {
    auto* made = new Names;  // never destroyed: owners may forget names at exit
    guard_across_fork<names_mutex>();
    return made;
  }();
  return *n;
}

void send(Named kind, const void* handle, const std::string& name) {
#if CUSTREAM_HAVE_NVTX
  switch (kind) {
    case Named::stream:
      nvtxNameCuStreamA(static_cast<CUstream>(const_cast<void*>(handle)), name.c_str());
      break;
    case Named::event:
      nvtxNameCuEventA(static_cast<CUevent>(const_cast<void*>(handle)), name.c_str());
      break;
    case Named::context:
      nvtxNameCuContextA(static_cast<CUcontext>(const_cast<void*>(handle)), name.c_str());
      break;
  }
#else
  (void)kind, (void)handle, (void)name;
#endif
}

}  // namespace

void set_name(Named kind, const void* handle, std::string_view name) {
  std::string text(name);
  Names& n = names();
  {
    std::lock_guard<std::mutex> lock(n.mutex);
    if (text.empty()) {
      n.table.erase(Key{kind, handle});
    } else {
      n.table[Key{kind, handle}] = text;
    }
    n.count.store(n.table.size(), std::memory_order_relaxed);
  }
  send(kind, handle, text);
}

std::string name_of(Named kind, const void* handle) {
  Names& n = names();
  if (n.count.load(std::memory_order_relaxed) == 0) return {};
  std::lock_guard<std::mutex> lock(n.mutex);
  auto it = n.table.find(Key{kind, handle});
  return it != n.table.end() ? it->second : std::string();
}

void forget_name(Named kind, const void* handle) noexcept {
  Names& n = names();
  std::lock_guard<std::mutex> lock(n.mutex);
  n.table.erase(Key{kind, handle});
  n.count.store(n.table.size(), std::memory_order_relaxed);
}

void forget_stale_name(Named kind, const void* handle) noexcept {
  if (names().count.load(std::memory_order_relaxed) != 0) forget_name(kind, handle);
}

}  // namespace detail

// --- NvtxRange ---

NvtxRange::NvtxRange(std::string_view name) {
  if (name.empty()) return;
#if CUSTREAM_HAVE_NVTX
  const std::string text(name);
  id_ = nvtxRangeStartA(text.c_str());
  active_ = true;
#endif
}

void NvtxRange::end_range() noexcept {
#if CUSTREAM_HAVE_NVTX
  nvtxRangeEnd(id_);
#endif
  active_ = false;
}

bool NvtxRange::enabled() noexcept { return CUSTREAM_HAVE_NVTX != 0; }

}  // namespace custream

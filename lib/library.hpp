// The owner of a loaded library and its kernels' functions per context. Internal. Design:
// docs/design/libraries.md.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "shared.hpp"

namespace custream::detail {

/// A kernel of a library: its CUkernel, name, and its function in each device's primary
/// context once resolved (invariant 3).
struct KernelState {
  CUkernel kernel = nullptr;
  std::string name;
  /// Per device ordinal: the function in that device's primary context, or null until the
  /// first launch there. Read without a lock; racing first launches store the same function.
  std::unique_ptr<std::atomic<CUfunction>[]> primary;
};

/// A 64-bit hash of `bytes` bytes, eight at a time: the cache's key of an image.
std::uint64_t hash_bytes(const void* data, std::size_t bytes) noexcept;

/// A loaded library; the last reference unloads it (invariant 1).
struct LibraryOwner : Counted {
  ~LibraryOwner();
  CUlibrary library = nullptr;
  /// Every kernel, enumerated at load (invariant 2): immutable afterwards, read without a lock.
  std::vector<std::unique_ptr<KernelState>> kernels;
  std::unordered_map<std::string, KernelState*> by_name;
  std::vector<std::string> names;
  /// A driver older than 12.4 cannot enumerate: kernels are then looked up on first use and
  /// added here, under `lazy_mutex`.
  bool enumerated = false;
  std::mutex lazy_mutex;
  std::unordered_map<std::string, std::unique_ptr<KernelState>> lazy;
};

}  // namespace custream::detail

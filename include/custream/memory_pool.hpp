/// @file
/// custream::MemoryPool: a device's memory pool for stream-ordered allocation.
#pragma once

#include "custream/detail/cuda.hpp"

#include <cstdint>

#include "custream/device.hpp"

namespace custream {

/// A view of a CUmemoryPool — the pool that stream-ordered allocations (DeviceBuffer and
/// DeviceArray on a Stream, cuMemAllocAsync) of a device come from. Freed memory returns to the
/// pool and is reused by later allocations on the device without a driver allocation; at a
/// synchronization the pool gives memory back to the system down to its release threshold
/// (0 by default: everything). Raising the threshold keeps that much memory reserved across
/// synchronizations, which makes allocation-heavy loops cheaper. Owns nothing: the driver
/// keeps a device's default pool for the process's life.
class MemoryPool {
 public:
  /// No pool.
  MemoryPool() noexcept = default;
  /// The default pool of `device` (cuDeviceGetDefaultMemPool, driver >= 11.2).
  /// @throws Error on a driver failure, or when the driver has no memory pools.
  static MemoryPool device_default(Device device);

  /// The CUmemoryPool.
  CUmemoryPool handle() const noexcept { return pool_; }
  /// The device whose memory it holds.
  int device_id() const noexcept { return device_; }

  /// Bytes the pool keeps reserved at a synchronization (CU_MEMPOOL_ATTR_RELEASE_THRESHOLD).
  /// @throws Error on a driver failure.
  std::uint64_t release_threshold() const;
  /// Sets the release threshold (UINT64_MAX: never give memory back).
  /// @throws Error on a driver failure.
  void set_release_threshold(std::uint64_t bytes) const;
  /// Bytes the pool holds from the system now (CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT).
  /// @throws Error on a driver failure.
  std::uint64_t reserved_bytes() const;
  /// Bytes allocated from the pool and not yet freed (CU_MEMPOOL_ATTR_USED_MEM_CURRENT).
  /// @throws Error on a driver failure.
  std::uint64_t used_bytes() const;
  /// Gives memory back to the system until at most `keep_bytes` stay reserved
  /// (cuMemPoolTrimTo). @throws Error on a driver failure.
  void trim_to(std::size_t keep_bytes) const;

  /// Same pool.
  friend bool operator==(const MemoryPool& a, const MemoryPool& b) noexcept {
    return a.pool_ == b.pool_;
  }
  /// Different pools.
  friend bool operator!=(const MemoryPool& a, const MemoryPool& b) noexcept { return !(a == b); }

 private:
  MemoryPool(CUmemoryPool pool, int device) noexcept : pool_(pool), device_(device) {}
  std::uint64_t attribute(CUmemPool_attribute attribute) const;

  CUmemoryPool pool_ = nullptr;
  int device_ = -1;
};

}  // namespace custream

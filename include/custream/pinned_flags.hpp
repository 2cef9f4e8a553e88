/// @file
/// custream::PinnedFlags: how page-locked host memory is allocated (cuMemHostAlloc flags).
#pragma once

#include "custream/detail/cuda.hpp"

namespace custream {

/// Flags of a pinned (page-locked) host allocation; combine with |.
enum class PinnedFlags : unsigned {
  none = 0,  ///< pinned for the context it was allocated in
  /// Pinned for every context (CU_MEMHOSTALLOC_PORTABLE).
  portable = CU_MEMHOSTALLOC_PORTABLE,
  /// Mapped into the device's address space (CU_MEMHOSTALLOC_DEVICEMAP): kernels may read and
  /// write it through PinnedArray::device_pointer().
  mapped = CU_MEMHOSTALLOC_DEVICEMAP,
  /// Write-combined (CU_MEMHOSTALLOC_WRITECOMBINED): faster host-to-device transfers, very
  /// slow host reads.
  write_combined = CU_MEMHOSTALLOC_WRITECOMBINED,
};

/// Both sets of flags.
constexpr PinnedFlags operator|(PinnedFlags a, PinnedFlags b) noexcept {
  return static_cast<PinnedFlags>(static_cast<unsigned>(a) | static_cast<unsigned>(b));
}
/// The flags in both.
constexpr PinnedFlags operator&(PinnedFlags a, PinnedFlags b) noexcept {
  return static_cast<PinnedFlags>(static_cast<unsigned>(a) & static_cast<unsigned>(b));
}

}  // namespace custream

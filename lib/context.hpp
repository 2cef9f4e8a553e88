// Context helpers shared by devices, streams and events.
//
// Design note — invariants:
//  1. The device of a context comes from the per-device primary-context slots when it is a
//     primary context custream retained (no driver call), else from the driver every time:
//     no cache that could disagree with contexts created or destroyed behind custream's back.
//  2. Only calls that need a current context switch it, through ContextScope (set/restore).
#pragma once

#include <cuda.h>

#include "driver.hpp"

namespace custream::detail {

/// The ordinal of the device `context` belongs to (invariant 1). @throws Error.
int device_of_context(CUcontext context);

/// Retains the primary context of device `ordinal` once (slow path of primary_context).
[[gnu::cold]] CUcontext retain_primary_context(const Loaded& l, int ordinal);

/// The retained primary context of device `ordinal` (which must be valid): one acquire load
/// once retained. @throws Error when the retain fails.
inline CUcontext primary_context(const Loaded& l, int ordinal) {
  CUcontext c = l.devices[ordinal].primary.load(std::memory_order_acquire);
  return c ? c : retain_primary_context(l, ordinal);
}

/// The ordinal of the device whose primary context custream retained as `context`, or -1.
inline int known_primary_device(const Loaded& l, CUcontext context) noexcept {
  for (int i = 0; i < l.device_count; ++i) {
    if (l.devices[i].primary.load(std::memory_order_acquire) == context) return i;
  }
  return -1;
}

/// The current device for `current` (the thread's current context): its device, or 0 when
/// it is null.
inline int device_of_current(const Loaded& l, CUcontext current) {
  if (current == nullptr) return 0;
  const int ordinal = known_primary_device(l, current);
  return ordinal >= 0 ? ordinal : device_of_context(current);
}

/// The ordinal of the current device (Device::current() without building a Device).
int current_device_ordinal(const Loaded& l);

}  // namespace custream::detail

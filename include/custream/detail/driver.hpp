// The loaded driver and per-device state, as inline hot paths need them. Internal: not part
// of custream's API. Design: docs/design/loading.md.
//
// Defined in lib/driver.cpp, except the out-of-line callees of the inline paths here and in
// custream/device.hpp and custream/detail/call.hpp, which public headers must see:
// retain_primary_context, device_of_context and current_primary_context (lib/context.cpp),
// throw_bad_ordinal (lib/error.cpp). Everything else lib/ defines is declared in lib/.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "custream/detail/driver_table.hpp"

namespace custream::detail {

/// One device as the loader found it.
struct DeviceSlot {
  CUdevice device = 0;
  /// The retained primary context; null until first needed (invariant 2).
  std::atomic<CUcontext> primary{nullptr};
  /// Serialises this device's first retain only: retaining device 1 never waits for device 0.
  std::mutex retain_mutex;
};

/// Everything that exists once the driver is loaded.
struct Loaded {
  DriverApi api;
  PFN_cuGetProcAddress_v12000 get_proc_address = nullptr;
  std::string library;
  int version = 0;
  int device_count = 0;
  std::unique_ptr<DeviceSlot[]> devices;
};

extern std::atomic<const Loaded*> g_loaded;

/// Loads the driver (or re-throws the recorded failure). Slow path of loaded().
[[gnu::cold]] const Loaded& load();

/// The loaded driver; loads it on first use. @throws Error when there is none.
inline const Loaded& loaded() {
  const Loaded* l = g_loaded.load(std::memory_order_acquire);
  return l ? *l : load();
}

/// The driver's entry points. @throws Error when there is no driver.
inline const DriverApi& api() { return loaded().api; }

/// The primary context of device `ordinal` (valid ordinal): one acquire load once retained.
/// @throws Error when the retain fails.
[[gnu::cold]] CUcontext retain_primary_context(const Loaded& l, int ordinal);
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

/// The ordinal of the device `context` belongs to: from the primary-context slots when
/// custream retained it, else from the driver every time (no cache that could go stale).
/// @throws Error.
int device_of_context(CUcontext context);

/// Throws the error for a device ordinal out of [0, count) (CUDA_ERROR_NO_DEVICE when the
/// count is 0, else CUDA_ERROR_INVALID_DEVICE), naming `call`, the ordinal and the count.
[[noreturn, gnu::cold]] void throw_bad_ordinal(int ordinal, int count,
                                               const char* call = "custream::Device");

/// The current device for `current` (the thread's current context): its device, or 0 when
/// it is null. @throws Error (CUDA_ERROR_NO_DEVICE when it is null and there is no device).
inline int device_of_current(const Loaded& l, CUcontext current) {
  if (current == nullptr) {
    if (l.device_count == 0) throw_bad_ordinal(0, 0);  // no device 0 to default to
    return 0;
  }
  const int ordinal = known_primary_device(l, current);
  return ordinal >= 0 ? ordinal : device_of_context(current);
}

/// The primary context of the current device. @throws Error.
CUcontext current_primary_context();

/// Throws the error for an optional entry point the driver lacks (`field` of DriverApi):
/// names the call, the ABI version and the minimum driver.
[[noreturn, gnu::cold]] void throw_missing_entry(const char* field);

}  // namespace custream::detail

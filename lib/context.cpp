// Primary contexts, the context→device lookup and ContextScope. Invariants: context.hpp.
#include "context.hpp"

#include <mutex>

#include "custream/context_scope.hpp"
#include "custream/error.hpp"

namespace custream::detail {

CUcontext retain_primary_context(const Loaded& l, int ordinal) {
  DeviceSlot& slot = l.devices[ordinal];
  std::lock_guard<std::mutex> lock(slot.retain_mutex);  // per device
  if (CUcontext c = slot.primary.load(std::memory_order_acquire)) return c;
  CUcontext c = nullptr;
  if (CUresult r = l.api.cuDevicePrimaryCtxRetain(&c, slot.device); r != CUDA_SUCCESS) {
    throw_device_error(r, "cuDevicePrimaryCtxRetain", ordinal);
  }
  // Never released: other threads may hold it, and releasing at exit could run after the
  // driver is gone.
  slot.primary.store(c, std::memory_order_release);
  return c;
}

namespace {
int ordinal_of(const Loaded& l, CUdevice device) {
  for (int i = 0; i < l.device_count; ++i) {
    if (l.devices[i].device == device) return i;
  }
  throw Error(CUDA_ERROR_INVALID_DEVICE, "custream::detail::device_of_context", {},
              "the driver reported CUdevice " + std::to_string(device) +
                  ", which cuDeviceGet did not list");
}
}  // namespace

int device_of_context(CUcontext context) {
  const Loaded& l = loaded();
  if (const int ordinal = known_primary_device(l, context); ordinal >= 0) return ordinal;
  CUdevice device = 0;
  if (l.api.cuCtxGetDevice_v2 != nullptr) {
    if (CUresult r = l.api.cuCtxGetDevice_v2(&device, context); r != CUDA_SUCCESS) {
      throw_error(r, "cuCtxGetDevice", "context " + pointer_text(context));
    }
  } else {
    ContextScope scope(context);
    if (CUresult r = l.api.cuCtxGetDevice(&device); r != CUDA_SUCCESS) {
      throw_error(r, "cuCtxGetDevice", "context " + pointer_text(context));
    }
  }
  return ordinal_of(l, device);
}

int current_device_ordinal(const Loaded& l) {
  CUcontext context = nullptr;
  if (CUresult r = l.api.cuCtxGetCurrent(&context); r != CUDA_SUCCESS) {
    throw_error(r, "cuCtxGetCurrent");
  }
  return device_of_current(l, context);
}

}  // namespace custream::detail

namespace custream {

ContextScope::ContextScope(CUcontext context) {
  const detail::DriverApi& api = detail::api();
  if (CUresult r = api.cuCtxGetCurrent(&previous_); r != CUDA_SUCCESS) {
    detail::throw_error(r, "cuCtxGetCurrent");
  }
  if (previous_ == context) return;
  if (CUresult r = api.cuCtxSetCurrent(context); r != CUDA_SUCCESS) {
    detail::throw_error(r, "cuCtxSetCurrent", "context " + detail::pointer_text(context));
  }
  switched_ = true;
}

ContextScope::~ContextScope() {
  // The driver is loaded (the constructor succeeded) and never unloaded. A failure leaves the
  // wrong context current: the release-error handler hears of it (except
  // CUDA_ERROR_DEINITIALIZED during teardown, when there is nothing left to restore).
  if (switched_) {
    detail::report_release_failure(
        detail::g_loaded.load(std::memory_order_acquire)->api.cuCtxSetCurrent(previous_),
        "cuCtxSetCurrent", "context (restoring it)", previous_);
  }
}

}  // namespace custream

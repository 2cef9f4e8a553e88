// Primary contexts, the context→device lookup and ContextScope. Design:
// docs/design/contexts.md.
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
  call<&DriverApi::cuDevicePrimaryCtxRetain>(device_subject(ordinal), &c, slot.device);
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
    call<&DriverApi::cuCtxGetDevice_v2>(context_subject(context), &device, context);
  } else {
    ContextScope scope(context);
    call<&DriverApi::cuCtxGetDevice>(context_subject(context), &device);
  }
  return ordinal_of(l, device);
}

int current_device_ordinal(const Loaded& l) {
  CUcontext context = nullptr;
  call<&DriverApi::cuCtxGetCurrent>({}, &context);
  return device_of_current(l, context);
}

CUcontext current_primary_context() {
  const Loaded& l = loaded();
  return primary_context(l, current_device_ordinal(l));
}

}  // namespace custream::detail

namespace custream {

ContextScope::ContextScope(CUcontext context) {
  using detail::DriverApi;
  detail::call<&DriverApi::cuCtxGetCurrent>({}, &previous_);
  if (previous_ == context) return;
  detail::call<&DriverApi::cuCtxSetCurrent>(detail::context_subject(context), context);
  switched_ = true;
}

ContextScope::~ContextScope() {
  // The driver is loaded (the constructor succeeded) and never unloaded. A failure leaves the
  // wrong context current: the release-error handler hears of it (except
  // CUDA_ERROR_DEINITIALIZED during teardown, when there is nothing left to restore).
  if (switched_) {
    detail::release_call<&detail::DriverApi::cuCtxSetCurrent>("context (restoring it)", previous_,
                                                              previous_);
  }
}

}  // namespace custream

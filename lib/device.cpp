// custream::Device.
#include "custream/device.hpp"

#include "context.hpp"
#include "custream/error.hpp"

namespace custream {

int Device::count() { return detail::loaded().device_count; }

Device::Device(int ordinal) : ordinal_(ordinal), handle_(0) {
  const detail::Loaded& l = detail::loaded();
  if (ordinal < 0 || ordinal >= l.device_count) {
    throw Error(CUDA_ERROR_INVALID_DEVICE, "custream::Device", "device " + std::to_string(ordinal),
                "the driver reports " + std::to_string(l.device_count) +
                    " device(s), ordinals 0.." + std::to_string(l.device_count - 1));
  }
  handle_ = l.devices[ordinal].device;
}

Device Device::current() {
  const detail::Loaded& l = detail::loaded();
  if (l.device_count == 0) {
    throw Error(CUDA_ERROR_NO_DEVICE, "custream::Device::current", {},
                "the driver reports no device");
  }
  const int ordinal = detail::current_device_ordinal(l);
  return Device(ordinal, l.devices[ordinal].device, Unchecked{});
}

std::string Device::name() const {
  char buffer[256] = {};
  if (CUresult r = detail::api().cuDeviceGetName(buffer, sizeof buffer - 1, handle_);
      r != CUDA_SUCCESS) {
    detail::throw_device_error(r, "cuDeviceGetName", ordinal_);
  }
  return buffer;
}

int Device::attribute(CUdevice_attribute attribute) const {
  int value = 0;
  if (CUresult r = detail::api().cuDeviceGetAttribute(&value, attribute, handle_);
      r != CUDA_SUCCESS) {
    detail::throw_error(r, "cuDeviceGetAttribute", "device " + std::to_string(ordinal_),
                        "attribute " + std::to_string(static_cast<int>(attribute)));
  }
  return value;
}

ComputeCapability Device::compute_capability() const {
  return {attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
          attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)};
}

std::size_t Device::total_memory() const {
  std::size_t bytes = 0;
  if (CUresult r = detail::api().cuDeviceTotalMem(&bytes, handle_); r != CUDA_SUCCESS) {
    detail::throw_device_error(r, "cuDeviceTotalMem", ordinal_);
  }
  return bytes;
}

CUcontext Device::primary_context() const {
  return detail::primary_context(detail::loaded(), ordinal_);
}

bool Device::primary_context_active() const {
  unsigned flags = 0;
  int active = 0;
  if (CUresult r = detail::api().cuDevicePrimaryCtxGetState(handle_, &flags, &active);
      r != CUDA_SUCCESS) {
    detail::throw_device_error(r, "cuDevicePrimaryCtxGetState", ordinal_);
  }
  return active != 0;
}

void Device::make_current() const {
  CUcontext context = primary_context();
  if (CUresult r = detail::api().cuCtxSetCurrent(context); r != CUDA_SUCCESS) {
    detail::throw_device_error(r, "cuCtxSetCurrent", ordinal_);
  }
}

}  // namespace custream

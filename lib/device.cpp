// custream::Device.
#include "custream/device.hpp"

#include "context.hpp"
#include "custream/error.hpp"

namespace custream {

void detail::throw_bad_ordinal(int ordinal, int count, const char* call) {
  throw Error(count == 0 ? CUDA_ERROR_NO_DEVICE : CUDA_ERROR_INVALID_DEVICE, call,
              "device " + std::to_string(ordinal),
              count == 0 ? std::string("the driver reports no device")
                         : "the driver reports " + std::to_string(count) +
                               " device(s), ordinals 0.." + std::to_string(count - 1));
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

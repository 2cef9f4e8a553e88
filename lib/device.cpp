// custream::Device.
#include "custream/device.hpp"

#include "context.hpp"
#include "custream/error.hpp"

namespace custream {

using detail::DriverApi;

std::string Device::name() const {
  char buffer[256] = {};
  detail::call<&DriverApi::cuDeviceGetName>(detail::device_subject(ordinal_), buffer,
                                            static_cast<int>(sizeof buffer - 1), handle_);
  return buffer;
}

int Device::attribute(CUdevice_attribute attribute) const {
  int value = 0;
  if (CUresult r = detail::try_call<&DriverApi::cuDeviceGetAttribute>(&value, attribute, handle_);
      r != CUDA_SUCCESS) {
    detail::fail<&DriverApi::cuDeviceGetAttribute>(
        r, detail::device_subject(ordinal_),
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
  detail::call<&DriverApi::cuDeviceTotalMem>(detail::device_subject(ordinal_), &bytes, handle_);
  return bytes;
}

bool Device::primary_context_active() const {
  unsigned flags = 0;
  int active = 0;
  detail::call<&DriverApi::cuDevicePrimaryCtxGetState>(detail::device_subject(ordinal_), handle_,
                                                       &flags, &active);
  return active != 0;
}

void Device::make_current() const {
  detail::call<&DriverApi::cuCtxSetCurrent>(detail::device_subject(ordinal_),
                                            primary_context().handle());
  detail::scoped_context_forget();  // an open ContextScope's context is no longer current
}

}  // namespace custream

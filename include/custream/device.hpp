/// @file
/// custream::Device: a CUDA device and its primary context.
#pragma once

#include "custream/detail/cuda.hpp"

#include <cstddef>
#include <string>

#include "custream/context.hpp"
#include "custream/detail/call.hpp"
#include "custream/detail/driver.hpp"
#include "custream/sm_resource.hpp"

namespace custream {

/// Compute capability, e.g. {9, 0} for an H100 or H200.
struct ComputeCapability {
  int major = 0;  ///< Major version.
  int minor = 0;  ///< Minor version.
};

/// A CUDA device by ordinal. A cheap value; the primary context it hands out is retained
/// once per process, lazily and thread-safely, and never released behind the user's back.
class Device {
 public:
  /// The number of devices the driver reports. @throws Error when there is no driver.
  static int count() { return detail::loaded().device_count; }

  /// The device of the current context when one is current in this thread (so it agrees with
  /// code that called cudaSetDevice or cuCtxSetCurrent), otherwise device 0.
  /// @throws Error when there is no driver, when the driver reports no device
  /// (CUDA_ERROR_NO_DEVICE), or when the driver query fails.
  static Device current() {
    const detail::Loaded& l = detail::loaded();
    CUcontext context = nullptr;
    const CUresult r = l.api.cuCtxGetCurrent(&context);  // raw: hot path, one call
    if (r != CUDA_SUCCESS) detail::fail<&detail::DriverApi::cuCtxGetCurrent>(r, {});
    if (l.device_count == 0) detail::throw_bad_ordinal(0, 0);
    const int ordinal = detail::device_of_current(l, context);
    return Device(ordinal, l.devices[ordinal].device, Unchecked{});
  }

  /// The device with this ordinal. @throws Error (CUDA_ERROR_INVALID_DEVICE) when `ordinal`
  /// is not in [0, count()), naming the ordinal and the count (CUDA_ERROR_NO_DEVICE when
  /// the count is 0).
  explicit Device(int ordinal) : ordinal_(ordinal) {
    const detail::Loaded& l = detail::loaded();
    if (static_cast<unsigned>(ordinal) >= static_cast<unsigned>(l.device_count)) {
      detail::throw_bad_ordinal(ordinal, l.device_count);
    }
    handle_ = l.devices[ordinal].device;
  }

  /// The ordinal, 0-based.
  int ordinal() const noexcept { return ordinal_; }
  /// The driver's CUdevice handle.
  CUdevice handle() const noexcept { return handle_; }

  /// The device's name, e.g. "NVIDIA H200". @throws Error on a driver failure.
  std::string name() const;
  /// One attribute (cuDeviceGetAttribute). @throws Error on a driver failure.
  int attribute(CUdevice_attribute attribute) const;
  /// Compute capability. @throws Error on a driver failure.
  ComputeCapability compute_capability() const;
  /// Total memory in bytes. @throws Error on a driver failure.
  std::size_t total_memory() const;

  /// The device's primary context, retained on first use (once per process, thread-safe) and
  /// never released behind the user's back; handle() is its CUcontext. After the first use it
  /// costs one atomic load. @throws Error when cuDevicePrimaryCtxRetain fails.
  Context primary_context() const {
    return Context(detail::primary_context(detail::loaded(), ordinal_), nullptr, ordinal_,
                   ContextKind::primary);
  }
  /// True when the primary context is active (cuDevicePrimaryCtxGetState), retained by
  /// custream or by anybody else. @throws Error on a driver failure.
  bool primary_context_active() const;

  /// All of the device's SMs (cuDeviceGetDevResource), to split into groups for green
  /// contexts. Needs a driver of CUDA 12.4 or newer.
  /// @throws Error naming the minimum driver when the driver lacks the call; Error on a
  /// driver failure.
  SmResource sms() const;
  /// sms().split(min_count, groups, ignore_coscheduling): up to `groups` groups (0, or more
  /// than fit: as many as fit) of at least `min_count` SMs for green contexts
  /// (Context::create_green). @throws as SmResource::split().
  SmSplit split_sms(unsigned min_count, unsigned groups = 0,
                    bool ignore_coscheduling = false) const;

  /// Makes the primary context current in this thread (like cudaSetDevice).
  /// @throws Error on a driver failure.
  void make_current() const;

  /// Same ordinal.
  friend bool operator==(Device a, Device b) noexcept { return a.ordinal_ == b.ordinal_; }
  /// Different ordinals.
  friend bool operator!=(Device a, Device b) noexcept { return a.ordinal_ != b.ordinal_; }

 private:
  struct Unchecked {};
  Device(int ordinal, CUdevice handle, Unchecked) noexcept : ordinal_(ordinal), handle_(handle) {}

  int ordinal_;
  CUdevice handle_ = 0;
};

}  // namespace custream

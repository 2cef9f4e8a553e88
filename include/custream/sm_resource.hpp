/// @file
/// custream::SmResource: a set of a device's SMs, split into groups for green contexts.
#pragma once

#include "custream/detail/cuda.hpp"

#include <vector>

namespace custream {

struct SmSplit;

/// A set of SMs of one device (a CUdevResource of type SM): the whole device
/// (Device::sms()), or a group split from it (split()). Green contexts are made from groups
/// (Context::create_green). Only the whole device's SMs can be split: the driver refuses to
/// split a group or the remaining SMs again. Needs a driver of CUDA 12.4 or newer.
class SmResource {
 public:
  /// No SMs.
  SmResource() noexcept = default;

  /// How many SMs it has.
  unsigned sm_count() const noexcept { return resource_.sm.smCount; }
  /// The device it belongs to, -1 when empty.
  int device_id() const noexcept { return device_; }
  /// The driver's description.
  const CUdevResource& native() const noexcept { return resource_; }

  /// Splits off up to `groups` groups (0: as many as the device allows) of at least
  /// `min_count` SMs each (cuDevSmResourceSplitByCount). A `groups` larger than what fits is
  /// no error: the driver's contract is "at most", so the split makes as many as fit (custream
  /// asks for at most sm_count() groups, each having one SM at least, whatever `groups` says:
  /// `UINT_MAX` allocates nothing large). The driver rounds the size up to its
  /// granularity (8 SMs on compute capability 9.x; 2 with `ignore_coscheduling`, which gives
  /// up the guarantee that a thread-block cluster fits in a group), and the SMs left over are
  /// in SmSplit::remaining.
  /// @throws Error (CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION) naming the device, the SM
  /// count and `min_count` when no group of that size fits, or when this is a group or the
  /// remaining SMs of an earlier split (without a driver call); Error naming the minimum
  /// driver when the driver lacks the call.
  SmSplit split(unsigned min_count, unsigned groups = 0, bool ignore_coscheduling = false) const;
  /// How many groups of at least `min_count` SMs split() could make (0 when none fits, and
  /// for a group or the remaining SMs of a split). @throws Error on a driver failure other
  /// than a size that does not fit.
  unsigned split_count(unsigned min_count, bool ignore_coscheduling = false) const;

 private:
  friend class Device;
  SmResource(const CUdevResource& resource, int device, bool splittable) noexcept
      : resource_(resource), device_(device), splittable_(splittable) {}

  CUdevResource resource_{};
  int device_ = -1;
  bool splittable_ = false;  // the whole device's SMs (Device::sms())
};

/// The result of SmResource::split(): the groups, each of the same size, and the rest.
struct SmSplit {
  std::vector<SmResource> groups;  ///< the groups made
  SmResource remaining;            ///< the SMs in no group (possibly none)
};

}  // namespace custream

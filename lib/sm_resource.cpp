// custream::SmResource and the SM queries of Device: splitting a device's SMs for green
// contexts. Design: docs/design/contexts.md.
#include "custream/sm_resource.hpp"

#include <algorithm>
#include <string>

#include "custream/device.hpp"
#include "custream/error.hpp"
#include "driver.hpp"

namespace custream {

using detail::DriverApi;

namespace {
unsigned split_flags(bool ignore_coscheduling) {
  return ignore_coscheduling ? unsigned{CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING} : 0u;
}

[[noreturn, gnu::cold]] void split_failed(CUresult r, const SmResource& input, unsigned min_count) {
  std::string why = "splitting " + std::to_string(input.sm_count()) +
                    " SMs into groups of at least " + std::to_string(min_count);
  if (r == CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION) {
    why +=
        ": no group of that size fits (the driver rounds sizes up to its granularity, 8 SMs "
        "on compute capability 9.x)";
  }
  detail::fail<&DriverApi::cuDevSmResourceSplitByCount>(
      r, detail::device_subject(input.device_id()), std::move(why));
}
}  // namespace

SmResource Device::sms() const {
  CUdevResource resource{};
  detail::call<&DriverApi::cuDeviceGetDevResource>(detail::device_subject(ordinal_), handle_,
                                                   &resource, CU_DEV_RESOURCE_TYPE_SM);
  return SmResource(resource, ordinal_, true);
}

SmSplit Device::split_sms(unsigned min_count, unsigned groups, bool ignore_coscheduling) const {
  return sms().split(min_count, groups, ignore_coscheduling);
}

unsigned SmResource::split_count(unsigned min_count, bool ignore_coscheduling) const {
  if (!splittable_ || min_count > sm_count()) return 0;
  unsigned count = 0;
  CUdevResource remaining{};
  const CUresult r = detail::try_call<&DriverApi::cuDevSmResourceSplitByCount>(
      static_cast<CUdevResource*>(nullptr), &count, &resource_, &remaining,
      split_flags(ignore_coscheduling), min_count);
  if (r == CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION) return 0;
  if (r != CUDA_SUCCESS) split_failed(r, *this, min_count);
  return count;
}

SmSplit SmResource::split(unsigned min_count, unsigned groups, bool ignore_coscheduling) const {
  if (!splittable_) {
    detail::fail<&DriverApi::cuDevSmResourceSplitByCount>(
        CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION, detail::device_subject(device_),
        "custream refused it without calling the driver: these " + std::to_string(sm_count()) +
            " SMs are a group or the rest of an earlier split, which the driver cannot split "
            "again; split the device's SMs (Device::sms()) with the sizes needed");
  }
  // The driver makes at most the groups asked for, and no more than fit; each has one SM at
  // least, so asking for more than the SM count changes nothing but the array's size (a caller's
  // UINT_MAX would be gigabytes of CUdevResource).
  unsigned count = std::min(groups, std::max(sm_count(), 1u));
  if (count == 0) {  // as many as fit: ask how many first
    count = split_count(min_count, ignore_coscheduling);
    if (count == 0) split_failed(CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION, *this, min_count);
  }
  std::vector<CUdevResource> made(count);
  CUdevResource remaining{};
  if (CUresult r = detail::try_call<&DriverApi::cuDevSmResourceSplitByCount>(
          made.data(), &count, &resource_, &remaining, split_flags(ignore_coscheduling), min_count);
      r != CUDA_SUCCESS) {
    split_failed(r, *this, min_count);
  }
  SmSplit split;
  split.groups.reserve(count);
  for (unsigned i = 0; i < count; ++i) {
    split.groups.push_back(SmResource(made[i], device_, false));
  }
  split.remaining = SmResource(remaining, device_, false);
  return split;
}

}  // namespace custream

/// @file
/// custream::InstantiateFlags: how a Graph is instantiated.
#pragma once

#include "custream/detail/cuda.hpp"

namespace custream {

/// Flags for instantiating a graph (CUgraphInstantiate_flags); combine with `|`.
enum class InstantiateFlags : unsigned long long {
  /// Nothing: the first launch pays the upload of the executable to the device.
  none = 0,
  /// CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH: free unfreed graph allocations before
  /// each relaunch.
  auto_free_on_launch = CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH,
  /// CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD: upload at instantiation, in the given stream, so the
  /// first launch costs what a repeat launch costs. custream's default.
  upload = CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD,
  /// CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH: launchable from the device (restricts the
  /// node kinds; host nodes are refused).
  device_launch = CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH,
  /// CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY: kernel nodes use their own priority
  /// instead of the launch stream's.
  use_node_priority = CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY,
};

/// Both flag sets.
constexpr InstantiateFlags operator|(InstantiateFlags a, InstantiateFlags b) noexcept {
  return static_cast<InstantiateFlags>(static_cast<unsigned long long>(a) |
                                       static_cast<unsigned long long>(b));
}
/// The flags in both.
constexpr InstantiateFlags operator&(InstantiateFlags a, InstantiateFlags b) noexcept {
  return static_cast<InstantiateFlags>(static_cast<unsigned long long>(a) &
                                       static_cast<unsigned long long>(b));
}

}  // namespace custream

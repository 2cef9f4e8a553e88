/// @file
/// custream::LaunchConfig: a kernel launch with launch attributes (cuLaunchKernelEx).
#pragma once

#include "custream/detail/cuda.hpp"

#include <cstddef>
#include <optional>

#include "custream/dim3.hpp"

namespace custream {

/// A programmatic event (CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT): `event` is recorded when
/// every block of the kernel has triggered it (cudaTriggerProgrammaticLaunchCompletion) or, with
/// `trigger_at_block_start`, when every block has started; a dependent launch may wait on it.
struct ProgrammaticEvent {
  CUevent event = nullptr;              ///< the event recorded (e.g. custream::Event::handle())
  bool trigger_at_block_start = false;  ///< trigger as each block starts
};

/// A launch's dimensions and attributes, for Kernel::launch and LibraryKernel::launch with a
/// configuration (one cuLaunchKernelEx, CUDA 11.6+). Attributes left unset are not passed.
///
/// @code
/// custream::LaunchConfig config{{blocks}, {256}};
/// config.cluster = custream::Dim3{2};  // clusters of two blocks (the grid must divide)
/// config.priority = 1;
/// kernel.launch(stream, config, buffer.get(), n);
/// @endcode
/// custream checks what the driver would answer obscurely, before calling it (a refused
/// launch would also invalidate a capture): cluster dimensions that do not divide the grid or
/// exceed what the kernel can schedule, a cooperative grid larger than the device can run at
/// once (from the kernel's occupancy), an attribute the driver is too old for (naming the
/// driver version it needs), one the device lacks, and more dynamic shared memory than the
/// driver's 32 bits can say.
struct LaunchConfig {
  Dim3 grid;                     ///< blocks
  Dim3 block;                    ///< threads per block
  std::size_t shared_bytes = 0;  ///< dynamic shared memory per block (at most 4 GiB − 1)

  /// Thread-block clusters of these dimensions (CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, compute
  /// capability 9.0+): each must divide the grid's; at most 8 blocks in a cluster (16 when the
  /// kernel allows non-portable sizes).
  std::optional<Dim3> cluster;
  /// Every block resident at once, for grid-wide synchronization
  /// (CU_LAUNCH_ATTRIBUTE_COOPERATIVE): the grid must not exceed the kernel's occupancy times
  /// the device's multiprocessors. Costs one occupancy query per launch.
  bool cooperative = false;
  /// The launch's priority (CU_LAUNCH_ATTRIBUTE_PRIORITY, CUDA 12.0+), as a stream priority:
  /// lower is higher; the driver clamps it to the device's range.
  std::optional<int> priority;
  /// Programmatic dependent launch (CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
  /// compute capability 9.0+): the kernel may start before the previous kernel in the stream
  /// has finished, once that kernel triggers it.
  bool programmatic_serialization = false;
  /// A programmatic event (CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT).
  std::optional<ProgrammaticEvent> programmatic_event;
  /// The memory synchronization domain (CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN, CUDA 12.0+).
  std::optional<CUlaunchMemSyncDomain> mem_sync_domain;

  /// A launch of `grid` blocks of `block` threads with `shared_bytes` of dynamic shared memory
  /// and no attributes yet.
  /// Explicit, so that a launch's grid is never taken for a configuration.
  explicit LaunchConfig(Dim3 grid_ = {}, Dim3 block_ = {}, std::size_t shared_bytes_ = 0) noexcept
      : grid(grid_), block(block_), shared_bytes(shared_bytes_) {}
};

}  // namespace custream

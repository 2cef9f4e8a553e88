/// @file
/// custream::CodeTarget: what a custream::Program compiles to.
#pragma once

namespace custream {

/// What a Program compiles to for the devices present.
enum class CodeTarget : unsigned char {
  /// PTX for the oldest architecture of the devices present (one image for every device,
  /// compiled by the driver's JIT for each), unless the driver is older than NVRTC (its JIT
  /// cannot read NVRTC's PTX ISA), the driver refuses the PTX
  /// (CUDA_ERROR_UNSUPPORTED_PTX_VERSION), or the program is linked (ProgramOptions::
  /// needs_link): then a cubin for each device architecture.
  automatic,
  /// PTX only (`--gpu-architecture=compute_XY`, XY the oldest device architecture).
  ptx,
  /// A cubin for each device architecture (`--gpu-architecture=sm_XY`).
  cubin,
};

}  // namespace custream

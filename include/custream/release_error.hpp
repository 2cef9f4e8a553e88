/// @file
/// custream::ReleaseError: a driver call that failed inside a destructor.
#pragma once

#include "custream/detail/cuda.hpp"

#include <string>

namespace custream {

/// What the release-error handler receives when a driver call made to release something
/// (cuStreamDestroy, cuEventDestroy, cuGraphExecDestroy, cuGraphDestroy, cuMemFree,
/// cuMemFreeAsync, cuModuleUnload, cuUserObjectRelease, or the cuCtxSetCurrent that restores
/// a context) failed where custream cannot throw: in a destructor or while cleaning up after
/// another error. CUDA_ERROR_DEINITIALIZED (the driver already torn down at process exit)
/// is not reported.
struct ReleaseError {
  /// The driver's result.
  CUresult result = CUDA_SUCCESS;
  /// The driver call, e.g. "cuStreamDestroy".
  std::string call;
  /// What it was called on, e.g. "stream 0x7f…".
  std::string subject;

  /// "cuStreamDestroy(stream 0x7f…) failed in a destructor: CUDA_ERROR_… (…)".
  /// @throws std::bad_alloc only.
  std::string message() const;
};

}  // namespace custream

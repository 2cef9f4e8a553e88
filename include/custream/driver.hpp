/// @file
/// The CUDA driver as custream loads it: at run time, once, lazily, thread-safely.
#pragma once

#include <string>

#include "custream/detail/cuda.hpp"

namespace custream {

/// What custream loaded.
struct DriverInfo {
  /// Absolute path of the driver library, or "(application-supplied cuGetProcAddress)".
  std::string library;
  /// cuDriverGetVersion(), e.g. 13000 for CUDA 13.0.
  int version = 0;
};

/// Loads the driver if needed (`dlopen` of `$CUSTREAM_LIBCUDA`, else "libcuda.so.1", then
/// `cuGetProcAddress_v2` for every entry point and `cuInit(0)`) and describes it.
/// @throws Error when there is no usable driver; the message says what is missing and why,
/// e.g. "no CUDA driver found (libcuda.so.1: cannot open shared object file: …)". A failed
/// load is not retried: every later call throws the same error.
const DriverInfo& driver_info();

/// True when driver_info() would succeed; never throws.
bool driver_available() noexcept;

/// Hands custream the application's own `cuGetProcAddress` (for example one obtained from a
/// driver the application loaded itself); custream then never opens libcuda on its own.
/// Must be called before anything loads the driver; handing over the same pointer again
/// before that is a no-op.
/// @throws Error (CUDA_ERROR_INVALID_VALUE) for a null pointer, when another pointer was
/// handed over already, or when the driver was already loaded (or a load was attempted and
/// failed: the message says why it failed).
void use_driver_entry_point(PFN_cuGetProcAddress_v12000 get_proc_address);

}  // namespace custream

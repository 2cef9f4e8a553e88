// Launches with a configuration (cuLaunchKernelEx) shared by Kernel and LibraryKernel, and the
// argument check of typed launches. Internal. Design: docs/design/libraries.md, invariants 6-7.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <string>

#include "custream/launch_config.hpp"
#include "custream/stream_ref.hpp"

namespace custream::detail {

/// Launches `function` on `stream` with `config` (one cuLaunchKernelEx) after the checks of
/// invariant 7. `kernel` is a library kernel's name for errors (empty: a module's kernel,
/// named by its function).
/// @throws Error naming the kernel, the attribute and the limit when a check refuses (the
/// driver is not called), or the driver's error naming the kernel, stream and configuration.
void launch_with_config(CUfunction function, const StreamRef& stream, const LaunchConfig& config,
                        void** params, const std::string& kernel);

/// "axb x c" for an error message.
std::string dims_text(Dim3 d);

/// The most dynamic shared memory a launch can ask for: the driver takes it in 32 bits
/// (cuLaunchKernel's sharedMemBytes, CUlaunchConfig::sharedMemBytes).
inline constexpr std::size_t kMaxSharedBytes = 0xFFFFFFFFu;

/// Throws the error of a launch of `kernel` (its text for errors) on `stream` asking for
/// `shared_bytes` of dynamic shared memory, more than kMaxSharedBytes (`call`: the entry the
/// launch would have called; the driver is not called).
[[noreturn, gnu::cold]] void refuse_shared_bytes(const char* call, const StreamRef& stream,
                                                 const std::string& kernel,
                                                 std::size_t shared_bytes);

}  // namespace custream::detail

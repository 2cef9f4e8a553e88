// Internal access to the loaded driver (the part inline hot paths need is in
// custream/detail/driver.hpp).
//
// Design note — invariants:
//  1. The driver is loaded at most once per process, under one mutex; a failure (of any
//     kind, also an exception that is not a custream::Error) is recorded and re-thrown by
//     every later call, never retried. When even recording the reason runs out of memory
//     (std::bad_alloc leaves the first call), the next call records CUDA_ERROR_OUT_OF_MEMORY.
//  2. After a successful load, g_loaded points to a Loaded that is never freed and never
//     changes (except the primary-context slots, which go from null to a retained context
//     exactly once, under that device's own lock: a first retain never waits for another
//     device's). Hot paths read it with one acquire load and no lock. A negative device
//     count is a failed load; with 0 devices, nothing indexes the (empty) slots: "the current
//     device" with no current context is CUDA_ERROR_NO_DEVICE, not device 0.
//  3. Nothing here has a static destructor: the library is never dlclose'd, and no driver
//     call runs at process exit.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>

#include "custream/detail/driver.hpp"

namespace custream::detail {

/// The table of entries, in CUSTREAM_DRIVER_ENTRIES order.
const DriverEntry* driver_entries(std::size_t* count) noexcept;

/// Throws the error for an optional entry point the driver lacks: names the call, the ABI
/// version and the minimum driver.
[[noreturn, gnu::cold]] void throw_missing_entry(const char* field);

/// Returns `fn`, or throws throw_missing_entry(field) when the driver lacks it.
template <typename Fn>
inline Fn require(Fn fn, const char* field) {
  if (fn == nullptr) throw_missing_entry(field);
  return fn;
}

/// "0x7f12…" for a handle or pointer ("0x0" for null).
std::string pointer_text(const void* p);

/// Throws Error for `call` failing with `result` about a device.
[[noreturn, gnu::cold]] void throw_device_error(CUresult result, const char* call, int device);
/// Throws Error for `call` failing with `result` about a stream ("stream 0x… (device N)").
[[noreturn, gnu::cold]] void throw_stream_error(CUresult result, const char* call, CUstream stream,
                                                int device);
/// Throws Error for `call` failing with `result`, with a subject and detail text.
[[noreturn, gnu::cold]] void throw_error(CUresult result, const char* call, std::string subject,
                                         std::string detail = {});

/// Reports `result` of a release call (`call` on the `what` at `handle`, e.g.
/// "cuStreamDestroy", "stream", h) to the release-error handler, unless it is CUDA_SUCCESS or
/// CUDA_ERROR_DEINITIALIZED. For destructors and cleanup paths: never throws, and allocates
/// only on failure.
void report_release_failure(CUresult result, const char* call, const char* what,
                            const void* handle) noexcept;

/// Checks a driver result: throws throw_error(result, call) unless CUDA_SUCCESS.
inline void check(CUresult result, const char* call) {
  if (result != CUDA_SUCCESS) throw_error(result, call);
}

}  // namespace custream::detail

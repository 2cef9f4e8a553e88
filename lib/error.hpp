// The throw helpers of lib/ (defined in error.cpp), beside the call layer's
// (custream/detail/call.hpp). Internal.
#pragma once

#include <cuda.h>

#include <string>

#include "custream/detail/call.hpp"

namespace custream::detail {

/// "0x7f12…" for a handle or pointer ("0x0" for null).
std::string pointer_text(const void* p);

/// Throws Error for `call` failing with `result`, about nothing in particular.
[[noreturn, gnu::cold]] void throw_error(CUresult result, const char* call);

/// Throws Error for `call` failing with `result`, with a subject and detail text written by
/// the caller (for subjects the call layer's Subject cannot say, e.g. a kernel by name).
[[noreturn, gnu::cold]] void throw_error(CUresult result, const char* call, std::string subject,
                                         std::string detail = {});

}  // namespace custream::detail

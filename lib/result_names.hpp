// CUresult names and short descriptions, generated from cuda.h by tools/gen_result_names.py.
// Shared by the library (messages when no driver is loaded) and the CPU driver emulator.
#pragma once

#include <cuda.h>

namespace custream::detail {

/// "CUDA_ERROR_INVALID_HANDLE" for CUDA_ERROR_INVALID_HANDLE; nullptr for an unknown code.
const char* result_name(CUresult result) noexcept;

/// The first sentence of cuda.h's description of the code; nullptr for an unknown code.
const char* result_description(CUresult result) noexcept;

}  // namespace custream::detail

// The CUDA toolkit headers custream's public headers use (cuda.h, cudaTypedefs.h), with a clear
// error where they or C++17 are missing, instead of the compiler's. Internal.
#pragma once

#if !defined(__cplusplus) || __cplusplus < 201703L
#error "custream needs C++17 or later: compile with -std=c++17 (or -std=gnu++17)"
#endif

#if defined(__has_include)
#if !__has_include(<cuda.h>) || !__has_include(<cudaTypedefs.h>)
#error "custream needs the CUDA toolkit headers cuda.h and cudaTypedefs.h (CUDA >= 12.0): add -I<toolkit>/include, e.g. -I/usr/local/cuda/include (`pkg-config --cflags custream` gives the directory custream was built with)"
#endif
#endif

#include <cuda.h>
#include <cudaTypedefs.h>

#if CUDA_VERSION < 12000
#error "custream needs CUDA >= 12.0 headers; the cuda.h found is older (see CUDA_VERSION)"
#endif

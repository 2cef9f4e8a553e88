// NVRTC and nvJitLink, loaded at run time like libcuda (nothing links them). Internal.
// Design: docs/design/jit.md (invariants 1 and 2).
#pragma once

#include <cstddef>
#include <string>

namespace custream::detail {

using nvrtcResult = int;
using nvrtcProgram = struct _nvrtcProgram*;
using nvJitLinkResult = int;
using nvJitLinkHandle = struct nvJitLink*;

/// The NVRTC entry points custream uses (declared here: no nvrtc.h needed to build).
struct NvrtcApi {
  std::string library;  ///< the path loaded
  int major = 0, minor = 0;
  const char* (*error_string)(nvrtcResult) = nullptr;
  nvrtcResult (*version)(int*, int*) = nullptr;
  nvrtcResult (*num_archs)(int*) = nullptr;
  nvrtcResult (*archs)(int*) = nullptr;
  nvrtcResult (*create)(nvrtcProgram*, const char*, const char*, int, const char* const*,
                        const char* const*) = nullptr;
  nvrtcResult (*destroy)(nvrtcProgram*) = nullptr;
  nvrtcResult (*compile)(nvrtcProgram, int, const char* const*) = nullptr;
  nvrtcResult (*log_size)(nvrtcProgram, std::size_t*) = nullptr;
  nvrtcResult (*log)(nvrtcProgram, char*) = nullptr;
  nvrtcResult (*ptx_size)(nvrtcProgram, std::size_t*) = nullptr;
  nvrtcResult (*ptx)(nvrtcProgram, char*) = nullptr;
  nvrtcResult (*cubin_size)(nvrtcProgram, std::size_t*) = nullptr;
  nvrtcResult (*cubin)(nvrtcProgram, char*) = nullptr;
  nvrtcResult (*ltoir_size)(nvrtcProgram, std::size_t*) = nullptr;  ///< null before NVRTC 12.0
  nvrtcResult (*ltoir)(nvrtcProgram, char*) = nullptr;
  nvrtcResult (*add_name)(nvrtcProgram, const char*) = nullptr;
  nvrtcResult (*lowered_name)(nvrtcProgram, const char*, const char**) = nullptr;

  /// "13.0".
  std::string version_text() const;
  /// 13000 for 13.0 (as cuDriverGetVersion counts).
  int version_number() const { return major * 1000 + minor * 10; }
};

/// The nvJitLink entry points custream uses.
struct NvJitLinkApi {
  std::string library;
  unsigned major = 0, minor = 0;
  nvJitLinkResult (*create)(nvJitLinkHandle*, unsigned, const char**) = nullptr;
  nvJitLinkResult (*destroy)(nvJitLinkHandle*) = nullptr;
  nvJitLinkResult (*add_data)(nvJitLinkHandle, int, const void*, std::size_t,
                              const char*) = nullptr;
  nvJitLinkResult (*add_file)(nvJitLinkHandle, int, const char*) = nullptr;
  nvJitLinkResult (*complete)(nvJitLinkHandle) = nullptr;
  nvJitLinkResult (*cubin_size)(nvJitLinkHandle, std::size_t*) = nullptr;
  nvJitLinkResult (*cubin)(nvJitLinkHandle, void*) = nullptr;
  nvJitLinkResult (*error_log_size)(nvJitLinkHandle, std::size_t*) = nullptr;
  nvJitLinkResult (*error_log)(nvJitLinkHandle, char*) = nullptr;
  nvJitLinkResult (*version)(unsigned*, unsigned*) = nullptr;

  /// "13.0".
  std::string version_text() const;
};

/// NVRTC, loaded once for the process: $CUSTREAM_NVRTC, else libnvrtc.so.13, .12, libnvrtc.so
/// (the loader's path, then the toolkit's lib64 under $CUDA_HOME and /usr/local/cuda).
/// @throws Error (CUDA_ERROR_NOT_FOUND) naming NVRTC, every path tried and how to fix it; the
/// failure is recorded and thrown again by every later call.
const NvrtcApi& nvrtc();
/// nvJitLink, the same way ($CUSTREAM_NVJITLINK, libnvJitLink.so.13, .12, libnvJitLink.so).
const NvJitLinkApi& nvjitlink();

/// The toolkit's lib64 directories to search, in order: $CUDA_HOME/lib64, $CUDA_PATH/lib64,
/// /usr/local/cuda/lib64.
std::string toolkit_lib_dirs_text();
/// The path of `file` in the first toolkit lib64 directory that has it, or "".
std::string find_in_toolkit(const std::string& file);

}  // namespace custream::detail

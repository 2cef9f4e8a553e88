// One NVRTC compilation and one nvJitLink link. Internal. Design: docs/design/jit.md.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "custream/program_image.hpp"

namespace custream::detail {

/// What NVRTC compiles.
struct SourceSet {
  const std::string& text;
  const std::string& name;
  const std::vector<std::pair<std::string, std::string>>& headers;
  const std::vector<std::string>& expressions;
};

/// What NVRTC hands back.
enum class NvrtcOutput { ptx, cubin, ltoir };

/// Compiles with `options` (the target included) and returns the output, the lowered names
/// and the log. @throws CompileError with NVRTC's log; Error for NVRTC's other failures.
ProgramImage run_nvrtc(const SourceSet& source, const std::vector<std::string>& options,
                       NvrtcOutput output, const std::string& arch);

/// Links `input` (LTO-IR when `ltoir`, else a relocatable cubin) for `arch` ("sm_90") with
/// nvJitLink, and libcudadevrt.a when `device_runtime`; returns the cubin.
/// @throws CompileError with nvJitLink's log; Error (CUDA_ERROR_NOT_FOUND) when nvJitLink or
/// libcudadevrt.a is absent.
std::string run_nvjitlink(const std::string& program, const std::string& input, bool ltoir,
                          const std::string& arch, bool device_runtime);

/// The path of libcudadevrt.a. @throws Error (CUDA_ERROR_NOT_FOUND) saying where it looked.
std::string device_runtime_library();

/// Options joined with spaces.
std::string joined(const std::vector<std::string>& options);

}  // namespace custream::detail

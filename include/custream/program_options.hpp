/// @file
/// custream::ProgramOptions: how a custream::Program is compiled.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace custream {

/// The compiler options of a Program, as a small typed set (plus raw NVRTC options). Every
/// option is part of the compile cache's key, in the order given (docs/design/jit.md).
struct ProgramOptions {
  /// The C++ dialect (`--std=`): "c++17", "c++20", …; empty: NVRTC's default.
  std::string std = "c++17";
  /// Macros (`-DNAME=VALUE`, or `-DNAME` for an empty value), in order.
  std::vector<std::pair<std::string, std::string>> defines;
  /// Include directories (`-I`). The compile cache keys them by path only: a change to a file
  /// in one of them is not seen; prefer Program::add_header for code that changes.
  std::vector<std::string> include_paths;
  /// `-lineinfo`: line numbers for profilers and the sanitizer.
  bool line_info = false;
  /// `--use_fast_math`.
  bool fast_math = false;
  /// `-rdc=true`: relocatable device code, linked by nvJitLink into a cubin for each device's
  /// architecture (needed by device code that calls functions of another unit).
  bool relocatable = false;
  /// `-dlto`: LTO-IR, optimized and linked by nvJitLink into a cubin for each device's
  /// architecture.
  bool link_time_optimization = false;
  /// Links the CUDA device runtime (the toolkit's libcudadevrt.a, found under $CUDA_HOME/lib64
  /// or /usr/local/cuda/lib64), e.g. for cudaGraphSetConditional or device-side launches in
  /// the program's kernels; implies `relocatable`. A machine with a driver but no toolkit has
  /// no libcudadevrt.a: the compile throws Error (CUDA_ERROR_NOT_FOUND) saying so.
  bool device_runtime = false;
  /// Raw NVRTC options, appended after the others as given (e.g. "-maxrregcount=64").
  std::vector<std::string> extra;

  /// Adds a macro. Returns *this.
  ProgramOptions& define(std::string name, std::string value = {}) {
    defines.emplace_back(std::move(name), std::move(value));
    return *this;
  }
  /// Adds an include directory. Returns *this.
  ProgramOptions& include(std::string path) {
    include_paths.push_back(std::move(path));
    return *this;
  }
  /// Adds a raw NVRTC option. Returns *this.
  ProgramOptions& option(std::string raw) {
    extra.push_back(std::move(raw));
    return *this;
  }

  /// The NVRTC options these make, in order, without the target architecture.
  std::vector<std::string> nvrtc_options() const;
  /// Whether nvJitLink links the result (relocatable, link_time_optimization or
  /// device_runtime).
  bool needs_link() const noexcept {
    return relocatable || link_time_optimization || device_runtime;
  }
};

}  // namespace custream

/// @file
/// custream::CompileError: NVRTC or nvJitLink refused a custream::Program.
#pragma once

#include <string>

#include "custream/error.hpp"

namespace custream {

/// A Program that does not compile or link. Its message (what()) holds the compiler's log,
/// whose lines name the source and line ("kernel.cu(12): error: …"), the options used, the
/// target and the NVRTC (or nvJitLink) version. result() is CUDA_ERROR_INVALID_SOURCE.
class CompileError : public Error {
 public:
  /// `call` is the failing NVRTC or nvJitLink function; `log` its log.
  CompileError(std::string call, std::string program, std::string log, std::string options,
               std::string target, std::string compiler_version);

  /// The compiler's log as it wrote it.
  const std::string& log() const noexcept { return log_; }
  /// The options used, space-separated, the target included.
  const std::string& options() const noexcept { return options_; }
  /// "NVRTC 13.0" or "nvJitLink 13.0".
  const std::string& compiler_version() const noexcept { return compiler_version_; }

 private:
  std::string log_;
  std::string options_;
  std::string compiler_version_;
};

}  // namespace custream

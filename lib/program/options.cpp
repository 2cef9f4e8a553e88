// ProgramOptions to NVRTC options; CompileError. Design: docs/design/jit.md.
#include "custream/compile_error.hpp"
#include "custream/program_options.hpp"

namespace custream {

std::vector<std::string> ProgramOptions::nvrtc_options() const {
  std::vector<std::string> out;
  if (!std.empty()) out.push_back("--std=" + std);
  for (const auto& [name, value] : defines) {
    out.push_back(value.empty() ? "-D" + name : "-D" + name + "=" + value);
  }
  for (const std::string& path : include_paths) out.push_back("-I" + path);
  if (line_info) out.push_back("-lineinfo");
  if (fast_math) out.push_back("--use_fast_math");
  if (relocatable || device_runtime) out.push_back("-rdc=true");
  if (link_time_optimization) out.push_back("-dlto");
  out.insert(out.end(), extra.begin(), extra.end());
  return out;
}

CompileError::CompileError(std::string call, std::string program, std::string log,
                           std::string options, std::string target, std::string compiler_version)
    : Error(CUDA_ERROR_INVALID_SOURCE, std::move(call), std::move(program),
            compiler_version + " refused it for " + target + " with options [" + options +
                "]; its log:\n" + log),
      log_(std::move(log)),
      options_(std::move(options)),
      compiler_version_(std::move(compiler_version)) {}

}  // namespace custream

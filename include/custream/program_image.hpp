/// @file
/// custream::ProgramImage: what one compilation of a custream::Program produced.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace custream {

/// The code a Program compiled for one target, ready for Library::from_image.
struct ProgramImage {
  /// The image: PTX text with its terminating NUL (counted in size()), or a cubin.
  std::string bytes;
  /// True for PTX, false for a cubin.
  bool ptx = true;
  /// The target: "compute_75" (PTX) or "sm_90" (cubin).
  std::string arch;
  /// Each name expression (Program::add_name_expression) and its lowered (mangled) name.
  std::vector<std::pair<std::string, std::string>> lowered_names;
  /// The compiler's log (warnings; empty when it wrote none).
  std::string log;
  /// True when it came from the compile cache rather than from NVRTC.
  bool from_cache = false;
};

}  // namespace custream

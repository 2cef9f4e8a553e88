// A ProgramImage as a compile-cache payload, and whole-file reads. Internal.
// Design: docs/design/jit.md (invariant 7).
#pragma once

#include <string>

#include "custream/program_image.hpp"

namespace custream::detail {

/// The payload of `image` (its bytes, kind, target, lowered names and log).
std::string encode_image(const ProgramImage& image);
/// Reads a payload; false when it is not one (then `image` is unspecified).
bool decode_image(const std::string& payload, ProgramImage* image);
/// Reads the file at `path` into `out`; false when it cannot.
bool read_whole_file(const std::string& path, std::string* out);

}  // namespace custream::detail

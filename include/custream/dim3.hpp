/// @file
/// custream::Dim3: grid and block dimensions of a kernel launch.
#pragma once

namespace custream {

/// Grid or block dimensions; unspecified dimensions are 1.
struct Dim3 {
  unsigned x = 1;  ///< First dimension.
  unsigned y = 1;  ///< Second dimension.
  unsigned z = 1;  ///< Third dimension.

  /// {x, y, z}; `Dim3(256)` is a one-dimensional size.
  constexpr Dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) noexcept  // NOLINT: implicit
      : x(x_), y(y_), z(z_) {}
};

}  // namespace custream

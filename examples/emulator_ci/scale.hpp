// The code under test: scales a device vector by a factor with a PTX kernel, on a stream.
#pragma once

#include <custream/custream.hpp>
#include <custream/kernel.hpp>
#include <custream/module.hpp>

namespace example {

/// Loads the `scale` kernel once (on the current device) and launches it.
class Scaler {
 public:
  Scaler();
  /// data[i] *= factor for i < n, enqueued on `stream`. @throws custream::Error
  void run(custream::StreamRef stream, CUdeviceptr data, unsigned n, float factor) const;

 private:
  custream::Kernel kernel_;
};

}  // namespace example

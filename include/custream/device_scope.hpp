/// @file
/// custream::DeviceScope: make a device current for a scope (like `with cupy.cuda.Device(n)`).
#pragma once

#include "custream/context_scope.hpp"
#include "custream/device.hpp"

namespace custream {

/// Makes a device's primary context current for the scope and restores exactly the context
/// that was current before (also none, or a context custream did not create).
class DeviceScope {
 public:
  /// Makes `device` current. @throws Error on a driver failure.
  explicit DeviceScope(Device device) : context_(device.primary_context()) {}
  /// Makes device `ordinal` current. @throws Error for a bad ordinal or a driver failure.
  explicit DeviceScope(int ordinal) : DeviceScope(Device(ordinal)) {}

 private:
  ContextScope context_;
};

}  // namespace custream

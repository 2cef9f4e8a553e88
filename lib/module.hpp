// The owner of a loaded module, shared by Module and Kernel. Internal. Design:
// docs/design/modules.md.
#pragma once

#include <cuda.h>

#include "shared.hpp"

namespace custream::detail {

/// A loaded module and the context it was loaded into; the last reference unloads it.
struct ModuleOwner : Counted {
  ~ModuleOwner();
  CUmodule module = nullptr;
  CUcontext context = nullptr;
};

}  // namespace custream::detail

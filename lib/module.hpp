// The owner of a loaded module, shared by Module and Kernel. Internal. Design:
// docs/design/modules.md.
#pragma once

#include <cuda.h>

#include "custream/context.hpp"
#include "shared.hpp"

namespace custream::detail {

/// A loaded module and the context it was loaded into; the last reference unloads it.
struct ModuleOwner : Counted {
  ~ModuleOwner();
  CUmodule module = nullptr;
  CUcontext context = nullptr;
  Context keep;  // an owned context outlives its modules (contexts.md, invariant 5)
};

}  // namespace custream::detail

// Context helpers shared by devices, streams and events.
//
// Design note — invariants:
//  1. The device of a context comes from the per-device primary-context slots when it is a
//     primary context custream retained (no driver call), else from the driver every time:
//     no cache that could disagree with contexts created or destroyed behind custream's back.
//  2. Only calls that need a current context switch it, through ContextScope (set/restore).
#pragma once

#include <cuda.h>

#include "driver.hpp"

namespace custream::detail {

/// The ordinal of the current device (Device::current() without building a Device).
int current_device_ordinal(const Loaded& l);

}  // namespace custream::detail

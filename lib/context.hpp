// Context helpers shared by devices, streams and events.
//
// Design note — invariants:
//  1. The device of a context comes from the per-device primary-context slots when it is a
//     primary context custream retained (no driver call), else from the driver every time:
//     no cache that could disagree with contexts created or destroyed behind custream's back.
//  2. Only calls that need a current context switch it, through ContextScope (set/restore).
#pragma once

#include <cuda.h>

#include <optional>

#include "custream/context_scope.hpp"
#include "driver.hpp"

namespace custream::detail {

/// The ordinal of the current device (Device::current() without building a Device).
int current_device_ordinal(const Loaded& l);

/// The primary context of the current device. @throws Error.
inline CUcontext current_primary_context() {
  const Loaded& l = loaded();
  return primary_context(l, current_device_ordinal(l));
}

/// The one retry of special stream handles (0, 1, 2 mean "the current context"): when
/// `first`, the result of `call()`, is CUDA_ERROR_INVALID_CONTEXT for such a handle, makes the
/// current device's primary context current in `scope` (the caller may keep it for the calls
/// that follow) and returns `call()` once more; otherwise returns `first`. Hot paths pay
/// nothing: only that failure retries. @throws Error when no context can be made current.
template <typename Call>
CUresult retry_on_current_device(CUresult first, bool special, std::optional<ContextScope>& scope,
                                 Call call) {
  if (first != CUDA_ERROR_INVALID_CONTEXT || !special) return first;
  scope.emplace(current_primary_context());
  return call();
}

}  // namespace custream::detail

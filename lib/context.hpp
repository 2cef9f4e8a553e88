// Context helpers shared by devices, streams and events. Design: docs/design/contexts.md.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "custream/context_scope.hpp"
#include "driver.hpp"
#include "shared.hpp"

namespace custream::detail {

/// `context` current on this thread for the scope (the previous one restored after): for the
/// driver calls that read the current context whatever their parameters name (graphs.md B10,
/// U5). When it is current already, one raw cuCtxGetCurrent and no switch (ContextScope does
/// the switch otherwise). @throws Error when asking or switching fails.
class MakeCurrent {
 public:
  explicit MakeCurrent(CUcontext context) {
    CUcontext current = nullptr;
    const CUresult r = api().cuCtxGetCurrent(&current);  // raw: hot path
    if (r == CUDA_SUCCESS && current == context) return;
    if (r != CUDA_SUCCESS) fail<&DriverApi::cuCtxGetCurrent>(r, context_subject(context));
    scope_.emplace(context);
  }

 private:
  std::optional<ContextScope> scope_;
};

/// The ordinal of the current device (Device::current() without building a Device).
/// @throws Error.
int current_device_ordinal(const Loaded& l);

/// `context`, unless it is empty: then throws Error (CUDA_ERROR_INVALID_CONTEXT) naming `call`.
const Context& nonempty(const Context& context, const char* call);

/// Primary or created: the kind of `context`, a context of `device` that is not green.
/// Retains the device's primary context for the comparison only when it is active.
/// @throws Error on a driver failure.
ContextKind context_kind(const Loaded& l, CUcontext context, int device);

/// The owner of a context custream created: a cuCtxCreate context (`created`) or a green
/// context (`green`), destroyed with the last reference, or for a green context made with
/// GreenReuse::cached, drained and kept in the green-context cache (docs/design/contexts.md,
/// invariants 5 and 7).
struct ContextOwner : Counted {
  ~ContextOwner();
  CUcontext created = nullptr;
  CUgreenCtx green = nullptr;
  CUcontext converted = nullptr;      // a green context's CUcontext (cuCtxFromGreenCtx)
  std::vector<CUdevResource> groups;  // a reusable green context's SM groups: its cache key
  int device = -1;
  bool reuse = false;  // kept in the cache when the last reference goes (contexts.md, 7)
  // The thread that make_current() made it current in (pthread_self()), kMadeCurrentByMany
  // after a second one, 0 before any: a green context that may still be current in another
  // thread than the one its last user goes on is destroyed, never handed to a new user.
  std::atomic<std::uintptr_t> made_current_by{0};
  static constexpr std::uintptr_t kMadeCurrentByMany = 1;
  std::atomic<bool> named{false};  // named: its name is forgotten when it goes (or is kept)
};

}  // namespace custream::detail

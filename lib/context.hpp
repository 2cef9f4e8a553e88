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

/// The context of the innermost ContextScope open on this thread, current there (null: none
/// open, or a custream call since changed the current context). ContextScope's contract says
/// raw driver calls inside a scope leave its context current: MakeCurrent trusts it
/// (contexts.md, invariant 9). Set only by scoped_context_* below.
inline thread_local CUcontext t_scoped_context __attribute__((tls_model("initial-exec"))) = nullptr;

/// A ContextScope made (or found) `context` current: the innermost open scope's is `context`.
void scoped_context_enter(CUcontext context) noexcept;
/// A ContextScope ended: when it `switched`, it restored `restored` (`ok`: successfully), which
/// is current now; otherwise it changed nothing. Outside every scope nothing is trusted.
void scoped_context_leave(bool switched, CUcontext restored, bool ok) noexcept;
/// custream changed the current context outside ContextScope (a make_current, a StreamScope's
/// push or pop, destroying a current context): nothing is trusted until a scope makes or
/// restores a context again.
inline void scoped_context_forget() noexcept { t_scoped_context = nullptr; }

/// `context` current on this thread for the scope (the previous one restored after): for the
/// driver calls that read the current context whatever their parameters name (graphs.md B10,
/// U5). Inside a ContextScope of `context`, nothing (one thread-local comparison); otherwise,
/// when it is current already, one raw cuCtxGetCurrent and no switch (ContextScope does the
/// switch otherwise). @throws Error when asking or switching fails.
class MakeCurrent {
 public:
  explicit MakeCurrent(CUcontext context) {
    CUresult asked = CUDA_SUCCESS;
    if (is_current(context, &asked)) return;
    if (asked != CUDA_SUCCESS) fail<&DriverApi::cuCtxGetCurrent>(asked, context_subject(context));
    scope_.emplace(context);
  }

  /// Whether `context` (not null) is current in this thread: an open ContextScope's (a
  /// thread-local comparison), else one raw cuCtxGetCurrent, whose result goes to `*asked`.
  static bool is_current(CUcontext context, CUresult* asked) noexcept {
    if (context == t_scoped_context && context != nullptr) return true;
    CUcontext current = nullptr;
    *asked = api().cuCtxGetCurrent(&current);  // raw: hot path
    return *asked == CUDA_SUCCESS && current == context;
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

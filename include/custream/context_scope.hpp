/// @file
/// custream::ContextScope: make a context current for a scope, then restore the previous one.
#pragma once

#include "custream/detail/cuda.hpp"

#include "custream/context.hpp"

namespace custream {

/// Makes `context` current in this thread unless it already is, and on destruction restores
/// exactly the context that was current before (also none). It sets and restores with
/// cuCtxSetCurrent and never leaves a pushed context on the stack.
///
/// While a scope is open, custream takes its context to be current in the thread: the calls
/// that need the context current (GraphBuilder::add_kernel, Graph::update_kernel) skip the
/// cuCtxGetCurrent they otherwise make, so a hot loop of them costs what the raw driver calls
/// cost. custream's own changes of the current context inside the scope (make_current, a
/// StreamScope of another context's stream, an inner ContextScope until it ends) are seen.
/// Raw driver calls inside the scope that leave no context current (cuCtxSetCurrent(nullptr),
/// cuCtxPopCurrent) must restore the scope's context before custream is called again: the
/// driver crashes adding or updating a kernel node with no context current. A scope ends on
/// the thread it began on, innermost first.
class ContextScope {
 public:
  /// Makes `context` current. @throws Error when cuCtxGetCurrent or cuCtxSetCurrent fails.
  explicit ContextScope(CUcontext context);
  /// Makes `context` current (for a green context, its converted CUcontext) and keeps an
  /// owned context alive until the scope ends.
  /// @throws Error (CUDA_ERROR_INVALID_CONTEXT) for an empty Context; as above otherwise.
  explicit ContextScope(const Context& context);
  /// Restores the previous context; never throws. A failed restore is reported to the
  /// release-error handler (release_error_handler.hpp), except CUDA_ERROR_DEINITIALIZED
  /// during driver teardown.
  ~ContextScope();

  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;

  /// The context that was current before, restored on destruction.
  CUcontext previous() const noexcept { return previous_; }

 private:
  Context kept_;  // an owned context stays alive while current
  CUcontext previous_ = nullptr;
  bool switched_ = false;
};

}  // namespace custream

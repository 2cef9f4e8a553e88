/// @file
/// custream::ContextScope: make a context current for a scope, then restore the previous one.
#pragma once

#include "custream/detail/cuda.hpp"

#include "custream/context.hpp"

namespace custream {

/// Makes `context` current in this thread unless it already is, and on destruction restores
/// exactly the context that was current before (also none). It sets and restores with
/// cuCtxSetCurrent and never leaves a pushed context on the stack.
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

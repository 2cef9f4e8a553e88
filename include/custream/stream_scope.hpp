/// @file
/// custream::StreamScope: `with stream:` for C++.
#pragma once

#include "custream/detail/current_streams.hpp"
#include "custream/stream.hpp"

namespace custream {

/// Makes a stream the current stream of its device in this thread for the scope, and on exit
/// restores whatever was current before, also a stream selected with Stream::use() (CuPy
/// #8377 lost it).
///
/// The scope borrows the stream (no atomic operation), and the current stream stays valid
/// whatever this thread does with the variable it was made from: a reference dropped in this
/// thread while the scope runs (the variable reassigned or destroyed) moves into the scope's
/// entry instead of destroying the stream. A temporary is refused at compile time. Copies
/// taken with current_stream() inside the scope are full references. For a stream of a
/// primary context (or a special handle), enter + exit cost one cuCtxGetCurrent and no atomic
/// operation.
///
/// A stream of a created or green context also makes its context current for the scope
/// (pushed onto the thread's context stack, popped on exit: no cuCtxGetCurrent), so that work
/// the scope submits to the current context lands in the stream's context, and its device is
/// the current device inside the scope whatever was current before.
class StreamScope {
 public:
  /// Makes `stream` current (and its created or green context). @throws Error when the
  /// stream is of a primary context and its device is not the current device (naming both),
  /// or when a created or green context cannot be pushed.
  explicit StreamScope(const Stream& stream) : device_(device_for(stream)) {
    Stream& slot = detail::current_slot(device_);  // may allocate: before anything changes
    if (stream.context_kind() != ContextKind::primary && !stream.is_special()) {
      detail::push_context(stream.context(), device_);
      pushed_ = stream.context();
    }
    previous_ = std::move(slot);
    slot.borrow(stream);  // see detail::release(): a reference dropped meanwhile moves here
  }
  /// Refused: the scope would outlive a temporary stream.
  explicit StreamScope(Stream&&) = delete;
  /// Pops the stream's context (when pushed), then restores the previous current stream,
  /// which may destroy the stream and its context when the scope held their last use. Never
  /// throws.
  ~StreamScope() {
    if (pushed_ != nullptr) detail::pop_context(pushed_);
    detail::current_slot(device_).restore(std::move(previous_));
  }

  StreamScope(const StreamScope&) = delete;
  StreamScope& operator=(const StreamScope&) = delete;

 private:
  /// The device whose current stream `stream` becomes: a primary-context stream's device must
  /// be current; a created or green context's is made current by the push.
  static int device_for(const Stream& stream) {
    if (stream.context_kind() == ContextKind::primary || stream.is_special()) {
      return stream.device_for_use("custream::StreamScope");
    }
    return stream.device_id();
  }

  int device_;
  CUcontext pushed_ = nullptr;  // the context pushed for the scope
  Stream previous_;
};

}  // namespace custream

// Internals shared by streams and the current-stream machinery. Design:
// docs/design/streams.md.
#pragma once

#include <atomic>
#include <memory>

#include "custream/detail/current_streams.hpp"
#include "custream/stream.hpp"
#include "driver.hpp"
#include "nvtx.hpp"
#include "shared.hpp"

namespace custream::detail {

/// "stream 0x… (device N)": the subject of an error about `s`.
inline Subject stream_subject(const StreamRef& s) noexcept {
  return {Subject::What::stream, s.handle(), s.device_id()};
}

/// The owner of a stream custream created (destroyed with the last reference) or of a
/// wrapper's keep-alive.
struct StreamOwner : Counted {
  ~StreamOwner() {
    if (destroy == nullptr) return;
    if (named.load(std::memory_order_relaxed)) forget_name(Named::stream, destroy);
    release_call<&DriverApi::cuStreamDestroy>("stream", destroy, destroy);
  }
  /// A reference dropped in a thread whose StreamScope borrows this stream moves into that
  /// scope's entry instead (docs/design/streams.md, invariant 4): true when it did.
  static bool take_release(StreamOwner* owner) noexcept;
  CUstream destroy = nullptr;        // created streams: destroyed with the last reference
  std::shared_ptr<void> keep_alive;  // wrappers: the caller's owner
  Context context;  // an owned context outlives its streams (contexts.md, invariant 5)
  std::atomic<bool> named{false};  // a created stream that was named: forget it when destroyed
};

}  // namespace custream::detail

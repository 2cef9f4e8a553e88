/// @file
/// custream::ExternalStream: a foreign CUstream / cudaStream_t (CuPy's `ExternalStream`).
#pragma once

#include <memory>

#include "custream/stream.hpp"

namespace custream {

/// Wraps a stream somebody else created (a CUstream, a cudaStream_t, a pointer from CuPy or
/// PyTorch). It never destroys the handle.
///
/// With `device_id == -1` the device and context are inferred once, with cuStreamGetCtx (safe
/// during capture: wrapping a capturing stream leaves the capture valid) and cached, together
/// with the context's kind (context_kind(): primary, created, or green, whose CUcontext is the
/// one the driver converts the green context to); the calling thread's current context is
/// not changed. An
/// explicit id must be a device ordinal in [0, Device::count()), checked before anything
/// else; the inferred device is then checked against it. The special handles 0, 1 and 2
/// are not inferred: their device stays -1 and follows the current device, so they take no
/// explicit id, not even a valid one (it would promise a device that the handle does not
/// keep): pass -1, and make the device current (DeviceScope) where the stream is used.
///
/// `keep_alive`, when given, is an owner of whatever keeps the handle valid; it lives exactly
/// as long as the last Stream copied from this wrapper.
class ExternalStream : public Stream {
 public:
  /// Wraps `handle`. @throws Error: CUDA_ERROR_INVALID_DEVICE when `device_id` is neither -1
  /// nor a device ordinal (naming it and the device count; CUDA_ERROR_NO_DEVICE when there
  /// is none); CUDA_ERROR_INVALID_VALUE for a special handle with a valid `device_id`; when
  /// inference fails (naming the stream and the driver's error); CUDA_ERROR_INVALID_DEVICE
  /// when `device_id` differs from the inferred device (naming both).
  explicit ExternalStream(CUstream handle, int device_id = -1,
                          std::shared_ptr<void> keep_alive = {})
      : Stream(StreamRef::wrap(handle, device_id), std::move(keep_alive)) {}
  /// Wraps the stream CCCL's `cuda::stream_ref` (or a view type of the same shape) refers to;
  /// as ExternalStream(view.get(), device_id, keep_alive). @throws as above.
  template <typename View, typename = std::enable_if_t<detail::is_foreign_stream_view<View>>>
  explicit ExternalStream(const View& view, int device_id = -1,
                          std::shared_ptr<void> keep_alive = {})
      : ExternalStream(view.get(), device_id, std::move(keep_alive)) {}
};

}  // namespace custream

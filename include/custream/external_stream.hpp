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
/// during capture: wrapping a capturing stream leaves the capture valid) and cached. With an
/// explicit id the inferred device is checked against it. The special handles 0, 1 and 2
/// are not inferred: their device stays -1 and follows the current device, so they take no
/// explicit id (an id would promise a device that the handle does not keep).
///
/// `keep_alive`, when given, is an owner of whatever keeps the handle valid; it lives exactly
/// as long as the last Stream copied from this wrapper.
class ExternalStream : public Stream {
 public:
  /// Wraps `handle`. @throws Error when inference fails (naming the stream and the driver's
  /// error), when `device_id` is given and differs from the inferred device (naming both),
  /// or for a special handle with a `device_id` other than -1 (CUDA_ERROR_INVALID_DEVICE when
  /// it is out of range, else CUDA_ERROR_INVALID_VALUE).
  explicit ExternalStream(CUstream handle, int device_id = -1,
                          std::shared_ptr<void> keep_alive = {})
      : Stream(handle, device_id, std::move(keep_alive)) {}
};

}  // namespace custream

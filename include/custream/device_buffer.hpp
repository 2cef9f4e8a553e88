/// @file
/// custream::DeviceBuffer: a small RAII device allocation.
#pragma once

#include "custream/detail/cuda.hpp"

#include <cstddef>

#include "custream/device.hpp"
#include "custream/stream.hpp"

namespace custream {

/// Device memory owned by one object: plain (cuMemAlloc, freed with cuMemFree) or
/// stream-ordered (cuMemAllocAsync on a stream, freed with cuMemFreeAsync on that stream,
/// which the buffer keeps alive).
class DeviceBuffer {
 public:
  /// An empty buffer.
  DeviceBuffer() noexcept = default;
  /// Allocates `bytes` on the current device.
  /// @throws Error on a driver failure (naming the device and size).
  explicit DeviceBuffer(std::size_t bytes);
  /// Allocates `bytes` on `device`. @throws Error on a driver failure.
  DeviceBuffer(std::size_t bytes, Device device);
  /// Allocates `bytes` in `context` (cuMemAlloc with it current; the calling thread's context
  /// is restored), which the buffer keeps alive when custream owns it.
  /// @throws Error on a driver failure; Error (CUDA_ERROR_INVALID_CONTEXT) for an empty one.
  DeviceBuffer(std::size_t bytes, const Context& context);
  /// Allocates `bytes` in stream order on `stream` (driver >= 11.2), in the stream's context.
  /// @throws Error on a driver failure.
  DeviceBuffer(std::size_t bytes, const Stream& stream);

  /// Takes over `other`'s memory; `other` becomes empty.
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  /// Frees this buffer's memory and takes over `other`'s; `other` becomes empty.
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  /// Frees the memory (in stream order for a stream-ordered buffer). Never throws; a failed
  /// free is reported to the release-error handler (release_error_handler.hpp).
  ~DeviceBuffer() { reset(); }

  /// The device address (0 when empty).
  CUdeviceptr get() const noexcept { return ptr_; }
  /// The size in bytes.
  std::size_t size() const noexcept { return bytes_; }
  /// Frees the memory now; the buffer becomes empty. Never throws (a failed free is reported
  /// to the release-error handler).
  void reset() noexcept;

 private:
  CUdeviceptr ptr_ = 0;
  std::size_t bytes_ = 0;
  Stream stream_;    // stream-ordered buffers only
  int device_ = -1;  // stream-ordered buffers: the device it was allocated on
  bool ordered_ = false;
  Context keep_;  // an owned context it was allocated in: freed before the context goes
};

}  // namespace custream

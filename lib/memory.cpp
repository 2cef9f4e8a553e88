// custream::DeviceBuffer.
#include <optional>

#include "context.hpp"
#include "custream/context_scope.hpp"
#include "custream/device_buffer.hpp"
#include "custream/error.hpp"

namespace custream {

DeviceBuffer::DeviceBuffer(std::size_t bytes) : DeviceBuffer(bytes, Device::current()) {}

DeviceBuffer::DeviceBuffer(std::size_t bytes, Device device) : bytes_(bytes) {
  const detail::Loaded& l = detail::loaded();
  ContextScope scope(detail::primary_context(l, device.ordinal()));
  if (CUresult r = l.api.cuMemAlloc(&ptr_, bytes); r != CUDA_SUCCESS) {
    detail::throw_error(r, "cuMemAlloc", "device " + std::to_string(device.ordinal()),
                        std::to_string(bytes) + " bytes");
  }
}

DeviceBuffer::DeviceBuffer(std::size_t bytes, const Stream& stream)
    : bytes_(bytes), stream_(stream), ordered_(true) {
  const detail::Loaded& l = detail::loaded();
  auto alloc = detail::require(l.api.cuMemAllocAsync, "cuMemAllocAsync");
  const int device =
      stream.device_id() >= 0 ? stream.device_id() : detail::current_device_ordinal(l);
  device_ = device;
  ContextScope scope(detail::primary_context(l, device));
  if (CUresult r = alloc(&ptr_, bytes, stream.handle()); r != CUDA_SUCCESS) {
    detail::throw_error(r, "cuMemAllocAsync", stream.to_string(), std::to_string(bytes) + " bytes");
  }
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : ptr_(other.ptr_),
      bytes_(other.bytes_),
      stream_(std::move(other.stream_)),
      device_(other.device_),
      ordered_(other.ordered_) {
  other.ptr_ = 0;
  other.bytes_ = 0;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    ptr_ = other.ptr_;
    bytes_ = other.bytes_;
    stream_ = std::move(other.stream_);
    device_ = other.device_;
    ordered_ = other.ordered_;
    other.ptr_ = 0;
    other.bytes_ = 0;
  }
  return *this;
}

void DeviceBuffer::reset() noexcept {
  if (ptr_ == 0) return;
  // Loaded (the allocation came from it) and never unloaded. Freeing needs no particular
  // context; a failure goes to the release-error handler (except CUDA_ERROR_DEINITIALIZED at
  // exit), and the buffer is empty afterwards either way.
  const detail::DriverApi& api = detail::g_loaded.load(std::memory_order_acquire)->api;
  if (ordered_) {
    // A special handle means the current context's stream: free on the allocating device's.
    try {
      std::optional<ContextScope> scope;
      if (stream_.is_special()) scope.emplace(detail::primary_context(detail::loaded(), device_));
      detail::report_release_failure(api.cuMemFreeAsync(ptr_, stream_.handle()), "cuMemFreeAsync",
                                     "device allocation", reinterpret_cast<const void*>(ptr_));
    } catch (const Error& e) {  // its context could not be made current: the memory stays
      detail::report_release_failure(e.result(), e.call().c_str(),
                                     "context (to free a device allocation)",
                                     reinterpret_cast<const void*>(ptr_));
    }
  } else {
    detail::report_release_failure(api.cuMemFree(ptr_), "cuMemFree", "device allocation",
                                   reinterpret_cast<const void*>(ptr_));
  }
  ptr_ = 0;
  bytes_ = 0;
  stream_ = Stream();
  ordered_ = false;
}

}  // namespace custream

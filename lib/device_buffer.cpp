// custream::DeviceBuffer.
#include "custream/device_buffer.hpp"

#include <optional>

#include "context.hpp"
#include "custream/context_scope.hpp"
#include "custream/error.hpp"

namespace custream {

using detail::DriverApi;

DeviceBuffer::DeviceBuffer(std::size_t bytes) : DeviceBuffer(bytes, Device::current()) {}

DeviceBuffer::DeviceBuffer(std::size_t bytes, Device device)
    : DeviceBuffer(bytes, device.primary_context()) {}

DeviceBuffer::DeviceBuffer(std::size_t bytes, const Context& context) : bytes_(bytes) {
  ContextScope scope(detail::nonempty(context, "custream::DeviceBuffer"));
  if (CUresult r = detail::try_call<&DriverApi::cuMemAlloc>(&ptr_, bytes); r != CUDA_SUCCESS) {
    detail::fail<&DriverApi::cuMemAlloc>(
        r, {detail::Subject::What::context, context.handle(), context.device_id()},
        std::to_string(bytes) + " bytes");
  }
  if (context.owned()) keep_ = context;
}

DeviceBuffer::DeviceBuffer(std::size_t bytes, const Stream& stream)
    : bytes_(bytes), stream_(stream), ordered_(true) {
  const detail::Loaded& l = detail::loaded();
  detail::entry<&DriverApi::cuMemAllocAsync>(l.api);  // an older driver: say so first
  const int device =
      stream.device_id() >= 0 ? stream.device_id() : detail::current_device_ordinal(l);
  device_ = device;
  // In the stream's own context (a created or green one too); a special handle's is the
  // current device's primary context.
  ContextScope scope(stream.context() != nullptr ? stream.context()
                                                 : detail::primary_context(l, device));
  if (CUresult r = detail::try_call<&DriverApi::cuMemAllocAsync>(&ptr_, bytes, stream.handle());
      r != CUDA_SUCCESS) {
    detail::throw_stream_error(r, detail::EntryInfo<&DriverApi::cuMemAllocAsync>::name, stream,
                               std::to_string(bytes) + " bytes");
  }
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : ptr_(other.ptr_),
      bytes_(other.bytes_),
      stream_(std::move(other.stream_)),
      device_(other.device_),
      ordered_(other.ordered_),
      keep_(std::move(other.keep_)) {
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
    keep_ = std::move(other.keep_);
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
  const void* what = reinterpret_cast<const void*>(ptr_);
  if (ordered_) {
    // A special handle means the current context's stream: free on the allocating device's.
    try {
      std::optional<ContextScope> scope;
      if (stream_.is_special()) scope.emplace(detail::primary_context(detail::loaded(), device_));
      detail::release_call<&DriverApi::cuMemFreeAsync>("device allocation", what, ptr_,
                                                       stream_.handle());
    } catch (const Error& e) {  // its context could not be made current: the memory stays
      detail::report_release_failure(e.result(), e.call().c_str(),
                                     "context (to free a device allocation)", what);
    }
  } else {
    detail::release_call<&DriverApi::cuMemFree>("device allocation", what, ptr_);
  }
  ptr_ = 0;
  bytes_ = 0;
  stream_ = Stream();
  ordered_ = false;
  keep_ = Context();  // after the free: the context goes last
}

}  // namespace custream

/// @file
/// custream::DeviceArray<T>: `count` elements of T in device memory, with typed copies.
#pragma once

#include "custream/detail/cuda.hpp"

#include <cstddef>
#include <cstring>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "custream/detail/typed_memory.hpp"
#include "custream/device_buffer.hpp"
#include "custream/stream_ref.hpp"

namespace custream {

/// `count` elements of T in device memory, over a DeviceBuffer: plain (cuMemAlloc) or
/// stream-ordered (cuMemAllocAsync on a Stream, freed there with cuMemFreeAsync after the work
/// enqueued on that stream before the array died, also when that work has not run yet). Copies to and from host memory are
/// typed and bounds-checked: a host container of another element type does not compile, and
/// a copy past the end is refused before the driver is called. Each copy is one driver call
/// (cuMemcpyHtoDAsync / cuMemcpyDtoHAsync) on the stream given; from pinned memory
/// (PinnedArray) it is truly asynchronous, from pageable memory the driver stages it. A copy
/// or fill of no element calls no driver. A stream-ordered array is freed on its own stream:
/// work enqueued on another stream must be ordered before that free by the caller (an event).
/// Move-only; a moved-from array is empty.
///
/// @code
/// custream::DeviceArray<float> x(n);
/// x.copy_from(stream, host);        // std::vector<float>, PinnedArray<float>, std::array…
/// scale.launch(stream, {blocks}, {256}, 0, x.get(), 2.0f, int(n));
/// x.copy_to(stream, host);
/// stream.synchronize();
/// @endcode
template <typename T>
class DeviceArray {
  static_assert(std::is_trivially_copyable_v<T>,
                "custream::DeviceArray<T>: T is copied bytewise to and from the device: it must "
                "be trivially copyable");

 public:
  /// The element type.
  using value_type = T;

  /// No memory.
  DeviceArray() noexcept = default;
  /// `count` elements on the current device (none allocated for 0).
  /// @throws Error on a driver failure; Error (CUDA_ERROR_INVALID_VALUE) refused by custream
  /// when `count` elements of T overflow the address space (so do the constructors below).
  explicit DeviceArray(std::size_t count)
      : buffer_(count ? DeviceBuffer(bytes_for(count)) : DeviceBuffer()), count_(count) {}
  /// `count` elements on `device`. @throws Error on a driver failure.
  DeviceArray(std::size_t count, Device device)
      : buffer_(count ? DeviceBuffer(bytes_for(count), device) : DeviceBuffer()), count_(count) {}
  /// `count` elements in `context`. @throws Error on a driver failure.
  DeviceArray(std::size_t count, const Context& context)
      : buffer_(count ? DeviceBuffer(bytes_for(count), context) : DeviceBuffer()), count_(count) {}
  /// `count` elements allocated in stream order on `stream` (cuMemAllocAsync, from the
  /// device's current memory pool: MemoryPool), freed on `stream` (cuMemFreeAsync) after the
  /// work enqueued on it before the array died. @throws Error on a driver failure.
  DeviceArray(std::size_t count, const Stream& stream)
      : buffer_(count ? DeviceBuffer(bytes_for(count), stream) : DeviceBuffer()), count_(count) {}

  /// Takes over `other`'s memory; `other` becomes empty (no element).
  DeviceArray(DeviceArray&& other) noexcept
      : buffer_(std::move(other.buffer_)), count_(std::exchange(other.count_, 0)) {}
  /// Frees this array's memory (in stream order for a stream-ordered one) and takes over
  /// `other`'s; `other` becomes empty.
  DeviceArray& operator=(DeviceArray&& other) noexcept {
    if (this != &other) {
      buffer_ = std::move(other.buffer_);
      count_ = std::exchange(other.count_, 0);
    }
    return *this;
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  /// Frees the memory (a stream-ordered array: cuMemFreeAsync on its stream, after the work
  /// enqueued there). Never throws.
  ~DeviceArray() = default;

  /// The device address of element 0.
  CUdeviceptr get() const noexcept { return buffer_.get(); }
  /// How many elements.
  std::size_t size() const noexcept { return count_; }
  /// How many bytes.
  std::size_t bytes() const noexcept { return count_ * sizeof(T); }
  /// True when it holds no element.
  bool empty() const noexcept { return count_ == 0; }
  /// The buffer it lives in.
  const DeviceBuffer& buffer() const noexcept { return buffer_; }

  /// Enqueues on `stream` a copy of `count` elements from host memory `src` to elements
  /// [offset, offset + count) (cuMemcpyHtoDAsync). `src` must stay valid until the copy ran.
  /// @throws Error (CUDA_ERROR_INVALID_VALUE) naming the array and the counts when the copy
  /// does not fit, before the driver is called; Error naming the call and the stream on a
  /// driver failure.
  void copy_from(const StreamRef& stream, const T* src, std::size_t count,
                 std::size_t offset = 0) const {
    check(count, offset, "custream::DeviceArray::copy_from");
    if (count == 0) return;
    const CUdeviceptr dst = get() + offset * sizeof(T);
    const std::size_t n = count * sizeof(T);
    detail::stream_call<&detail::DriverApi::cuMemcpyHtoDAsync>(
        stream, dst, static_cast<const void*>(src), n, stream.handle());
  }
  /// Enqueues a copy of every element of `host` (a contiguous container of T: std::vector,
  /// std::array, PinnedArray, …) to elements [offset, offset + host.size()).
  /// @throws as copy_from(stream, pointer, count, offset).
  template <typename C, typename = std::enable_if_t<detail::is_host_container_v<const C>>>
  void copy_from(const StreamRef& stream, const C& host, std::size_t offset = 0) const {
    static_assert(std::is_same_v<detail::host_element_t<const C>, T>,
                  "custream::DeviceArray<T>::copy_from: the host container's elements must be "
                  "exactly T");
    copy_from(stream, host.data(), host.size(), offset);
  }
  /// Refused at compile time: a temporary container dies before the enqueued copy has read
  /// it (from pinned memory the copy is truly asynchronous). Name the container.
  template <typename C, typename = std::enable_if_t<detail::is_host_container_v<const C>>>
  void copy_from(const StreamRef& stream, const C&& host, std::size_t offset = 0) const = delete;
  /// Enqueues on `stream` a copy of elements [offset, offset + count) to host memory `dst`
  /// (cuMemcpyDtoHAsync); read `dst` after the stream has run it (synchronize).
  /// @throws as copy_from.
  void copy_to(const StreamRef& stream, T* dst, std::size_t count, std::size_t offset = 0) const {
    check(count, offset, "custream::DeviceArray::copy_to");
    if (count == 0) return;
    const CUdeviceptr src = get() + offset * sizeof(T);
    const std::size_t n = count * sizeof(T);
    detail::stream_call<&detail::DriverApi::cuMemcpyDtoHAsync>(stream, static_cast<void*>(dst), src,
                                                               n, stream.handle());
  }
  /// Enqueues a copy of elements [offset, offset + host.size()) into `host` (a contiguous
  /// container of T). @throws as copy_to(stream, pointer, count, offset).
  template <typename C, typename = std::enable_if_t<detail::is_host_container_v<C>>>
  void copy_to(const StreamRef& stream, C& host, std::size_t offset = 0) const {
    static_assert(std::is_same_v<detail::host_element_t<C>, T> && !std::is_const_v<C>,
                  "custream::DeviceArray<T>::copy_to: the host container's elements must be "
                  "exactly T (and writable)");
    copy_to(stream, host.data(), host.size(), offset);
  }
  /// Copies every element to a new vector: enqueues the copy on `stream` and synchronizes the
  /// stream (none for an empty array).
  /// @throws as copy_to; Error when the synchronization reports a failure (the vector's
  /// memory is then kept until the stream has run the copy, which may still happen).
  std::vector<T> to_vector(const StreamRef& stream) const {
    std::vector<T> out(count_);
    if (count_ == 0) return out;
    copy_to(stream, out.data(), count_);
    try {
      stream.synchronize();
    } catch (...) {  // the copy may still run: its target outlives it (moving keeps the storage)
      detail::keep_until_done(stream, std::make_shared<std::vector<T>>(std::move(out)));
      throw;
    }
    return out;
  }
  /// Enqueues on `stream` setting every element to `value` (cuMemsetD8Async, D16 or D32 for
  /// a T of 1, 2 or 4 bytes; another size does not compile); nothing for an empty array.
  /// @throws Error naming the call and the stream on a driver failure.
  void fill(const StreamRef& stream, const T& value) const {
    static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4,
                  "custream::DeviceArray<T>::fill: the driver fills 1-, 2- or 4-byte elements");
    if (count_ == 0) return;
    std::conditional_t<sizeof(T) == 1, unsigned char,
                       std::conditional_t<sizeof(T) == 2, unsigned short, unsigned>>
        word = 0;
    std::memcpy(&word, &value, sizeof(T));
    detail::array_fill(stream, get(), word, sizeof(T), count_);
  }

 private:
  static std::size_t bytes_for(std::size_t count) {
    return detail::array_bytes("custream::DeviceArray", count, sizeof(T));
  }
  void check(std::size_t count, std::size_t offset, const char* call) const {
    if (offset > count_ || count > count_ - offset) {
      detail::throw_array_bounds(call, "device array", reinterpret_cast<const void*>(get()), count_,
                                 offset, count);
    }
  }

  DeviceBuffer buffer_;
  std::size_t count_ = 0;
};

}  // namespace custream

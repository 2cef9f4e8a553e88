/// @file
/// custream::PinnedArray<T>: page-locked host memory for `count` elements of T.
#pragma once

#include "custream/detail/cuda.hpp"

#include <cstddef>
#include <type_traits>

#include "custream/context.hpp"
#include "custream/detail/typed_memory.hpp"
#include "custream/pinned_flags.hpp"

namespace custream {

namespace detail {
/// `bytes` of pinned host memory (cuMemHostAlloc in `context`, or, when it is empty, the
/// current context, else the current device's primary context); the context it used is
/// returned in `used`. @throws Error naming cuMemHostAlloc, the size and the flags.
void* pinned_allocate(std::size_t bytes, PinnedFlags flags, const Context& context, Context& used);
/// cuMemFreeHost; a failure goes to the release-error handler.
void pinned_free(void* p) noexcept;
/// The device address of mapped pinned memory (cuMemHostGetDevicePointer in `context`; 0 for
/// no memory). @throws Error when it is not mapped, or on a driver failure.
CUdeviceptr pinned_device_pointer(void* p, PinnedFlags flags, const Context& context);
}  // namespace detail

/// `count` elements of T in page-locked host memory (cuMemHostAlloc), freed with the object
/// (cuMemFreeHost). Copies between it and device memory are truly asynchronous (a pageable
/// source is staged by the driver) and run at full bandwidth. With PinnedFlags::mapped a
/// kernel can read and write it directly (device_pointer()). The elements are zeroed.
/// Move-only.
template <typename T>
class PinnedArray {
  static_assert(std::is_trivially_copyable_v<T>,
                "custream::PinnedArray<T>: T is copied bytewise to and from the device: it must "
                "be trivially copyable");

 public:
  /// The element type.
  using value_type = T;

  /// No memory.
  PinnedArray() noexcept = default;
  /// `count` elements, pinned in the current context (else the current device's primary
  /// context), with `flags`.
  /// @throws Error naming cuMemHostAlloc, the size and the flags on a driver failure.
  explicit PinnedArray(std::size_t count, PinnedFlags flags = PinnedFlags::none)
      : PinnedArray(count, flags, Context()) {}
  /// `count` elements pinned in `context` (for a context custream owns, kept alive as long as
  /// the memory). @throws as above.
  PinnedArray(std::size_t count, PinnedFlags flags, const Context& context)
      : count_(count), flags_(flags) {
    const std::size_t bytes = detail::array_bytes("custream::PinnedArray", count, sizeof(T));
    data_ = static_cast<T*>(detail::pinned_allocate(bytes, flags, context, context_));
  }
  /// Takes over `other`'s memory; `other` becomes empty.
  PinnedArray(PinnedArray&& other) noexcept { swap(other); }
  /// Frees this memory and takes over `other`'s; `other` becomes empty.
  PinnedArray& operator=(PinnedArray&& other) noexcept {
    if (this != &other) {
      PinnedArray gone(std::move(*this));
      swap(other);
    }
    return *this;
  }
  PinnedArray(const PinnedArray&) = delete;
  PinnedArray& operator=(const PinnedArray&) = delete;
  /// Frees the memory (cuMemFreeHost). Never throws. The caller makes sure no enqueued copy
  /// or kernel still uses it (synchronize first).
  ~PinnedArray() {
    if (data_ != nullptr) detail::pinned_free(data_);
  }

  /// The first element (null when empty).
  T* data() noexcept { return data_; }
  /// The first element (null when empty).
  const T* data() const noexcept { return data_; }
  /// How many elements.
  std::size_t size() const noexcept { return count_; }
  /// How many bytes.
  std::size_t bytes() const noexcept { return count_ * sizeof(T); }
  /// True when it holds no element.
  bool empty() const noexcept { return count_ == 0; }
  /// Element `i` (unchecked).
  T& operator[](std::size_t i) noexcept { return data_[i]; }
  /// Element `i` (unchecked).
  const T& operator[](std::size_t i) const noexcept { return data_[i]; }
  /// The first element.
  T* begin() noexcept { return data_; }
  /// Past the last element.
  T* end() noexcept { return data_ + count_; }
  /// The first element.
  const T* begin() const noexcept { return data_; }
  /// Past the last element.
  const T* end() const noexcept { return data_ + count_; }
  /// The flags it was allocated with.
  PinnedFlags flags() const noexcept { return flags_; }
  /// Its address in the device's address space (PinnedFlags::mapped; 0 when empty).
  /// @throws Error (CUDA_ERROR_INVALID_VALUE) when it was not allocated mapped (refused by
  /// custream, naming the flags); Error naming cuMemHostGetDevicePointer on a driver failure.
  CUdeviceptr device_pointer() const {
    return detail::pinned_device_pointer(const_cast<T*>(data_), flags_, context_);
  }

 private:
  void swap(PinnedArray& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(count_, other.count_);
    std::swap(flags_, other.flags_);
    std::swap(context_, other.context_);
  }

  T* data_ = nullptr;
  std::size_t count_ = 0;
  PinnedFlags flags_ = PinnedFlags::none;
  Context context_;  // the context it was pinned in
};

}  // namespace custream

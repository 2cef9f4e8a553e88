// What DeviceArray and PinnedArray share out of line (lib/typed_memory.cpp): their errors and
// the fill. Internal: not part of custream's API. Design: docs/design/memory.md.
#pragma once

#include "custream/detail/cuda.hpp"

#include <cstddef>
#include <memory>
#include <type_traits>
#include <utility>

namespace custream {

class StreamRef;

namespace detail {

/// Throws Error (CUDA_ERROR_INVALID_VALUE) for a copy of `count` elements at element
/// `offset` of the array `what` at `array` of `size` elements, refused by custream before the
/// driver was called.
[[noreturn, gnu::cold]] void throw_array_bounds(const char* call, const char* what,
                                                const void* array, std::size_t size,
                                                std::size_t offset, std::size_t count);
/// Throws Error (CUDA_ERROR_INVALID_VALUE): `count` elements of `element_bytes` overflow the
/// address space (refused by custream).
[[noreturn, gnu::cold]] void throw_too_many(const char* call, std::size_t count,
                                            std::size_t element_bytes);
/// Enqueues the fill of `count` elements of `element_bytes` (1, 2 or 4) at `dst` with the
/// bit pattern `bits` (cuMemsetD8Async, cuMemsetD16Async, cuMemsetD32Async).
/// @throws Error naming the call and the stream on a driver failure.
void array_fill(const StreamRef& stream, CUdeviceptr dst, unsigned bits, std::size_t element_bytes,
                std::size_t count);

/// Keeps `memory` alive until `stream` has run the work enqueued so far (a host function on it
/// releases it): the target of a copy whose synchronization failed, which may still run. When
/// the host function cannot be enqueued either, the memory is never freed (on purpose: whether
/// the copy still runs is unknown). Never throws.
void keep_until_done(const StreamRef& stream, std::shared_ptr<void> memory) noexcept;

/// `count * element_bytes`. @throws Error (throw_too_many) when that overflows.
inline std::size_t array_bytes(const char* call, std::size_t count, std::size_t element_bytes) {
  if (count != 0 && count > static_cast<std::size_t>(-1) / element_bytes) {
    throw_too_many(call, count, element_bytes);
  }
  return count * element_bytes;
}

/// True for a host container: a class with data() and size() (std::vector, std::array,
/// std::basic_string, PinnedArray, …); never a pointer.
template <typename C, typename = void>
inline constexpr bool is_host_container_v = false;
template <typename C>
inline constexpr bool is_host_container_v<
    C, std::void_t<decltype(std::declval<C&>().data()), decltype(std::declval<C&>().size())>> =
    std::is_class_v<std::remove_cv_t<C>> && std::is_pointer_v<decltype(std::declval<C&>().data())>;

/// The element type of host container `C` (what data() points to, without const).
template <typename C>
using host_element_t = std::remove_cv_t<std::remove_pointer_t<decltype(std::declval<C&>().data())>>;

}  // namespace detail
}  // namespace custream

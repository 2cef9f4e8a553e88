// Typed memory: pinned host arrays (PinnedArray), the cold paths of DeviceArray, and device
// memory pools (MemoryPool). What the templates in custream/pinned_array.hpp,
// device_array.hpp and memory_pool.hpp need out of line: allocation, release, errors.
#include "custream/detail/typed_memory.hpp"

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "context.hpp"
#include "custream/context_scope.hpp"
#include "custream/device_array.hpp"
#include "custream/error.hpp"
#include "custream/host_function.hpp"
#include "custream/memory_pool.hpp"
#include "custream/pinned_array.hpp"
#include "error.hpp"

namespace custream {

using detail::DriverApi;

namespace detail {
namespace {

std::string flags_text(PinnedFlags flags) {
  static constexpr std::pair<PinnedFlags, const char*> names[] = {
      {PinnedFlags::portable, "portable"},
      {PinnedFlags::mapped, "mapped"},
      {PinnedFlags::write_combined, "write_combined"},
  };
  std::string text;
  for (const auto& [flag, name] : names) {
    if ((flags & flag) != PinnedFlags::none) text += (text.empty() ? "" : "|") + std::string(name);
  }
  return text.empty() ? "none" : text;
}

}  // namespace

void* pinned_allocate(std::size_t bytes, PinnedFlags flags, const Context& context, Context& used) {
  if (bytes == 0) return nullptr;
  // In `context`, else the current one, else the current device's primary context.
  std::optional<ContextScope> scope;
  if (context.handle() != nullptr) {
    scope.emplace(context);
    used = context;
  } else {
    used = Context::current();
    if (used.handle() == nullptr) {
      scope.emplace(current_primary_context());
      used = Context::current();
    }
  }
  void* p = nullptr;
  const CUresult r = try_call<&DriverApi::cuMemHostAlloc>(&p, bytes, static_cast<unsigned>(flags));
  if (r != CUDA_SUCCESS) {
    fail<&DriverApi::cuMemHostAlloc>(
        r, context_subject(used.handle()),
        std::to_string(bytes) + " bytes of pinned host memory, flags " + flags_text(flags));
  }
  // The driver does not promise zeroed memory; PinnedArray does (as std::vector<T>(n)).
  std::memset(p, 0, bytes);
  return p;
}

void pinned_free(void* p) noexcept {
  release_call<&DriverApi::cuMemFreeHost>("pinned host memory", p, p);
}

CUdeviceptr pinned_device_pointer(void* p, PinnedFlags flags, const Context& context) {
  if ((flags & PinnedFlags::mapped) == PinnedFlags::none) {
    throw_error(CUDA_ERROR_INVALID_VALUE, "custream::PinnedArray::device_pointer",
                "pinned host memory " + pointer_text(p),
                "custream refused: it was allocated without PinnedFlags::mapped (flags " +
                    flags_text(flags) + "), so the device cannot address it");
  }
  if (p == nullptr) return 0;
  std::optional<ContextScope> scope;
  if (context.handle() != nullptr) scope.emplace(context);
  CUdeviceptr d = 0;
  call<&DriverApi::cuMemHostGetDevicePointer>(context_subject(context.handle()), &d, p, 0u);
  return d;
}

void throw_too_many(const char* call, std::size_t count, std::size_t element_bytes) {
  throw_error(CUDA_ERROR_INVALID_VALUE, call, {},
              "custream refused: " + std::to_string(count) + " elements of " +
                  std::to_string(element_bytes) + " bytes overflow the address space");
}

void throw_array_bounds(const char* call, const char* what, const void* array, std::size_t size,
                        std::size_t offset, std::size_t count) {
  throw_error(
      CUDA_ERROR_INVALID_VALUE, call,
      std::string(what) + " " + pointer_text(array) + " of " + std::to_string(size) + " elements",
      "custream refused before calling the driver: " + std::to_string(count) +
          " elements at element " + std::to_string(offset) + " do not fit in its " +
          std::to_string(size) + " elements");
}

void keep_until_done(const StreamRef& stream, std::shared_ptr<void> memory) noexcept {
  auto* kept = new std::shared_ptr<void>(std::move(memory));
  try {
    launch_host_func(
        stream, [](void* p) { delete static_cast<std::shared_ptr<void>*>(p); }, kept);
  } catch (...) {
    // The stream takes no more work; whether the copy still runs is unknown: never freed.
  }
}

void array_fill(const StreamRef& stream, CUdeviceptr dst, unsigned bits, std::size_t element_bytes,
                std::size_t count) {
  switch (element_bytes) {
    case 1:
      stream_call<&DriverApi::cuMemsetD8Async>(stream, dst, static_cast<unsigned char>(bits), count,
                                               stream.handle());
      return;
    case 2:
      stream_call<&DriverApi::cuMemsetD16Async>(stream, dst, static_cast<unsigned short>(bits),
                                                count, stream.handle());
      return;
    default:
      stream_call<&DriverApi::cuMemsetD32Async>(stream, dst, bits, count, stream.handle());
      return;
  }
}

}  // namespace detail

MemoryPool MemoryPool::device_default(Device device) {
  CUmemoryPool pool = nullptr;
  detail::call<&DriverApi::cuDeviceGetDefaultMemPool>(detail::device_subject(device.ordinal()),
                                                      &pool, device.handle());
  return MemoryPool(pool, device.ordinal());
}

std::uint64_t MemoryPool::attribute(CUmemPool_attribute attribute) const {
  // RELEASE_THRESHOLD and the *_MEM_* attributes are cuuint64_t.
  cuuint64_t value = 0;
  detail::call<&DriverApi::cuMemPoolGetAttribute>(detail::device_subject(device_), pool_, attribute,
                                                  static_cast<void*>(&value));
  return value;
}

std::uint64_t MemoryPool::release_threshold() const {
  return attribute(CU_MEMPOOL_ATTR_RELEASE_THRESHOLD);
}

void MemoryPool::set_release_threshold(std::uint64_t bytes) const {
  cuuint64_t value = bytes;
  detail::call<&DriverApi::cuMemPoolSetAttribute>(detail::device_subject(device_), pool_,
                                                  CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                                                  static_cast<void*>(&value));
}

std::uint64_t MemoryPool::reserved_bytes() const {
  return attribute(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
}

std::uint64_t MemoryPool::used_bytes() const { return attribute(CU_MEMPOOL_ATTR_USED_MEM_CURRENT); }

void MemoryPool::trim_to(std::size_t keep_bytes) const {
  detail::call<&DriverApi::cuMemPoolTrimTo>(detail::device_subject(device_), pool_, keep_bytes);
}

}  // namespace custream

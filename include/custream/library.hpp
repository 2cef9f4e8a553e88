/// @file
/// custream::Library: code loaded once for the whole process and every device (CUlibrary).
#pragma once

#include "custream/detail/cuda.hpp"

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "custream/detail/shared.hpp"

namespace custream {

class Context;
class Device;
class LibraryKernel;

namespace detail {
/// Shared ownership of a loaded library and of its kernels' per-context functions.
struct LibraryOwner;
/// A kernel of a library (lib/library.hpp).
struct KernelState;
/// The loaded driver (lib/driver.hpp).
struct Loaded;
}  // namespace detail

/// Whether a load may use the process-wide cache of loaded images (Library::from_ptx, …).
enum class LibraryCache : unsigned char {
  use,     ///< the same image (same bytes) loaded again returns the same Library
  bypass,  ///< always a new driver load, and the result is not cached
};

/// A device variable of a Library in one context: its address and size.
struct LibraryGlobal {
  CUdeviceptr address = 0;  ///< the variable's device address in that context
  std::size_t bytes = 0;    ///< its size
};

/// Code loaded once for the whole process and every device (cuLibraryLoadData, CUDA 12.0+),
/// as a value handle: copies share it, and the last copy (or LibraryKernel taken from it, the
/// cache, or a graph custream instantiated with one of its kernels) unloads it. Unlike a Module,
/// which is loaded into one context, a Library's kernels launch on streams of any device and any
/// context: each kernel is resolved to the stream's context's function (cuKernelGetFunction) once,
/// then cached.
///
/// Loading is content-addressed: the same image loaded again (same bytes) returns the same
/// Library without another driver load, also when threads race to load it first (one loads,
/// the others wait for it). The cache keeps the libraries of the 64 most recently loaded
/// images, at most 256 MiB of images together, loaded (least recently used first out);
/// LibraryCache::bypass skips it, and clear_cache() empties it. A library the cache drops that
/// nothing else holds is unloaded with the thread's capture mode relaxed, so that no other
/// thread's capture is invalidated.
///
/// For JIT tools: PTX is compiled by the driver's JIT for each device when a kernel is first
/// resolved there (lazily), or all at once with preload(). A failure carries the JIT's error
/// log in the message. A driver that loads lazily (the default) loads PTX that does not compile
/// without an error: such a library keeps its logs (jit_error_log()), is not cached, and its
/// first failing use carries the log.
class Library {
 public:
  /// No library.
  Library() noexcept = default;

  /// Loads PTX text. @throws Error with the JIT error log when the driver refuses it (a driver
  /// that loads lazily does not: see jit_error_log()); Error naming the minimum driver (12.0)
  /// when the driver has no libraries.
  static Library from_ptx(std::string_view ptx, LibraryCache cache = LibraryCache::use);
  /// Loads a cubin or fatbin image, or NUL-terminated PTX, of `bytes` bytes.
  /// @throws as from_ptx(); Error (CUDA_ERROR_INVALID_VALUE) for a null or empty image.
  static Library from_image(const void* image, std::size_t bytes,
                            LibraryCache cache = LibraryCache::use);
  /// Reads the file at `path` (PTX, cubin or fatbin) and loads it.
  /// @throws Error (CUDA_ERROR_FILE_NOT_FOUND) naming the path and the system's reason when it
  /// cannot be read (missing, a directory, no permission; the driver is not called), or as
  /// from_ptx().
  static Library from_file(const std::string& path, LibraryCache cache = LibraryCache::use);

  /// Drops the cache's references (loaded libraries still referred to stay loaded).
  static void clear_cache() noexcept;
  /// How many libraries the cache holds.
  static std::size_t cached_count() noexcept;

  /// The kernel `name` (its mangled name for C++ kernels not declared extern "C"): a hash
  /// lookup without a driver call, a lock or a reference count (with a driver of CUDA 12.4 or
  /// newer; an older one is asked once per name). The reference is valid while this Library
  /// is; a copy of it (`LibraryKernel k = lib.kernel("f");`) keeps the library loaded.
  /// @throws Error (CUDA_ERROR_NOT_FOUND) naming the kernel and listing the library's kernels;
  /// for an image that did not compile, the driver's error (CUDA_ERROR_INVALID_PTX, …) with the
  /// JIT error log; Error (CUDA_ERROR_INVALID_HANDLE) for an empty Library.
  const LibraryKernel& kernel(const std::string& name) const&;
  /// The kernel `name` of a temporary Library, as a copy that keeps the library loaded.
  /// @throws as above.
  LibraryKernel kernel(const std::string& name) &&;
  /// The names of its kernels, in the driver's order.
  const std::vector<std::string>& kernel_names() const;

  /// Resolves every kernel in `context` now (cuKernelGetFunction), so that no lazy load
  /// happens later, e.g. inside a capture or next to persistent kernels.
  /// @throws Error naming the kernel, the context and the driver's error; Error
  /// (CUDA_ERROR_INVALID_IMAGE, the driver not called) with the JIT error log for an image
  /// that did not compile; Error (CUDA_ERROR_INVALID_CONTEXT) naming the call for an empty
  /// Context.
  void preload(const Context& context) const;
  /// preload(device.primary_context()). @throws as above.
  void preload(const Device& device) const;

  /// The device variable `name` in `context` (cuLibraryGetGlobal with it current).
  /// @throws Error (CUDA_ERROR_NOT_FOUND from the driver) naming the variable, with the JIT
  /// error log where the load wrote one; Error (CUDA_ERROR_INVALID_CONTEXT) for an empty
  /// Context.
  LibraryGlobal global(const std::string& name, const Context& context) const;
  /// The managed variable `name` (cuLibraryGetManaged), valid in every context.
  /// @throws Error (CUDA_ERROR_NOT_FOUND from the driver) naming the variable.
  LibraryGlobal managed(const std::string& name) const;

  /// Unloads the library now (cuLibraryUnload) and leaves this Library empty, when nothing
  /// else can still run its code: no other copy of this Library and no LibraryKernel taken
  /// from it exists, and no graph custream instantiated launches its kernels (the cache's
  /// reference is dropped). Dropping the last reference unloads it too; this is for callers
  /// that must know the code is gone.
  /// @throws Error (CUDA_ERROR_NOT_PERMITTED) saying how many graphs or other references still
  /// need it (nothing changes); the driver's error when it refuses (e.g. while a stream captures
  /// in global mode), the library still loaded; Error (CUDA_ERROR_INVALID_HANDLE) when empty.
  void unload();

  /// The JIT's error log of its load: empty for an image that compiled. A driver that loads
  /// lazily (the default) loads an image that does not compile without an error; this log
  /// says why, and the first use that fails (a kernel lookup, preload(), function(), a launch,
  /// global()) carries it in its Error. Empty for an empty Library.
  const std::string& jit_error_log() const noexcept;
  /// The JIT's information log of its load (empty unless the driver wrote one).
  const std::string& jit_info_log() const noexcept;
  /// The CUlibrary (null when empty).
  CUlibrary handle() const noexcept;
  /// True unless empty.
  explicit operator bool() const noexcept { return static_cast<bool>(owner_); }

  /// Same CUlibrary.
  friend bool operator==(const Library& a, const Library& b) noexcept {
    return a.owner_.get() == b.owner_.get();
  }
  /// Different CUlibraries.
  friend bool operator!=(const Library& a, const Library& b) noexcept { return !(a == b); }

 private:
  friend class LibraryKernel;
  friend class GraphBuilder;  // a graph with a library-kernel node holds the library
  friend struct detail::KernelState;
  /// A Library that refers to `owner` without counting (a LibraryKernel the owner keeps of
  /// each kernel, so that a lookup returns a reference; it lets go of it uncounted).
  static Library uncounted(detail::LibraryOwner* owner) noexcept;
  static Library load(const void* image, std::size_t bytes, LibraryCache cache, const char* what);
  /// One driver load; `cacheable` (unless null) says whether the cache may keep it.
  static Library load_new(const detail::Loaded& l, const void* image, std::size_t bytes,
                          const char* what, bool* cacheable);

  detail::Shared<detail::LibraryOwner> owner_;
};

}  // namespace custream

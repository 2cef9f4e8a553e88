// The owner of a loaded library, its kernels' functions per context and parameter sizes, and
// the libraries graphs hold. Internal. Design: docs/design/libraries.md.
#pragma once

#include <cuda.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "custream/detail/call.hpp"
#include "custream/library_kernel.hpp"
#include "launch.hpp"
#include "shared.hpp"
#include "support/held_code.hpp"

namespace custream {
class StreamRef;
}

namespace custream::detail {

/// A kernel of a library: its CUkernel, name, its function in each device's primary context
/// once resolved (invariant 3), and its parameters' sizes once asked (invariant 6).
struct KernelState {
  KernelState() = default;
  KernelState(const KernelState&) = delete;
  KernelState& operator=(const KernelState&) = delete;
  ~KernelState() { handle.forget_uncounted(); }
  /// Makes `handle` this kernel of `owner`'s library, uncounted; the last step of making one.
  void bind(LibraryOwner* owner) noexcept {
    handle = LibraryKernel(this, Library::uncounted(owner));
  }

  CUkernel kernel = nullptr;
  std::string name;
  /// Per device ordinal: the function in that device's primary context, or null until the
  /// first launch there. Read without a lock; racing first launches store the same function.
  std::unique_ptr<std::atomic<CUfunction>[]> primary;

  /// What its parameters take (cuKernelGetParamInfo), for typed launches' checks.
  ParamSizes params;

  /// This kernel as a handle whose library reference is not counted (it lives inside the
  /// library): Library::kernel returns a reference to it, so a lookup counts nothing; copies
  /// of it count as usual. The destructor lets go of it uncounted.
  LibraryKernel handle;
};

/// A 64-bit hash of `bytes` bytes, eight at a time: the cache's key of an image.
std::uint64_t hash_bytes(const void* data, std::size_t bytes) noexcept;

/// A loaded library; the last reference unloads it (invariant 1).
struct LibraryOwner : LaunchedCode {
  ~LibraryOwner();
  CUlibrary library = nullptr;
  /// Every kernel, enumerated at load (invariant 2): immutable afterwards, read without a lock.
  std::vector<std::unique_ptr<KernelState>> kernels;
  std::unordered_map<std::string, KernelState*> by_name;
  std::vector<std::string> names;
  /// A driver older than 12.4 cannot enumerate: kernels are then looked up on first use and
  /// added here, under `lazy_mutex`.
  bool enumerated = false;
  std::mutex lazy_mutex;
  std::unordered_map<std::string, std::unique_ptr<KernelState>> lazy;
  /// The JIT's logs of the load (invariant 8): immutable after the load.
  std::string jit_error_log;
  std::string jit_info_log;

  /// Whether the image is known not to have compiled: the driver loaded it lazily, wrote an
  /// error log, and found no kernels (invariant 8).
  bool broken() const noexcept {
    return !jit_error_log.empty() && (!enumerated || kernels.empty());
  }
};

/// "; JIT error log:\n…" when `owner`'s load wrote one, else empty: appended to the error of
/// a failing use (invariant 8).
std::string jit_log_text(const LibraryOwner& owner);

/// The subject of an error about `library`.
inline Subject library_subject(CUlibrary library) noexcept {
  return {Subject::What::library, library, -1};
}

/// The registry of loaded libraries (invariant 5; support/held_code.hpp).
using Registry = CodeRegistry<LibraryOwner>;
/// The one registry of libraries.
inline Registry& registry() { return code_registry<LibraryOwner>(); }

/// An image in the cache and its library (invariant 4).
struct CacheEntry {
  std::uint64_t hash;
  std::string image;
  Library library;
};

/// A first load of an image in progress (invariant 4): threads loading the same bytes wait for
/// it (`done`) and take its library; an empty one means the load threw.
struct PendingLoad {
  std::uint64_t hash = 0;
  const void* image = nullptr;  // the loading thread's, valid while this is in Cache::pending
  std::size_t bytes = 0;
  bool done = false;
  Library library;
};

/// The content-addressed cache of loaded images (invariant 4).
struct Cache {
  std::mutex mutex;
  std::list<CacheEntry> entries;  // most recently used first
  std::size_t bytes = 0;
  std::vector<std::shared_ptr<PendingLoad>> pending;  // first loads in progress
  std::condition_variable loaded;                     // a pending load finished
};
/// The one cache (never destroyed: no unload after the driver is gone at exit).
Cache& cache();

/// The cached library of the `bytes` bytes at `image`; else the library of the same bytes
/// another thread is loading, once it has; else `load`'s, cached unless it sets its argument to
/// false (a broken image). Evicted libraries are dropped as drop_entries() does (invariant 4).
/// @throws what `load` throws.
Library cached_load(const void* image, std::size_t bytes,
                    const std::function<Library(bool*)>& load);

/// Drops `dropped` (the cache's entries, outside its mutex) with the thread's capture mode
/// relaxed, so that unloading a library no one else holds neither invalidates another thread's
/// capture nor leaks (invariant 4).
void drop_entries(std::list<CacheEntry>& dropped) noexcept;

/// The parameter sizes of `state`'s kernel, asked once with `stream`'s context current
/// (cuKernelGetParamInfo); leaves state.params known or unknown. @throws Error on a driver
/// failure other than "cannot tell".
void load_param_sizes(KernelState& state, const StreamRef& stream);

/// A typed launch's (or kernel node's) argument check where the sizes are not known yet, or do
/// not match (invariant 6): asks them once (cuKernelGetParamInfo, with `context` current unless
/// null), then refuses arguments that do not match, naming `call`.
/// @throws Error (CUDA_ERROR_INVALID_VALUE) naming the kernel and argument; Error about
/// `subject` when the driver's query fails.
[[gnu::cold, gnu::noinline]] void check_library_arguments(KernelState& state, CUcontext context,
                                                          const char* call, const Subject& subject,
                                                          const std::size_t* sizes,
                                                          std::size_t count);

/// Throws the Error of a typed launch whose `count` arguments of `sizes` do not match the
/// kernel's parameters, naming the first mismatch; returns when they match.
void check_arguments(const KernelState& state, const std::size_t* sizes, std::size_t count);

}  // namespace custream::detail

// The owner of a loaded library, its kernels' functions per context and parameter sizes, and
// the libraries graphs hold. Internal. Design: docs/design/libraries.md.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "custream/library_kernel.hpp"
#include "shared.hpp"

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

  /// Whether param_sizes is known: not yet asked, known, or unknowable (a driver without
  /// cuKernelGetParamInfo, or an image it cannot tell of). Written once, under params_mutex.
  enum class Params : int { unasked, known, unknown };
  std::atomic<Params> params{Params::unasked};
  std::mutex params_mutex;
  std::vector<std::size_t> param_sizes;  // immutable once params is known

  /// This kernel as a handle whose library reference is not counted (it lives inside the
  /// library): Library::kernel returns a reference to it, so a lookup counts nothing; copies
  /// of it count as usual. The destructor lets go of it uncounted.
  LibraryKernel handle;
};

/// A 64-bit hash of `bytes` bytes, eight at a time: the cache's key of an image.
std::uint64_t hash_bytes(const void* data, std::size_t bytes) noexcept;

/// A loaded library; the last reference unloads it (invariant 1).
struct LibraryOwner : Counted {
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
  /// How many graphs hold this library (invariant 5).
  std::atomic<long> graphs{0};
};

/// The parameter sizes of `state`'s kernel, asked once with `stream`'s context current
/// (cuKernelGetParamInfo); leaves state.params known or unknown. @throws Error on a driver
/// failure other than "cannot tell".
void load_param_sizes(KernelState& state, const StreamRef& stream);

/// Throws the Error of a typed launch whose `count` arguments of `sizes` do not match the
/// kernel's parameters, naming the first mismatch; returns when they match.
void check_arguments(const KernelState& state, const std::size_t* sizes, std::size_t count);

/// The libraries whose kernels a graph launches, held while the graph (and its executable)
/// lives (invariant 5). Filled from the graph's kernel nodes when custream instantiates or
/// updates it; never copied.
class GraphLibraries {
 public:
  GraphLibraries() = default;
  GraphLibraries(const GraphLibraries&) = delete;
  GraphLibraries& operator=(const GraphLibraries&) = delete;
  ~GraphLibraries();

  /// Whether any library is loaded in the process: when none, a graph's kernel nodes need not
  /// be read.
  static bool any_loaded() noexcept;
  /// Holds the libraries of these kernel-node functions (CUfunction or CUkernel handles), those
  /// custream knows of; others are ignored.
  void hold(const std::vector<const void*>& functions);
  /// Holds `other`'s libraries too.
  void hold(const GraphLibraries& other);
  /// How many libraries are held.
  std::size_t size() const noexcept { return held_.size(); }

 private:
  void add(LibraryOwner* owner);  // a reference already taken
  std::vector<LibraryOwner*> held_;
};

}  // namespace custream::detail

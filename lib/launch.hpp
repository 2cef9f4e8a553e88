// Launches with a configuration (cuLaunchKernelEx) shared by Kernel and LibraryKernel, and the
// argument check of typed launches. Internal. Design: docs/design/libraries.md, invariants 6-7.
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "custream/detail/cuda.hpp"

#include "custream/detail/call.hpp"
#include "custream/launch_config.hpp"
#include "custream/stream_ref.hpp"

namespace custream::detail {

/// Launches `function` on `stream` with `config` (one cuLaunchKernelEx) after the checks of
/// invariant 7. `kernel` is a library kernel's name for errors (empty: a module's kernel,
/// named by its function).
/// @throws Error naming the kernel, the attribute and the limit when a check refuses (the
/// driver is not called), or the driver's error naming the kernel, stream and configuration.
void launch_with_config(CUfunction function, const StreamRef& stream, const LaunchConfig& config,
                        void** params, const std::string& kernel);

/// Where a launch with a configuration goes, for the checks of invariant 7 and their errors: a
/// stream, or (stream null) a kernel node of `graph` whose kernel runs in `context_` on `device`.
struct LaunchSite {
  const char* call;  ///< named by a refusal
  const StreamRef* stream = nullptr;
  CUgraph graph = nullptr;
  CUcontext context_ = nullptr;
  int device = -1;

  bool is_special() const noexcept { return stream != nullptr && stream->is_special(); }
  int device_id() const noexcept { return stream != nullptr ? stream->device_id() : device; }
  CUcontext context() const noexcept { return stream != nullptr ? stream->context() : context_; }
  CUstream stream_handle() const noexcept { return stream != nullptr ? stream->handle() : nullptr; }
  /// "stream 0x… (device N)" or "graph 0x…".
  Subject subject() const noexcept {
    return stream != nullptr ? Subject{Subject::What::stream, stream->handle(), stream->device_id()}
                             : Subject{Subject::What::graph, graph, -1};
  }
  /// Throws Error (`r`, `call`, the site) saying `why`.
  [[noreturn, gnu::cold]] void refuse(CUresult r, std::string why) const;
};

/// Whether `config` asks for any launch attribute (a plain configuration asks for none).
inline bool has_attributes(const LaunchConfig& c) noexcept {
  return c.cluster || c.cooperative || c.priority || c.programmatic_serialization ||
         c.programmatic_event || c.mem_sync_domain;
}

/// The launch attributes of `config` for `function` at `site`, after the checks of invariant 7
/// (the same for a launch and a kernel node): written to `out`, their count returned.
/// @throws Error naming the kernel (`kernel`, or the function when empty), the attribute and the
/// limit, before the driver is asked to launch.
unsigned launch_attributes(const LaunchSite& site, CUfunction function, const LaunchConfig& config,
                           const std::string& kernel, CUlaunchAttribute (&out)[6]);

/// launch_with_config() for a caller that has refused `config.shared_bytes` above
/// kMaxSharedBytes itself (before any driver call of its own): the attribute checks and the one
/// cuLaunchKernelEx, without checking the shared memory twice. Hidden: called from within
/// libcustream only, so the call is direct (no PLT hop).
/// @throws as launch_with_config().
[[gnu::visibility("hidden")]] void launch_with_attributes(CUfunction function,
                                                          const StreamRef& stream,
                                                          const LaunchConfig& config, void** params,
                                                          const std::string& kernel);

/// "axb x c" for an error message.
std::string dims_text(Dim3 d);

/// The most dynamic shared memory a launch can ask for: the driver takes it in 32 bits
/// (cuLaunchKernel's sharedMemBytes, CUlaunchConfig::sharedMemBytes).
inline constexpr std::size_t kMaxSharedBytes = 0xFFFFFFFFu;

/// Throws the error of a launch of `kernel` (its text for errors) on `stream` asking for
/// `shared_bytes` of dynamic shared memory, more than kMaxSharedBytes (`call`: the entry the
/// launch would have called; the driver is not called).
[[noreturn, gnu::cold]] void refuse_shared_bytes(const char* call, const StreamRef& stream,
                                                 const std::string& kernel,
                                                 std::size_t shared_bytes);

/// What a kernel's parameters take, in bytes, for the argument checks of typed launches
/// (libraries.md and modules.md, invariant 6): asked of the driver once (cuKernelGetParamInfo or
/// cuFuncGetParamInfo, CUDA 12.4), then read without a lock.
struct ParamSizes {
  /// Not asked yet, known, or unknowable (a driver without the entry, an image it cannot tell
  /// of). Written once, under `mutex`.
  enum class Known : int { unasked, known, unknown };
  std::atomic<Known> known{Known::unasked};
  std::mutex mutex;
  std::vector<std::size_t> sizes;  // immutable once known
};

/// Asks `info(index, &offset, &size)` of every parameter once (under p.mutex; CUDA_ERROR_
/// INVALID_VALUE past the last, CUDA_ERROR_NOT_SUPPORTED: unknowable; a null `info`: the
/// driver lacks the entry), and returns whether the sizes are known. @throws what `failed(r,
/// index)` throws for another error.
bool param_sizes_known(ParamSizes& p,
                       const std::function<CUresult(std::size_t, std::size_t*, std::size_t*)>& info,
                       const std::function<void(CUresult, std::size_t)>& failed);

/// Whether `count` arguments of `sizes` bytes are what `p`'s known sizes say: the check of every
/// typed launch, inline (a refusal, or sizes not yet asked, take check_argument_sizes() and
/// param_sizes_known(), out of line).
inline bool arguments_match(const ParamSizes& p, const std::size_t* sizes,
                            std::size_t count) noexcept {
  if (count != p.sizes.size()) return false;
  for (std::size_t i = 0; i < count; ++i) {
    if (sizes[i] != p.sizes[i]) return false;
  }
  return true;
}

/// Refuses, without calling the driver, a typed launch of the kernel `name` whose `count`
/// arguments of `sizes` bytes do not match `p`'s known sizes. Builds no text unless it refuses.
/// @throws Error (CUDA_ERROR_INVALID_VALUE, `call`) saying which argument and what it takes.
void check_argument_sizes(const ParamSizes& p, const char* call, const std::string& name,
                          const std::size_t* sizes, std::size_t count);

}  // namespace custream::detail

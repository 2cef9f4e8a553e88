/// @file
/// custream::Module: a loaded CUDA module (PTX, cubin or fatbin), as a value handle.
#pragma once

#include "custream/detail/cuda.hpp"

#include <string>
#include <string_view>

#include "custream/context.hpp"
#include "custream/detail/shared.hpp"

namespace custream {

class Kernel;

namespace detail {
/// Shared ownership of a loaded module.
struct ModuleOwner;
}  // namespace detail

/// A CUDA module loaded into a context (cuModuleLoadDataEx): a device's primary context, or a
/// Context given to the loader (kept alive by the module when custream owns it). Copies share
/// it; the last copy (or Kernel taken from it) unloads it. Its kernels run on streams of the
/// context it was loaded in, and of the device's green contexts when that is the primary
/// context (green contexts share the primary context's modules); a module of a created
/// context is usable only there. For code that runs on several devices or contexts, or that
/// a JIT tool loads many times, prefer custream::Library (loaded once for every device, and
/// cached by content).
///
/// For JIT and kernel-loader tools: PTX text is compiled by the driver's JIT for the device;
/// a failure carries the JIT's error log in the message.
class Module {
 public:
  /// No module.
  Module() noexcept = default;

  /// Loads PTX text (JIT-compiled for the device) on device `device_id` (-1: the current
  /// device). @throws Error naming the device, with the JIT error log, when it fails.
  static Module from_ptx(std::string_view ptx, int device_id = -1);
  /// Loads a cubin or fatbin image (or NUL-terminated PTX) from memory; the driver reads
  /// its size from its header. @throws Error with the JIT log when it fails.
  static Module from_image(const void* image, int device_id = -1);
  /// Reads the file at `path` (PTX, cubin or fatbin) and loads it.
  /// @throws Error when the file cannot be read (naming it) or the load fails (JIT log).
  static Module from_file(const std::string& path, int device_id = -1);
  /// Loads PTX text into `context`; see from_ptx(). The calling thread's current context is
  /// left as it was. @throws as from_ptx(); Error (CUDA_ERROR_INVALID_CONTEXT) for an empty
  /// Context.
  static Module from_ptx(std::string_view ptx, const Context& context);
  /// Loads an image into `context`; see from_image(). @throws as from_image().
  static Module from_image(const void* image, const Context& context);
  /// Loads a file into `context`; see from_file(). @throws as from_file().
  static Module from_file(const std::string& path, const Context& context);

  /// Another reference to the same loaded module.
  Module(const Module& other) noexcept = default;
  /// Takes over `other`'s reference; `other` becomes empty.
  Module(Module&& other) noexcept = default;
  /// Refers to `other`'s loaded module instead (dropping this reference).
  Module& operator=(const Module& other) noexcept = default;
  /// Takes over `other`'s reference (dropping this one); `other` becomes empty.
  Module& operator=(Module&& other) noexcept = default;
  /// Drops this reference; the last one unloads the module. Never throws.
  ~Module() = default;

  /// The kernel `name` (its mangled name for C++ kernels not declared extern "C").
  /// @throws Error (CUDA_ERROR_NOT_FOUND from the driver) naming the kernel when absent.
  Kernel kernel(const std::string& name) const;

  /// The CUmodule (null when empty). A raw handle leaves custream's sight: every graph
  /// custream instantiates from then on holds the module, since it may launch its functions.
  CUmodule handle() const noexcept;
  /// The device it was loaded on (-1 when empty).
  int device_id() const noexcept { return device_; }
  /// The context it was loaded into (null when empty).
  CUcontext context() const noexcept;

 private:
  friend class Kernel;
  friend class GraphBuilder;  // kernel nodes hold their modules
  static Module load(const void* image, const Context& context, const char* what);
  static Context context_for(int device_id);

  detail::MovedFrom<CUmodule> module_;
  detail::MovedFrom<int, -1> device_;
  detail::Shared<detail::ModuleOwner> owner_;
};

}  // namespace custream

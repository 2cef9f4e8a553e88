/// @file
/// custream::Kernel: a function of a loaded Module, launched on a stream with typed
/// arguments.
#pragma once

#include "custream/detail/cuda.hpp"

#include <cstddef>
#include <type_traits>

#include "custream/dim3.hpp"
#include "custream/launch_config.hpp"
#include "custream/module.hpp"
#include "custream/stream_ref.hpp"

namespace custream {

class GraphBuilder;

namespace detail {
/// What a module's kernel's typed launches check its arguments against (lib/module.hpp).
struct KernelParams;
}  // namespace detail

/// A kernel (CUfunction) of a Module; it keeps the module loaded.
///
/// @code
/// auto add_one = custream::Module::from_ptx(ptx).kernel("add_one");
/// add_one.launch(stream, {blocks}, {256}, 0, buffer.get(), n);  // CUdeviceptr, int
/// @endcode
/// A launch on a capturing stream is captured (a kernel node) and replays with the
/// argument values of the launch.
class Kernel {
 public:
  /// No kernel.
  Kernel() noexcept = default;

  /// The CUfunction (null when empty). A raw handle leaves custream's sight: every graph
  /// custream instantiates from then on holds the module, since it may launch the function.
  CUfunction handle() const noexcept;
  /// The module it belongs to.
  const Module& module() const noexcept { return module_; }

  /// Launches the kernel on `stream` with `grid` blocks of `block` threads, `shared_bytes`
  /// of dynamic shared memory, and `args` as its parameters (each passed by value, so its
  /// type must match the kernel's parameter type exactly: e.g. CUdeviceptr for a pointer,
  /// int for .s32). The count and sizes of `args` are checked against the kernel's parameters
  /// (asked of the driver once per kernel, cuFuncGetParamInfo, CUDA 12.4; not checked where the
  /// driver cannot tell). One driver call (cuLaunchKernel), no context switch when a context is
  /// current.
  /// @throws Error (CUDA_ERROR_INVALID_VALUE) naming the kernel and the argument when they do
  /// not match, before the driver is called; Error naming the kernel, stream and configuration
  /// on a driver failure.
  template <typename... Args>
  void launch(StreamRef stream, Dim3 grid, Dim3 block, std::size_t shared_bytes,
              const Args&... args) const {
    static_assert((std::is_trivially_copyable_v<Args> && ...),
                  "kernel arguments are copied bytewise: they must be trivially copyable");
    void* params[sizeof...(Args) + 1] = {const_cast<void*>(static_cast<const void*>(&args))...,
                                         nullptr};
    const std::size_t sizes[sizeof...(Args) + 1] = {sizeof(Args)..., 0};
    check(stream, sizes, sizeof...(Args));
    launch_raw(stream, grid, block, shared_bytes, params);
  }

  /// Launches with an array of pointers to the arguments (cuLaunchKernel's kernelParams).
  /// @throws Error on a driver failure.
  void launch_raw(StreamRef stream, Dim3 grid, Dim3 block, std::size_t shared_bytes,
                  void** params) const;

  /// Launches with launch attributes (one cuLaunchKernelEx, CUDA 11.6+): `config`'s
  /// dimensions, shared memory, clusters, cooperative launch, priority, programmatic dependent
  /// launch, memory synchronization domain, checked as LaunchConfig says.
  /// @throws Error naming the kernel, the attribute and the limit when a check refuses; Error
  /// naming the kernel, stream and configuration on a driver failure.
  template <typename... Args>
  void launch(StreamRef stream, const LaunchConfig& config, const Args&... args) const {
    static_assert((std::is_trivially_copyable_v<Args> && ...),
                  "kernel arguments are copied bytewise: they must be trivially copyable");
    void* params[sizeof...(Args) + 1] = {const_cast<void*>(static_cast<const void*>(&args))...,
                                         nullptr};
    const std::size_t sizes[sizeof...(Args) + 1] = {sizeof(Args)..., 0};
    check(stream, sizes, sizeof...(Args));
    launch_raw(stream, config, params);
  }

  /// Launches with launch attributes and an array of pointers to the arguments.
  /// @throws as launch(stream, config, args...).
  void launch_raw(StreamRef stream, const LaunchConfig& config, void** params) const;

 private:
  friend class Module;
  friend class GraphBuilder;  // kernel nodes: the same checks as a launch
  Kernel(CUfunction function, Module module, detail::KernelParams* params) noexcept
      : function_(function), module_(std::move(module)), params_(params) {}
  /// Refuses arguments of `sizes` that do not match the kernel's parameters (once they are
  /// known). @throws Error (CUDA_ERROR_INVALID_VALUE) naming the kernel and the argument.
  void check(StreamRef stream, const std::size_t* sizes, std::size_t count) const;
  [[gnu::cold]] void launch_failed(CUresult result, StreamRef stream, Dim3 grid, Dim3 block,
                                   std::size_t shared_bytes, void** params) const;

  CUfunction function_ = nullptr;
  Module module_;
  detail::KernelParams* params_ = nullptr;  // its module's entry (lives with the module)
};

}  // namespace custream

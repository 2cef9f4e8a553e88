/// @file
/// custream::LibraryKernel: a kernel of a Library (CUkernel), launched on any device's stream.
#pragma once

#include "custream/detail/cuda.hpp"

#include <cstddef>
#include <string>
#include <type_traits>

#include "custream/detail/shared.hpp"
#include "custream/dim3.hpp"
#include "custream/launch_config.hpp"
#include "custream/library.hpp"
#include "custream/stream_ref.hpp"

namespace custream {

class GraphBuilder;

namespace detail {
/// A kernel of a library and its functions per context (lib/library.hpp).
struct KernelState;
}  // namespace detail

/// A kernel of a Library (CUkernel); it keeps the library loaded.
///
/// @code
/// custream::Library lib = custream::Library::from_ptx(ptx);  // once, for every device
/// custream::LibraryKernel add_one = lib.kernel("add_one");
/// add_one.launch(stream_on_device_0, {blocks}, {256}, 0, buffer0.get(), n);
/// add_one.launch(stream_on_device_1, {blocks}, {256}, 0, buffer1.get(), n);
/// @endcode
/// The first launch on a stream of a context resolves the kernel's function there
/// (cuKernelGetFunction, which loads it into that context); later launches there make one
/// driver call (cuLaunchKernel). A launch on a capturing stream is captured (a kernel node).
class LibraryKernel {
 public:
  /// No kernel.
  LibraryKernel() noexcept = default;

  /// The CUkernel (null when empty).
  CUkernel handle() const noexcept;
  /// Its name.
  const std::string& name() const noexcept;
  /// The library it belongs to.
  Library library() const noexcept;

  /// Its function in `context` (cuKernelGetFunction with it current, once per context, then
  /// cached). @throws Error naming the kernel and the context on a driver failure (with the
  /// library's JIT error log, if any); Error (CUDA_ERROR_INVALID_CONTEXT) naming the call for
  /// an empty Context.
  CUfunction function(const Context& context) const;

  /// Launches the kernel on `stream` with `grid` blocks of `block` threads, `shared_bytes`
  /// of dynamic shared memory, and `args` as its parameters (each passed by value, so its
  /// type must match the kernel's parameter type exactly: e.g. CUdeviceptr for a pointer, int
  /// for .s32). In the stream's context, whatever is current; for the special handles 0, 1
  /// and 2, the current context's function.
  ///
  /// The arguments are checked against the kernel's parameters where the driver reports them
  /// (cuKernelGetParamInfo, CUDA 12.4; asked once per kernel, then a comparison of sizes): a
  /// different count, or an argument whose size differs from its parameter's, is refused before
  /// the driver is called.
  /// @throws Error (CUDA_ERROR_INVALID_VALUE) naming the kernel and the first mismatching
  /// argument, its size and the parameter's, or `shared_bytes` above 4 GiB − 1 (the driver
  /// takes 32 bits; refused before the driver is called); Error naming the kernel, stream and
  /// configuration on a driver failure.
  template <typename... Args>
  void launch(const StreamRef& stream, Dim3 grid, Dim3 block, std::size_t shared_bytes,
              const Args&... args) const {
    static_assert((std::is_trivially_copyable_v<Args> && ...),
                  "kernel arguments are copied bytewise: they must be trivially copyable");
    void* params[sizeof...(Args) + 1] = {const_cast<void*>(static_cast<const void*>(&args))...,
                                         nullptr};
    static constexpr std::size_t sizes[sizeof...(Args) + 1] = {sizeof(Args)..., 0};
    launch_checked(stream, grid, block, shared_bytes, params, sizes, sizeof...(Args));
  }

  /// Launches with launch attributes (one cuLaunchKernelEx): `config`'s dimensions, shared
  /// memory, clusters, cooperative launch, priority, programmatic dependent launch, memory
  /// synchronization domain. The arguments are checked as by the launch above; the attributes
  /// as LaunchConfig says.
  /// @throws Error naming the kernel, the attribute and the limit when a check refuses; Error
  /// naming the kernel, stream and configuration on a driver failure.
  template <typename... Args>
  void launch(const StreamRef& stream, const LaunchConfig& config, const Args&... args) const {
    static_assert((std::is_trivially_copyable_v<Args> && ...),
                  "kernel arguments are copied bytewise: they must be trivially copyable");
    void* params[sizeof...(Args) + 1] = {const_cast<void*>(static_cast<const void*>(&args))...,
                                         nullptr};
    static constexpr std::size_t sizes[sizeof...(Args) + 1] = {sizeof(Args)..., 0};
    launch_checked(stream, config, params, sizes, sizeof...(Args));
  }

  /// Launches with an array of pointers to the arguments (cuLaunchKernel's kernelParams),
  /// unchecked. @throws Error (CUDA_ERROR_INVALID_VALUE) for `shared_bytes` above 4 GiB − 1;
  /// Error on a driver failure.
  void launch_raw(const StreamRef& stream, Dim3 grid, Dim3 block, std::size_t shared_bytes,
                  void** params) const;
  /// Launches with launch attributes and an array of pointers to the arguments, unchecked.
  /// @throws as launch(stream, config, args...) does, less the argument check.
  void launch_raw(const StreamRef& stream, const LaunchConfig& config, void** params) const;

  /// An attribute of the kernel on `device` (cuKernelGetAttribute).
  /// @throws Error naming the kernel, the attribute and the device on a driver failure.
  int attribute(CUfunction_attribute attribute, int device) const;
  /// Sets an attribute of the kernel on `device` (cuKernelSetAttribute), e.g.
  /// CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES before a launch with more than 48 KiB of
  /// dynamic shared memory. @throws Error naming the kernel, the attribute, the value and the
  /// device on a driver failure.
  void set_attribute(CUfunction_attribute attribute, int value, int device) const;

 private:
  friend class Library;
  friend class GraphBuilder;  // kernel nodes: the same checks as a launch
  friend struct detail::KernelState;
  LibraryKernel(detail::KernelState* state, Library library) noexcept
      : state_(state), library_(std::move(library)) {}
  /// Drops the library without counting (the owner's own, uncounted kernel handles).
  void forget_uncounted() noexcept { (void)library_.owner_.detach(); }
  /// function() without marking the library's code as handed out. @throws as function().
  CUfunction resolve(const Context& context) const;
  /// The CUkernel without marking it as handed out (null when empty).
  CUkernel kernel_or_null() const noexcept;
  /// The function for `stream` (cached per device for primary contexts). @throws Error.
  CUfunction function_for(const StreamRef& stream) const;
  /// Checks `count` arguments of `sizes` bytes against the parameters. @throws Error.
  void check(const StreamRef& stream, const std::size_t* sizes, std::size_t count) const;
  /// What both launches do first: the function, the argument check (sizes null: none), the
  /// launch stamp of the library. @throws Error.
  CUfunction prepare(const StreamRef& stream, const std::size_t* sizes, std::size_t count) const;
  void launch_checked(const StreamRef& stream, Dim3 grid, Dim3 block, std::size_t shared_bytes,
                      void** params, const std::size_t* sizes, std::size_t count) const;
  void launch_checked(const StreamRef& stream, const LaunchConfig& config, void** params,
                      const std::size_t* sizes, std::size_t count) const;

  detail::MovedFrom<detail::KernelState*> state_;  // owned by the library
  Library library_;
};

}  // namespace custream

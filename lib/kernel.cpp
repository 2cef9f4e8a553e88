// custream::Kernel: launching a function of a loaded Module. Design: docs/design/modules.md.
#include "custream/kernel.hpp"

#include <functional>
#include <optional>
#include <string>

#include "custream/context_scope.hpp"
#include "driver.hpp"
#include "launch.hpp"
#include "module.hpp"

namespace custream {

void Kernel::launch_raw(StreamRef stream, Dim3 grid, Dim3 block, std::size_t shared_bytes,
                        void** params) const {
  if (shared_bytes > detail::kMaxSharedBytes) {  // never truncated to the driver's 32 bits
    detail::refuse_shared_bytes("custream::Kernel::launch", stream,
                                "kernel " + detail::pointer_text(function_), shared_bytes);
  }
  if (module_.owner_) detail::note_launch(*module_.owner_.get());  // invariant 7
  const CUresult r = detail::api().cuLaunchKernel(  // raw: hot path, one call
      function_, grid.x, grid.y, grid.z, block.x, block.y, block.z,
      static_cast<unsigned>(shared_bytes), stream.handle(), params, nullptr);
  if (r != CUDA_SUCCESS) launch_failed(r, stream, grid, block, shared_bytes, params);
}

CUfunction Kernel::handle() const noexcept {
  if (module_.owner_) detail::note_exposed(*module_.owner_.get());  // may be launched raw (7)
  return function_;
}

namespace detail {
void check_kernel_arguments(KernelParams& kernel, CUfunction function, CUcontext context,
                            const char* call, const Subject& subject, const std::size_t* sizes,
                            std::size_t count) {
  if (kernel.sizes.known.load(std::memory_order_acquire) == ParamSizes::Known::unasked) {
    std::optional<ContextScope> scope;
    if (context != nullptr) scope.emplace(context);
    const auto info = api().cuFuncGetParamInfo;
    (void)param_sizes_known(
        kernel.sizes,
        info == nullptr ? std::function<CUresult(std::size_t, std::size_t*, std::size_t*)>()
                        : [&](std::size_t i, std::size_t* offset,
                              std::size_t* size) { return info(function, i, offset, size); },
        [&](CUresult r, std::size_t i) {
          fail<&DriverApi::cuFuncGetParamInfo>(
              r, subject, "parameter " + std::to_string(i) + " of kernel \"" + kernel.name + "\"");
        });
  }
  if (kernel.sizes.known.load(std::memory_order_acquire) == ParamSizes::Known::known) {
    check_argument_sizes(kernel.sizes, call, kernel.name, sizes, count);
  }
}
}  // namespace detail

void Kernel::check(StreamRef stream, const std::size_t* sizes, std::size_t count) const {
  if (params_ == nullptr) return;  // no kernel: the launch says so
  detail::KernelParams& kernel = *params_;
  const detail::ParamSizes::Known known = kernel.sizes.known.load(std::memory_order_acquire);
  if (known == detail::ParamSizes::Known::known &&
      detail::arguments_match(kernel.sizes, sizes, count)) {
    return;  // invariant 6: the common case, inline
  }
  if (known != detail::ParamSizes::Known::unknown) {
    detail::check_kernel_arguments(  // asked with the module's context current, as the driver asks
        kernel, function_, module_.owner_ ? module_.owner_.get()->context : nullptr,
        "custream::Kernel::launch",
        {detail::Subject::What::stream, stream.handle(), stream.device_id()}, sizes, count);
  }
}

void Kernel::launch_raw(StreamRef stream, const LaunchConfig& config, void** params) const {
  if (module_.owner_) detail::note_launch(*module_.owner_.get());  // invariant 7
  detail::launch_with_config(function_, stream, config, params, {});
}

void Kernel::launch_failed(CUresult r, StreamRef stream, Dim3 grid, Dim3 block,
                           std::size_t shared_bytes, void** params) const {
  if (r == CUDA_ERROR_INVALID_CONTEXT && module_.owner_) {  // invariant 4
    ContextScope scope(module_.owner_.get()->context);
    r = detail::try_call<&detail::DriverApi::cuLaunchKernel>(
        function_, grid.x, grid.y, grid.z, block.x, block.y, block.z,
        static_cast<unsigned>(shared_bytes), stream.handle(), params, nullptr);
    if (r == CUDA_SUCCESS) return;
  }
  std::string why = "kernel " + detail::pointer_text(function_) + ", grid " +
                    detail::dims_text(grid) + ", block " + detail::dims_text(block) + ", " +
                    std::to_string(shared_bytes) + " bytes of shared memory";
  const CUcontext loaded_in = module_.context();
  if (r == CUDA_ERROR_INVALID_HANDLE && loaded_in != nullptr && stream.context() != nullptr &&
      loaded_in != stream.context()) {
    // A function belongs to the context its module was loaded in (contexts.md, invariant 6).
    why += "; the kernel's module was loaded in context " + detail::pointer_text(loaded_in) +
           " but the stream belongs to the " + to_string(stream.context_kind()) + " context " +
           detail::pointer_text(stream.context()) +
           ": load the module into the stream's context (Module::from_ptx(ptx, context))";
  }
  detail::throw_stream_error(r, detail::EntryInfo<&detail::DriverApi::cuLaunchKernel>::name, stream,
                             std::move(why));
}

}  // namespace custream

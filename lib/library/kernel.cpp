// custream::LibraryKernel: per-context functions, argument checks and launches (invariants 3,
// 6 and 7 of docs/design/libraries.md).
#include <atomic>
#include <functional>
#include <optional>
#include <string>

#include "context.hpp"
#include "custream/context.hpp"
#include "custream/context_scope.hpp"
#include "custream/device.hpp"
#include "custream/error.hpp"
#include "custream/library.hpp"
#include "custream/library_kernel.hpp"
#include "driver.hpp"
#include "launch.hpp"
#include "library.hpp"

namespace custream {

using detail::DriverApi;

namespace detail {}  // namespace detail

const std::string& LibraryKernel::name() const noexcept {
  static const std::string none;
  return state_ != nullptr ? state_->name : none;
}

CUkernel LibraryKernel::kernel_or_null() const noexcept {
  return state_ != nullptr ? state_->kernel : nullptr;
}

CUkernel LibraryKernel::handle() const noexcept {
  if (state_ == nullptr) return nullptr;
  detail::note_exposed(*library_.owner_.get());  // may now be launched raw (invariant 5)
  return state_->kernel;
}

Library LibraryKernel::library() const noexcept { return library_; }

namespace {
[[noreturn, gnu::cold]] void refuse_empty_kernel(const char* call) {
  throw Error(CUDA_ERROR_INVALID_HANDLE, call, "empty custream::LibraryKernel",
              "the LibraryKernel holds no kernel");
}
}  // namespace

CUfunction LibraryKernel::function(const Context& context) const {
  if (state_ == nullptr) refuse_empty_kernel("custream::LibraryKernel::function");
  detail::nonempty(context, "custream::LibraryKernel::function");  // before it is read
  detail::note_exposed(*library_.owner_.get());  // may now be launched raw (invariant 5)
  return resolve(context);
}

CUfunction LibraryKernel::resolve(const Context& context) const {
  detail::nonempty(context, "custream::LibraryKernel::function");  // its device indexes below
  const bool primary = context.kind() == ContextKind::primary;
  std::atomic<CUfunction>* slot = primary ? &state_->primary[context.device_id()] : nullptr;
  if (slot != nullptr) {
    if (CUfunction f = slot->load(std::memory_order_acquire)) return f;
  }
  // Resolved in the context (invariant 3): cuKernelGetFunction loads the kernel there.
  ContextScope scope(context);
  CUfunction f = nullptr;
  if (CUresult r = detail::try_call<&DriverApi::cuKernelGetFunction>(&f, state_->kernel);
      r != CUDA_SUCCESS) {
    detail::fail<&DriverApi::cuKernelGetFunction>(
        r, {detail::Subject::What::context, context.handle(), context.device_id()},
        "kernel \"" + state_->name + "\" (" + to_string(context.kind()) + " context)" +
            detail::jit_log_text(*library_.owner_.get()));
  }
  if (slot != nullptr) slot->store(f, std::memory_order_release);  // the same f every time
  return f;
}

CUfunction LibraryKernel::function_for(const StreamRef& stream) const {
  if (state_ == nullptr) refuse_empty_kernel("custream::LibraryKernel::launch");
  const int device = stream.device_id();
  if (device >= 0 && stream.context_kind() == ContextKind::primary) {
    if (CUfunction f = state_->primary[device].load(std::memory_order_acquire)) return f;  // 3
    return resolve(Device(device).primary_context());
  }
  // A special handle means the current context's stream: the driver resolves a CUkernel
  // passed as the function in the current context.
  if (stream.is_special()) return reinterpret_cast<CUfunction>(state_->kernel);
  return resolve(Context::wrap(stream.context()));
}

namespace detail {
void check_library_arguments(KernelState& state, CUcontext context, const char* call,
                             const Subject& subject, const std::size_t* sizes, std::size_t count) {
  if (state.params.known.load(std::memory_order_acquire) == ParamSizes::Known::unasked) {
    // The driver asks for a current context (the stream's; the current one for a special
    // handle), as launch.cpp's queries.
    std::optional<ContextScope> scope;
    if (context != nullptr) scope.emplace(context);
    const auto info = api().cuKernelGetParamInfo;
    (void)param_sizes_known(
        state.params,
        info == nullptr ? std::function<CUresult(std::size_t, std::size_t*, std::size_t*)>()
                        : [&](std::size_t i, std::size_t* offset,
                              std::size_t* size) { return info(state.kernel, i, offset, size); },
        [&](CUresult r, std::size_t i) {
          fail<&DriverApi::cuKernelGetParamInfo>(
              r, subject, "parameter " + std::to_string(i) + " of kernel \"" + state.name + "\"");
        });
  }
  if (state.params.known.load(std::memory_order_acquire) == ParamSizes::Known::known) {
    check_argument_sizes(state.params, call, state.name, sizes, count);
  }
}
}  // namespace detail

void LibraryKernel::check(const StreamRef& stream, const std::size_t* sizes,
                          std::size_t count) const {
  detail::KernelState& state = *state_;
  const detail::ParamSizes::Known known = state.params.known.load(std::memory_order_acquire);
  if (known == detail::ParamSizes::Known::known &&
      detail::arguments_match(state.params, sizes, count)) {
    return;  // invariant 6: the common case, inline
  }
  if (known != detail::ParamSizes::Known::unknown) {
    detail::check_library_arguments(
        state, stream.is_special() ? nullptr : stream.context(), "custream::LibraryKernel::launch",
        {detail::Subject::What::stream, stream.handle(), stream.device_id()}, sizes, count);
  }
}

CUfunction LibraryKernel::prepare(const StreamRef& stream, const std::size_t* sizes,
                                  std::size_t count) const {
  const CUfunction f = function_for(stream);
  if (sizes != nullptr) check(stream, sizes, count);  // invariant 6
  detail::note_launch(*library_.owner_.get());        // invariant 5
  return f;
}

void LibraryKernel::launch_checked(const StreamRef& stream, Dim3 grid, Dim3 block,
                                   std::size_t shared_bytes, void** params,
                                   const std::size_t* sizes, std::size_t count) const {
  if (shared_bytes > detail::kMaxSharedBytes) {  // invariant 7: refused before any driver call
    detail::refuse_shared_bytes("custream::LibraryKernel::launch", stream,
                                "library kernel \"" + name() + "\"", shared_bytes);
  }
  const CUfunction f = prepare(stream, sizes, count);
  const CUresult r = detail::api().cuLaunchKernel(f, grid.x, grid.y, grid.z, block.x, block.y,
                                                  block.z, static_cast<unsigned>(shared_bytes),
                                                  stream.handle(), params, nullptr);
  if (r != CUDA_SUCCESS) {
    detail::throw_stream_error(r, "cuLaunchKernel", stream,
                               "library kernel \"" + state_->name + "\", grid " +
                                   detail::dims_text(grid) + ", block " + detail::dims_text(block) +
                                   ", " + std::to_string(shared_bytes) + " bytes of shared memory");
  }
}

void LibraryKernel::launch_checked(const StreamRef& stream, const LaunchConfig& config,
                                   void** params, const std::size_t* sizes,
                                   std::size_t count) const {
  if (config.shared_bytes > detail::kMaxSharedBytes) {  // before prepare() calls the driver
    detail::refuse_shared_bytes("custream::LibraryKernel::launch", stream,
                                "library kernel \"" + name() + "\"", config.shared_bytes);
  }
  const CUfunction f = prepare(stream, sizes, count);
  detail::launch_with_config(f, stream, config, params, state_->name);
}

void LibraryKernel::launch_raw(const StreamRef& stream, Dim3 grid, Dim3 block,
                               std::size_t shared_bytes, void** params) const {
  launch_checked(stream, grid, block, shared_bytes, params, nullptr, 0);
}

void LibraryKernel::launch_raw(const StreamRef& stream, const LaunchConfig& config,
                               void** params) const {
  launch_checked(stream, config, params, nullptr, 0);
}

int LibraryKernel::attribute(CUfunction_attribute attribute, int device) const {
  const Device d(device);
  int value = 0;
  if (CUresult r = detail::try_call<&DriverApi::cuKernelGetAttribute>(&value, attribute,
                                                                      kernel_or_null(), d.handle());
      r != CUDA_SUCCESS) {
    detail::fail<&DriverApi::cuKernelGetAttribute>(
        r, detail::device_subject(device),
        "kernel \"" + name() + "\", attribute " + std::to_string(static_cast<int>(attribute)));
  }
  return value;
}

void LibraryKernel::set_attribute(CUfunction_attribute attribute, int value, int device) const {
  const Device d(device);
  if (CUresult r = detail::try_call<&DriverApi::cuKernelSetAttribute>(attribute, value,
                                                                      kernel_or_null(), d.handle());
      r != CUDA_SUCCESS) {
    detail::fail<&DriverApi::cuKernelSetAttribute>(r, detail::device_subject(device),
                                                   "kernel \"" + name() + "\", attribute " +
                                                       std::to_string(static_cast<int>(attribute)) +
                                                       " = " + std::to_string(value));
  }
}

}  // namespace custream

// custream::Module and custream::Kernel: loading PTX/cubin/fatbin and launching kernels.
//
// Design note — invariants:
//  1. A module is loaded into its device's primary context (made current with ContextScope
//     only for the load) and unloaded by the last release, with that context current (set
//     and restored with raw calls: the release never throws); CUDA_ERROR_DEINITIALIZED at
//     exit is ignored.
//  2. Files are read by custream and loaded from memory (cuModuleLoadDataEx), so one entry
//     point serves PTX, cubin and fatbin, and the JIT log is available for every failure.
//  3. A Kernel holds its Module: the function stays valid as long as any Kernel exists.
//  4. Kernel::launch issues one cuLaunchKernel; only when the driver answers
//     CUDA_ERROR_INVALID_CONTEXT (no or another context current) it retries once with the
//     module's context current.
#include "custream/module.hpp"

#include <atomic>
#include <fstream>
#include <iterator>
#include <string>

#include "context.hpp"
#include "custream/context_scope.hpp"
#include "custream/device.hpp"
#include "custream/error.hpp"
#include "custream/kernel.hpp"
#include "driver.hpp"

namespace custream {
namespace detail {

struct ModuleOwner {
  std::atomic<long> refs{1};
  CUmodule module = nullptr;
  CUcontext context = nullptr;
};

void retain(ModuleOwner* owner) noexcept {
  if (owner != nullptr) owner->refs.fetch_add(1, std::memory_order_relaxed);
}

void release(ModuleOwner* owner) noexcept {
  if (owner == nullptr || owner->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  if (const Loaded* l = g_loaded.load(std::memory_order_acquire)) {  // invariant 1
    CUcontext previous = nullptr;
    const bool known = l->api.cuCtxGetCurrent(&previous) == CUDA_SUCCESS;
    const bool switched = known && previous != owner->context &&
                          l->api.cuCtxSetCurrent(owner->context) == CUDA_SUCCESS;
    report_release_failure(l->api.cuModuleUnload(owner->module), "cuModuleUnload", "module",
                           owner->module);
    if (switched) {
      report_release_failure(l->api.cuCtxSetCurrent(previous), "cuCtxSetCurrent",
                             "context (restoring it)", previous);
    }
  }
  delete owner;
}

}  // namespace detail

namespace {

std::string device_text(int device) { return "device " + std::to_string(device); }

}  // namespace

Module Module::load(const void* image, int device_id, const char* what) {
  const detail::Loaded& l = detail::loaded();
  const int device =
      device_id == -1 ? detail::current_device_ordinal(l) : Device(device_id).ordinal();
  const CUcontext context = detail::primary_context(l, device);
  ContextScope scope(context);

  char error_log[8192] = {};
  char info_log[4096] = {};
  CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                            CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES};
  void* values[] = {
      error_log, reinterpret_cast<void*>(static_cast<std::uintptr_t>(sizeof error_log)), info_log,
      reinterpret_cast<void*>(static_cast<std::uintptr_t>(sizeof info_log))};
  CUmodule module = nullptr;
  const CUresult r = l.api.cuModuleLoadDataEx(&module, image, 4, options, values);
  if (r != CUDA_SUCCESS) {
    error_log[sizeof error_log - 1] = '\0';
    std::string detail = std::string("loading ") + what;
    if (error_log[0] != '\0') detail += "; JIT error log:\n" + std::string(error_log);
    detail::throw_error(r, "cuModuleLoadDataEx", device_text(device), std::move(detail));
  }
  Module m;
  try {
    m.owner_ = new detail::ModuleOwner;
  } catch (...) {
    detail::report_release_failure(l.api.cuModuleUnload(module), "cuModuleUnload", "module",
                                   module);
    throw;
  }
  m.owner_->module = module;
  m.owner_->context = context;
  m.module_ = module;
  m.device_ = device;
  return m;
}

Module Module::from_ptx(std::string_view ptx, int device_id) {
  const std::string text(ptx);  // the driver needs it NUL-terminated
  return load(text.c_str(), device_id, "PTX text");
}

Module Module::from_image(const void* image, int device_id) {
  if (image == nullptr) {
    throw Error(CUDA_ERROR_INVALID_VALUE, "custream::Module::from_image", {}, "the image is null");
  }
  return load(image, device_id, "a module image");
}

Module Module::from_file(const std::string& path, int device_id) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw Error(CUDA_ERROR_FILE_NOT_FOUND, "custream::Module::from_file", path,
                "cannot open the file");
  }
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) {
    throw Error(CUDA_ERROR_FILE_NOT_FOUND, "custream::Module::from_file", path,
                "cannot read the file");
  }
  bytes.push_back('\0');  // PTX files need the terminator; images ignore it (invariant 2)
  return load(bytes.data(), device_id, ("file " + path).c_str());
}

Module::Module(const Module& other) noexcept
    : module_(other.module_), device_(other.device_), owner_(other.owner_) {
  detail::retain(owner_);
}

Module::Module(Module&& other) noexcept
    : module_(other.module_), device_(other.device_), owner_(other.owner_) {
  other.owner_ = nullptr;
  other.module_ = nullptr;
  other.device_ = -1;
}

Module& Module::operator=(const Module& other) noexcept {
  if (this != &other) {
    detail::retain(other.owner_);
    detail::release(owner_);
    module_ = other.module_;
    device_ = other.device_;
    owner_ = other.owner_;
  }
  return *this;
}

Module& Module::operator=(Module&& other) noexcept {
  if (this != &other) {
    detail::release(owner_);
    module_ = other.module_;
    device_ = other.device_;
    owner_ = other.owner_;
    other.owner_ = nullptr;
    other.module_ = nullptr;
    other.device_ = -1;
  }
  return *this;
}

Kernel Module::kernel(const std::string& name) const {
  if (module_ == nullptr) {
    throw Error(CUDA_ERROR_INVALID_HANDLE, "cuModuleGetFunction", "kernel " + name,
                "the Module is empty");
  }
  CUfunction function = nullptr;
  if (CUresult r = detail::api().cuModuleGetFunction(&function, module_, name.c_str());
      r != CUDA_SUCCESS) {
    detail::throw_error(r, "cuModuleGetFunction",
                        "kernel \"" + name + "\" in module " + detail::pointer_text(module_) +
                            " (" + device_text(device_) + ")");
  }
  return Kernel(function, *this);
}

void Kernel::launch_raw(const Stream& stream, Dim3 grid, Dim3 block, std::size_t shared_bytes,
                        void** params) const {
  const CUresult r = detail::api().cuLaunchKernel(
      function_, grid.x, grid.y, grid.z, block.x, block.y, block.z,
      static_cast<unsigned>(shared_bytes), stream.handle(), params, nullptr);
  if (r != CUDA_SUCCESS) launch_failed(r, stream, grid, block, shared_bytes, params);
}

void Kernel::launch_failed(CUresult r, const Stream& stream, Dim3 grid, Dim3 block,
                           std::size_t shared_bytes, void** params) const {
  const detail::Loaded& l = detail::loaded();
  if (r == CUDA_ERROR_INVALID_CONTEXT && module_.owner_ != nullptr) {  // invariant 4
    ContextScope scope(module_.owner_->context);
    r = l.api.cuLaunchKernel(function_, grid.x, grid.y, grid.z, block.x, block.y, block.z,
                             static_cast<unsigned>(shared_bytes), stream.handle(), params, nullptr);
    if (r == CUDA_SUCCESS) return;
  }
  auto dims = [](Dim3 d) {
    return std::to_string(d.x) + "x" + std::to_string(d.y) + "x" + std::to_string(d.z);
  };
  detail::throw_error(
      r, "cuLaunchKernel",
      "kernel " + detail::pointer_text(function_) + " on " + stream.to_string(),
      "grid " + dims(grid) + ", block " + dims(block) + ", " + std::to_string(shared_bytes) +
          " bytes of shared memory" +
          (r == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED || r == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT
               ? "; the driver has now invalidated the stream's capture"
               : ""));
}

}  // namespace custream

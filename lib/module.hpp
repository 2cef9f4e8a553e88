// The owner of a loaded module, shared by Module and Kernel. Internal. Design:
// docs/design/modules.md.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "custream/context.hpp"
#include "custream/detail/cuda.hpp"
#include "launch.hpp"
#include "shared.hpp"
#include "support/held_code.hpp"

namespace custream::detail {

/// A kernel of a module, as its typed launches check it (modules.md, invariant 6).
struct KernelParams {
  std::string name;
  ParamSizes sizes;  // cuFuncGetParamInfo, asked on the first typed launch
};

/// A typed launch's (or kernel node's) argument check where the sizes are not known yet, or do
/// not match (modules.md, invariant 6): asks them once (cuFuncGetParamInfo, with `context`
/// current), then refuses arguments that do not match, naming `call`.
/// @throws Error (CUDA_ERROR_INVALID_VALUE) naming the kernel and argument; Error about
/// `subject` when the driver's query fails.
[[gnu::cold, gnu::noinline]] void check_kernel_arguments(KernelParams& kernel, CUfunction function,
                                                         CUcontext context, const char* call,
                                                         const Subject& subject,
                                                         const std::size_t* sizes,
                                                         std::size_t count);

/// A loaded module; registered from load to its destructor, so that graphs can hold it
/// (invariant 7).
struct ModuleOwner : LaunchedCode {
  ModuleOwner(CUmodule m, CUcontext c, Context k) noexcept
      : module(m), context(c), keep(std::move(k)) {}
  /// Unregisters it, then unloads it with its context current. Never throws.
  ~ModuleOwner();
  CUmodule module = nullptr;
  CUcontext context = nullptr;
  Context keep;  // an owned context outlives its modules (contexts.md, invariant 5)
  /// Its kernels looked up so far, by function (each Kernel points at its entry).
  std::mutex kernels_mutex;
  std::unordered_map<CUfunction, std::unique_ptr<KernelParams>> kernels;
};

/// The bytes of the file at `path` (PTX, cubin or fatbin) with a NUL appended: PTX needs the
/// terminator, images ignore it (invariant 2). @throws Error naming `call` and the file when it
/// cannot be read.
std::string read_image_file(const std::string& path, const char* call);

/// JIT options that collect a load's error and info logs (cuModuleLoadDataEx,
/// cuLibraryLoadData); the driver writes the logs into this object, so it is not copied.
struct JitLogs {
  JitLogs() noexcept;
  JitLogs(const JitLogs&) = delete;
  JitLogs& operator=(const JitLogs&) = delete;
  static constexpr unsigned count = 4;
  /// "loading <what>" and the JIT's error log when it wrote one.
  std::string failure(const std::string& what);

  char error[8192] = {};
  char info[4096] = {};
  CUjit_option options[count] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                                 CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES};
  void* values[count] = {};
};

}  // namespace custream::detail

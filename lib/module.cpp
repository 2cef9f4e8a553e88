// custream::Module: loading PTX/cubin/fatbin. Design: docs/design/modules.md.
#include "custream/module.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <memory>
#include <string>
#include <system_error>

#include "context.hpp"
#include "custream/context_scope.hpp"
#include "custream/device.hpp"
#include "custream/error.hpp"
#include "custream/kernel.hpp"
#include "driver.hpp"
#include "module.hpp"

namespace custream {
namespace detail {

ModuleOwner::~ModuleOwner() {
  unregister_code(this);  // first: no graph can take a reference from here on (invariant 7)
  // Unloaded with its context current, set and restored with release calls: a release never
  // throws, and every failure reaches the release-error handler (invariant 1). A context
  // that cannot be made current still gets the unload attempted.
  CUcontext previous = nullptr;
  const bool known =
      release_call<&DriverApi::cuCtxGetCurrent>("module", module, &previous) == CUDA_SUCCESS;
  const bool switched =
      known && previous != context &&
      release_call<&DriverApi::cuCtxSetCurrent>("module", module, context) == CUDA_SUCCESS;
  release_call<&DriverApi::cuModuleUnload>("module", module, module);
  if (switched) {
    release_call<&DriverApi::cuCtxSetCurrent>("context (restoring it)", previous, previous);
    // A release-error handler run meanwhile may have opened a ContextScope that trusted the
    // module's context (contexts.md, invariant 9); a failed restore leaves another current.
    scoped_context_forget();
  }
}
template struct Refs<ModuleOwner>;

std::string read_image_file(const std::string& path, const char* call) {
  const auto refuse = [&](int error) {
    detail::throw_error(CUDA_ERROR_FILE_NOT_FOUND, call, "file \"" + path + "\"",
                        "cannot read it: " + std::generic_category().message(error) +
                            " (custream did not call the driver)");
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) refuse(errno);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) refuse(errno);
  if (S_ISDIR(st.st_mode)) refuse(EISDIR);
  std::string bytes;
  if (S_ISREG(st.st_mode)) bytes.reserve(static_cast<std::size_t>(st.st_size) + 1);
  char buffer[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      refuse(errno);
    }
    bytes.append(buffer, static_cast<std::size_t>(n));
  }
  bytes.push_back('\0');
  return bytes;
}

JitLogs::JitLogs() noexcept
    : values{error, reinterpret_cast<void*>(static_cast<std::uintptr_t>(sizeof error)), info,
             reinterpret_cast<void*>(static_cast<std::uintptr_t>(sizeof info))} {}

std::string JitLogs::failure(const std::string& what) {
  error[sizeof error - 1] = '\0';
  std::string text = "loading " + what;
  if (error[0] != '\0') text += "; JIT error log:\n" + std::string(error);
  return text;
}

}  // namespace detail

using detail::DriverApi;

Context Module::context_for(int device_id) {
  const detail::Loaded& l = detail::loaded();
  return Device(device_id == -1 ? detail::current_device_ordinal(l) : device_id).primary_context();
}

Module Module::load(const void* image, const Context& where, const char* what) {
  detail::loaded();  // no driver: say so first
  const int device = detail::nonempty(where, "custream::Module").device_id();
  const CUcontext context = where.handle();
  ContextScope scope(context);

  detail::JitLogs logs;
  CUmodule module = nullptr;
  const CUresult r = detail::try_call<&DriverApi::cuModuleLoadDataEx>(&module, image, logs.count,
                                                                      logs.options, logs.values);
  if (r != CUDA_SUCCESS) {
    detail::fail<&DriverApi::cuModuleLoadDataEx>(
        r, detail::device_subject(device),
        logs.failure(std::string(what) + " into the " + to_string(where.kind()) + " context " +
                     detail::pointer_text(context)));
  }
  std::unique_ptr<detail::ModuleOwner> owner;
  try {
    owner =
        std::make_unique<detail::ModuleOwner>(module, context, where.owned() ? where : Context());
  } catch (...) {
    detail::release_call<&DriverApi::cuModuleUnload>("module", module, module);
    throw;
  }
  detail::register_code(owner.get());  // invariant 7; a failure unloads it (the owner)
  Module m;
  m.owner_ = detail::Shared<detail::ModuleOwner>(owner.release());
  m.module_ = module;
  m.device_ = device;
  return m;
}

CUmodule Module::handle() const noexcept {
  if (owner_) detail::note_exposed(*owner_.get());  // its kernels may be launched raw (7)
  return module_;
}

CUcontext Module::context() const noexcept { return owner_ ? owner_.get()->context : nullptr; }

Module Module::from_ptx(std::string_view ptx, int device_id) {
  return from_ptx(ptx, context_for(device_id));
}

Module Module::from_ptx(std::string_view ptx, const Context& context) {
  const std::string text(ptx);  // the driver needs it NUL-terminated
  return load(text.c_str(), context, "PTX text");
}

Module Module::from_image(const void* image, int device_id) {
  return from_image(image, context_for(device_id));
}

Module Module::from_image(const void* image, const Context& context) {
  if (image == nullptr) {
    detail::throw_error(CUDA_ERROR_INVALID_VALUE, "custream::Module::from_image", {},
                        "the image is null");
  }
  return load(image, context, "a module image");
}

Module Module::from_file(const std::string& path, int device_id) {
  const std::string bytes =  // before the device: a missing file says so
      detail::read_image_file(path, "custream::Module::from_file");
  return load(bytes.data(), context_for(device_id), ("file " + path).c_str());
}

Module Module::from_file(const std::string& path, const Context& context) {
  const std::string bytes = detail::read_image_file(path, "custream::Module::from_file");
  return load(bytes.data(), context, ("file " + path).c_str());
}

Kernel Module::kernel(const std::string& name) const {
  if (module_ == nullptr) {
    detail::throw_error(CUDA_ERROR_INVALID_HANDLE,
                        detail::EntryInfo<&DriverApi::cuModuleGetFunction>::name, "kernel " + name,
                        "the Module is empty");
  }
  CUfunction function = nullptr;
  if (CUresult r = detail::try_call<&DriverApi::cuModuleGetFunction>(
          &function, static_cast<CUmodule>(module_), name.c_str());
      r != CUDA_SUCCESS) {
    detail::throw_error(
        r, detail::EntryInfo<&DriverApi::cuModuleGetFunction>::name,
        "kernel \"" + name + "\" in " +
            detail::subject_text({detail::Subject::What::module, module_, device_}));
  }
  std::lock_guard<std::mutex> lock(owner_.get()->kernels_mutex);
  std::unique_ptr<detail::KernelParams>& params = owner_.get()->kernels[function];
  if (params == nullptr) {
    params = std::make_unique<detail::KernelParams>();
    params->name = name;
  }
  return Kernel(function, *this, params.get());
}

}  // namespace custream

// NVRTC and nvJitLink loaded at run time: dlopen with an environment override, a clear error
// naming what was tried. Design: docs/design/jit.md (invariants 1 and 2).
#include "nvrtc.hpp"

#include <dlfcn.h>
#include <link.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <optional>
#include <vector>

#include "custream/detail/driver.hpp"
#include "custream/error.hpp"

namespace custream::detail {
namespace {

std::vector<std::string> toolkit_lib_dirs() {
  std::vector<std::string> dirs;
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"}) {
    const char* v = secure_getenv(var);
    if (v != nullptr && v[0] != '\0') dirs.push_back(std::string(v) + "/lib64");
  }
  dirs.push_back("/usr/local/cuda/lib64");
  return dirs;
}

struct Opened {
  void* handle = nullptr;
  std::string path;
  std::string tried;  // every name tried, with dlopen's reason for each
  bool from_env = false;
};

// $`env` when set, else each soname through the loader's search path, then in the toolkit.
Opened open_first(const char* env, const std::vector<std::string>& sonames) {
  Opened out;
  std::vector<std::string> candidates;
  const char* override_path = secure_getenv(env);  // ignored in setuid programs
  if (override_path != nullptr && override_path[0] != '\0') {
    candidates.push_back(override_path);
    out.from_env = true;
  } else {
    candidates = sonames;
    for (const std::string& dir : toolkit_lib_dirs()) {
      for (const std::string& name : sonames) candidates.push_back(dir + "/" + name);
    }
  }
  for (const std::string& path : candidates) {
    dlerror();
    out.handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);  // never dlclose'd
    if (out.handle != nullptr) {
      link_map* map = nullptr;
      out.path = dlinfo(out.handle, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr &&
                         map->l_name != nullptr && map->l_name[0] != '\0'
                     ? map->l_name
                     : path;
      return out;
    }
    const char* why = dlerror();
    out.tried += (out.tried.empty() ? "" : "; ") + (why != nullptr ? std::string(why) : path);
  }
  return out;
}

Error not_found(const std::string& what, const char* env, const Opened& o,
                const std::string& package) {
  const std::string fix =
      o.from_env ? std::string("; ") + env +
                       " names a library that does not load: unset it or "
                       "point it at " +
                       what + " (e.g. " + toolkit_lib_dirs().back() + "/" + package + ")"
                 : "; install the CUDA toolkit's " + what + " (" + package + ") or set " + env +
                       "=/path/to/" + package + " (or CUDA_HOME to the toolkit)";
  return Error(CUDA_ERROR_NOT_FOUND, {}, {}, what + " not found (tried " + o.tried + ")" + fix);
}

template <typename F>
bool resolve(void* handle, F& field, const char* symbol) {
  field = reinterpret_cast<F>(dlsym(handle, symbol));
  return field != nullptr;
}

const NvrtcApi& load_nvrtc() {
  const Opened o =
      open_first("CUSTREAM_NVRTC", {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"});
  if (o.handle == nullptr) throw not_found("NVRTC", "CUSTREAM_NVRTC", o, "libnvrtc.so");
  auto api = std::make_unique<NvrtcApi>();
  api->library = o.path;
  const bool complete = resolve(o.handle, api->error_string, "nvrtcGetErrorString") &&
                        resolve(o.handle, api->version, "nvrtcVersion") &&
                        resolve(o.handle, api->create, "nvrtcCreateProgram") &&
                        resolve(o.handle, api->destroy, "nvrtcDestroyProgram") &&
                        resolve(o.handle, api->compile, "nvrtcCompileProgram") &&
                        resolve(o.handle, api->log_size, "nvrtcGetProgramLogSize") &&
                        resolve(o.handle, api->log, "nvrtcGetProgramLog") &&
                        resolve(o.handle, api->ptx_size, "nvrtcGetPTXSize") &&
                        resolve(o.handle, api->ptx, "nvrtcGetPTX") &&
                        resolve(o.handle, api->cubin_size, "nvrtcGetCUBINSize") &&
                        resolve(o.handle, api->cubin, "nvrtcGetCUBIN") &&
                        resolve(o.handle, api->add_name, "nvrtcAddNameExpression") &&
                        resolve(o.handle, api->lowered_name, "nvrtcGetLoweredName") &&
                        resolve(o.handle, api->num_archs, "nvrtcGetNumSupportedArchs") &&
                        resolve(o.handle, api->archs, "nvrtcGetSupportedArchs");
  if (!complete) {
    throw Error(CUDA_ERROR_NOT_FOUND, {}, {},
                "NVRTC " + o.path + " lacks an entry point custream needs (NVRTC >= 11.2)");
  }
  resolve(o.handle, api->ltoir_size, "nvrtcGetLTOIRSize");
  resolve(o.handle, api->ltoir, "nvrtcGetLTOIR");
  api->version(&api->major, &api->minor);
  return *api.release();  // for the rest of the process, like the driver
}

const NvJitLinkApi& load_nvjitlink() {
  const Opened o = open_first("CUSTREAM_NVJITLINK",
                              {"libnvJitLink.so.13", "libnvJitLink.so.12", "libnvJitLink.so"});
  if (o.handle == nullptr) {
    throw not_found("nvJitLink", "CUSTREAM_NVJITLINK", o, "libnvJitLink.so");
  }
  auto api = std::make_unique<NvJitLinkApi>();
  api->library = o.path;
  const bool complete = resolve(o.handle, api->create, "nvJitLinkCreate") &&
                        resolve(o.handle, api->destroy, "nvJitLinkDestroy") &&
                        resolve(o.handle, api->add_data, "nvJitLinkAddData") &&
                        resolve(o.handle, api->add_file, "nvJitLinkAddFile") &&
                        resolve(o.handle, api->complete, "nvJitLinkComplete") &&
                        resolve(o.handle, api->cubin_size, "nvJitLinkGetLinkedCubinSize") &&
                        resolve(o.handle, api->cubin, "nvJitLinkGetLinkedCubin") &&
                        resolve(o.handle, api->error_log_size, "nvJitLinkGetErrorLogSize") &&
                        resolve(o.handle, api->error_log, "nvJitLinkGetErrorLog");
  if (!complete) {
    throw Error(CUDA_ERROR_NOT_FOUND, {}, {},
                "nvJitLink " + o.path + " lacks an entry point custream needs (nvJitLink >= 12.0)");
  }
  if (resolve(o.handle, api->version, "nvJitLinkVersion")) api->version(&api->major, &api->minor);
  return *api.release();
}

// Loads once; a failure is recorded and thrown again (like the driver's loader).
template <typename Api>
const Api& once(const Api& (*load)()) {
  static std::mutex mutex;
  static const Api* loaded = nullptr;
  static std::optional<Error> failure;
  std::lock_guard<std::mutex> lock(mutex);
  if (loaded != nullptr) return *loaded;
  if (failure) throw *failure;
  try {
    loaded = &load();
    return *loaded;
  } catch (const Error& e) {
    failure = e;
    throw;
  }
}

}  // namespace

std::string NvrtcApi::version_text() const {
  return std::to_string(major) + "." + std::to_string(minor);
}

std::string NvJitLinkApi::version_text() const {
  return major == 0 ? std::string("unknown") : std::to_string(major) + "." + std::to_string(minor);
}

const NvrtcApi& nvrtc() { return once<NvrtcApi>(&load_nvrtc); }
const NvJitLinkApi& nvjitlink() { return once<NvJitLinkApi>(&load_nvjitlink); }

std::string toolkit_lib_dirs_text() {
  std::string out;
  for (const std::string& d : toolkit_lib_dirs()) out += (out.empty() ? "" : ", ") + d;
  return out;
}


std::string find_in_toolkit(const std::string& file) {
  for (const std::string& dir : toolkit_lib_dirs()) {
    const std::string path = dir + "/" + file;
    if (::access(path.c_str(), R_OK) == 0) return path;
  }
  return {};
}

}  // namespace custream::detail

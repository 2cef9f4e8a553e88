// One nvJitLink link: LTO-IR or relocatable device code (and the device runtime) to a cubin.
// Design: docs/design/jit.md (invariant 5).
#include "compile.hpp"
#include "custream/compile_error.hpp"
#include "custream/error.hpp"
#include "nvrtc.hpp"

namespace custream::detail {
namespace {

constexpr int kInputCubin = 1;    // NVJITLINK_INPUT_CUBIN
constexpr int kInputLtoir = 3;    // NVJITLINK_INPUT_LTOIR
constexpr int kInputLibrary = 6;  // NVJITLINK_INPUT_LIBRARY

struct LinkHandle {
  const NvJitLinkApi& api;
  nvJitLinkHandle handle = nullptr;
  ~LinkHandle() {
    if (handle != nullptr) api.destroy(&handle);
  }
};

std::string error_log(const NvJitLinkApi& api, nvJitLinkHandle h) {
  std::size_t size = 0;
  if (api.error_log_size(h, &size) != 0 || size <= 1) return {};
  std::string log(size, '\0');
  if (api.error_log(h, log.data()) != 0) return {};
  log.resize(size - 1);
  return log;
}

}  // namespace

std::string device_runtime_library() {
  const std::string path = find_in_toolkit("libcudadevrt.a");
  if (path.empty()) {
    throw Error(CUDA_ERROR_NOT_FOUND, {}, {},
                "libcudadevrt.a (the CUDA device runtime, needed by ProgramOptions::"
                "device_runtime) not found in " +
                    toolkit_lib_dirs_text() +
                    "; it ships with the CUDA toolkit, not with the driver: install the "
                    "toolkit or set CUDA_HOME to it");
  }
  return path;
}

std::string run_nvjitlink(const std::string& program, const std::string& input, bool ltoir,
                          const std::string& arch, bool device_runtime) {
  const std::string devrt = device_runtime ? device_runtime_library() : std::string();
  const NvJitLinkApi& api = nvjitlink();
  std::vector<std::string> options{"-arch=" + arch};
  if (ltoir) options.push_back("-lto");
  std::vector<const char*> option_ptrs;
  for (const std::string& o : options) option_ptrs.push_back(o.c_str());
  const std::string version = "nvJitLink " + api.version_text();
  LinkHandle link{api};
  if (nvJitLinkResult r =
          api.create(&link.handle, static_cast<unsigned>(option_ptrs.size()), option_ptrs.data())) {
    throw Error(CUDA_ERROR_UNKNOWN, "nvJitLinkCreate", program,
                version + " (" + api.library + ") answered " + std::to_string(r));
  }
  auto failed = [&](const char* call, nvJitLinkResult r) {
    return CompileError(call, program,
                        "nvJitLink error " + std::to_string(r) + "\n" + error_log(api, link.handle),
                        joined(options), arch, version);
  };
  if (nvJitLinkResult r = api.add_data(link.handle, ltoir ? kInputLtoir : kInputCubin, input.data(),
                                       input.size(), program.c_str())) {
    throw failed("nvJitLinkAddData", r);
  }
  if (device_runtime) {
    if (nvJitLinkResult r = api.add_file(link.handle, kInputLibrary, devrt.c_str())) {
      throw failed("nvJitLinkAddFile", r);
    }
  }
  if (nvJitLinkResult r = api.complete(link.handle)) throw failed("nvJitLinkComplete", r);
  std::size_t size = 0;
  if (nvJitLinkResult r = api.cubin_size(link.handle, &size)) {
    throw failed("nvJitLinkGetLinkedCubinSize", r);
  }
  std::string cubin(size, '\0');
  if (nvJitLinkResult r = api.cubin(link.handle, cubin.data())) {
    throw failed("nvJitLinkGetLinkedCubin", r);
  }
  return cubin;
}

}  // namespace custream::detail

// cuGetProcAddress, cuInit, version and error strings, and the kernel-less module stubs.
#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>

#include "../../lib/result_names.hpp"
#include "emu.hpp"

#define EMU_EXPORT extern "C" __attribute__((visibility("default")))

namespace emu {
namespace {

CUresult init(unsigned int flags) {
  if (CUresult r = check_fault("cuInit")) return r;
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  if (!s.initialized.load()) s.initialized.store(true, std::memory_order_release);
  return CUDA_SUCCESS;
}

CUresult driver_get_version(int* v) {
  if (CUresult r = check_fault("cuDriverGetVersion")) return r;
  if (!v) return CUDA_ERROR_INVALID_VALUE;
  *v = kDriverVersion;
  return CUDA_SUCCESS;
}

CUresult get_error_name(CUresult e, const char** out) {
  if (CUresult r = check_fault("cuGetErrorName")) return r;
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  const char* n = custream::detail::result_name(e);
  *out = n;
  return n ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult get_error_string(CUresult e, const char** out) {
  if (CUresult r = check_fault("cuGetErrorString")) return r;
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  const char* n = custream::detail::result_description(e);
  *out = n;
  return n ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

// Kernels cannot run on the CPU: modules cannot be loaded, and there is no function to launch.
CUresult module_load_data(CUmodule* m, const void*) {
  EMU_ENTER("cuModuleLoadData");
  if (m) *m = nullptr;
  return CUDA_ERROR_NOT_SUPPORTED;
}
CUresult module_load_data_ex(CUmodule* m, const void*, unsigned int, CUjit_option*, void**) {
  EMU_ENTER("cuModuleLoadDataEx");
  if (m) *m = nullptr;
  return CUDA_ERROR_NOT_SUPPORTED;
}
CUresult module_unload(CUmodule) {
  EMU_ENTER("cuModuleUnload");
  return CUDA_ERROR_INVALID_HANDLE;
}
CUresult module_get_function(CUfunction* f, CUmodule, const char*) {
  EMU_ENTER("cuModuleGetFunction");
  if (f) *f = nullptr;
  return CUDA_ERROR_INVALID_HANDLE;
}
CUresult launch_kernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                       unsigned, CUstream, void**, void**) {
  EMU_ENTER("cuLaunchKernel");
  return CUDA_ERROR_INVALID_HANDLE;
}

CUresult get_proc_address_v2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                             CUdriverProcAddressQueryResult* status);
CUresult get_proc_address_v1(const char* symbol, void** pfn, int version, cuuint64_t flags) {
  return get_proc_address_v2(symbol, pfn, version, flags, nullptr);
}

using Table = std::unordered_map<std::string, std::vector<Entry>>;

const Table& table() {
  static const Table* t = [] {
    std::vector<Entry> all = {
        EMU_ENTRY(cuInit, 2000, init),
        EMU_ENTRY(cuDriverGetVersion, 2020, driver_get_version),
        EMU_ENTRY(cuGetErrorName, 6000, get_error_name),
        EMU_ENTRY(cuGetErrorString, 6000, get_error_string),
        EMU_ENTRY(cuGetProcAddress, 11030, get_proc_address_v1),
        EMU_ENTRY(cuGetProcAddress, 12000, get_proc_address_v2),
        EMU_ENTRY(cuModuleLoadData, 2000, module_load_data),
        EMU_ENTRY(cuModuleLoadDataEx, 2010, module_load_data_ex),
        EMU_ENTRY(cuModuleUnload, 2000, module_unload),
        EMU_ENTRY(cuModuleGetFunction, 2000, module_get_function),
        EMU_ENTRY(cuLaunchKernel, 4000, launch_kernel),
    };
    register_context_entries(all);
    register_stream_entries(all);
    register_event_entries(all);
    register_memory_entries(all);
    register_capture_entries(all);
    register_graph_entries(all);
    register_user_object_entries(all);
    auto* out = new Table;  // leaked: process lifetime (invariant 5)
    for (const Entry& e : all) (*out)[e.name].push_back(e);
    return out;
  }();
  return *t;
}

CUresult get_proc_address_v2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                             CUdriverProcAddressQueryResult* status) {
  if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
  const cuuint64_t known =
      CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  if (flags & ~known) return CUDA_ERROR_INVALID_VALUE;
  // cuda.h: a version above the driver's is invalid; an unknown symbol or a too-low version
  // answers CUDA_SUCCESS with *pfn NULL and the reason in *status (seen on the H200).
  if (version > kDriverVersion) return CUDA_ERROR_INVALID_VALUE;
  *pfn = nullptr;
  const Table& t = table();
  auto it = t.find(symbol);
  if (it == t.end()) {
    if (status) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_SUCCESS;
  }
  const Entry* best = nullptr;
  for (const Entry& e : it->second)
    if (e.version <= version && (!best || e.version > best->version)) best = &e;
  if (!best) {
    if (status) *status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
    return CUDA_SUCCESS;
  }
  *pfn = best->fn;
  if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
  return CUDA_SUCCESS;
}

}  // namespace
}  // namespace emu

EMU_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion,
                                        cuuint64_t flags,
                                        CUdriverProcAddressQueryResult* symbolStatus) {
  return emu::get_proc_address_v2(symbol, pfn, cudaVersion, flags, symbolStatus);
}

EMU_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion,
                                     cuuint64_t flags) {
  return emu::get_proc_address_v1(symbol, pfn, cudaVersion, flags);
}

EMU_EXPORT CUresult cuInit(unsigned int flags) { return emu::init(flags); }

EMU_EXPORT CUresult cuDriverGetVersion(int* driverVersion) {
  return emu::driver_get_version(driverVersion);
}

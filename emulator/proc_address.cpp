// cuGetProcAddress (the table of every entry point), cuInit, version and error strings.
#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>

#include "../lib/result_names.hpp"
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

CUresult get_proc_address_v2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                             CUdriverProcAddressQueryResult* status);
CUresult get_proc_address_v1(const char* symbol, void** pfn, int version, cuuint64_t flags) {
  return get_proc_address_v2(symbol, pfn, version, flags, nullptr);
}

// NVRTC (and the CUDA runtime) open libcuda.so.1 themselves and ask it for NVIDIA's private
// export tables; in a process that loaded the emulator, that name is the emulator. It has no
// such tables: it says so, and NVRTC compiles without them.
CUresult get_export_table(const void** table, const CUuuid* id) {
  if (table) *table = nullptr;
  (void)id;
  return CUDA_ERROR_NOT_SUPPORTED;
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
        EMU_ENTRY(cuGetExportTable, 3000, get_export_table),
    };
    register_context_entries(all);
    register_stream_entries(all);
    register_event_entries(all);
    register_memory_entries(all);
    register_memop_entries(all);
    register_capture_entries(all);
    register_graph_entries(all);
    register_graph_node_entries(all);
    register_graph_exec_entries(all);
    register_user_object_entries(all);
    register_module_entries(all);
    register_library_entries(all);
    register_green_entries(all);
    register_mempool_entries(all);
    auto* out = new Table;  // leaked: process lifetime (invariant 5)
    for (const Entry& e : all) (*out)[e.name].push_back(e);
    return out;
  }();
  return *t;
}

const Entry* find_entry(const Table& t, const char* symbol, int version, bool* known) {
  auto it = t.find(symbol);
  *known = it != t.end();
  if (!*known) return nullptr;
  const Entry* best = nullptr;
  for (const Entry& e : it->second)
    if (e.version <= version && (!best || e.version > best->version)) best = &e;
  return best;
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
  bool symbol_known = false;
  const Entry* best = find_entry(table(), symbol, version, &symbol_known);
  if (!symbol_known) {
    if (status) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_SUCCESS;
  }
  if (!best) {
    if (status) *status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
    return CUDA_SUCCESS;
  }
  *pfn = best->fn;
  if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
  return CUDA_SUCCESS;
}

}  // namespace

bool known_entry(const char* name) { return table().count(name) != 0; }

void* entry_point(const char* name, int version) {
  bool known = false;
  const Entry* e = find_entry(table(), name, version, &known);
  return e ? e->fn : nullptr;
}

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

// An NVTX injection library for test/nvtx_test.cpp: what a tool such as Nsight Systems is to
// NVTX. NVTX's loader (nvtx3/nvtxDetail/nvtxInit.h) dlopens the library named by
// NVTX_INJECTION64_PATH at the process's first NVTX call and calls InitializeInjectionNvtx2,
// which installs the callbacks below in NVTX's function tables (NVTX_CB_MODULE_CORE: marks and
// ranges; NVTX_CB_MODULE_CUDA: nvtxNameCu*). Each call is recorded as one line of a log that
// the test reads through custream_nvtx_test_log (extern "C", found with dlsym).
#include <cuda.h>
#include <nvtx3/nvToolsExt.h>
#include <nvtx3/nvToolsExtCuda.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>

namespace {

std::mutex g_mutex;
std::string g_log;              // one line per NVTX call received
std::uint64_t g_range_ids = 0;  // the last range id handed out (reset by clear)

void record(const std::string& line) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_log += line;
  g_log += '\n';
}
std::string pointer(const void* p) {
  char text[32];
  std::snprintf(text, sizeof text, "%p", p);
  return text;
}
std::string text_of(const char* s) { return s != nullptr ? s : "(null)"; }
std::string text_of(const nvtxEventAttributes_t* a) {
  if (a != nullptr && a->messageType == NVTX_MESSAGE_TYPE_ASCII) return text_of(a->message.ascii);
  return "(not ascii)";
}

// --- NVTX_CB_MODULE_CUDA ---
void NVTX_API name_stream(CUstream s, const char* name) {
  record("stream " + pointer(s) + " " + text_of(name));
}
void NVTX_API name_event(CUevent e, const char* name) {
  record("event " + pointer(e) + " " + text_of(name));
}
void NVTX_API name_context(CUcontext c, const char* name) {
  record("context " + pointer(c) + " " + text_of(name));
}
void NVTX_API name_device(CUdevice d, const char* name) {
  record("device " + std::to_string(d) + " " + text_of(name));
}
void NVTX_API name_wide(const void* handle, const wchar_t*) { record("wide " + pointer(handle)); }

// --- NVTX_CB_MODULE_CORE ---
nvtxRangeId_t next_range(const std::string& name) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const nvtxRangeId_t id = ++g_range_ids;
  g_log += "range_start " + std::to_string(id) + " " + name + "\n";
  return id;
}
nvtxRangeId_t NVTX_API range_start_a(const char* name) { return next_range(text_of(name)); }
nvtxRangeId_t NVTX_API range_start_ex(const nvtxEventAttributes_t* a) {
  return next_range(text_of(a));
}
void NVTX_API range_end(nvtxRangeId_t id) { record("range_end " + std::to_string(id)); }
int NVTX_API push_a(const char* name) {
  record("push " + text_of(name));
  return 0;
}
int NVTX_API push_ex(const nvtxEventAttributes_t* a) {
  record("push " + text_of(a));
  return 0;
}
int NVTX_API pop() {
  record("pop");
  return 0;
}
void NVTX_API mark_a(const char* name) { record("mark " + text_of(name)); }
void NVTX_API mark_ex(const nvtxEventAttributes_t* a) { record("mark " + text_of(a)); }

// Installs `fn` as callback `id` of `table` (of `size` entries).
template <typename Fn>
void install(NvtxFunctionTable table, unsigned size, unsigned id, Fn fn) {
  if (table != nullptr && id < size && table[id] != nullptr) {
    *table[id] = reinterpret_cast<NvtxFunctionPointer>(fn);
  }
}

}  // namespace

extern "C" {

/// Called by NVTX's loader; returns nonzero on success.
__attribute__((visibility("default"))) int InitializeInjectionNvtx2(
    NvtxGetExportTableFunc_t get_export_table) {
  const auto* callbacks =
      static_cast<const NvtxExportTableCallbacks*>(get_export_table(NVTX_ETID_CALLBACKS));
  if (callbacks == nullptr || callbacks->struct_size < sizeof(NvtxExportTableCallbacks)) return 0;
  NvtxFunctionTable core = nullptr;
  unsigned core_size = 0;
  NvtxFunctionTable cuda = nullptr;
  unsigned cuda_size = 0;
  if (!callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &core, &core_size) ||
      !callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CUDA, &cuda, &cuda_size)) {
    return 0;
  }
  install(core, core_size, NVTX_CBID_CORE_MarkEx, mark_ex);
  install(core, core_size, NVTX_CBID_CORE_MarkA, mark_a);
  install(core, core_size, NVTX_CBID_CORE_RangeStartEx, range_start_ex);
  install(core, core_size, NVTX_CBID_CORE_RangeStartA, range_start_a);
  install(core, core_size, NVTX_CBID_CORE_RangeEnd, range_end);
  install(core, core_size, NVTX_CBID_CORE_RangePushEx, push_ex);
  install(core, core_size, NVTX_CBID_CORE_RangePushA, push_a);
  install(core, core_size, NVTX_CBID_CORE_RangePop, pop);
  install(cuda, cuda_size, NVTX_CBID_CUDA_NameCuDeviceA, name_device);
  install(cuda, cuda_size, NVTX_CBID_CUDA_NameCuContextA, name_context);
  install(cuda, cuda_size, NVTX_CBID_CUDA_NameCuStreamA, name_stream);
  install(cuda, cuda_size, NVTX_CBID_CUDA_NameCuEventA, name_event);
  install(cuda, cuda_size, NVTX_CBID_CUDA_NameCuContextW, name_wide);
  install(cuda, cuda_size, NVTX_CBID_CUDA_NameCuStreamW, name_wide);
  install(cuda, cuda_size, NVTX_CBID_CUDA_NameCuEventW, name_wide);
  record("initialized");
  return 1;
}

/// Copies the log (one line per NVTX call received) into `out` (at most `size` bytes, NUL
/// included) and returns its full length.
__attribute__((visibility("default"))) std::size_t custream_nvtx_test_log(char* out,
                                                                          std::size_t size) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (size > 0) {
    const std::size_t n = g_log.size() < size - 1 ? g_log.size() : size - 1;
    std::memcpy(out, g_log.data(), n);
    out[n] = '\0';
  }
  return g_log.size();
}

/// Empties the log and restarts range ids at 1.
__attribute__((visibility("default"))) void custream_nvtx_test_clear() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_log.clear();
  g_range_ids = 0;
}

}  // extern "C"

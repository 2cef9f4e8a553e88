// Driver conformance suite: the rules the CPU emulator (test/emu) implements, exercised
// directly through the driver API — dlopen($CUSTREAM_LIBCUDA or "libcuda.so.1") and
// cuGetProcAddress_v2, never through custream. The same binary runs on the emulator and, with
// CUSTREAM_LIBCUDA unset, on a real GPU.
//
// [conformance]: must pass on both. A rule whose real-driver behaviour is not documented or
//                measured on an H200 sits in its own TEST_CASE tagged [unsure] so that a
//                mismatch on the GPU is isolated.
// [emu-only]:    fault injection and leak accounting; skip unless the emulator is loaded.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "catch_compat.hpp"
#include "custream/detail/driver_table.hpp"
#include "emu/emu_control.h"

namespace {

using namespace std::chrono_literals;

// ---- loading ----

// X(field, symbol, version)
#define CONFORMANCE_ENTRIES(X)                                                   \
  X(cuInit, cuInit, 2000)                                                        \
  X(cuDriverGetVersion, cuDriverGetVersion, 2020)                                \
  X(cuGetErrorName, cuGetErrorName, 6000)                                        \
  X(cuGetErrorString, cuGetErrorString, 6000)                                    \
  X(cuDeviceGetCount, cuDeviceGetCount, 2000)                                    \
  X(cuDeviceGet, cuDeviceGet, 2000)                                              \
  X(cuDeviceGetName, cuDeviceGetName, 2000)                                      \
  X(cuDeviceGetAttribute, cuDeviceGetAttribute, 2000)                            \
  X(cuDeviceTotalMem, cuDeviceTotalMem, 3020)                                    \
  X(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain, 7000)                    \
  X(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease, 11000)                 \
  X(cuDevicePrimaryCtxGetState, cuDevicePrimaryCtxGetState, 7000)                \
  X(cuCtxCreate, cuCtxCreate, 3020)                                              \
  X(cuCtxDestroy, cuCtxDestroy, 4000)                                            \
  X(cuCtxGetCurrent, cuCtxGetCurrent, 4000)                                      \
  X(cuCtxSetCurrent, cuCtxSetCurrent, 4000)                                      \
  X(cuCtxPushCurrent, cuCtxPushCurrent, 4000)                                    \
  X(cuCtxPopCurrent, cuCtxPopCurrent, 4000)                                      \
  X(cuCtxGetDevice, cuCtxGetDevice, 2000)                                        \
  X(cuCtxGetDevice_v2, cuCtxGetDevice, 13000)                                    \
  X(cuCtxSynchronize, cuCtxSynchronize, 2000)                                    \
  X(cuCtxGetStreamPriorityRange, cuCtxGetStreamPriorityRange, 5050)              \
  X(cuStreamCreate, cuStreamCreate, 2000)                                        \
  X(cuStreamCreateWithPriority, cuStreamCreateWithPriority, 5050)                \
  X(cuStreamDestroy, cuStreamDestroy, 4000)                                      \
  X(cuStreamGetCtx, cuStreamGetCtx, 9020)                                        \
  X(cuStreamGetCtx_v2, cuStreamGetCtx, 12050)                                    \
  X(cuStreamGetDevice, cuStreamGetDevice, 12080)                                 \
  X(cuStreamGetPriority, cuStreamGetPriority, 5050)                              \
  X(cuStreamGetFlags, cuStreamGetFlags, 5050)                                    \
  X(cuStreamGetId, cuStreamGetId, 12000)                                         \
  X(cuStreamQuery, cuStreamQuery, 2000)                                          \
  X(cuStreamSynchronize, cuStreamSynchronize, 2000)                              \
  X(cuStreamWaitEvent, cuStreamWaitEvent, 3020)                                  \
  X(cuStreamAddCallback, cuStreamAddCallback, 5000)                              \
  X(cuLaunchHostFunc, cuLaunchHostFunc, 10000)                                   \
  X(cuStreamBeginCapture, cuStreamBeginCapture, 10010)                           \
  X(cuStreamEndCapture, cuStreamEndCapture, 10000)                               \
  X(cuStreamIsCapturing, cuStreamIsCapturing, 10000)                             \
  X(cuStreamGetCaptureInfo_v1, cuStreamGetCaptureInfo, 10010)                    \
  X(cuStreamGetCaptureInfo_v2, cuStreamGetCaptureInfo, 11030)                    \
  X(cuStreamGetCaptureInfo_v3, cuStreamGetCaptureInfo, 12030)                    \
  X(cuThreadExchangeStreamCaptureMode, cuThreadExchangeStreamCaptureMode, 10010) \
  X(cuEventCreate, cuEventCreate, 2000)                                          \
  X(cuEventDestroy, cuEventDestroy, 4000)                                        \
  X(cuEventRecord, cuEventRecord, 2000)                                          \
  X(cuEventQuery, cuEventQuery, 2000)                                            \
  X(cuEventSynchronize, cuEventSynchronize, 2000)                                \
  X(cuEventElapsedTime, cuEventElapsedTime, 2000)                                \
  X(cuIpcGetEventHandle, cuIpcGetEventHandle, 4010)                              \
  X(cuMemAlloc, cuMemAlloc, 3020)                                                \
  X(cuMemFree, cuMemFree, 3020)                                                  \
  X(cuMemAllocAsync, cuMemAllocAsync, 11020)                                     \
  X(cuMemFreeAsync, cuMemFreeAsync, 11020)                                       \
  X(cuMemsetD8Async, cuMemsetD8Async, 3020)                                      \
  X(cuMemsetD32Async, cuMemsetD32Async, 3020)                                    \
  X(cuMemcpyAsync, cuMemcpyAsync, 4000)                                          \
  X(cuMemcpyHtoDAsync, cuMemcpyHtoDAsync, 3020)                                  \
  X(cuMemcpyDtoHAsync, cuMemcpyDtoHAsync, 3020)                                  \
  X(cuMemcpyDtoDAsync, cuMemcpyDtoDAsync, 3020)                                  \
  X(cuGraphCreate, cuGraphCreate, 10000)                                         \
  X(cuGraphDestroy, cuGraphDestroy, 10000)                                       \
  X(cuGraphGetNodes, cuGraphGetNodes, 10000)                                     \
  X(cuGraphAddHostNode, cuGraphAddHostNode, 10000)                               \
  X(cuGraphAddEmptyNode, cuGraphAddEmptyNode, 10000)                             \
  X(cuGraphNodeGetType, cuGraphNodeGetType, 10000)                               \
  X(cuGraphDebugDotPrint, cuGraphDebugDotPrint, 11030)                           \
  X(cuGraphInstantiateWithFlags, cuGraphInstantiateWithFlags, 11040)             \
  X(cuGraphInstantiateWithParams, cuGraphInstantiateWithParams, 12000)           \
  X(cuGraphExecDestroy, cuGraphExecDestroy, 10000)                               \
  X(cuGraphUpload, cuGraphUpload, 11010)                                         \
  X(cuGraphLaunch, cuGraphLaunch, 10000)                                         \
  X(cuGraphExecUpdate, cuGraphExecUpdate, 12000)                                 \
  X(cuUserObjectCreate, cuUserObjectCreate, 11030)                               \
  X(cuUserObjectRelease, cuUserObjectRelease, 11030)                             \
  X(cuGraphRetainUserObject, cuGraphRetainUserObject, 11030)                     \
  X(cuModuleLoadData, cuModuleLoadData, 2000)                                    \
  X(cuModuleUnload, cuModuleUnload, 2000)                                        \
  X(cuModuleGetFunction, cuModuleGetFunction, 2000)                              \
  X(cuLaunchKernel, cuLaunchKernel, 4000)

// Entry points a driver may lack (green contexts: CUDA 12.4 and later): loaded when served,
// NULL otherwise; a case that needs them skips without them (REQUIRE_GREEN_CONTEXTS).
#define CONFORMANCE_OPTIONAL_ENTRIES(X)                              \
  X(cuCtxGetId, cuCtxGetId, 12000)                                   \
  X(cuDeviceGetDevResource, cuDeviceGetDevResource, 12040)           \
  X(cuCtxGetDevResource, cuCtxGetDevResource, 12040)                 \
  X(cuGreenCtxGetDevResource, cuGreenCtxGetDevResource, 12040)       \
  X(cuDevSmResourceSplitByCount, cuDevSmResourceSplitByCount, 12040) \
  X(cuDevResourceGenerateDesc, cuDevResourceGenerateDesc, 12040)     \
  X(cuGreenCtxCreate, cuGreenCtxCreate, 12040)                       \
  X(cuGreenCtxDestroy, cuGreenCtxDestroy, 12040)                     \
  X(cuCtxFromGreenCtx, cuCtxFromGreenCtx, 12040)                     \
  X(cuStreamGetGreenCtx, cuStreamGetGreenCtx, 12040)                 \
  X(cuGreenCtxRecordEvent, cuGreenCtxRecordEvent, 12040)             \
  X(cuGreenCtxWaitEvent, cuGreenCtxWaitEvent, 12040)                 \
  X(cuGreenCtxGetId, cuGreenCtxGetId, 12090)                         \
  X(cuCtxRecordEvent, cuCtxRecordEvent, 12050)                       \
  X(cuCtxWaitEvent, cuCtxWaitEvent, 12050)                           \
  X(cuGreenCtxStreamCreate, cuGreenCtxStreamCreate, 12050)

// Context-independent loading and cuLaunchKernelEx (CUDA 12.0 to 12.5 added them), and the
// occupancy, attribute and kernel-node calls custream makes with them: loaded when served; a
// case that needs them skips without them (REQUIRE_LIBRARIES).
#define CONFORMANCE_LIBRARY_ENTRIES(X)                                                        \
  X(cuLibraryLoadData, cuLibraryLoadData, 12000)                                              \
  X(cuLibraryLoadFromFile, cuLibraryLoadFromFile, 12000)                                      \
  X(cuLibraryUnload, cuLibraryUnload, 12000)                                                  \
  X(cuLibraryGetKernel, cuLibraryGetKernel, 12000)                                            \
  X(cuLibraryGetKernelCount, cuLibraryGetKernelCount, 12040)                                  \
  X(cuLibraryEnumerateKernels, cuLibraryEnumerateKernels, 12040)                              \
  X(cuLibraryGetModule, cuLibraryGetModule, 12000)                                            \
  X(cuLibraryGetGlobal, cuLibraryGetGlobal, 12000)                                            \
  X(cuLibraryGetManaged, cuLibraryGetManaged, 12000)                                          \
  X(cuKernelGetFunction, cuKernelGetFunction, 12000)                                          \
  X(cuKernelGetName, cuKernelGetName, 12030)                                                  \
  X(cuKernelGetLibrary, cuKernelGetLibrary, 12050)                                            \
  X(cuKernelGetAttribute, cuKernelGetAttribute, 12000)                                        \
  X(cuKernelSetAttribute, cuKernelSetAttribute, 12000)                                        \
  X(cuKernelGetParamInfo, cuKernelGetParamInfo, 12040)                                        \
  X(cuLaunchKernelEx, cuLaunchKernelEx, 11060)                                                \
  X(cuModuleLoadDataEx, cuModuleLoadDataEx, 2010)                                             \
  X(cuFuncGetAttribute, cuFuncGetAttribute, 2020)                                             \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessor, cuOccupancyMaxActiveBlocksPerMultiprocessor, \
    6050)                                                                                     \
  X(cuOccupancyMaxActiveClusters, cuOccupancyMaxActiveClusters, 11070)                        \
  X(cuGraphKernelNodeGetParams_v1, cuGraphKernelNodeGetParams, 10000)                         \
  X(cuGraphKernelNodeGetParams, cuGraphKernelNodeGetParams, 12000)

// Host-mapped memory and stream memory operations (custream's completion engine records with
// them), and the CUDA 8.0 / 9.0 ABIs of the operations: loaded when served; a case that needs
// them skips without them (REQUIRE_MEMOPS).
#define CONFORMANCE_MEMOP_ENTRIES(X)                            \
  X(cuMemHostAlloc, cuMemHostAlloc, 2020)                       \
  X(cuMemFreeHost, cuMemFreeHost, 2000)                         \
  X(cuMemHostGetDevicePointer, cuMemHostGetDevicePointer, 3020) \
  X(cuStreamWriteValue32, cuStreamWriteValue32, 11070)          \
  X(cuStreamWriteValue64, cuStreamWriteValue64, 11070)          \
  X(cuStreamWaitValue32, cuStreamWaitValue32, 11070)            \
  X(cuStreamWaitValue64, cuStreamWaitValue64, 11070)            \
  X(cuStreamWriteValue32_v1, cuStreamWriteValue32, 8000)        \
  X(cuStreamWriteValue64_v1, cuStreamWriteValue64, 9000)        \
  X(cuStreamWaitValue32_v1, cuStreamWaitValue32, 8000)          \
  X(cuStreamWaitValue64_v1, cuStreamWaitValue64, 9000)

struct Api {
#define CONFORMANCE_FIELD(field, symbol, version) PFN_##symbol##_v##version field = nullptr;
  CONFORMANCE_ENTRIES(CONFORMANCE_FIELD)
  CONFORMANCE_OPTIONAL_ENTRIES(CONFORMANCE_FIELD)
  CONFORMANCE_LIBRARY_ENTRIES(CONFORMANCE_FIELD)
  CONFORMANCE_MEMOP_ENTRIES(CONFORMANCE_FIELD)
#undef CONFORMANCE_FIELD
};

struct Driver {
  void* lib = nullptr;
  std::string error;
  PFN_cuGetProcAddress_v12000 get_proc = nullptr;
  bool emulated = false;
  Api api;
  int device_count = 0;
};

const Driver& driver() {
  static const Driver* d = [] {
    auto* r = new Driver;  // process lifetime
    const char* env = std::getenv("CUSTREAM_LIBCUDA");
    const char* path = env && *env ? env : "libcuda.so.1";
    r->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!r->lib) {
      const char* e = dlerror();
      r->error = std::string(path) + ": " + (e ? e : "dlopen failed");
      return r;
    }
    r->get_proc =
        reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(r->lib, "cuGetProcAddress_v2"));
    if (!r->get_proc) {
      r->error = std::string(path) + " has no cuGetProcAddress_v2";
      return r;
    }
    r->emulated = dlsym(r->lib, "custream_emu_reset") != nullptr;
#define CONFORMANCE_LOAD(field, symbol, version)                                                \
  {                                                                                             \
    void* fn = nullptr;                                                                         \
    CUdriverProcAddressQueryResult st{};                                                        \
    if (r->get_proc(#symbol, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &st) != CUDA_SUCCESS || \
        !fn) {                                                                                  \
      r->error = "cuGetProcAddress(" #symbol ", " #version ") failed";                          \
      return r;                                                                                 \
    }                                                                                           \
    r->api.field = reinterpret_cast<PFN_##symbol##_v##version>(fn);                             \
  }
    CONFORMANCE_ENTRIES(CONFORMANCE_LOAD)
#undef CONFORMANCE_LOAD
#define CONFORMANCE_LOAD_OPTIONAL(field, symbol, version)                                     \
  {                                                                                           \
    void* fn = nullptr;                                                                       \
    CUdriverProcAddressQueryResult st{};                                                      \
    if (r->get_proc(#symbol, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &st) == CUDA_SUCCESS) \
      r->api.field = reinterpret_cast<PFN_##symbol##_v##version>(fn);                         \
  }
    CONFORMANCE_OPTIONAL_ENTRIES(CONFORMANCE_LOAD_OPTIONAL)
    CONFORMANCE_LIBRARY_ENTRIES(CONFORMANCE_LOAD_OPTIONAL)
    CONFORMANCE_MEMOP_ENTRIES(CONFORMANCE_LOAD_OPTIONAL)
#undef CONFORMANCE_LOAD_OPTIONAL
    if (r->api.cuInit(0) != CUDA_SUCCESS) {
      r->error = "cuInit failed";
      return r;
    }
    r->api.cuDeviceGetCount(&r->device_count);
    if (r->device_count == 0) r->error = "no device";
    return r;
  }();
  return *d;
}

const Api& api() { return driver().api; }

#define REQUIRE_DRIVER_LOADED()                                                         \
  do {                                                                                  \
    if (!driver().error.empty()) CUSTREAM_SKIP("no usable driver: " << driver().error); \
  } while (false)

#define REQUIRE_EMULATOR()                                                                \
  do {                                                                                    \
    REQUIRE_DRIVER_LOADED();                                                              \
    if (!driver().emulated) CUSTREAM_SKIP("emulator-only test; a real driver is loaded"); \
  } while (false)

// The first optional entry point the driver does not serve ("symbol at version"), or NULL.
const char* missing_optional_entry() {
#define CONFORMANCE_MISSING(field, symbol, version) \
  if (!driver().api.field) return #symbol " at " #version;
  CONFORMANCE_OPTIONAL_ENTRIES(CONFORMANCE_MISSING)
#undef CONFORMANCE_MISSING
  return nullptr;
}

// The first library entry point the driver does not serve, or NULL.
const char* missing_library_entry() {
#define CONFORMANCE_MISSING(field, symbol, version) \
  if (!driver().api.field) return #symbol " at " #version;
  CONFORMANCE_LIBRARY_ENTRIES(CONFORMANCE_MISSING)
#undef CONFORMANCE_MISSING
  return nullptr;
}

// The first host-mapped memory or memory-operation entry point the driver does not serve, or
// NULL.
const char* missing_memop_entry() {
#define CONFORMANCE_MISSING(field, symbol, version) \
  if (!driver().api.field) return #symbol " at " #version;
  CONFORMANCE_MEMOP_ENTRIES(CONFORMANCE_MISSING)
#undef CONFORMANCE_MISSING
  return nullptr;
}

#define REQUIRE_MEMOPS()                                                                    \
  do {                                                                                      \
    REQUIRE_DRIVER_LOADED();                                                                \
    if (const char* missing_ = missing_memop_entry())                                       \
      CUSTREAM_SKIP("no stream memory operations: the driver does not serve " << missing_); \
  } while (false)

#define REQUIRE_LIBRARIES()                                                  \
  do {                                                                       \
    REQUIRE_DRIVER_LOADED();                                                 \
    if (const char* missing_ = missing_library_entry())                      \
      CUSTREAM_SKIP("no libraries: the driver does not serve " << missing_); \
  } while (false)

#define REQUIRE_GREEN_CONTEXTS()                                                  \
  do {                                                                            \
    REQUIRE_DRIVER_LOADED();                                                      \
    if (const char* missing_ = missing_optional_entry())                          \
      CUSTREAM_SKIP("no green contexts: the driver does not serve " << missing_); \
  } while (false)

template <class F>
F emu_control(const char* name) {
  return reinterpret_cast<F>(dlsym(driver().lib, name));
}

std::string nm(CUresult r) {
  const char* s = nullptr;
  if (api().cuGetErrorName && api().cuGetErrorName(r, &s) == CUDA_SUCCESS && s) return s;
  return "CUresult(" + std::to_string(static_cast<int>(r)) + ")";
}

#define CU_OK(expr) REQUIRE(nm(expr) == "CUDA_SUCCESS")
#define CU_EQ(expr, code) REQUIRE(nm(expr) == nm(code))
#define CU_CHECK_EQ(expr, code) CHECK(nm(expr) == nm(code))

// Retains device `dev`'s primary context and makes it current; restores and releases on exit.
class PrimaryScope {
 public:
  explicit PrimaryScope(int dev = 0) : dev_(dev) {
    CU_OK(api().cuDevicePrimaryCtxRetain(&ctx_, dev));
    CU_OK(api().cuCtxGetCurrent(&prev_));
    CU_OK(api().cuCtxSetCurrent(ctx_));
  }
  ~PrimaryScope() {
    api().cuCtxSetCurrent(prev_);
    api().cuDevicePrimaryCtxRelease(dev_);
  }
  PrimaryScope(const PrimaryScope&) = delete;
  PrimaryScope& operator=(const PrimaryScope&) = delete;
  CUcontext ctx() const { return ctx_; }

 private:
  int dev_;
  CUcontext ctx_ = nullptr;
  CUcontext prev_ = nullptr;
};

struct StreamHandle {
  CUstream s = nullptr;
  explicit StreamHandle(unsigned flags = CU_STREAM_DEFAULT, int priority = 0) {
    CU_OK(api().cuStreamCreateWithPriority(&s, flags, priority));
  }
  ~StreamHandle() {
    if (s) api().cuStreamDestroy(s);
  }
  StreamHandle(const StreamHandle&) = delete;
  StreamHandle& operator=(const StreamHandle&) = delete;
};

struct EventHandle {
  CUevent e = nullptr;
  explicit EventHandle(unsigned flags = CU_EVENT_DISABLE_TIMING) {
    CU_OK(api().cuEventCreate(&e, flags));
  }
  ~EventHandle() {
    if (e) api().cuEventDestroy(e);
  }
  EventHandle(const EventHandle&) = delete;
  EventHandle& operator=(const EventHandle&) = delete;
};

struct DeviceBuffer {
  CUdeviceptr p = 0;
  size_t bytes;
  explicit DeviceBuffer(size_t n) : bytes(n) { CU_OK(api().cuMemAlloc(&p, n)); }
  ~DeviceBuffer() {
    if (p) api().cuMemFree(p);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

// A host function whose payload is a std::function owned by the test.
void call_function(void* p) { (*static_cast<std::function<void()>*>(p))(); }

CUresult launch(CUstream s, std::function<void()>* f) {
  return api().cuLaunchHostFunc(s, call_function, f);
}

// Thread-safe log of host-function activity.
struct Log {
  std::mutex mu;
  std::vector<int> order;
  std::vector<std::thread::id> threads;
  void add(int v) {
    std::lock_guard<std::mutex> lk(mu);
    order.push_back(v);
    threads.push_back(std::this_thread::get_id());
  }
  std::vector<int> get() {
    std::lock_guard<std::mutex> lk(mu);
    return order;
  }
};

CUstreamCaptureStatus capture_status(CUstream s) {
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  CU_OK(api().cuStreamIsCapturing(s, &st));
  return st;
}

size_t node_count(CUgraph g) {
  size_t n = 0;
  CU_OK(api().cuGraphGetNodes(g, nullptr, &n));
  return n;
}

CUgraphExec instantiate(CUgraph g) {
  CUgraphExec e = nullptr;
  CU_OK(api().cuGraphInstantiateWithFlags(&e, g, 0));
  return e;
}

// Ends a capture whose outcome the test does not assert, freeing a graph if one came back.
void end_capture_quietly(CUstream s) {
  CUgraph g = nullptr;
  api().cuStreamEndCapture(s, &g);
  if (g) api().cuGraphDestroy(g);
}

template <class Pred>
bool wait_until(Pred p, std::chrono::milliseconds limit = 5000ms) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!p()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

}  // namespace

// ============================================================================================
// Entry points and versions
// ============================================================================================

TEST_CASE("cuGetProcAddress answers by ABI version", "[conformance]") {
  REQUIRE_DRIVER_LOADED();
  auto gpa = driver().get_proc;
  PrimaryScope scope;
  StreamHandle s;

  void* v9020 = nullptr;
  void* v12050 = nullptr;
  CUdriverProcAddressQueryResult st{};
  CU_OK(gpa("cuStreamGetCtx", &v9020, 9020, CU_GET_PROC_ADDRESS_DEFAULT, &st));
  CHECK(st == CU_GET_PROC_ADDRESS_SUCCESS);
  CU_OK(gpa("cuStreamGetCtx", &v12050, 12050, CU_GET_PROC_ADDRESS_DEFAULT, &st));
  void* v13000 = nullptr;
  CU_OK(gpa("cuStreamGetCtx", &v13000, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &st));
  REQUIRE(v9020 != nullptr);
  REQUIRE(v12050 != nullptr);
  CHECK(v9020 != v12050);
  CHECK(v13000 == v12050);

  CUcontext c1 = nullptr;
  CU_OK(reinterpret_cast<PFN_cuStreamGetCtx_v9020>(v9020)(s.s, &c1));
  CHECK(c1 == scope.ctx());
  CUcontext c2 = nullptr;
  CUgreenCtx green = reinterpret_cast<CUgreenCtx>(&c2);  // must be overwritten
  CU_OK(reinterpret_cast<PFN_cuStreamGetCtx_v12050>(v12050)(s.s, &c2, &green));
  CHECK(c2 == scope.ctx());
  CHECK(green == nullptr);

  void* d2000 = nullptr;
  void* d13000 = nullptr;
  CU_OK(gpa("cuCtxGetDevice", &d2000, 2000, CU_GET_PROC_ADDRESS_DEFAULT, &st));
  CU_OK(gpa("cuCtxGetDevice", &d13000, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &st));
  REQUIRE(d2000 != nullptr);
  REQUIRE(d13000 != nullptr);
  CHECK(d2000 != d13000);
  CUdevice dev = -1;
  CU_OK(reinterpret_cast<PFN_cuCtxGetDevice_v13000>(d13000)(&dev, scope.ctx()));
  CHECK(dev == 0);

  // The flags select the same entry points for these functions.
  void* legacy = nullptr;
  void* ptds = nullptr;
  CU_OK(gpa("cuStreamGetCtx", &legacy, 9020, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &st));
  CU_OK(gpa("cuStreamGetCtx", &ptds, 9020, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st));
  CHECK(legacy != nullptr);
  CHECK(ptds != nullptr);
}

TEST_CASE("cuGetProcAddress: unknown names and too-low versions give NULL", "[conformance]") {
  REQUIRE_DRIVER_LOADED();
  auto gpa = driver().get_proc;
  void* fn = reinterpret_cast<void*>(&nm);
  CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SUCCESS;
  gpa("cuNoSuchFunctionAnywhere", &fn, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &st);
  CHECK(fn == nullptr);
  CHECK(st == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);

  fn = reinterpret_cast<void*>(&nm);
  st = CU_GET_PROC_ADDRESS_SUCCESS;
  gpa("cuStreamGetCtx", &fn, 9010, CU_GET_PROC_ADDRESS_DEFAULT, &st);
  CHECK(fn == nullptr);
  CHECK(st == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);

  fn = reinterpret_cast<void*>(&nm);
  st = CU_GET_PROC_ADDRESS_SUCCESS;
  gpa("cuStreamGetDevice", &fn, 12070, CU_GET_PROC_ADDRESS_DEFAULT, &st);
  CHECK(fn == nullptr);
  CHECK(st == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
}

// Seen on the H200 (driver 580, CUDA 13.0) and documented in cuda.h: an unknown symbol or a
// version below a symbol's first ABI answers CUDA_SUCCESS, *pfn NULL, the reason in *status;
// a version above the driver's answers CUDA_ERROR_INVALID_VALUE.
TEST_CASE("cuGetProcAddress: not found answers CUDA_SUCCESS with a status", "[conformance]") {
  REQUIRE_DRIVER_LOADED();
  auto gpa = driver().get_proc;
  void* fn = reinterpret_cast<void*>(&nm);
  CUdriverProcAddressQueryResult st{};
  CU_CHECK_EQ(gpa("cuNoSuchFunctionAnywhere", &fn, 13000, 0, &st), CUDA_SUCCESS);
  CHECK(fn == nullptr);
  CHECK(st == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  fn = reinterpret_cast<void*>(&nm);
  CU_CHECK_EQ(gpa("cuStreamGetCtx", &fn, 9010, 0, &st), CUDA_SUCCESS);
  CHECK(fn == nullptr);
  CHECK(st == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  int driver_version = 0;
  REQUIRE(api().cuDriverGetVersion(&driver_version) == CUDA_SUCCESS);
  CU_CHECK_EQ(gpa("cuStreamGetCtx", &fn, driver_version + 10, 0, &st), CUDA_ERROR_INVALID_VALUE);
}

TEST_CASE("every entry of custream's driver table is served at its version", "[conformance]") {
  REQUIRE_DRIVER_LOADED();
  auto gpa = driver().get_proc;
#define CONFORMANCE_TABLE_ROW(field, symbol, version, ...)                                     \
  {                                                                                            \
    INFO(#symbol " at " #version);                                                             \
    void* fn = nullptr;                                                                        \
    CUdriverProcAddressQueryResult st{};                                                       \
    CHECK(nm(gpa(#symbol, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &st)) == "CUDA_SUCCESS"); \
    CHECK(fn != nullptr);                                                                      \
    CHECK(st == CU_GET_PROC_ADDRESS_SUCCESS);                                                  \
  }
  CUSTREAM_DRIVER_ENTRIES(CONFORMANCE_TABLE_ROW)
#undef CONFORMANCE_TABLE_ROW
}

TEST_CASE("driver version and error strings", "[conformance]") {
  REQUIRE_DRIVER_LOADED();
  int v = 0;
  CU_OK(api().cuDriverGetVersion(&v));
  CHECK(v >= 13000);
  const char* s = nullptr;
  CU_OK(api().cuGetErrorName(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, &s));
  CHECK(std::string(s) == "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT");
  s = nullptr;
  CU_OK(api().cuGetErrorString(CUDA_ERROR_INVALID_HANDLE, &s));
  REQUIRE(s != nullptr);
  CHECK(std::strlen(s) > 0);
  CU_EQ(api().cuGetErrorName(static_cast<CUresult>(987654), &s), CUDA_ERROR_INVALID_VALUE);
}

// ============================================================================================
// Devices and contexts
// ============================================================================================

TEST_CASE("devices: name, attributes, memory", "[conformance]") {
  REQUIRE_DRIVER_LOADED();
  int n = 0;
  CU_OK(api().cuDeviceGetCount(&n));
  REQUIRE(n >= 1);
  CUdevice d = -1;
  CU_OK(api().cuDeviceGet(&d, 0));
  CHECK(d == 0);
  CU_EQ(api().cuDeviceGet(&d, n), CUDA_ERROR_INVALID_DEVICE);
  char name[256] = {};
  CU_OK(api().cuDeviceGetName(name, sizeof name, 0));
  CHECK(std::strlen(name) > 0);
  int major = 0, minor = -1, sms = 0;
  CU_OK(api().cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0));
  CU_OK(api().cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0));
  CU_OK(api().cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0));
  CHECK(major >= 7);
  CHECK(minor >= 0);
  CHECK(sms > 0);
  int v = 0;
  CU_EQ(api().cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX, 0), CUDA_ERROR_INVALID_VALUE);
  CU_EQ(api().cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_WARP_SIZE, n),
        CUDA_ERROR_INVALID_DEVICE);
  size_t bytes = 0;
  CU_OK(api().cuDeviceTotalMem(&bytes, 0));
  CHECK(bytes > (size_t{1} << 30));
}

TEST_CASE("primary contexts: stable handle, state, current-context stack", "[conformance]") {
  REQUIRE_DRIVER_LOADED();
  std::thread([] {  // a fresh thread: empty context stack
    CUcontext cur = reinterpret_cast<CUcontext>(1);
    CU_OK(api().cuCtxGetCurrent(&cur));
    CHECK(cur == nullptr);
    CUcontext popped = nullptr;
    CU_EQ(api().cuCtxPopCurrent(&popped), CUDA_ERROR_INVALID_CONTEXT);
    CUdevice dev = -1;
    CU_EQ(api().cuCtxGetDevice(&dev), CUDA_ERROR_INVALID_CONTEXT);

    CUcontext a = nullptr, b = nullptr;
    CU_OK(api().cuDevicePrimaryCtxRetain(&a, 0));
    CU_OK(api().cuDevicePrimaryCtxRetain(&b, 0));
    CHECK(a == b);
    unsigned flags = 0;
    int active = 0;
    CU_OK(api().cuDevicePrimaryCtxGetState(0, &flags, &active));
    CHECK(active == 1);

    CU_OK(api().cuCtxPushCurrent(a));
    CU_OK(api().cuCtxGetCurrent(&cur));
    CHECK(cur == a);
    CU_OK(api().cuCtxGetDevice(&dev));
    CHECK(dev == 0);
    CU_OK(api().cuCtxGetDevice_v2(&dev, nullptr));
    CHECK(dev == 0);
    CU_OK(api().cuCtxPopCurrent(&popped));
    CHECK(popped == a);
    CU_OK(api().cuCtxGetCurrent(&cur));
    CHECK(cur == nullptr);

    CU_OK(api().cuCtxSetCurrent(a));
    CU_OK(api().cuCtxGetCurrent(&cur));
    CHECK(cur == a);
    CU_OK(api().cuCtxSetCurrent(nullptr));
    CU_OK(api().cuCtxGetCurrent(&cur));
    CHECK(cur == nullptr);

    CU_OK(api().cuDevicePrimaryCtxRelease(0));
    CU_OK(api().cuDevicePrimaryCtxRelease(0));
    if (driver().device_count > 1) {
      CUcontext c1 = nullptr;
      CU_OK(api().cuDevicePrimaryCtxRetain(&c1, 1));
      CHECK(c1 != a);
      CU_OK(api().cuCtxGetDevice_v2(&dev, c1));
      CHECK(dev == 1);
      CU_OK(api().cuDevicePrimaryCtxRelease(1));
    }
  })
      .join();
}

TEST_CASE("stream priority range", "[conformance]") {
  REQUIRE_DRIVER_LOADED();
  PrimaryScope scope;
  int least = 99, greatest = 99;
  CU_OK(api().cuCtxGetStreamPriorityRange(&least, &greatest));
  CHECK(least == 0);
  CHECK(greatest == -5);
}

// ============================================================================================
// Streams
// ============================================================================================

TEST_CASE("special stream handles resolve to the current context", "[conformance]") {
  REQUIRE_DRIVER_LOADED();
  std::thread([] {
    for (CUstream h : {CUstream{nullptr}, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD}) {
      CUcontext c = nullptr;
      CU_EQ(api().cuStreamGetCtx(h, &c), CUDA_ERROR_INVALID_CONTEXT);
      CUdevice d = -1;
      CU_EQ(api().cuStreamGetDevice(h, &d), CUDA_ERROR_INVALID_CONTEXT);
    }
    CUstream s = nullptr;
    CU_EQ(api().cuStreamCreate(&s, 0), CUDA_ERROR_INVALID_CONTEXT);
    CUevent e = nullptr;
    CU_EQ(api().cuEventCreate(&e, 0), CUDA_ERROR_INVALID_CONTEXT);
    {
      PrimaryScope scope;
      for (CUstream h : {CUstream{nullptr}, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD}) {
        CUcontext c = nullptr;
        CU_OK(api().cuStreamGetCtx(h, &c));
        CHECK(c == scope.ctx());
        CUdevice d = -1;
        CU_OK(api().cuStreamGetDevice(h, &d));
        CHECK(d == 0);
        CU_OK(api().cuStreamSynchronize(h));
        CU_OK(api().cuStreamQuery(h));
      }
    }
  }).join();
}

TEST_CASE("created-stream queries work with no context current", "[conformance]") {
  REQUIRE_DRIVER_LOADED();
  std::thread([] {
    CUcontext ctx = nullptr;
    CU_OK(api().cuDevicePrimaryCtxRetain(&ctx, 0));
    CU_OK(api().cuCtxSetCurrent(ctx));
    CUstream s = nullptr;
    CU_OK(api().cuStreamCreateWithPriority(&s, CU_STREAM_NON_BLOCKING, -2));
    CU_OK(api().cuCtxSetCurrent(nullptr));

    CUcontext c = nullptr;
    CU_OK(api().cuStreamGetCtx(s, &c));
    CHECK(c == ctx);
    CUgreenCtx g = nullptr;
    CU_OK(api().cuStreamGetCtx_v2(s, &c, &g));
    CHECK(c == ctx);
    CUdevice d = -1;
    CU_OK(api().cuStreamGetDevice(s, &d));
    CHECK(d == 0);
    CU_OK(api().cuStreamQuery(s));
    CU_OK(api().cuStreamSynchronize(s));
    int p = 99;
    CU_OK(api().cuStreamGetPriority(s, &p));
    CHECK(p == -2);
    CU_OK(api().cuStreamDestroy(s));
    CU_OK(api().cuDevicePrimaryCtxRelease(0));
  }).join();
}

TEST_CASE("stream flags, priorities (clamped), ids", "[conformance]") {
  REQUIRE_DRIVER_LOADED();
  PrimaryScope scope;
  StreamHandle low(CU_STREAM_NON_BLOCKING, 100);
  StreamHandle high(CU_STREAM_DEFAULT, -100);
  int p = 99;
  CU_OK(api().cuStreamGetPriority(low.s, &p));
  CHECK(p == 0);
  CU_OK(api().cuStreamGetPriority(high.s, &p));
  CHECK(p == -5);
  unsigned f = 99;
  CU_OK(api().cuStreamGetFlags(low.s, &f));
  CHECK(f == CU_STREAM_NON_BLOCKING);
  CU_OK(api().cuStreamGetFlags(high.s, &f));
  CHECK(f == CU_STREAM_DEFAULT);
  unsigned long long a = 0, b = 0;
  CU_OK(api().cuStreamGetId(low.s, &a));
  CU_OK(api().cuStreamGetId(high.s, &b));
  CHECK(a != b);
  CUstream s = nullptr;
  CU_EQ(api().cuStreamCreate(&s, 0x80), CUDA_ERROR_INVALID_VALUE);
}

TEST_CASE("stream order is observable through memset and memcpy data", "[conformance]") {
  REQUIRE_DRIVER_LOADED();
  PrimaryScope scope;
  constexpr size_t kN = 1 << 16;
  DeviceBuffer a(kN * 4), b(kN * 4);
  StreamHandle s;
  std::vector<uint32_t> h1(kN), h2(kN), src(kN, 0x01020304u);
  for (int round = 0; round < 5; ++round) {
    CU_OK(api().cuMemsetD32Async(a.p, 7, kN, s.s));
    CU_OK(api().cuMemcpyDtoDAsync(b.p, a.p, kN * 4, s.s));
    CU_OK(api().cuMemsetD32Async(a.p, 9, kN, s.s));
    CU_OK(api().cuMemcpyDtoHAsync(h1.data(), b.p, kN * 4, s.s));
    CU_OK(api().cuMemcpyDtoHAsync(h2.data(), a.p, kN * 4, s.s));
    CU_OK(api().cuStreamSynchronize(s.s));
    CHECK(h1 == std::vector<uint32_t>(kN, 7));
    CHECK(h2 == std::vector<uint32_t>(kN, 9));
  }
  CU_OK(api().cuMemcpyHtoDAsync(a.p, src.data(), kN * 4, s.s));
  CU_OK(api().cuMemsetD8Async(a.p, 0xff, 2, s.s));
  CU_OK(api().cuMemcpyAsync(b.p, a.p, kN * 4, s.s));
  CU_OK(api().cuMemcpyDtoHAsync(h1.data(), b.p, kN * 4, s.s));
  CU_OK(api().cuStreamSynchronize(s.s));
  CHECK(h1[0] == 0x0102ffffu);
  CHECK(h1[kN - 1] == 0x01020304u);
}

TEST_CASE("events order work across streams", "[conformance]") {
  REQUIRE_DRIVER_LOADED();
  PrimaryScope scope;
  DeviceBuffer a(4096);
  StreamHandle s1(CU_STREAM_NON_BLOCKING), s2(CU_STREAM_NON_BLOCKING);
  EventHandle e;
  std::vector<uint32_t> h(1024, 0);
  std::function<void()> slow = [] { std::this_thread::sleep_for(50ms); };
  CU_OK(api().cuMemsetD32Async(a.p, 1, 1024, s1.s));
  CU_OK(launch(s1.s, &slow));
  CU_OK(api().cuMemsetD32Async(a.p, 5, 1024, s1.s));
  CU_OK(api().cuEventRecord(e.e, s1.s));
  CU_OK(api().cuStreamWaitEvent(s2.s, e.e, 0));
  CU_OK(api().cuMemcpyDtoHAsync(h.data(), a.p, 4096, s2.s));
  CU_OK(api().cuStreamSynchronize(s2.s));
  CHECK(h == std::vector<uint32_t>(1024, 5));
  CU_OK(api().cuEventSynchronize(e.e));
  CU_OK(api().cuEventQuery(e.e));
}

TEST_CASE("the legacy stream waits for blocking streams", "[conformance]") {
  REQUIRE_DRIVER_LOADED();
  PrimaryScope scope;
  DeviceBuffer a(4096);
  StreamHandle blocking(CU_STREAM_DEFAULT);
  std::vector<uint32_t> h(1024, 0);
  std::function<void()> slow = [] { std::this_thread::sleep_for(50ms); };
  CU_OK(api().cuMemsetD32Async(a.p, 1, 1024, blocking.s));
  CU_OK(launch(blocking.s, &slow));
  CU_OK(api().cuMemsetD32Async(a.p, 3, 1024, blocking.s));
  CU_OK(api().cuMemcpyDtoHAsync(h.data(), a.p, 4096, CU_STREAM_LEGACY));
  CU_OK(api().cuStreamSynchronize(CU_STREAM_LEGACY));
  CHECK(h == std::vector<uint32_t>(1024, 3));
  // And a blocking stream waits for earlier legacy-stream work.
  CU_OK(launch(CU_STREAM_LEGACY, &slow));
  CU_OK(api().cuMemsetD32Async(a.p, 4, 1024, CU_STREAM_LEGACY));
  CU_OK(api().cuMemcpyDtoHAsync(h.data(), a.p, 4096, blocking.s));
  CU_OK(api().cuStreamSynchronize(blocking.s));
  CHECK(h == std::vector<uint32_t>(1024, 4));
}

TEST_CASE("stream query reports pending work", "[conformance]") {
  REQUIRE_DRIVER_LOADED();
  PrimaryScope scope;
  StreamHandle s;
  std::atomic<bool> release{false};
  std::function<void()> gate = [&] {
    while (!release.load()) std::this_thread::sleep_for(1ms);
  };
  CU_OK(launch(s.s, &gate));
  CU_EQ(api().cuStreamQuery(s.s), CUDA_ERROR_NOT_READY);
  release = true;
  CU_OK(api().cuStreamSynchronize(s.s));
  CU_OK(api().cuStreamQuery(s.s));
}

// ============================================================================================
// Host functions and callbacks
// ============================================================================================

namespace {
struct CallbackRecord {
  Log* log;
  int value;
  CUstream expected;
  std::atomic<int>* wrong;
};
void CUDA_CB record_callback(CUstream s, CUresult status, void* p) {
  auto* r = static_cast<CallbackRecord*>(p);
  if (s != r->expected || status != CUDA_SUCCESS) r->wrong->fetch_add(1);
  r->log->add(r->value);
}
void record_host(void* p) {
  auto* r = static_cast<CallbackRecord*>(p);
  r->log->add(r->value);
}
}  // namespace

TEST_CASE("host functions and callbacks run in order on one non-caller thread", "[conformance]") {
  REQUIRE_DRIVER_LOADED();
  PrimaryScope scope;
  StreamHandle s1, s2(CU_STREAM_NON_BLOCKING);
  Log log1, log2;
  std::atomic<int> wrong{0};
  std::vector<CallbackRecord> r1, r2;
  r1.reserve(200);
  r2.reserve(200);
  DeviceBuffer buf(1 << 16);
  std::vector<unsigned char> host(1 << 16);
  for (int i = 0; i < 100; ++i) {
    r1.push_back({&log1, i, s1.s, &wrong});
    r2.push_back({&log2, i, s2.s, &wrong});
  }
  for (int i = 0; i < 100; ++i) {
    CU_OK(api().cuMemcpyHtoDAsync(buf.p, host.data(), host.size(), s1.s));
    if (i % 2) {
      CU_OK(api().cuStreamAddCallback(s1.s, record_callback, &r1[i], 0));
    } else {
      CU_OK(api().cuLaunchHostFunc(s1.s, record_host, &r1[i]));
    }
    CU_OK(api().cuStreamAddCallback(s2.s, record_callback, &r2[i], 0));
  }
  CU_OK(api().cuStreamSynchronize(s1.s));
  CU_OK(api().cuStreamSynchronize(s2.s));
  std::vector<int> expected(100);
  for (int i = 0; i < 100; ++i) expected[i] = i;
  CHECK(log1.get() == expected);
  CHECK(log2.get() == expected);
  CHECK(wrong.load() == 0);
  const auto me = std::this_thread::get_id();
  std::set<std::thread::id> threads(log1.threads.begin(), log1.threads.end());
  threads.insert(log2.threads.begin(), log2.threads.end());
  CHECK(threads.count(me) == 0);
  // Measured on the H200: host functions of different streams ran on one driver thread.
  CHECK(threads.size() == 1);
}

// ============================================================================================
// Events
// ============================================================================================

TEST_CASE("event elapsed time and its errors", "[conformance]") {
  REQUIRE_DRIVER_LOADED();
  PrimaryScope scope;
  StreamHandle s;
  EventHandle start(CU_EVENT_DEFAULT), end(CU_EVENT_DEFAULT), never(CU_EVENT_DEFAULT);
  EventHandle untimed(CU_EVENT_DISABLE_TIMING);
  float ms = -1;
  // Never recorded: documented CUDA_ERROR_INVALID_HANDLE; query of such an event succeeds.
  CU_EQ(api().cuEventElapsedTime(&ms, never.e, never.e), CUDA_ERROR_INVALID_HANDLE);
  CU_OK(api().cuEventQuery(never.e));

  std::function<void()> sleep20 = [] { std::this_thread::sleep_for(20ms); };
  CU_OK(api().cuEventRecord(start.e, s.s));
  CU_OK(launch(s.s, &sleep20));
  CU_OK(api().cuEventRecord(end.e, s.s));
  CU_OK(api().cuEventRecord(untimed.e, s.s));
  CU_OK(api().cuStreamSynchronize(s.s));
  CU_OK(api().cuEventElapsedTime(&ms, start.e, end.e));
  CHECK(ms >= 15.0f);
  CHECK(ms < 5000.0f);
  // Timing disabled: documented CUDA_ERROR_INVALID_HANDLE.
  CU_EQ(api().cuEventElapsedTime(&ms, start.e, untimed.e), CUDA_ERROR_INVALID_HANDLE);
  CU_EQ(api().cuEventElapsedTime(&ms, start.e, never.e), CUDA_ERROR_INVALID_HANDLE);

  // Recorded but not complete: documented CUDA_ERROR_NOT_READY.
  std::atomic<bool> release{false};
  std::function<void()> gate = [&] {
    while (!release.load()) std::this_thread::sleep_for(1ms);
  };
  CU_OK(api().cuEventRecord(start.e, s.s));
  CU_OK(launch(s.s, &gate));
  CU_OK(api().cuEventRecord(end.e, s.s));
  CU_EQ(api().cuEventQuery(end.e), CUDA_ERROR_NOT_READY);
  CU_EQ(api().cuEventElapsedTime(&ms, start.e, end.e), CUDA_ERROR_NOT_READY);
  release = true;
  CU_OK(api().cuEventSynchronize(end.e));
  CU_OK(api().cuEventElapsedTime(&ms, start.e, end.e));
  CHECK(ms >= 0.0f);
}

TEST_CASE("interprocess events need disabled timing", "[conformance]") {
  REQUIRE_DRIVER_LOADED();
  PrimaryScope scope;
  CUevent e = nullptr;
  CU_EQ(api().cuEventCreate(&e, CU_EVENT_INTERPROCESS), CUDA_ERROR_INVALID_VALUE);
  CU_OK(api().cuEventCreate(&e, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING));
  CUipcEventHandle h{};
  CU_OK(api().cuIpcGetEventHandle(&h, e));
  CU_OK(api().cuEventDestroy(e));
}

// ============================================================================================
// Capture
// ============================================================================================

TEST_CASE("capture is refused on handles 0 and 1, allowed on 2", "[conformance]") {
  REQUIRE_DRIVER_LOADED();
  std::thread([] {
    PrimaryScope scope;
    CU_EQ(api().cuStreamBeginCapture(nullptr, CU_STREAM_CAPTURE_MODE_GLOBAL),
          CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    CU_EQ(api().cuStreamBeginCapture(CU_STREAM_LEGACY, CU_STREAM_CAPTURE_MODE_GLOBAL),
          CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    CU_OK(api().cuStreamBeginCapture(CU_STREAM_PER_THREAD, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    CHECK(capture_status(CU_STREAM_PER_THREAD) == CU_STREAM_CAPTURE_STATUS_ACTIVE);
    std::atomic<int> runs{0};
    std::function<void()> f = [&] { runs.fetch_add(1); };
    CU_OK(launch(CU_STREAM_PER_THREAD, &f));
    CUgraph g = nullptr;
    CU_OK(api().cuStreamEndCapture(CU_STREAM_PER_THREAD, &g));
    REQUIRE(g != nullptr);
    CHECK(node_count(g) == 1);
    CHECK(runs.load() == 0);
    CHECK(capture_status(CU_STREAM_PER_THREAD) == CU_STREAM_CAPTURE_STATUS_NONE);
    CU_OK(api().cuGraphDestroy(g));
  }).join();
}

TEST_CASE("capture-unsafe stream queries fail and invalidate the capture", "[conformance]") {
  REQUIRE_DRIVER_LOADED();
  PrimaryScope scope;
  const std::vector<std::pair<const char*, std::function<CUresult(CUstream)>>> queries = {
      {"cuStreamQuery", [](CUstream s) { return api().cuStreamQuery(s); }},
      {"cuStreamSynchronize", [](CUstream s) { return api().cuStreamSynchronize(s); }},
      {"cuStreamGetFlags",
       [](CUstream s) {
         unsigned f;
         return api().cuStreamGetFlags(s, &f);
       }},
      {"cuStreamGetId",
       [](CUstream s) {
         unsigned long long id;
         return api().cuStreamGetId(s, &id);
       }},
      {"cuStreamGetDevice",
       [](CUstream s) {
         CUdevice d;
         return api().cuStreamGetDevice(s, &d);
       }},
  };
  for (const auto& [name, query] : queries) {
    INFO(name);
    StreamHandle s(CU_STREAM_NON_BLOCKING);
    CU_OK(api().cuStreamBeginCapture(s.s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CU_EQ(query(s.s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    CHECK(capture_status(s.s) == CU_STREAM_CAPTURE_STATUS_INVALIDATED);
    CUgraph g = reinterpret_cast<CUgraph>(&g);
    CU_EQ(api().cuStreamEndCapture(s.s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    CHECK(g == nullptr);
    CHECK(capture_status(s.s) == CU_STREAM_CAPTURE_STATUS_NONE);
    CU_OK(query(s.s));  // the stream works again
  }
}

TEST_CASE("capture-safe queries keep the capture valid", "[conformance]") {
  REQUIRE_DRIVER_LOADED();
  PrimaryScope scope;
  StreamHandle s(CU_STREAM_NON_BLOCKING, -3);
  CU_OK(api().cuStreamBeginCapture(s.s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  std::function<void()> f = [] {};
  CU_OK(launch(s.s, &f));
  CUcontext c = nullptr;
  CU_OK(api().cuStreamGetCtx(s.s, &c));
  CHECK(c == scope.ctx());
  CUgreenCtx green = nullptr;
  CU_OK(api().cuStreamGetCtx_v2(s.s, &c, &green));
  int p = 0;
  CU_OK(api().cuStreamGetPriority(s.s, &p));
  CHECK(p == -3);
  CUstreamCaptureStatus st{};
  cuuint64_t id1 = 0, id2 = 0, id3 = 0;
  CU_OK(api().cuStreamGetCaptureInfo_v1(s.s, &st, &id1));
  CHECK(st == CU_STREAM_CAPTURE_STATUS_ACTIVE);
  CUgraph g2 = nullptr, g3 = nullptr;
  const CUgraphNode* deps = nullptr;
  const CUgraphEdgeData* edges = nullptr;
  size_t nd = 0;
  CU_OK(api().cuStreamGetCaptureInfo_v2(s.s, &st, &id2, &g2, &deps, &nd));
  CHECK(nd == 1);
  CU_OK(api().cuStreamGetCaptureInfo_v3(s.s, &st, &id3, &g3, &deps, &edges, &nd));
  CHECK(nd == 1);
  CHECK(id1 == id2);
  CHECK(id2 == id3);
  CHECK(g2 != nullptr);
  CHECK(g2 == g3);
  CHECK(capture_status(s.s) == CU_STREAM_CAPTURE_STATUS_ACTIVE);
  CUgraph g = nullptr;
  CU_OK(api().cuStreamEndCapture(s.s, &g));
  REQUIRE(g != nullptr);
  CHECK(g == g2);
  CHECK(node_count(g) == 1);
  CU_OK(api().cuGraphDestroy(g));
  CU_OK(api().cuStreamGetCaptureInfo_v1(s.s, &st, &id1));
  CHECK(st == CU_STREAM_CAPTURE_STATUS_NONE);
}

TEST_CASE("cuStreamAddCallback during capture is unsupported and invalidates", "[conformance]") {
  REQUIRE_DRIVER_LOADED();
  PrimaryScope scope;
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  Log log;
  std::atomic<int> wrong{0};
  CallbackRecord r{&log, 1, s.s, &wrong};
  CU_OK(api().cuStreamBeginCapture(s.s, CU_STREAM_CAPTURE_MODE_RELAXED));
  CU_EQ(api().cuStreamAddCallback(s.s, record_callback, &r, 0),
        CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CHECK(capture_status(s.s) == CU_STREAM_CAPTURE_STATUS_INVALIDATED);
  CUgraph g = nullptr;
  CU_EQ(api().cuStreamEndCapture(s.s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  CHECK(g == nullptr);
  CU_OK(api().cuStreamSynchronize(s.s));
  CHECK(log.get().empty());
}

TEST_CASE("the legacy stream during a blocking stream's capture: implicit error", "[conformance]") {
  REQUIRE_DRIVER_LOADED();
  PrimaryScope scope;
  StreamHandle s(CU_STREAM_DEFAULT);
  CU_OK(api().cuStreamBeginCapture(s.s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CUstreamCaptureStatus st{};
  CU_EQ(api().cuStreamIsCapturing(CU_STREAM_LEGACY, &st), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
  CU_EQ(api().cuStreamQuery(nullptr), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
  CU_EQ(api().cuStreamQuery(CU_STREAM_LEGACY), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
  end_capture_quietly(s.s);
  CHECK(capture_status(s.s) == CU_STREAM_CAPTURE_STATUS_NONE);
  CU_OK(api().cuStreamIsCapturing(CU_STREAM_LEGACY, &st));
  CHECK(st == CU_STREAM_CAPTURE_STATUS_NONE);
}

TEST_CASE("the implicit error invalidates the capture", "[conformance][unsure]") {
  REQUIRE_DRIVER_LOADED();
  PrimaryScope scope;
  StreamHandle s(CU_STREAM_DEFAULT);
  CU_OK(api().cuStreamBeginCapture(s.s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU_EQ(api().cuStreamQuery(CU_STREAM_LEGACY), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
  CUgraph g = nullptr;
  CU_CHECK_EQ(api().cuStreamEndCapture(s.s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  if (g) api().cuGraphDestroy(g);
}

TEST_CASE("cuStreamIsCapturing on the legacy stream does not invalidate the capture",
          "[conformance]") {
  // cuda.h: "The blocking stream capture is not invalidated." custream's capture check relies
  // on it (a host function refused on the legacy stream leaves the capture valid).
  REQUIRE_DRIVER_LOADED();
  PrimaryScope scope;
  StreamHandle s(CU_STREAM_DEFAULT);
  CU_OK(api().cuStreamBeginCapture(s.s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CUstreamCaptureStatus st{};
  CU_EQ(api().cuStreamIsCapturing(CU_STREAM_LEGACY, &st), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
  CHECK(capture_status(s.s) == CU_STREAM_CAPTURE_STATUS_ACTIVE);
  CUgraph g = nullptr;
  CU_EQ(api().cuStreamEndCapture(s.s, &g), CUDA_SUCCESS);
  REQUIRE(g != nullptr);
  CU_OK(api().cuGraphDestroy(g));
}

TEST_CASE("the implicit error also holds in relaxed mode", "[conformance][unsure]") {
  REQUIRE_DRIVER_LOADED();
  PrimaryScope scope;
  StreamHandle s(CU_STREAM_DEFAULT);
  CU_OK(api().cuStreamBeginCapture(s.s, CU_STREAM_CAPTURE_MODE_RELAXED));
  CUstreamCaptureStatus st{};
  CU_CHECK_EQ(api().cuStreamIsCapturing(CU_STREAM_LEGACY, &st), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
  end_capture_quietly(s.s);
}

TEST_CASE("a non-blocking stream's capture leaves the legacy stream usable", "[conformance]") {
  REQUIRE_DRIVER_LOADED();
  PrimaryScope scope;
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  CU_OK(api().cuStreamBeginCapture(s.s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CHECK(capture_status(CU_STREAM_LEGACY) == CU_STREAM_CAPTURE_STATUS_NONE);
  CHECK(capture_status(s.s) == CU_STREAM_CAPTURE_STATUS_ACTIVE);
  CUgraph g = nullptr;
  CU_OK(api().cuStreamEndCapture(s.s, &g));
  REQUIRE(g != nullptr);
  CU_OK(api().cuGraphDestroy(g));
}

TEST_CASE("end capture without begin is an illegal state", "[conformance]") {
  REQUIRE_DRIVER_LOADED();
  PrimaryScope scope;
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  CUgraph g = nullptr;
  CU_EQ(api().cuStreamEndCapture(s.s, &g), CUDA_ERROR_ILLEGAL_STATE);
  CHECK(g == nullptr);
}

TEST_CASE("fork and join through events; end on a joined stream is unmatched", "[conformance]") {
  REQUIRE_DRIVER_LOADED();
  PrimaryScope scope;
  StreamHandle s1(CU_STREAM_NON_BLOCKING), s2(CU_STREAM_NON_BLOCKING);
  EventHandle fork, join;
  Log log;
  std::function<void()> a = [&] { log.add(1); }, b = [&] { log.add(2); }, c = [&] { log.add(3); };
  CU_OK(api().cuStreamBeginCapture(s1.s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU_OK(launch(s1.s, &a));
  CU_OK(api().cuEventRecord(fork.e, s1.s));
  CU_OK(api().cuStreamWaitEvent(s2.s, fork.e, 0));
  CHECK(capture_status(s2.s) == CU_STREAM_CAPTURE_STATUS_ACTIVE);
  // Measured on the H200: a joined stream reports the same capture id and graph.
  CUstreamCaptureStatus st{};
  cuuint64_t id1 = 0, id2 = 0;
  CUgraph g1 = nullptr, g2 = nullptr;
  CU_OK(api().cuStreamGetCaptureInfo_v2(s1.s, &st, &id1, &g1, nullptr, nullptr));
  CU_OK(api().cuStreamGetCaptureInfo_v2(s2.s, &st, &id2, &g2, nullptr, nullptr));
  CHECK(id1 == id2);
  CHECK(g1 == g2);
  CU_OK(launch(s2.s, &b));

  SECTION("join, then end on the origin") {
    CU_OK(api().cuEventRecord(join.e, s2.s));
    CU_OK(api().cuStreamWaitEvent(s1.s, join.e, 0));
    CU_OK(launch(s1.s, &c));
    CUgraph g = nullptr;
    CU_OK(api().cuStreamEndCapture(s1.s, &g));
    REQUIRE(g != nullptr);
    CHECK(node_count(g) == 3);
    CHECK(capture_status(s2.s) == CU_STREAM_CAPTURE_STATUS_NONE);
    CUgraphExec e = instantiate(g);
    CU_OK(api().cuGraphLaunch(e, s1.s));
    CU_OK(api().cuGraphLaunch(e, s1.s));
    CU_OK(api().cuStreamSynchronize(s1.s));
    CHECK(log.get() == std::vector<int>{1, 2, 3, 1, 2, 3});
    CU_OK(api().cuGraphExecDestroy(e));
    CU_OK(api().cuGraphDestroy(g));
  }
  SECTION("end on the joined stream") {
    CUgraph g = nullptr;
    CU_EQ(api().cuStreamEndCapture(s2.s, &g), CUDA_ERROR_STREAM_CAPTURE_UNMATCHED);
    CHECK(g == nullptr);
    // Whether the capture survives is not asserted (the emulator invalidates it).
    api().cuEventRecord(join.e, s2.s);
    api().cuStreamWaitEvent(s1.s, join.e, 0);
    end_capture_quietly(s1.s);
    CHECK(capture_status(s1.s) == CU_STREAM_CAPTURE_STATUS_NONE);
  }
}

TEST_CASE("ending with an unjoined fork is unjoined", "[conformance]") {
  REQUIRE_DRIVER_LOADED();
  PrimaryScope scope;
  StreamHandle s1(CU_STREAM_NON_BLOCKING), s2(CU_STREAM_NON_BLOCKING);
  EventHandle fork;
  std::function<void()> f = [] {};
  CU_OK(api().cuStreamBeginCapture(s1.s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU_OK(launch(s1.s, &f));
  CU_OK(api().cuEventRecord(fork.e, s1.s));
  CU_OK(api().cuStreamWaitEvent(s2.s, fork.e, 0));
  CU_OK(launch(s2.s, &f));
  CUgraph g = nullptr;
  CU_EQ(api().cuStreamEndCapture(s1.s, &g), CUDA_ERROR_STREAM_CAPTURE_UNJOINED);
  CHECK(g == nullptr);
  CHECK(capture_status(s1.s) == CU_STREAM_CAPTURE_STATUS_NONE);
}

TEST_CASE("after an unjoined end the forked stream has left capture", "[conformance][unsure]") {
  REQUIRE_DRIVER_LOADED();
  PrimaryScope scope;
  StreamHandle s1(CU_STREAM_NON_BLOCKING), s2(CU_STREAM_NON_BLOCKING);
  EventHandle fork;
  std::function<void()> f = [] {};
  CU_OK(api().cuStreamBeginCapture(s1.s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU_OK(api().cuEventRecord(fork.e, s1.s));
  CU_OK(api().cuStreamWaitEvent(s2.s, fork.e, 0));
  CU_OK(launch(s2.s, &f));
  end_capture_quietly(s1.s);
  CUstreamCaptureStatus st{};
  CU_CHECK_EQ(api().cuStreamIsCapturing(s2.s, &st), CUDA_SUCCESS);
  CHECK(st == CU_STREAM_CAPTURE_STATUS_NONE);
  end_capture_quietly(s2.s);
}

TEST_CASE("cuCtxSynchronize during a global capture is unsupported and invalidates",
          "[conformance]") {
  REQUIRE_DRIVER_LOADED();
  PrimaryScope scope;
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  CU_OK(api().cuStreamBeginCapture(s.s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU_EQ(api().cuCtxSynchronize(), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CUgraph g = nullptr;
  CU_EQ(api().cuStreamEndCapture(s.s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  CHECK(g == nullptr);
  CU_OK(api().cuCtxSynchronize());
}

TEST_CASE("thread capture mode exchange", "[conformance]") {
  REQUIRE_DRIVER_LOADED();
  std::thread([] {
    CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;
    CU_OK(api().cuThreadExchangeStreamCaptureMode(&m));
    CHECK(m == CU_STREAM_CAPTURE_MODE_GLOBAL);
    CU_OK(api().cuThreadExchangeStreamCaptureMode(&m));
    CHECK(m == CU_STREAM_CAPTURE_MODE_RELAXED);
  }).join();
}

// What a completion watcher meets: another thread, in the default (global) mode, queries an
// ordinary event while this thread captures in global mode; then the same from a thread whose
// mode is relaxed.
TEST_CASE("cuEventQuery by another thread during a global capture: global mode and relaxed",
          "[conformance]") {
  REQUIRE_DRIVER_LOADED();
  PrimaryScope scope;
  StreamHandle s(CU_STREAM_NON_BLOCKING), other(CU_STREAM_NON_BLOCKING);
  EventHandle e;
  CU_OK(api().cuEventRecord(e.e, other.s));
  CU_OK(api().cuStreamSynchronize(other.s));
  const CUcontext ctx = scope.ctx();
  const auto query_from_thread = [&](CUstreamCaptureMode mode) {
    CUresult r = CUDA_ERROR_UNKNOWN, exchanged = CUDA_ERROR_UNKNOWN;
    std::thread([&] {
      api().cuCtxSetCurrent(ctx);
      CUstreamCaptureMode m = mode;
      exchanged = api().cuThreadExchangeStreamCaptureMode(&m);
      r = api().cuEventQuery(e.e);
    }).join();
    CU_EQ(exchanged, CUDA_SUCCESS);
    return r;
  };
  CUgraph g = nullptr;
  CU_OK(api().cuStreamBeginCapture(s.s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU_EQ(query_from_thread(CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CU_EQ(api().cuStreamEndCapture(s.s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  CHECK(g == nullptr);

  CU_OK(api().cuStreamBeginCapture(s.s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU_EQ(query_from_thread(CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  CU_OK(api().cuStreamEndCapture(s.s, &g));
  REQUIRE(g != nullptr);
  CU_OK(api().cuGraphDestroy(g));
  g = nullptr;

  // The capturing thread itself, in global mode.
  CU_OK(api().cuStreamBeginCapture(s.s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU_EQ(api().cuEventQuery(e.e), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CU_EQ(api().cuStreamEndCapture(s.s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
}

// ============================================================================================
// Graphs
// ============================================================================================

TEST_CASE("graph replay of captured memset, memcpy and host nodes", "[conformance]") {
  REQUIRE_DRIVER_LOADED();
  PrimaryScope scope;
  constexpr size_t kN = 4096;
  DeviceBuffer a(kN * 4), b(kN * 4);
  StreamHandle cap(CU_STREAM_NON_BLOCKING), run(CU_STREAM_NON_BLOCKING);
  std::vector<uint32_t> src(kN), out(kN);
  for (size_t i = 0; i < kN; ++i) src[i] = static_cast<uint32_t>(i * 3);
  std::atomic<int> calls{0};
  std::function<void()> count = [&] { calls.fetch_add(1); };

  CU_OK(api().cuStreamBeginCapture(cap.s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU_OK(api().cuMemsetD32Async(a.p, 5, kN, cap.s));
  CU_OK(api().cuMemcpyDtoDAsync(b.p, a.p, kN * 4, cap.s));
  CU_OK(api().cuMemcpyHtoDAsync(a.p, src.data(), kN * 4, cap.s));
  CU_OK(launch(cap.s, &count));
  CUgraph g = nullptr;
  CU_OK(api().cuStreamEndCapture(cap.s, &g));
  REQUIRE(g != nullptr);
  CHECK(node_count(g) == 4);
  std::vector<CUgraphNode> nodes(4);
  size_t n = nodes.size();
  CU_OK(api().cuGraphGetNodes(g, nodes.data(), &n));
  REQUIRE(n == 4);
  std::vector<CUgraphNodeType> types;
  for (CUgraphNode node : nodes) {
    CUgraphNodeType t{};
    CU_OK(api().cuGraphNodeGetType(node, &t));
    types.push_back(t);
  }
  std::sort(types.begin(), types.end());
  std::vector<CUgraphNodeType> expected = {CU_GRAPH_NODE_TYPE_MEMCPY, CU_GRAPH_NODE_TYPE_MEMCPY,
                                           CU_GRAPH_NODE_TYPE_MEMSET, CU_GRAPH_NODE_TYPE_HOST};
  std::sort(expected.begin(), expected.end());
  CHECK(types == expected);
  CHECK(calls.load() == 0);  // nothing ran during capture

  CUDA_GRAPH_INSTANTIATE_PARAMS params{};
  params.flags = CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD;
  params.hUploadStream = run.s;
  CUgraphExec e = nullptr;
  CU_OK(api().cuGraphInstantiateWithParams(&e, g, &params));
  CHECK(params.result_out == CUDA_GRAPH_INSTANTIATE_SUCCESS);
  for (int i = 0; i < 3; ++i) {
    CU_OK(api().cuMemsetD32Async(a.p, 0, kN, run.s));
    CU_OK(api().cuMemsetD32Async(b.p, 0, kN, run.s));
    CU_OK(api().cuGraphLaunch(e, run.s));
    CU_OK(api().cuMemcpyDtoHAsync(out.data(), b.p, kN * 4, run.s));
    CU_OK(api().cuStreamSynchronize(run.s));
    CHECK(out == std::vector<uint32_t>(kN, 5));
    CU_OK(api().cuMemcpyDtoHAsync(out.data(), a.p, kN * 4, run.s));
    CU_OK(api().cuStreamSynchronize(run.s));
    CHECK(out == src);
  }
  CHECK(calls.load() == 3);
  CU_OK(api().cuGraphUpload(e, cap.s));
  CU_OK(api().cuGraphLaunch(e, cap.s));  // also on the capturing stream, now idle
  CU_OK(api().cuStreamSynchronize(cap.s));
  CHECK(calls.load() == 4);
  CU_OK(api().cuGraphExecDestroy(e));
  CU_OK(api().cuGraphDestroy(g));
}

TEST_CASE("explicit graphs: host and empty nodes in dependency order", "[conformance]") {
  REQUIRE_DRIVER_LOADED();
  PrimaryScope scope;
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  CUgraph g = nullptr;
  CU_OK(api().cuGraphCreate(&g, 0));
  Log log;
  std::function<void()> f1 = [&] { log.add(1); }, f2 = [&] { log.add(2); };
  CUDA_HOST_NODE_PARAMS p1{call_function, &f1}, p2{call_function, &f2};
  CUgraphNode n1 = nullptr, n2 = nullptr, empty = nullptr;
  CU_OK(api().cuGraphAddHostNode(&n1, g, nullptr, 0, &p1));
  CU_OK(api().cuGraphAddEmptyNode(&empty, g, &n1, 1));
  CU_OK(api().cuGraphAddHostNode(&n2, g, &empty, 1, &p2));
  CHECK(node_count(g) == 3);
  CUgraphExec e = instantiate(g);
  for (int i = 0; i < 3; ++i) CU_OK(api().cuGraphLaunch(e, s.s));
  CU_OK(api().cuStreamSynchronize(s.s));
  CHECK(log.get() == std::vector<int>{1, 2, 1, 2, 1, 2});
  CU_OK(api().cuGraphExecDestroy(e));
  CU_OK(api().cuGraphDestroy(g));
}

TEST_CASE("executable update: same topology succeeds", "[conformance]") {
  REQUIRE_DRIVER_LOADED();
  PrimaryScope scope;
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  Log log;
  std::function<void()> f1 = [&] { log.add(1); }, f2 = [&] { log.add(2); };
  auto capture_one = [&](std::function<void()>* f) {
    CU_OK(api().cuStreamBeginCapture(s.s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CU_OK(launch(s.s, f));
    CUgraph g = nullptr;
    CU_OK(api().cuStreamEndCapture(s.s, &g));
    return g;
  };
  CUgraph g1 = capture_one(&f1);
  CUgraph g2 = capture_one(&f2);
  CUgraphExec e = instantiate(g1);
  CUgraphExecUpdateResultInfo info{};
  CU_OK(api().cuGraphExecUpdate(e, g2, &info));
  CHECK(info.result == CU_GRAPH_EXEC_UPDATE_SUCCESS);
  CU_OK(api().cuGraphLaunch(e, s.s));
  CU_OK(api().cuStreamSynchronize(s.s));
  CHECK(log.get() == std::vector<int>{2});
  CU_OK(api().cuGraphExecDestroy(e));
  CU_OK(api().cuGraphDestroy(g1));
  CU_OK(api().cuGraphDestroy(g2));
}

TEST_CASE("executable update: node type and topology changes are refused",
          "[conformance][unsure]") {
  REQUIRE_DRIVER_LOADED();
  PrimaryScope scope;
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  DeviceBuffer buf(4096);
  std::function<void()> f = [] {};
  CU_OK(api().cuStreamBeginCapture(s.s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU_OK(launch(s.s, &f));
  CUgraph host = nullptr;
  CU_OK(api().cuStreamEndCapture(s.s, &host));
  CU_OK(api().cuStreamBeginCapture(s.s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU_OK(api().cuMemsetD32Async(buf.p, 1, 1024, s.s));
  CUgraph memset = nullptr;
  CU_OK(api().cuStreamEndCapture(s.s, &memset));
  CU_OK(api().cuStreamBeginCapture(s.s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU_OK(launch(s.s, &f));
  CU_OK(launch(s.s, &f));
  CUgraph two = nullptr;
  CU_OK(api().cuStreamEndCapture(s.s, &two));

  CUgraphExec e = instantiate(host);
  CUgraphExecUpdateResultInfo info{};
  CU_CHECK_EQ(api().cuGraphExecUpdate(e, memset, &info), CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
  CHECK(info.result == CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED);
  CHECK(info.errorNode != nullptr);
  info = {};
  CU_CHECK_EQ(api().cuGraphExecUpdate(e, two, &info), CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
  CHECK(info.result == CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED);
  CU_OK(api().cuGraphExecDestroy(e));
  for (CUgraph g : {host, memset, two}) CU_OK(api().cuGraphDestroy(g));
}

TEST_CASE("graph DOT output", "[conformance]") {
  REQUIRE_DRIVER_LOADED();
  PrimaryScope scope;
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  DeviceBuffer buf(4096);
  std::function<void()> f = [] {};
  CU_OK(api().cuStreamBeginCapture(s.s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU_OK(launch(s.s, &f));
  CU_OK(api().cuMemsetD32Async(buf.p, 1, 1024, s.s));
  CUgraph g = nullptr;
  CU_OK(api().cuStreamEndCapture(s.s, &g));
  char tmpl[] = "/tmp/custream-dot-XXXXXX";
  const int fd = mkstemp(tmpl);
  REQUIRE(fd >= 0);
  close(fd);
  auto read = [&](unsigned flags) {
    CU_OK(api().cuGraphDebugDotPrint(g, tmpl, flags));
    std::ifstream in(tmpl);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  const std::string plain = read(0);
  const std::string verbose = read(CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE);
  std::remove(tmpl);
  CHECK(plain.rfind("digraph", 0) == 0);
  CHECK(verbose.rfind("digraph", 0) == 0);
  CHECK(plain != verbose);
  CHECK(plain.find("->") != std::string::npos);
  CU_OK(api().cuGraphDestroy(g));
}

namespace {
struct Payload {
  std::atomic<int>* destroyed;
  Log* log;
};
void destroy_payload(void* p) {
  auto* payload = static_cast<Payload*>(p);
  payload->log->add(-1);
  payload->destroyed->fetch_add(1);
  delete payload;
}
}  // namespace

TEST_CASE("user object: destructor once, after graph and executable are gone", "[conformance]") {
  REQUIRE_DRIVER_LOADED();
  PrimaryScope scope;
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  std::atomic<int> destroyed{0};
  Log log;
  const auto me = std::this_thread::get_id();
  std::function<void()> f = [&] { log.add(1); };
  CU_OK(api().cuStreamBeginCapture(s.s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU_OK(launch(s.s, &f));
  CUstreamCaptureStatus st{};
  CUgraph capture_graph = nullptr;
  CU_OK(api().cuStreamGetCaptureInfo_v2(s.s, &st, nullptr, &capture_graph, nullptr, nullptr));
  CUuserObject obj = nullptr;
  CU_OK(api().cuUserObjectCreate(&obj, new Payload{&destroyed, &log}, destroy_payload, 1,
                                 CU_USER_OBJECT_NO_DESTRUCTOR_SYNC));
  CU_OK(api().cuGraphRetainUserObject(capture_graph, obj, 1, CU_GRAPH_USER_OBJECT_MOVE));
  CUgraph g = nullptr;
  CU_OK(api().cuStreamEndCapture(s.s, &g));
  CUgraphExec e = instantiate(g);
  CU_OK(api().cuGraphDestroy(g));
  for (int i = 0; i < 4; ++i) CU_OK(api().cuGraphLaunch(e, s.s));
  CU_OK(api().cuStreamSynchronize(s.s));
  std::this_thread::sleep_for(50ms);
  CHECK(destroyed.load() == 0);  // the executable holds its own reference
  CU_OK(api().cuGraphExecDestroy(e));
  CHECK(wait_until([&] { return destroyed.load() == 1; }));
  std::this_thread::sleep_for(100ms);
  CHECK(destroyed.load() == 1);
  CHECK(log.get() == std::vector<int>{1, 1, 1, 1, -1});
  CHECK(log.threads.back() != me);
}

namespace {
// Begins a global capture on `s` and attaches a counting payload to the capture graph.
void capture_with_payload(CUstream s, std::atomic<int>* destroyed, Log* log) {
  CU_OK(api().cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CUstreamCaptureStatus st{};
  CUgraph capture_graph = nullptr;
  CU_OK(api().cuStreamGetCaptureInfo_v2(s, &st, nullptr, &capture_graph, nullptr, nullptr));
  CUuserObject obj = nullptr;
  CU_OK(api().cuUserObjectCreate(&obj, new Payload{destroyed, log}, destroy_payload, 1,
                                 CU_USER_OBJECT_NO_DESTRUCTOR_SYNC));
  CU_OK(api().cuGraphRetainUserObject(capture_graph, obj, 1, CU_GRAPH_USER_OBJECT_MOVE));
}
}  // namespace

TEST_CASE("end of a global capture from another thread: wrong thread, and the capture is over",
          "[conformance]") {
  REQUIRE_DRIVER_LOADED();
  PrimaryScope scope;
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  std::atomic<int> destroyed{0};
  Log log;
  capture_with_payload(s.s, &destroyed, &log);
  CUresult end = CUDA_SUCCESS;
  CUgraph g = nullptr;
  std::thread([&] { end = api().cuStreamEndCapture(s.s, &g); }).join();
  CHECK(end == CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD);
  CHECK(g == nullptr);
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  CU_OK(api().cuStreamIsCapturing(s.s, &st));
  CHECK(st == CU_STREAM_CAPTURE_STATUS_NONE);  // measured on the H200: over, not still running
  CHECK(wait_until([&] { return destroyed.load() == 1; }));  // the graph was discarded
  CHECK(api().cuStreamEndCapture(s.s, &g) == CUDA_ERROR_ILLEGAL_STATE);
}

TEST_CASE("destroying a stream while it captures discards the capture and its user objects",
          "[conformance]") {
  REQUIRE_DRIVER_LOADED();
  PrimaryScope scope;
  std::atomic<int> destroyed{0};
  Log log;
  CUstream s = nullptr;
  CU_OK(api().cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  capture_with_payload(s, &destroyed, &log);
  CU_OK(api().cuStreamDestroy(s));
  CHECK(wait_until([&] { return destroyed.load() == 1; }));
  std::this_thread::sleep_for(50ms);
  CHECK(destroyed.load() == 1);
}

namespace {
// A one-host-node graph running `f`, whose user object owns a counting payload.
CUgraph host_graph_with_payload(std::function<void()>* f, std::atomic<int>* destroyed, Log* log) {
  CUgraph g = nullptr;
  CU_OK(api().cuGraphCreate(&g, 0));
  CUDA_HOST_NODE_PARAMS p{call_function, f};
  CUgraphNode node = nullptr;
  CU_OK(api().cuGraphAddHostNode(&node, g, nullptr, 0, &p));
  CUuserObject obj = nullptr;
  CU_OK(api().cuUserObjectCreate(&obj, new Payload{destroyed, log}, destroy_payload, 1,
                                 CU_USER_OBJECT_NO_DESTRUCTOR_SYNC));
  CU_OK(api().cuGraphRetainUserObject(g, obj, 1, CU_GRAPH_USER_OBJECT_MOVE));
  return g;
}
}  // namespace

TEST_CASE(
    "executable update: the executable takes the newer graph's user objects and drops its "
    "old ones once launches before the update are done",
    "[conformance]") {
  REQUIRE_DRIVER_LOADED();
  PrimaryScope scope;
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  std::atomic<int> gone1{0}, gone2{0}, gone3{0};
  Log log;
  std::atomic<bool> open{false};
  std::function<void()> gate = [&] {
    while (!open.load()) std::this_thread::sleep_for(1ms);
  };
  std::function<void()> f1 = [&] { log.add(1); }, f2 = [&] { log.add(2); },
                        f3 = [&] { log.add(3); };
  CUgraph g1 = host_graph_with_payload(&f1, &gone1, &log);
  CUgraph g2 = host_graph_with_payload(&f2, &gone2, &log);
  CUgraphExec e = instantiate(g1);
  CUgraphExecUpdateResultInfo info{};
  CU_OK(api().cuGraphExecUpdate(e, g2, &info));
  CU_OK(api().cuGraphDestroy(g2));  // the executable holds its own references to g2's objects
  CU_OK(api().cuGraphDestroy(g1));  // and none of g1's any more
  CHECK(wait_until([&] { return gone1.load() == 1; }));
  std::this_thread::sleep_for(50ms);
  CHECK(gone2.load() == 0);

  CU_OK(launch(s.s, &gate));
  CU_OK(api().cuGraphLaunch(e, s.s));  // pending behind the gate: will run f2
  CUgraph g3 = host_graph_with_payload(&f3, &gone3, &log);
  info = {};
  CU_OK(api().cuGraphExecUpdate(e, g3, &info));
  CU_OK(api().cuGraphDestroy(g3));
  std::this_thread::sleep_for(100ms);
  CHECK(gone2.load() == 0);  // the pending launch still holds g2's objects
  open = true;
  CU_OK(api().cuStreamSynchronize(s.s));
  CHECK(wait_until([&] { return gone2.load() == 1; }));
  CHECK(gone3.load() == 0);
  CU_OK(api().cuGraphLaunch(e, s.s));
  CU_OK(api().cuStreamSynchronize(s.s));
  CU_OK(api().cuGraphExecDestroy(e));
  CHECK(wait_until([&] { return gone3.load() == 1; }));
  std::this_thread::sleep_for(50ms);
  CHECK(gone1.load() == 1);
  CHECK(gone2.load() == 1);
  CHECK(gone3.load() == 1);
  CHECK(log.get() == std::vector<int>{-1, 2, -1, 3, -1});
}

TEST_CASE("a graph launch on a capturing stream is refused and invalidates the capture",
          "[conformance]") {
  REQUIRE_DRIVER_LOADED();
  PrimaryScope scope;
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  std::atomic<int> gone{0};
  Log log;
  std::function<void()> f = [&] { log.add(1); };
  CUgraph g = host_graph_with_payload(&f, &gone, &log);
  CUgraphExec e = instantiate(g);
  CU_OK(api().cuStreamBeginCapture(s.s, CU_STREAM_CAPTURE_MODE_RELAXED));
  // Measured on the H200 (driver 580): no child-graph node, the capture is invalidated.
  CU_CHECK_EQ(api().cuGraphLaunch(e, s.s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CUstreamCaptureStatus st{};
  CU_OK(api().cuStreamIsCapturing(s.s, &st));
  CHECK(st == CU_STREAM_CAPTURE_STATUS_INVALIDATED);
  CUgraph outer = nullptr;
  CU_CHECK_EQ(api().cuStreamEndCapture(s.s, &outer), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  CHECK(outer == nullptr);
  // The executable is untouched: it still launches, and holds its payload.
  CU_OK(api().cuGraphLaunch(e, s.s));
  CU_OK(api().cuStreamSynchronize(s.s));
  CU_OK(api().cuGraphDestroy(g));
  std::this_thread::sleep_for(50ms);
  CHECK(gone.load() == 0);
  CU_OK(api().cuGraphExecDestroy(e));
  CHECK(wait_until([&] { return gone.load() == 1; }));
  CHECK(log.get() == std::vector<int>{1, -1});
}

TEST_CASE(
    "a created context: current once made, its own streams and events; another context's "
    "event cannot be recorded on its stream but can be waited on",
    "[conformance]") {
  REQUIRE_DRIVER_LOADED();
  PrimaryScope scope;
  CUcontext primary = nullptr, created = nullptr, now = nullptr;
  CU_OK(api().cuCtxGetCurrent(&primary));
  REQUIRE(primary != nullptr);
  CU_OK(api().cuCtxCreate(&created, 0, 0));
  CU_OK(api().cuCtxGetCurrent(&now));
  CHECK(now == created);  // pushed onto the thread's stack
  CHECK(created != primary);
  CUstream in_created = nullptr;
  CU_OK(api().cuStreamCreate(&in_created, CU_STREAM_NON_BLOCKING));
  CUevent created_event = nullptr;
  CU_OK(api().cuEventCreate(&created_event, CU_EVENT_DISABLE_TIMING));
  CUcontext popped = nullptr;
  CU_OK(api().cuCtxPopCurrent(&popped));
  CHECK(popped == created);
  CU_OK(api().cuCtxGetCurrent(&now));
  CHECK(now == primary);
  CUcontext of_stream = nullptr;
  CU_OK(api().cuStreamGetCtx(in_created, &of_stream));
  CHECK(of_stream == created);
  CUdevice device = -1;
  CU_OK(api().cuCtxGetDevice_v2(&device, created));
  CHECK(device == 0);
  {
    StreamHandle in_primary(CU_STREAM_NON_BLOCKING);
    EventHandle primary_event;
    // Recorded across contexts: refused. Waited on across contexts: allowed.
    CU_CHECK_EQ(api().cuEventRecord(primary_event.e, in_created), CUDA_ERROR_INVALID_HANDLE);
    CU_CHECK_EQ(api().cuEventRecord(created_event, in_primary.s), CUDA_ERROR_INVALID_HANDLE);
    CU_OK(api().cuEventRecord(created_event, in_created));
    CU_OK(api().cuStreamWaitEvent(in_primary.s, created_event, 0));
    CU_OK(api().cuEventRecord(primary_event.e, in_primary.s));
    CU_OK(api().cuStreamWaitEvent(in_created, primary_event.e, 0));
    CU_OK(api().cuStreamSynchronize(in_created));
    CU_OK(api().cuStreamSynchronize(in_primary.s));
    CU_OK(api().cuEventQuery(created_event));
  }
  CU_OK(api().cuEventDestroy(created_event));
  CU_OK(api().cuStreamDestroy(in_created));
  CU_OK(api().cuCtxDestroy(created));
  CU_OK(api().cuCtxGetCurrent(&now));
  CHECK(now == primary);
  // Destroying the current context pops it: the one below becomes current again.
  CUcontext second = nullptr;
  CU_OK(api().cuCtxCreate(&second, 0, 0));
  CU_OK(api().cuCtxDestroy(second));
  CU_OK(api().cuCtxGetCurrent(&now));
  CHECK(now == primary);
}

TEST_CASE("an event cannot be recorded on another device's stream; it can be waited on",
          "[conformance]") {
  REQUIRE_DRIVER_LOADED();
  int n = 0;
  CU_OK(api().cuDeviceGetCount(&n));
  if (n < 2) CUSTREAM_SKIP("needs 2 devices");
  // Device 1's primary context stays retained for the whole case: its last release would
  // destroy it and e1 with it (the H200 then answers CUDA_ERROR_CONTEXT_IS_DESTROYED).
  PrimaryScope one(1);
  CUevent e1 = nullptr;
  CU_OK(api().cuEventCreate(&e1, CU_EVENT_DISABLE_TIMING));
  {
    PrimaryScope zero(0);
    StreamHandle s0(CU_STREAM_NON_BLOCKING);
    CU_CHECK_EQ(api().cuEventRecord(e1, s0.s), CUDA_ERROR_INVALID_HANDLE);
    CU_CHECK_EQ(api().cuEventRecord(e1, nullptr), CUDA_ERROR_INVALID_HANDLE);  // device 0's
    CU_CHECK_EQ(api().cuStreamWaitEvent(s0.s, e1, 0), CUDA_SUCCESS);
    CU_OK(api().cuStreamSynchronize(s0.s));
  }
  CU_OK(api().cuEventRecord(e1, nullptr));  // device 1's null stream: its own context
  CU_OK(api().cuEventSynchronize(e1));
  CU_OK(api().cuEventDestroy(e1));
}

TEST_CASE("destroying graph and executable while a launch is in flight", "[conformance]") {
  REQUIRE_DRIVER_LOADED();
  PrimaryScope scope;
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  std::atomic<int> destroyed{0};
  Log log;
  std::function<void()> slow = [&] {
    std::this_thread::sleep_for(200ms);
    log.add(1);
  };
  CUgraph g = nullptr;
  CU_OK(api().cuGraphCreate(&g, 0));
  CUDA_HOST_NODE_PARAMS p{call_function, &slow};
  CUgraphNode node = nullptr;
  CU_OK(api().cuGraphAddHostNode(&node, g, nullptr, 0, &p));
  CUuserObject obj = nullptr;
  CU_OK(api().cuUserObjectCreate(&obj, new Payload{&destroyed, &log}, destroy_payload, 1,
                                 CU_USER_OBJECT_NO_DESTRUCTOR_SYNC));
  CU_OK(api().cuGraphRetainUserObject(g, obj, 1, CU_GRAPH_USER_OBJECT_MOVE));
  CUgraphExec e = instantiate(g);
  CU_OK(api().cuGraphLaunch(e, s.s));
  CU_OK(api().cuGraphExecDestroy(e));
  CU_OK(api().cuGraphDestroy(g));
  CU_OK(api().cuStreamSynchronize(s.s));
  CHECK(wait_until([&] { return destroyed.load() == 1; }));
  CHECK(log.get() == std::vector<int>{1, -1});
}

// ============================================================================================
// Kernels
// ============================================================================================

TEST_CASE("a garbage module image is refused", "[conformance]") {
  REQUIRE_DRIVER_LOADED();
  PrimaryScope scope;
  const char junk[] = "this is not a cubin";
  CUmodule m = nullptr;
  CHECK(api().cuModuleLoadData(&m, junk) != CUDA_SUCCESS);
}

// add(int* data, int amount): data[0] += amount (one thread); PTX for sm_70, JIT-compiled on
// the GPU; the emulator reads the kernel names and parameter sizes from it.
constexpr const char* kKernelPtx = R"(
.version 7.0
.target sm_70
.address_size 64

.visible .entry add(
  .param .u64 data,
  .param .u32 amount
)
{
  .reg .b32 %r<4>;
  .reg .b64 %rd<3>;
  ld.param.u64 %rd1, [data];
  ld.param.u32 %r1, [amount];
  cvta.to.global.u64 %rd2, %rd1;
  ld.global.u32 %r2, [%rd2];
  add.s32 %r3, %r2, %r1;
  st.global.u32 [%rd2], %r3;
  ret;
}
)";

TEST_CASE("PTX modules: functions by name, launch checks, another context's stream",
          "[conformance]") {
  REQUIRE_DRIVER_LOADED();
  PrimaryScope scope;
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  CUmodule m = nullptr;
  CU_OK(api().cuModuleLoadData(&m, kKernelPtx));
  CUfunction f = nullptr;
  CU_EQ(api().cuModuleGetFunction(&f, m, "no_such_kernel"), CUDA_ERROR_NOT_FOUND);
  CU_OK(api().cuModuleGetFunction(&f, m, "add"));
  CUfunction again = nullptr;
  CU_OK(api().cuModuleGetFunction(&again, m, "add"));
  CHECK(again == f);
  DeviceBuffer buf(sizeof(int));
  CU_OK(api().cuMemsetD32Async(buf.p, 0, 1, s.s));
  CUdeviceptr p = buf.p;
  int amount = 1;
  void* args[] = {&p, &amount};
  CU_EQ(api().cuLaunchKernel(f, 0, 1, 1, 1, 1, 1, 0, s.s, args, nullptr), CUDA_ERROR_INVALID_VALUE);
  CU_EQ(api().cuLaunchKernel(f, 1, 1, 1, 1025, 1, 1, 0, s.s, args, nullptr),
        CUDA_ERROR_INVALID_VALUE);
  CU_OK(api().cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s.s, args, nullptr));
  CU_OK(api().cuStreamSynchronize(s.s));
  int n = 0;
  CU_OK(api().cuDeviceGetCount(&n));
  if (n > 1) {  // a function of device 0's context on device 1's stream
    PrimaryScope one(1);
    StreamHandle s1(CU_STREAM_NON_BLOCKING);
    CU_EQ(api().cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s1.s, args, nullptr),
          CUDA_ERROR_INVALID_HANDLE);
  }
  CU_OK(api().cuModuleUnload(m));
}

// ============================================================================================
// Green contexts (measured on the H200, driver 580; the SM counts of splits depend on the
// device: only device-independent rules are checked)
// ============================================================================================

namespace {

CUdevResource device_sm_resource(int dev = 0) {
  CUdevResource r{};
  CU_OK(api().cuDeviceGetDevResource(dev, &r, CU_DEV_RESOURCE_TYPE_SM));
  REQUIRE(r.type == CU_DEV_RESOURCE_TYPE_SM);
  return r;
}

int compute_capability_major(int dev = 0) {
  int major = 0;
  CU_OK(api().cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
  return major;
}

// The size of a group of a split by count on compute capability 9.x: minCount rounded up to
// the granularity (8; 2 ignoring co-scheduling), at least the granularity.
unsigned cc9_group_size(unsigned min_count, unsigned granularity = 8) {
  return std::max(granularity, (min_count + granularity - 1) / granularity * granularity);
}

// A green context of device `dev` made of one group of at least `min_sms` SMs of a split of the
// whole device, and its CUcontext (cuCtxFromGreenCtx). Destroyed at scope exit unless the case
// destroyed it itself (forget()).
class GreenScope {
 public:
  explicit GreenScope(unsigned min_sms = 16, int dev = 0) {
    CUdevResource whole = device_sm_resource(dev);
    CUdevResource group{};
    unsigned n = 1;
    CU_OK(api().cuDevSmResourceSplitByCount(&group, &n, &whole, nullptr, 0, min_sms));
    REQUIRE(n == 1);
    sms_ = group.sm.smCount;
    CUdevResourceDesc desc = nullptr;
    CU_OK(api().cuDevResourceGenerateDesc(&desc, &group, 1));
    CU_OK(api().cuGreenCtxCreate(&green_, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM));
    CU_OK(api().cuCtxFromGreenCtx(&ctx_, green_));
  }
  ~GreenScope() {
    if (green_) api().cuGreenCtxDestroy(green_);
  }
  GreenScope(const GreenScope&) = delete;
  GreenScope& operator=(const GreenScope&) = delete;
  CUgreenCtx get() const { return green_; }
  CUcontext ctx() const { return ctx_; }  // the converted context
  unsigned sms() const { return sms_; }
  void forget() { green_ = nullptr; }  // the case destroyed it

 private:
  CUgreenCtx green_ = nullptr;
  CUcontext ctx_ = nullptr;
  unsigned sms_ = 0;
};

struct GreenStream {
  CUstream s = nullptr;
  explicit GreenStream(CUgreenCtx g, int priority = 0) {
    CU_OK(api().cuGreenCtxStreamCreate(&s, g, CU_STREAM_NON_BLOCKING, priority));
  }
  ~GreenStream() {
    if (s) api().cuStreamDestroy(s);
  }
  GreenStream(const GreenStream&) = delete;
  GreenStream& operator=(const GreenStream&) = delete;
};

// A host function with no state: safe whenever the driver runs it.
void sleep_20ms(void*) { std::this_thread::sleep_for(20ms); }

// An event made with `ctx` current (the current context is restored).
CUevent event_in(CUcontext ctx, CUcontext restore) {
  CUevent e = nullptr;
  CU_OK(api().cuCtxSetCurrent(ctx));
  CU_OK(api().cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
  CU_OK(api().cuCtxSetCurrent(restore));
  return e;
}

}  // namespace

TEST_CASE("green contexts: SM resources of a device and of its primary context",
          "[conformance][green]") {
  REQUIRE_GREEN_CONTEXTS();
  PrimaryScope scope;
  int sms = 0;
  CU_OK(api().cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0));
  CUdevResource r{};
  CU_OK(api().cuDeviceGetDevResource(0, &r, CU_DEV_RESOURCE_TYPE_SM));
  CHECK(r.type == CU_DEV_RESOURCE_TYPE_SM);
  CHECK(r.sm.smCount == static_cast<unsigned>(sms));
  if (compute_capability_major() == 9) {  // measured on the H200 (132 SMs: not a multiple)
    CHECK(r.sm.minSmPartitionSize == 8);
    CHECK(r.sm.smCoscheduledAlignment == 8);
  }
  CU_CHECK_EQ(api().cuDeviceGetDevResource(0, &r, CU_DEV_RESOURCE_TYPE_INVALID),
              CUDA_ERROR_INVALID_RESOURCE_TYPE);
  CU_CHECK_EQ(api().cuDeviceGetDevResource(99, &r, CU_DEV_RESOURCE_TYPE_SM),
              CUDA_ERROR_INVALID_DEVICE);
  CUdevResource p{};
  CU_OK(api().cuCtxGetDevResource(scope.ctx(), &p, CU_DEV_RESOURCE_TYPE_SM));
  CHECK(p.type == CU_DEV_RESOURCE_TYPE_SM);
  CHECK(p.sm.smCount == static_cast<unsigned>(sms));
}

TEST_CASE("green contexts: SM splits by count", "[conformance][green]") {
  REQUIRE_GREEN_CONTEXTS();
  PrimaryScope scope;
  const CUdevResource whole = device_sm_resource();
  const unsigned total = whole.sm.smCount;
  const bool cc9 = compute_capability_major() == 9;
  auto split = api().cuDevSmResourceSplitByCount;

  // The count alone (result NULL), then as many groups as that: sizes, remaining, counts.
  for (unsigned min_count : {0u, 1u, 8u, 9u, 17u, 33u, 66u}) {
    INFO("minCount " << min_count);
    unsigned possible = 0;
    CU_OK(split(nullptr, &possible, &whole, nullptr, 0, min_count));
    REQUIRE(possible >= 1);
    std::vector<CUdevResource> groups(possible);
    CUdevResource rest{};
    unsigned made = possible;
    CU_OK(split(groups.data(), &made, &whole, &rest, 0, min_count));
    CHECK(made == possible);
    const unsigned size = groups[0].sm.smCount;
    CHECK(size >= min_count);
    if (cc9) CHECK(size == cc9_group_size(min_count));
    for (const CUdevResource& g : groups) {
      CHECK(g.type == CU_DEV_RESOURCE_TYPE_SM);
      CHECK(g.sm.smCount == size);
    }
    CHECK(made * size + rest.sm.smCount == total);
  }

  // Fewer groups than possible: as many as asked for; remaining may be NULL.
  CUdevResource two[2];
  CUdevResource rest{};
  unsigned n = 2;
  CU_OK(split(two, &n, &whole, &rest, 0, 33));
  CHECK(n == 2);
  if (cc9) CHECK(two[0].sm.smCount == 40);
  CHECK(two[1].sm.smCount == two[0].sm.smCount);
  CHECK(2 * two[0].sm.smCount + rest.sm.smCount == total);
  n = 1;
  CU_OK(split(two, &n, &whole, nullptr, 0, 8));
  CHECK(n == 1);
  // More than possible: as many as possible.
  unsigned possible = 0;
  CU_OK(split(nullptr, &possible, &whole, nullptr, 0, 8));
  std::vector<CUdevResource> many(100);
  n = 100;
  CU_OK(split(many.data(), &n, &whole, &rest, 0, 8));
  CHECK(n == possible);
  CHECK(n < 100);
  CHECK(n * many[0].sm.smCount + rest.sm.smCount == total);

  // Ignoring co-scheduling: a finer granularity (2 on compute capability 9.x).
  n = 1;
  CU_OK(split(two, &n, &whole, nullptr, CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING, 3));
  CHECK(n == 1);
  CHECK(two[0].sm.smCount >= 3);
  if (cc9) CHECK(two[0].sm.smCount == 4);
  // Flag bits the driver does not know are ignored.
  n = 1;
  CU_OK(split(two, &n, &whole, nullptr, 0x100, 8));
  CHECK(n == 1);

  // minCount up to every SM: one group of them all, even where rounding up would pass them.
  n = 1;
  CU_OK(split(two, &n, &whole, &rest, 0, total));
  CHECK(n == 1);
  CHECK(two[0].sm.smCount == total);
  CHECK(rest.sm.smCount == 0);

  // The outputs of a split (groups and remaining) cannot be split again (cuda.h), not even
  // counted; the resources of a green context made of one can.
  CUdevResource group{};
  n = 1;
  CU_OK(split(&group, &n, &whole, &rest, 0, 33));
  n = 1;
  CUdevResource part{};
  CU_CHECK_EQ(split(&part, &n, &group, nullptr, 0, 8), CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION);
  n = 0;
  CU_CHECK_EQ(split(nullptr, &n, &group, nullptr, 0, 8), CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION);
  n = 1;
  CU_CHECK_EQ(split(&part, &n, &rest, nullptr, 0, 8), CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION);
  GreenScope green(33);
  CUdevResource of_green{}, of_converted{};
  CU_OK(api().cuGreenCtxGetDevResource(green.get(), &of_green, CU_DEV_RESOURCE_TYPE_SM));
  CU_OK(api().cuCtxGetDevResource(green.ctx(), &of_converted, CU_DEV_RESOURCE_TYPE_SM));
  for (const CUdevResource* in : {&of_green, &of_converted}) {
    unsigned count = 0;
    CU_OK(split(nullptr, &count, in, nullptr, 0, 8));
    REQUIRE(count >= 1);
    std::vector<CUdevResource> parts(count);
    n = count;
    CU_OK(split(parts.data(), &n, in, &rest, 0, 8));
    CHECK(n == count);
    if (cc9) CHECK(parts[0].sm.smCount == 8);
    CHECK(n * parts[0].sm.smCount + rest.sm.smCount == in->sm.smCount);
  }

  // Errors.
  n = 1;
  CU_CHECK_EQ(split(two, &n, &whole, nullptr, 0, total + 1),
              CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION);
  CU_CHECK_EQ(split(two, nullptr, &whole, nullptr, 0, 8), CUDA_ERROR_INVALID_VALUE);
  n = 0;
  CU_CHECK_EQ(split(two, &n, &whole, nullptr, 0, 8), CUDA_ERROR_INVALID_VALUE);
}

TEST_CASE("green contexts: descriptors, creation, resources and ids", "[conformance][green]") {
  REQUIRE_GREEN_CONTEXTS();
  PrimaryScope scope;
  CUdevResource whole = device_sm_resource();
  CUdevResource parts[2];  // a group and the remaining SMs
  CUdevResource group{};
  unsigned n = 1;
  CU_OK(api().cuDevSmResourceSplitByCount(&group, &n, &whole, &parts[1], 0, 16));
  REQUIRE(n == 1);
  parts[0] = group;
  CUdevResourceDesc one = nullptr, pair = nullptr, all = nullptr;
  CU_OK(api().cuDevResourceGenerateDesc(&one, &group, 1));
  CU_OK(api().cuDevResourceGenerateDesc(&pair, parts, 2));
  CU_OK(api().cuDevResourceGenerateDesc(&all, &whole, 1));

  CUgreenCtx g = nullptr;
  CU_CHECK_EQ(api().cuGreenCtxCreate(&g, one, 0, 0), CUDA_ERROR_INVALID_VALUE);
  CU_CHECK_EQ(api().cuGreenCtxCreate(&g, one, 99, CU_GREEN_CTX_DEFAULT_STREAM),
              CUDA_ERROR_INVALID_DEVICE);
  // One descriptor, two green contexts; the current context does not change.
  CUgreenCtx a = nullptr, b = nullptr;
  CU_OK(api().cuGreenCtxCreate(&a, one, 0, CU_GREEN_CTX_DEFAULT_STREAM));
  CU_OK(api().cuGreenCtxCreate(&b, one, 0, CU_GREEN_CTX_DEFAULT_STREAM));
  CHECK(a != b);
  CUcontext now = nullptr;
  CU_OK(api().cuCtxGetCurrent(&now));
  CHECK(now == scope.ctx());

  CUdevResource r{};
  CU_OK(api().cuGreenCtxGetDevResource(a, &r, CU_DEV_RESOURCE_TYPE_SM));
  CHECK(r.type == CU_DEV_RESOURCE_TYPE_SM);
  CHECK(r.sm.smCount == group.sm.smCount);
  CUcontext ca = nullptr;
  CU_OK(api().cuCtxFromGreenCtx(&ca, a));
  CU_OK(api().cuCtxGetDevResource(ca, &r, CU_DEV_RESOURCE_TYPE_SM));
  CHECK(r.sm.smCount == group.sm.smCount);
  CU_OK(api().cuCtxGetDevResource(scope.ctx(), &r, CU_DEV_RESOURCE_TYPE_SM));
  CHECK(r.sm.smCount == whole.sm.smCount);

  unsigned long long id_a = 0, id_ca = 0, id_b = 0;
  CU_OK(api().cuGreenCtxGetId(a, &id_a));
  CU_OK(api().cuCtxGetId(ca, &id_ca));
  CU_OK(api().cuGreenCtxGetId(b, &id_b));
  CHECK(id_a == id_ca);
  CHECK(id_a != id_b);
  CU_OK(api().cuGreenCtxDestroy(b));
  CU_OK(api().cuGreenCtxDestroy(a));
}

TEST_CASE("green contexts: the converted context is stable, can be current and synchronized",
          "[conformance][green]") {
  REQUIRE_GREEN_CONTEXTS();
  PrimaryScope scope;
  GreenScope green;
  CUcontext c1 = nullptr, c2 = nullptr, now = nullptr;
  CU_OK(api().cuCtxFromGreenCtx(&c1, green.get()));
  CU_OK(api().cuCtxFromGreenCtx(&c2, green.get()));
  CHECK(c1 == c2);
  CHECK(c1 != scope.ctx());
  CUdevice dev = -1;
  CU_OK(api().cuCtxGetDevice_v2(&dev, c1));
  CHECK(dev == 0);

  CU_OK(api().cuCtxSetCurrent(c1));
  CU_OK(api().cuCtxGetCurrent(&now));
  CHECK(now == c1);
  CU_OK(api().cuCtxSynchronize());
  CU_OK(api().cuCtxSetCurrent(scope.ctx()));

  CU_OK(api().cuCtxPushCurrent(c1));
  CU_OK(api().cuCtxGetCurrent(&now));
  CHECK(now == c1);
  CU_OK(api().cuCtxSynchronize());
  CUcontext popped = nullptr;
  CU_OK(api().cuCtxPopCurrent(&popped));
  CHECK(popped == c1);
  CU_OK(api().cuCtxGetCurrent(&now));
  CHECK(now == scope.ctx());
}

TEST_CASE("green contexts: streams, and the contexts cuStreamGetCtx infers",
          "[conformance][green]") {
  REQUIRE_GREEN_CONTEXTS();
  PrimaryScope scope;
  GreenScope green;
  CUstream s = nullptr;
  CU_CHECK_EQ(api().cuGreenCtxStreamCreate(&s, green.get(), 0, 0), CUDA_ERROR_INVALID_VALUE);
  GreenStream gs(green.get(), -5);
  CUcontext now = nullptr;
  CU_OK(api().cuCtxGetCurrent(&now));
  CHECK(now == scope.ctx());  // not changed
  unsigned flags = 0;
  CU_OK(api().cuStreamGetFlags(gs.s, &flags));
  CHECK(flags == CU_STREAM_NON_BLOCKING);
  int priority = 0;
  CU_OK(api().cuStreamGetPriority(gs.s, &priority));
  CHECK(priority == -5);
  CUdevice dev = -1;
  CU_OK(api().cuStreamGetDevice(gs.s, &dev));
  CHECK(dev == 0);

  // cuStreamGetCtx answers the converted context; cuStreamGetCtx_v2 the primary context and
  // the green context.
  CUcontext c = nullptr;
  CU_OK(api().cuStreamGetCtx(gs.s, &c));
  CHECK(c == green.ctx());
  CUgreenCtx g = nullptr;
  CU_OK(api().cuStreamGetCtx_v2(gs.s, &c, &g));
  CHECK(c == scope.ctx());
  CHECK(g == green.get());
  g = nullptr;
  CU_OK(api().cuStreamGetGreenCtx(gs.s, &g));
  CHECK(g == green.get());

  // Streams of the primary context and of a created context: no green context.
  StreamHandle ps(CU_STREAM_NON_BLOCKING);
  g = green.get();
  CU_OK(api().cuStreamGetGreenCtx(ps.s, &g));
  CHECK(g == nullptr);
  g = green.get();
  CU_OK(api().cuStreamGetCtx_v2(ps.s, &c, &g));
  CHECK(c == scope.ctx());
  CHECK(g == nullptr);
  CUcontext created = nullptr;
  CU_OK(api().cuCtxCreate(&created, 0, 0));
  CUstream cs = nullptr;
  CU_OK(api().cuStreamCreate(&cs, CU_STREAM_NON_BLOCKING));
  CU_OK(api().cuCtxPopCurrent(nullptr));
  g = green.get();
  CU_OK(api().cuStreamGetCtx_v2(cs, &c, &g));
  CHECK(c == created);
  CHECK(g == nullptr);
  CU_OK(api().cuStreamDestroy(cs));
  CU_OK(api().cuCtxDestroy(created));

  // With the converted context current: cuStreamCreate makes a stream of the green context,
  // and the null stream is the green context's.
  CU_OK(api().cuCtxSetCurrent(green.ctx()));
  CUstream made = nullptr;
  CU_OK(api().cuStreamCreate(&made, CU_STREAM_NON_BLOCKING));
  g = nullptr;
  CU_OK(api().cuStreamGetGreenCtx(made, &g));
  CHECK(g == green.get());
  g = nullptr;
  CU_OK(api().cuStreamGetCtx_v2(nullptr, &c, &g));
  CHECK(c == scope.ctx());
  CHECK(g == green.get());
  CU_OK(api().cuCtxSetCurrent(scope.ctx()));

  // Work runs as on any stream.
  std::atomic<int> runs{0};
  std::function<void()> count = [&] { runs.fetch_add(1); };
  CU_OK(launch(gs.s, &count));
  CU_OK(launch(made, &count));
  CU_OK(api().cuStreamSynchronize(gs.s));
  CU_OK(api().cuStreamSynchronize(made));
  CHECK(runs.load() == 2);
  CU_OK(api().cuStreamQuery(gs.s));
  CU_OK(api().cuStreamDestroy(made));
}

TEST_CASE("green contexts: no per-thread stream while a green context is current",
          "[conformance][green]") {
  REQUIRE_GREEN_CONTEXTS();
  PrimaryScope scope;
  GreenScope green;
  CU_OK(api().cuCtxSetCurrent(green.ctx()));
  CUcontext c = nullptr;
  CUgreenCtx g = nullptr;
  // cuda.h, cuStreamGetCtx_v2: "CU_STREAM_PER_THREAD ... will return CUDA_ERROR_INVALID_HANDLE
  // if a green context is current" (so on the H200).
  CU_CHECK_EQ(api().cuStreamGetCtx_v2(CU_STREAM_PER_THREAD, &c, &g), CUDA_ERROR_INVALID_HANDLE);
  CU_OK(api().cuCtxSetCurrent(scope.ctx()));
}

TEST_CASE("green contexts share the primary context's events, modules and graphs",
          "[conformance][green]") {
  REQUIRE_GREEN_CONTEXTS();
  PrimaryScope scope;
  GreenScope green;
  GreenStream gs(green.get());
  StreamHandle ps(CU_STREAM_NON_BLOCKING);

  // Events: one made in the primary context is recorded on a green stream, one made with the
  // converted context current on a primary stream; waits go both ways.
  EventHandle primary_event;
  CUevent green_event = event_in(green.ctx(), scope.ctx());
  CU_OK(api().cuEventRecord(primary_event.e, gs.s));
  CU_OK(api().cuStreamWaitEvent(ps.s, primary_event.e, 0));
  CU_OK(api().cuEventRecord(green_event, ps.s));
  CU_OK(api().cuStreamWaitEvent(gs.s, green_event, 0));
  CU_OK(api().cuEventRecord(green_event, gs.s));
  CU_OK(api().cuStreamSynchronize(gs.s));
  CU_OK(api().cuStreamSynchronize(ps.s));
  CU_OK(api().cuEventQuery(green_event));
  CU_OK(api().cuEventQuery(primary_event.e));

  // Waiting across contexts of one device: a created context's event on a green stream, and
  // the green context's event on the created context's stream.
  CUcontext created = nullptr;
  CU_OK(api().cuCtxCreate(&created, 0, 0));
  CUstream cs = nullptr;
  CU_OK(api().cuStreamCreate(&cs, CU_STREAM_NON_BLOCKING));
  CUevent created_event = nullptr;
  CU_OK(api().cuEventCreate(&created_event, CU_EVENT_DISABLE_TIMING));
  CU_OK(api().cuCtxPopCurrent(nullptr));
  CU_OK(api().cuEventRecord(created_event, cs));
  CU_OK(api().cuStreamWaitEvent(gs.s, created_event, 0));
  CU_OK(api().cuStreamWaitEvent(cs, green_event, 0));
  CU_OK(api().cuStreamSynchronize(gs.s));
  CU_OK(api().cuStreamSynchronize(cs));
  CU_OK(api().cuEventDestroy(created_event));
  CU_OK(api().cuStreamDestroy(cs));
  CU_OK(api().cuCtxDestroy(created));

  // Modules: loaded in the primary context, launched on a green stream; loaded with the
  // converted context current, launched on a primary stream (and a green one).
  DeviceBuffer buf(sizeof(int));
  CU_OK(api().cuMemsetD32Async(buf.p, 0, 1, gs.s));
  CUdeviceptr p = buf.p;
  int amount = 1;
  void* args[] = {&p, &amount};
  CUmodule in_primary = nullptr, in_green = nullptr;
  CU_OK(api().cuModuleLoadData(&in_primary, kKernelPtx));
  CU_OK(api().cuCtxSetCurrent(green.ctx()));
  CU_OK(api().cuModuleLoadData(&in_green, kKernelPtx));
  CU_OK(api().cuCtxSetCurrent(scope.ctx()));
  CUfunction f_primary = nullptr, f_green = nullptr;
  CU_OK(api().cuModuleGetFunction(&f_primary, in_primary, "add"));
  CU_OK(api().cuModuleGetFunction(&f_green, in_green, "add"));
  CU_OK(api().cuLaunchKernel(f_primary, 1, 1, 1, 1, 1, 1, 0, gs.s, args, nullptr));
  CU_OK(api().cuStreamSynchronize(gs.s));
  CU_OK(api().cuLaunchKernel(f_green, 1, 1, 1, 1, 1, 1, 0, ps.s, args, nullptr));
  CU_OK(api().cuLaunchKernel(f_green, 1, 1, 1, 1, 1, 1, 0, ps.s, args, nullptr));
  CU_OK(api().cuStreamSynchronize(ps.s));
  CU_OK(api().cuLaunchKernel(f_green, 1, 1, 1, 1, 1, 1, 0, gs.s, args, nullptr));
  CU_OK(api().cuStreamSynchronize(gs.s));
  CU_OK(api().cuModuleUnload(in_green));
  CU_OK(api().cuModuleUnload(in_primary));

  // Graphs: captured on a green stream, instantiated with the primary context current,
  // launched on green and primary streams; host functions run as usual.
  std::atomic<int> runs{0};
  std::function<void()> count = [&] { runs.fetch_add(1); };
  CU_OK(api().cuStreamBeginCapture(gs.s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU_OK(launch(gs.s, &count));
  CU_OK(api().cuMemsetD32Async(buf.p, 7, 1, gs.s));
  CUgraph graph = nullptr;
  CU_OK(api().cuStreamEndCapture(gs.s, &graph));
  REQUIRE(graph != nullptr);
  CHECK(node_count(graph) == 2);
  CUgraphExec exec = instantiate(graph);
  CU_OK(api().cuGraphLaunch(exec, gs.s));
  CU_OK(api().cuStreamSynchronize(gs.s));
  CU_OK(api().cuGraphLaunch(exec, ps.s));
  CU_OK(api().cuStreamSynchronize(ps.s));
  CHECK(runs.load() == 2);
  int host = 0;
  CU_OK(api().cuMemcpyDtoHAsync(&host, buf.p, sizeof host, ps.s));
  CU_OK(api().cuStreamSynchronize(ps.s));
  CHECK(host == 7);
  CU_OK(api().cuGraphExecDestroy(exec));
  CU_OK(api().cuGraphDestroy(graph));
  CU_OK(api().cuEventDestroy(green_event));
}

TEST_CASE("green contexts: recording and waiting on a green context and on a context",
          "[conformance][green]") {
  REQUIRE_GREEN_CONTEXTS();
  PrimaryScope scope;
  GreenScope green;
  GreenStream gs(green.get());
  StreamHandle ps(CU_STREAM_NON_BLOCKING);
  DeviceBuffer a(4096);
  std::vector<uint32_t> h(1024, 0);
  std::atomic<bool> release{false};
  std::function<void()> gate = [&] {
    while (!release.load()) std::this_thread::sleep_for(1ms);
  };
  std::function<void()> slow = [] { std::this_thread::sleep_for(50ms); };
  EventHandle pe;  // of the primary context
  CUevent ge = event_in(green.ctx(), scope.ctx());

  // A record on the green context completes when the work submitted so far to its streams has.
  CU_OK(api().cuMemsetD32Async(a.p, 1, 1024, gs.s));
  CU_OK(launch(gs.s, &gate));
  CU_OK(api().cuMemsetD32Async(a.p, 5, 1024, gs.s));
  CU_OK(api().cuGreenCtxRecordEvent(green.get(), pe.e));
  CU_CHECK_EQ(api().cuEventQuery(pe.e), CUDA_ERROR_NOT_READY);
  release = true;
  CU_OK(api().cuStreamWaitEvent(ps.s, pe.e, 0));
  CU_OK(api().cuMemcpyDtoHAsync(h.data(), a.p, 4096, ps.s));
  CU_OK(api().cuStreamSynchronize(ps.s));
  CHECK(h == std::vector<uint32_t>(1024, 5));
  CU_OK(api().cuGreenCtxRecordEvent(green.get(), ge));  // an event of the green context
  CU_OK(api().cuEventSynchronize(ge));

  // A wait on the green context: work submitted later to its streams waits for the event.
  CU_OK(api().cuMemsetD32Async(a.p, 1, 1024, ps.s));
  CU_OK(launch(ps.s, &slow));
  CU_OK(api().cuMemsetD32Async(a.p, 6, 1024, ps.s));
  CU_OK(api().cuEventRecord(pe.e, ps.s));
  CU_OK(api().cuGreenCtxWaitEvent(green.get(), pe.e));
  CU_OK(api().cuMemcpyDtoHAsync(h.data(), a.p, 4096, gs.s));
  CU_OK(api().cuStreamSynchronize(gs.s));
  CHECK(h == std::vector<uint32_t>(1024, 6));
  CU_OK(api().cuGreenCtxWaitEvent(green.get(), ge));
  CU_OK(api().cuStreamSynchronize(gs.s));

  // cuCtxRecordEvent: the primary context with its event, the converted context with the
  // green context's event, the primary context with the green context's event.
  release = false;
  CU_OK(launch(ps.s, &gate));
  CU_OK(api().cuCtxRecordEvent(scope.ctx(), pe.e));
  CU_CHECK_EQ(api().cuEventQuery(pe.e), CUDA_ERROR_NOT_READY);
  release = true;
  CU_OK(api().cuEventSynchronize(pe.e));
  release = false;
  CU_OK(api().cuMemsetD32Async(a.p, 1, 1024, gs.s));
  CU_OK(launch(gs.s, &gate));
  CU_OK(api().cuMemsetD32Async(a.p, 7, 1024, gs.s));
  CU_OK(api().cuCtxRecordEvent(green.ctx(), ge));
  CU_CHECK_EQ(api().cuEventQuery(ge), CUDA_ERROR_NOT_READY);
  release = true;
  CU_OK(api().cuStreamWaitEvent(ps.s, ge, 0));
  CU_OK(api().cuMemcpyDtoHAsync(h.data(), a.p, 4096, ps.s));
  CU_OK(api().cuStreamSynchronize(ps.s));
  CHECK(h == std::vector<uint32_t>(1024, 7));
  CU_OK(api().cuCtxRecordEvent(scope.ctx(), ge));
  CU_OK(api().cuEventSynchronize(ge));

  // cuCtxWaitEvent: the converted context waits for a primary stream's work, the primary
  // context for a green stream's.
  CU_OK(api().cuMemsetD32Async(a.p, 1, 1024, ps.s));
  CU_OK(launch(ps.s, &slow));
  CU_OK(api().cuMemsetD32Async(a.p, 8, 1024, ps.s));
  CU_OK(api().cuEventRecord(pe.e, ps.s));
  CU_OK(api().cuCtxWaitEvent(green.ctx(), pe.e));
  CU_OK(api().cuMemcpyDtoHAsync(h.data(), a.p, 4096, gs.s));
  CU_OK(api().cuStreamSynchronize(gs.s));
  CHECK(h == std::vector<uint32_t>(1024, 8));
  CU_OK(api().cuMemsetD32Async(a.p, 1, 1024, gs.s));
  CU_OK(launch(gs.s, &slow));
  CU_OK(api().cuMemsetD32Async(a.p, 9, 1024, gs.s));
  CU_OK(api().cuEventRecord(ge, gs.s));
  CU_OK(api().cuCtxWaitEvent(scope.ctx(), ge));
  CU_OK(api().cuMemcpyDtoHAsync(h.data(), a.p, 4096, ps.s));
  CU_OK(api().cuStreamSynchronize(ps.s));
  CHECK(h == std::vector<uint32_t>(1024, 9));

  // A created context: its own event.
  CUcontext created = nullptr;
  CU_OK(api().cuCtxCreate(&created, 0, 0));
  CUevent ce = nullptr;
  CU_OK(api().cuEventCreate(&ce, CU_EVENT_DISABLE_TIMING));
  CU_OK(api().cuCtxPopCurrent(nullptr));
  CU_OK(api().cuCtxRecordEvent(created, ce));
  CU_OK(api().cuCtxWaitEvent(created, ce));
  CU_OK(api().cuEventSynchronize(ce));
  CU_OK(api().cuEventDestroy(ce));
  CU_OK(api().cuCtxDestroy(created));
  CU_OK(api().cuEventDestroy(ge));
}

TEST_CASE("green contexts: destroyed with streams alive", "[conformance][green]") {
  REQUIRE_GREEN_CONTEXTS();
  PrimaryScope scope;
  CUgreenCtx gone = nullptr;
  CUstream orphan = nullptr;  // never destroyed: cuStreamDestroy refuses (cuda.h: it leaks)
  {
    GreenScope green;
    gone = green.get();
    CU_OK(api().cuGreenCtxStreamCreate(&orphan, gone, CU_STREAM_NON_BLOCKING, 0));
    CU_OK(api().cuLaunchHostFunc(orphan, sleep_20ms, nullptr));
    CU_OK(api().cuGreenCtxDestroy(gone));
    green.forget();
  }
  CU_CHECK_EQ(api().cuStreamQuery(orphan), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  CUcontext c = nullptr;
  CUgreenCtx g = nullptr;
  CU_CHECK_EQ(api().cuStreamGetCtx_v2(orphan, &c, &g), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  CU_CHECK_EQ(api().cuStreamDestroy(orphan), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  CU_CHECK_EQ(api().cuGreenCtxDestroy(gone), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  CU_CHECK_EQ(api().cuCtxFromGreenCtx(&c, gone), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  CUstream s = nullptr;
  CU_CHECK_EQ(api().cuGreenCtxStreamCreate(&s, gone, CU_STREAM_NON_BLOCKING, 0),
              CUDA_ERROR_CONTEXT_IS_DESTROYED);
  // Not done here: cuCtxSetCurrent of its converted context. The H200 answers CUDA_SUCCESS and
  // then aborts the process on a double free inside the driver, in one run of three (the
  // emulator answers CONTEXT_IS_DESTROYED: an [emu-only] case checks it).

  // Destroying the green context current in this thread leaves its handle current.
  {
    GreenScope green;
    CU_OK(api().cuCtxSetCurrent(green.ctx()));
    CU_OK(api().cuGreenCtxDestroy(green.get()));
    green.forget();
    CUcontext now = nullptr;
    CU_OK(api().cuCtxGetCurrent(&now));
    CHECK(now == green.ctx());
  }
  CU_OK(api().cuCtxSetCurrent(scope.ctx()));
}

// ============================================================================================
// Destroying created contexts
// ============================================================================================

// On the H200 any later use of such a stream (query, synchronize, cuStreamGetCtx, an event
// record, cuStreamDestroy) and cuCtxGetDevice_v2 on the destroyed context crash the driver
// (SIGSEGV): none is made here; the [emu-only] case below checks what the emulator answers.
TEST_CASE("a created context destroyed with streams and modules alive", "[conformance]") {
  REQUIRE_DRIVER_LOADED();
  PrimaryScope scope;
  CUcontext created = nullptr, now = nullptr;
  CU_OK(api().cuCtxCreate(&created, 0, 0));  // pushed above the primary context
  CUstream s = nullptr;
  CU_OK(api().cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUmodule m = nullptr;
  CU_OK(api().cuModuleLoadData(&m, kKernelPtx));
  CU_OK(api().cuLaunchHostFunc(s, sleep_20ms, nullptr));
  CU_OK(api().cuCtxDestroy(created));  // current in this thread: popped
  CU_OK(api().cuCtxGetCurrent(&now));
  CHECK(now == scope.ctx());
  // Destroyed again: CONTEXT_IS_DESTROYED on the H200, in one run of five INVALID_CONTEXT (the
  // emulator: CONTEXT_IS_DESTROYED).
  const std::string again = nm(api().cuCtxDestroy(created));
  INFO(again);
  CHECK((again == nm(CUDA_ERROR_CONTEXT_IS_DESTROYED) || again == nm(CUDA_ERROR_INVALID_CONTEXT)));
  if (driver().emulated) CHECK(again == nm(CUDA_ERROR_CONTEXT_IS_DESTROYED));
}

// ============================================================================================
// Context-independent loading (CUlibrary, CUkernel) and cuLaunchKernelEx (measured on the
// H200, driver 580, with the default lazy module loading)
// ============================================================================================

namespace {

// Kernels lib_add(int* data, int amount) (data[0] += amount, one thread), lib_mixed (parameters
// of several alignments), lib_shared (1 KiB of static shared memory), lib_internal (not
// .visible) and a .func; variables, one of them managed. JIT-compiled on the GPU; the emulator
// reads the names, parameters, static shared memory and variables from it.
constexpr const char* kLibraryPtx = R"(
.version 7.0
.target sm_70
.address_size 64

.visible .global .align 4 .u32 counter;
.visible .global .align 4 .u32 initialized = 7;
.visible .global .align 4 .u32 table[3] = {1, 2, 3};
.visible .global .attribute(.managed) .align 4 .u32 managed_value;
.global .align 4 .u32 hidden_var;

.func helper()
{
  ret;
}

.visible .entry lib_add(
  .param .u64 data,
  .param .u32 amount
)
{
  .reg .b32 %r<4>;
  .reg .b64 %rd<3>;
  ld.param.u64 %rd1, [data];
  ld.param.u32 %r1, [amount];
  cvta.to.global.u64 %rd2, %rd1;
  ld.global.u32 %r2, [%rd2];
  add.s32 %r3, %r2, %r1;
  st.global.u32 [%rd2], %r3;
  ret;
}

.visible .entry lib_mixed(
  .param .u32 a,
  .param .u64 b,
  .param .align 8 .b8 s[12],
  .param .u16 c
)
{
  ret;
}

.visible .entry lib_shared(
  .param .u64 out
)
{
  .shared .align 4 .b8 sbuf[1024];
  .reg .b32 %r<3>;
  .reg .b64 %rd<3>;
  mov.u32 %r1, 5;
  st.shared.u32 [sbuf], %r1;
  bar.sync 0;
  ld.shared.u32 %r2, [sbuf+4];
  ld.param.u64 %rd1, [out];
  cvta.to.global.u64 %rd2, %rd1;
  st.global.u32 [%rd2], %r2;
  ret;
}

.entry lib_internal()
{
  ret;
}
)";

// PTX whose braces do not balance: ptxas refuses it (CUDA_ERROR_INVALID_PTX), and so does the
// emulator.
constexpr const char* kUnbalancedPtx = R"(
.version 7.0
.target sm_70
.address_size 64

.visible .entry broken(
  .param .u32 a
)
{
  ret;
)";

constexpr const char* kGarbageImage = "this is not a cubin";

struct LibraryHandle {
  CUlibrary lib = nullptr;
  explicit LibraryHandle(const char* image = kLibraryPtx) {
    CU_OK(api().cuLibraryLoadData(&lib, image, nullptr, nullptr, 0, nullptr, nullptr, 0));
  }
  ~LibraryHandle() {
    if (lib) api().cuLibraryUnload(lib);
  }
  LibraryHandle(const LibraryHandle&) = delete;
  LibraryHandle& operator=(const LibraryHandle&) = delete;
  CUkernel kernel(const char* name) const {
    CUkernel k = nullptr;
    CU_OK(api().cuLibraryGetKernel(&k, lib, name));
    return k;
  }
};

// lib_add on the CPU: data[0] += amount.
void cpu_lib_add(const custream_emu_kernel_launch* l) {
  int* data = nullptr;
  int amount = 0;
  std::memcpy(&data, l->params[0], sizeof data);
  std::memcpy(&amount, l->params[1], sizeof amount);
  *data += amount;
}

// On the emulator, registers lib_add's CPU twin for the scope, so that results can be checked
// on both drivers.
class LibAddTwin {
 public:
  LibAddTwin() {
    if (driver().emulated) registrar()("lib_add", cpu_lib_add, nullptr, nullptr, 0);
  }
  ~LibAddTwin() {
    if (driver().emulated) registrar()("lib_add", nullptr, nullptr, nullptr, 0);
  }
  LibAddTwin(const LibAddTwin&) = delete;
  LibAddTwin& operator=(const LibAddTwin&) = delete;

 private:
  static decltype(&custream_emu_register_kernel) registrar() {
    auto r = emu_control<decltype(&custream_emu_register_kernel)>("custream_emu_register_kernel");
    REQUIRE(r != nullptr);
    return r;
  }
};

int read_int(CUdeviceptr p, CUstream s) {
  int v = -1;
  CU_OK(api().cuMemcpyDtoHAsync(&v, p, sizeof v, s));
  CU_OK(api().cuStreamSynchronize(s));
  return v;
}

CUlaunchConfig launch_config(CUstream s, unsigned grid = 1, unsigned block = 1) {
  CUlaunchConfig c{};
  c.gridDimX = grid;
  c.gridDimY = c.gridDimZ = 1;
  c.blockDimX = block;
  c.blockDimY = c.blockDimZ = 1;
  c.hStream = s;
  return c;
}

// cuLaunchKernelEx of f with one attribute.
CUresult launch_ex_with(CUfunction f, CUlaunchConfig c, CUlaunchAttribute attr, void** args) {
  c.attrs = &attr;
  c.numAttrs = 1;
  return api().cuLaunchKernelEx(&c, f, args, nullptr);
}

CUlaunchAttribute cluster_attr(unsigned x, unsigned y = 1, unsigned z = 1) {
  CUlaunchAttribute a{};
  a.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  a.value.clusterDim.x = x;
  a.value.clusterDim.y = y;
  a.value.clusterDim.z = z;
  return a;
}

// Ends a capture and answers what cuStreamEndCapture said (a graph that came back is destroyed).
std::string end_capture_result(CUstream s) {
  CUgraph g = nullptr;
  const std::string r = nm(api().cuStreamEndCapture(s, &g));
  if (g) api().cuGraphDestroy(g);
  return r;
}

std::set<std::string> kernel_names(CUlibrary lib) {
  unsigned count = 0;
  CU_OK(api().cuLibraryGetKernelCount(&count, lib));
  std::vector<CUkernel> ks(count);
  if (count) CU_OK(api().cuLibraryEnumerateKernels(ks.data(), count, lib));
  std::set<std::string> names;
  for (CUkernel k : ks) {
    const char* n = nullptr;
    CU_OK(api().cuKernelGetName(&n, k));
    names.insert(n);
  }
  return names;
}

// The setup the launching cases share, made after REQUIRE_LIBRARIES(): lib_add's CPU twin (on
// the emulator), the primary context current, a non-blocking stream `s`, an int on the device
// set to 0 on it, and lib_add's arguments `args` for that int and `amount` (1 unless a case
// changes it).
struct LaunchFixture {
  LibAddTwin twin;
  PrimaryScope scope;
  StreamHandle stream{CU_STREAM_NON_BLOCKING};
  DeviceBuffer buf{sizeof(int)};
  CUstream s = stream.s;
  CUdeviceptr p = buf.p;
  int amount = 1;
  void* args[2] = {&p, &amount};

  LaunchFixture() { CU_OK(api().cuMemsetD32Async(buf.p, 0, 1, s)); }
  LaunchFixture(const LaunchFixture&) = delete;
  LaunchFixture& operator=(const LaunchFixture&) = delete;
  // The int, once the stream's work so far has completed.
  int value() const { return read_int(buf.p, s); }
};

// ... and a library of kLibraryPtx, its kernel `k` (lib_add unless named) and k's function `f`
// in the primary context.
struct LibraryFixture : LaunchFixture {
  LibraryHandle lib;
  CUkernel k = nullptr;
  CUfunction f = nullptr;

  explicit LibraryFixture(const char* kernel = "lib_add") : k(lib.kernel(kernel)) {
    CU_OK(api().cuKernelGetFunction(&f, k));
  }
};

}  // namespace

TEST_CASE("libraries: loading needs no context; kernels by name, count and enumeration",
          "[conformance][library]") {
  REQUIRE_LIBRARIES();
  CUcontext prev = nullptr;
  CU_OK(api().cuCtxGetCurrent(&prev));
  CU_OK(api().cuCtxSetCurrent(nullptr));  // none current: loading needs none
  CUlibrary lib = nullptr;
  CU_OK(api().cuLibraryLoadData(&lib, kLibraryPtx, nullptr, nullptr, 0, nullptr, nullptr, 0));
  CU_CHECK_EQ(
      api().cuLibraryLoadData(nullptr, kLibraryPtx, nullptr, nullptr, 0, nullptr, nullptr, 0),
      CUDA_ERROR_INVALID_VALUE);
  CUlibrary other = nullptr;
  CU_CHECK_EQ(api().cuLibraryLoadData(&other, nullptr, nullptr, nullptr, 0, nullptr, nullptr, 0),
              CUDA_ERROR_INVALID_VALUE);
  CU_CHECK_EQ(
      api().cuLibraryLoadData(&other, kLibraryPtx, nullptr, nullptr, 2, nullptr, nullptr, 0),
      CUDA_ERROR_INVALID_VALUE);

  // Kernels: the .entry directives (.visible or not), not .func; one handle per name.
  CUkernel k = nullptr, again = nullptr;
  CU_OK(api().cuLibraryGetKernel(&k, lib, "lib_add"));
  CU_OK(api().cuLibraryGetKernel(&again, lib, "lib_add"));
  CHECK(k == again);
  CU_OK(api().cuLibraryGetKernel(&again, lib, "lib_internal"));
  CU_CHECK_EQ(api().cuLibraryGetKernel(&again, lib, "helper"), CUDA_ERROR_NOT_FOUND);
  CU_CHECK_EQ(api().cuLibraryGetKernel(&again, lib, "no_such_kernel"), CUDA_ERROR_NOT_FOUND);
  CU_CHECK_EQ(api().cuLibraryGetKernel(&again, lib, nullptr), CUDA_ERROR_INVALID_VALUE);
  CU_CHECK_EQ(api().cuLibraryGetKernel(nullptr, lib, "lib_add"), CUDA_ERROR_INVALID_VALUE);
  CU_CHECK_EQ(api().cuLibraryGetKernel(&again, nullptr, "lib_add"), CUDA_ERROR_INVALID_HANDLE);

  // Count and enumeration (the H200 lists the last declared first; the order is not checked).
  unsigned count = 0;
  CU_OK(api().cuLibraryGetKernelCount(&count, lib));
  CHECK(count == 4);
  CHECK(kernel_names(lib) ==
        std::set<std::string>{"lib_add", "lib_mixed", "lib_shared", "lib_internal"});
  std::vector<CUkernel> all(count), first(1), more(count + 1, nullptr);
  CU_OK(api().cuLibraryEnumerateKernels(all.data(), count, lib));
  CHECK(std::find(all.begin(), all.end(), k) != all.end());
  CU_OK(api().cuLibraryEnumerateKernels(first.data(), 1, lib));
  CHECK(first[0] == all[0]);
  CU_OK(api().cuLibraryEnumerateKernels(more.data(), count + 1, lib));
  CHECK(more[count] == nullptr);
  CU_OK(api().cuLibraryEnumerateKernels(all.data(), 0, lib));
  CU_CHECK_EQ(api().cuLibraryEnumerateKernels(nullptr, count, lib), CUDA_ERROR_INVALID_VALUE);
  CU_CHECK_EQ(api().cuLibraryEnumerateKernels(all.data(), count, nullptr),
              CUDA_ERROR_INVALID_HANDLE);
  CU_CHECK_EQ(api().cuLibraryGetKernelCount(nullptr, lib), CUDA_ERROR_INVALID_VALUE);
  CU_CHECK_EQ(api().cuLibraryGetKernelCount(&count, nullptr), CUDA_ERROR_INVALID_HANDLE);

  // Name (a stable pointer) and library of a kernel.
  const char* name = nullptr;
  const char* name2 = nullptr;
  CU_OK(api().cuKernelGetName(&name, k));
  CU_OK(api().cuKernelGetName(&name2, k));
  CHECK(std::string(name) == "lib_add");
  CHECK(name == name2);
  CU_CHECK_EQ(api().cuKernelGetName(nullptr, k), CUDA_ERROR_INVALID_VALUE);
  CU_CHECK_EQ(api().cuKernelGetName(&name, nullptr), CUDA_ERROR_INVALID_VALUE);
  CUlibrary back = nullptr;
  CU_OK(api().cuKernelGetLibrary(&back, k));
  CHECK(back == lib);
  CU_CHECK_EQ(api().cuKernelGetLibrary(nullptr, k), CUDA_ERROR_INVALID_VALUE);
  CU_CHECK_EQ(api().cuKernelGetLibrary(&back, nullptr), CUDA_ERROR_INVALID_HANDLE);

  // The same image loaded twice: two libraries with their own kernels.
  LibraryHandle second;
  CHECK(second.lib != lib);
  CHECK(second.kernel("lib_add") != k);

  // Only PTX variables, no kernels.
  LibraryHandle globals_only(
      ".version 7.0\n.target sm_70\n.address_size 64\n"
      ".visible .global .align 4 .u32 lonely;\n");
  CU_OK(api().cuLibraryGetKernelCount(&count, globals_only.lib));
  CHECK(count == 0);

  CU_OK(api().cuLibraryUnload(lib));
  CU_CHECK_EQ(api().cuLibraryUnload(nullptr), CUDA_ERROR_INVALID_HANDLE);
  CU_OK(api().cuCtxSetCurrent(prev));
}

TEST_CASE("libraries: a bad image loads, and its first use reports it", "[conformance][library]") {
  REQUIRE_LIBRARIES();
  PrimaryScope scope;  // a context current changes nothing: loading is lazy
  // Not an image: loads; the error log says why; no kernels; a lookup answers INVALID_IMAGE.
  char log[1024];
  std::memset(log, 'X', sizeof log);
  CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void* values[] = {log, reinterpret_cast<void*>(static_cast<uintptr_t>(sizeof log))};
  CUlibrary garbage = nullptr;
  CU_OK(api().cuLibraryLoadData(&garbage, kGarbageImage, options, values, 2, nullptr, nullptr, 0));
  const size_t written = static_cast<size_t>(reinterpret_cast<uintptr_t>(values[1]));
  INFO(std::string(log, strnlen(log, sizeof log)));
  CHECK(written > 0);
  CHECK(strnlen(log, sizeof log) == written);
  unsigned count = 99;
  CU_OK(api().cuLibraryGetKernelCount(&count, garbage));
  CHECK(count == 0);
  CUkernel k = nullptr;
  CU_CHECK_EQ(api().cuLibraryGetKernel(&k, garbage, "lib_add"), CUDA_ERROR_INVALID_IMAGE);
  CUmodule m = nullptr;
  CU_CHECK_EQ(api().cuLibraryGetModule(&m, garbage), CUDA_ERROR_INVALID_IMAGE);
  CU_OK(api().cuLibraryUnload(garbage));
  // PTX that does not compile: loads, with an error log; INVALID_PTX at the first use.
  std::memset(log, 'X', sizeof log);
  values[1] = reinterpret_cast<void*>(static_cast<uintptr_t>(sizeof log));
  CUlibrary bad = nullptr;
  CU_OK(api().cuLibraryLoadData(&bad, kUnbalancedPtx, options, values, 2, nullptr, nullptr, 0));
  CHECK(reinterpret_cast<uintptr_t>(values[1]) > 0);
  CU_CHECK_EQ(api().cuLibraryGetKernel(&k, bad, "broken"), CUDA_ERROR_INVALID_PTX);
  CU_CHECK_EQ(api().cuLibraryGetModule(&m, bad), CUDA_ERROR_INVALID_PTX);
  CU_OK(api().cuLibraryGetKernelCount(&count, bad));
  CHECK(count == 0);
  CU_OK(api().cuLibraryUnload(bad));
  // A good image: the logs come back empty.
  values[1] = reinterpret_cast<void*>(static_cast<uintptr_t>(sizeof log));
  CUlibrary good = nullptr;
  CU_OK(api().cuLibraryLoadData(&good, kLibraryPtx, options, values, 2, nullptr, nullptr, 0));
  CU_OK(api().cuLibraryUnload(good));
}

TEST_CASE("libraries: an empty image, and the variables of a bad image", "[conformance][library]") {
  REQUIRE_LIBRARIES();
  PrimaryScope scope;
  CUlibrary garbage = nullptr;
  CU_OK(api().cuLibraryLoadData(&garbage, kGarbageImage, nullptr, nullptr, 0, nullptr, nullptr, 0));
  CUdeviceptr p = 0;
  CU_CHECK_EQ(api().cuLibraryGetGlobal(&p, nullptr, garbage, "counter"), CUDA_ERROR_INVALID_IMAGE);
  CU_CHECK_EQ(api().cuLibraryGetManaged(&p, nullptr, garbage, "counter"), CUDA_ERROR_INVALID_IMAGE);
  CU_OK(api().cuLibraryUnload(garbage));
  CUlibrary empty = nullptr;
  CU_OK(api().cuLibraryLoadData(&empty, "", nullptr, nullptr, 0, nullptr, nullptr, 0));
  CUkernel k = nullptr;
  CU_CHECK_EQ(api().cuLibraryGetKernel(&k, empty, "lib_add"), CUDA_ERROR_INVALID_IMAGE);
  CU_OK(api().cuLibraryUnload(empty));
}

TEST_CASE("libraries: loading from a file, and library options", "[conformance][library]") {
  REQUIRE_LIBRARIES();
  char path[] = "/tmp/custream-conformance-XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  const std::string text = kLibraryPtx;
  REQUIRE(write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()));
  close(fd);
  CUlibrary lib = nullptr;
  CU_OK(api().cuLibraryLoadFromFile(&lib, path, nullptr, nullptr, 0, nullptr, nullptr, 0));
  unlink(path);
  CHECK(kernel_names(lib).count("lib_add") == 1);
  CU_OK(api().cuLibraryUnload(lib));
  CU_CHECK_EQ(api().cuLibraryLoadFromFile(&lib, "/nonexistent/custream.ptx", nullptr, nullptr, 0,
                                          nullptr, nullptr, 0),
              CUDA_ERROR_FILE_NOT_FOUND);
  CU_CHECK_EQ(api().cuLibraryLoadFromFile(&lib, nullptr, nullptr, nullptr, 0, nullptr, nullptr, 0),
              CUDA_ERROR_INVALID_VALUE);
  // CU_LIBRARY_BINARY_IS_PRESERVED is accepted; an unknown option is not.
  CUlibraryOption preserved[] = {CU_LIBRARY_BINARY_IS_PRESERVED};
  void* one[] = {reinterpret_cast<void*>(1)};
  CU_OK(api().cuLibraryLoadData(&lib, kLibraryPtx, nullptr, nullptr, 0, preserved, one, 1));
  CU_OK(api().cuLibraryUnload(lib));
  CUlibraryOption unknown[] = {static_cast<CUlibraryOption>(77)};
  lib = nullptr;
  CU_CHECK_EQ(api().cuLibraryLoadData(&lib, kLibraryPtx, nullptr, nullptr, 0, unknown, one, 1),
              CUDA_ERROR_INVALID_VALUE);
  if (lib) api().cuLibraryUnload(lib);
}

TEST_CASE("a PTX module that does not parse is refused with INVALID_PTX and a JIT log",
          "[conformance][library]") {
  REQUIRE_LIBRARIES();
  PrimaryScope scope;
  CUmodule m = nullptr;
  CU_CHECK_EQ(api().cuModuleLoadData(&m, kUnbalancedPtx), CUDA_ERROR_INVALID_PTX);
  CU_CHECK_EQ(api().cuModuleLoadData(&m, ""), CUDA_ERROR_INVALID_IMAGE);
  char log[1024] = {};
  CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void* values[] = {log, reinterpret_cast<void*>(static_cast<uintptr_t>(sizeof log))};
  CU_CHECK_EQ(api().cuModuleLoadDataEx(&m, kGarbageImage, 2, options, values),
              CUDA_ERROR_INVALID_IMAGE);
  CHECK(reinterpret_cast<uintptr_t>(values[1]) == std::strlen(log));
  CHECK(std::strlen(log) > 0);
}

TEST_CASE("kernels: one function per context, loaded on first use; green contexts share it",
          "[conformance][library]") {
  REQUIRE_LIBRARIES();
  LibraryHandle lib;
  CUkernel k = lib.kernel("lib_add");
  CUcontext prev = nullptr;
  CU_OK(api().cuCtxGetCurrent(&prev));
  CU_OK(api().cuCtxSetCurrent(nullptr));
  CUfunction f = nullptr;
  CU_CHECK_EQ(api().cuKernelGetFunction(&f, k), CUDA_ERROR_INVALID_CONTEXT);
  CUmodule m = nullptr;
  CU_CHECK_EQ(api().cuLibraryGetModule(&m, lib.lib), CUDA_ERROR_INVALID_CONTEXT);
  CU_OK(api().cuCtxSetCurrent(prev));

  PrimaryScope scope;
  CU_OK(api().cuKernelGetFunction(&f, k));
  CHECK(f != nullptr);
  CHECK(f != reinterpret_cast<CUfunction>(k));
  CUfunction again = nullptr;
  CU_OK(api().cuKernelGetFunction(&again, k));
  CHECK(again == f);
  CU_CHECK_EQ(api().cuKernelGetFunction(nullptr, k), CUDA_ERROR_INVALID_VALUE);
  CU_CHECK_EQ(api().cuKernelGetFunction(&again, nullptr), CUDA_ERROR_INVALID_HANDLE);
  // The library's module in this context: its functions are the kernels' functions; it cannot
  // be unloaded on its own.
  CU_OK(api().cuLibraryGetModule(&m, lib.lib));
  CUmodule m2 = nullptr;
  CU_OK(api().cuLibraryGetModule(&m2, lib.lib));
  CHECK(m == m2);
  CUfunction from_module = nullptr;
  CU_OK(api().cuModuleGetFunction(&from_module, m, "lib_add"));
  CHECK(from_module == f);
  CU_CHECK_EQ(api().cuModuleUnload(m), CUDA_ERROR_NOT_PERMITTED);
  CU_OK(api().cuModuleGetFunction(&from_module, m, "lib_add"));
  CU_CHECK_EQ(api().cuLibraryGetModule(nullptr, lib.lib), CUDA_ERROR_INVALID_VALUE);
  CU_CHECK_EQ(api().cuLibraryGetModule(&m2, nullptr), CUDA_ERROR_INVALID_HANDLE);

  // Another context of the device: another function and module.
  CUcontext created = nullptr;
  CU_OK(api().cuCtxCreate(&created, 0, 0));
  CUfunction in_created = nullptr;
  CU_OK(api().cuKernelGetFunction(&in_created, k));
  CHECK(in_created != f);
  CU_OK(api().cuLibraryGetModule(&m2, lib.lib));
  CHECK(m2 != m);
  CU_OK(api().cuCtxDestroy(created));
  CU_OK(api().cuKernelGetFunction(&again, k));
  CHECK(again == f);

  // A green context: the primary context's function and module.
  if (!missing_optional_entry()) {
    GreenScope green;
    CU_OK(api().cuCtxSetCurrent(green.ctx()));
    CUfunction in_green = nullptr;
    CU_OK(api().cuKernelGetFunction(&in_green, k));
    CHECK(in_green == f);
    CU_OK(api().cuLibraryGetModule(&m2, lib.lib));
    CHECK(m2 == m);
    CU_OK(api().cuCtxSetCurrent(scope.ctx()));
  }
}

TEST_CASE("kernels: a CUkernel launches as a CUfunction, in the stream's context",
          "[conformance][library]") {
  REQUIRE_LIBRARIES();
  LibraryFixture fx;
  const auto cast = reinterpret_cast<CUfunction>(fx.k);
  CU_OK(api().cuLaunchKernel(fx.f, 1, 1, 1, 1, 1, 1, 0, fx.s, fx.args, nullptr));
  CU_OK(api().cuLaunchKernel(cast, 1, 1, 1, 1, 1, 1, 0, fx.s, fx.args, nullptr));
  CU_OK(api().cuStreamSynchronize(fx.s));
  CU_OK(api().cuLaunchKernel(cast, 1, 1, 1, 1, 1, 1, 0, nullptr, fx.args, nullptr));  // legacy
  CU_OK(api().cuStreamSynchronize(nullptr));
  CHECK(fx.value() == 3);

  // A created context's stream, with the primary context current: the kernel launches in the
  // stream's context; the primary context's function is refused there, and the created
  // context's on the primary context's stream.
  CUcontext created = nullptr;
  CU_OK(api().cuCtxCreate(&created, 0, 0));
  CUstream cs = nullptr;
  CU_OK(api().cuStreamCreate(&cs, CU_STREAM_NON_BLOCKING));
  CUfunction fc = nullptr;
  CU_OK(api().cuKernelGetFunction(&fc, fx.k));
  CU_OK(api().cuCtxPopCurrent(nullptr));
  CU_OK(api().cuLaunchKernel(cast, 1, 1, 1, 1, 1, 1, 0, cs, fx.args, nullptr));
  CU_CHECK_EQ(api().cuLaunchKernel(fx.f, 1, 1, 1, 1, 1, 1, 0, cs, fx.args, nullptr),
              CUDA_ERROR_INVALID_HANDLE);
  CU_CHECK_EQ(api().cuLaunchKernel(fc, 1, 1, 1, 1, 1, 1, 0, fx.s, fx.args, nullptr),
              CUDA_ERROR_INVALID_HANDLE);
  CU_OK(api().cuStreamSynchronize(cs));
  // No context current: a created stream names its context; the legacy stream has none.
  CU_OK(api().cuCtxSetCurrent(nullptr));
  CU_OK(api().cuLaunchKernel(cast, 1, 1, 1, 1, 1, 1, 0, fx.s, fx.args, nullptr));
  CU_CHECK_EQ(api().cuLaunchKernel(cast, 1, 1, 1, 1, 1, 1, 0, nullptr, fx.args, nullptr),
              CUDA_ERROR_INVALID_CONTEXT);
  CU_OK(api().cuStreamSynchronize(fx.s));
  CU_OK(api().cuCtxSetCurrent(fx.scope.ctx()));
  CHECK(fx.value() == 5);
  CU_OK(api().cuStreamDestroy(cs));
  CU_OK(api().cuCtxDestroy(created));

  // A green context's stream runs the primary context's function, and the kernel.
  if (!missing_optional_entry()) {
    GreenScope green;
    GreenStream gs(green.get());
    CU_OK(api().cuLaunchKernel(fx.f, 1, 1, 1, 1, 1, 1, 0, gs.s, fx.args, nullptr));
    CU_OK(api().cuLaunchKernel(cast, 1, 1, 1, 1, 1, 1, 0, gs.s, fx.args, nullptr));
    CU_OK(api().cuStreamSynchronize(gs.s));
    CHECK(fx.value() == 7);
  }
}

TEST_CASE("kernels: attributes per device; dynamic shared memory bounded by the opt-in maximum",
          "[conformance][library]") {
  REQUIRE_LIBRARIES();
  LibraryHandle lib;
  CUkernel add = lib.kernel("lib_add");
  CUkernel shared = lib.kernel("lib_shared");
  int v = -1;
  // No context needed.
  CU_OK(api().cuKernelGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, add, 0));
  CHECK(v == 1024);
  CU_OK(api().cuKernelGetAttribute(&v, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, add, 0));
  CHECK(v == 0);
  CU_OK(api().cuKernelGetAttribute(&v, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, shared, 0));
  CHECK(v == 1024);
  CU_OK(api().cuKernelGetAttribute(&v, CU_FUNC_ATTRIBUTE_NUM_REGS, add, 0));
  CHECK((v > 0 && v <= 255));
  CU_OK(api().cuKernelGetAttribute(&v, CU_FUNC_ATTRIBUTE_PTX_VERSION, add, 0));
  CHECK(v == 70);
  CU_OK(api().cuKernelGetAttribute(&v, CU_FUNC_ATTRIBUTE_BINARY_VERSION, add, 0));
  CHECK(v == 10 * compute_capability_major());
  CU_OK(api().cuKernelGetAttribute(&v, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, add, 0));
  CHECK(v == 0);
  CU_OK(api().cuKernelGetAttribute(&v, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, add, 0));
  CHECK(v == -1);
  // Dynamic shared memory: 48 KiB less the static shared memory by default, settable up to the
  // device's opt-in maximum less the static shared memory.
  CU_OK(api().cuKernelGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, add, 0));
  CHECK(v == 49152);
  CU_OK(api().cuKernelGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared, 0));
  CHECK(v == 49152 - 1024);
  int optin = 0;
  CU_OK(
      api().cuDeviceGetAttribute(&optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, 0));
  const auto dyn = CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
  CU_OK(api().cuKernelSetAttribute(dyn, 100000, add, 0));
  CU_OK(api().cuKernelGetAttribute(&v, dyn, add, 0));
  CHECK(v == 100000);
  CU_OK(api().cuKernelSetAttribute(dyn, optin, add, 0));
  CU_CHECK_EQ(api().cuKernelSetAttribute(dyn, optin + 1, add, 0), CUDA_ERROR_INVALID_VALUE);
  CU_CHECK_EQ(api().cuKernelSetAttribute(dyn, -1, add, 0), CUDA_ERROR_INVALID_VALUE);
  CU_OK(api().cuKernelGetAttribute(&v, dyn, add, 0));
  CHECK(v == optin);
  CU_OK(api().cuKernelSetAttribute(dyn, optin - 1024, shared, 0));
  CU_CHECK_EQ(api().cuKernelSetAttribute(dyn, optin - 1023, shared, 0), CUDA_ERROR_INVALID_VALUE);
  // Read-only attributes; carveout percentages; errors.
  CU_CHECK_EQ(api().cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_NUM_REGS, 10, add, 0),
              CUDA_ERROR_INVALID_VALUE);
  CU_CHECK_EQ(api().cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 128, add, 0),
              CUDA_ERROR_INVALID_VALUE);
  CU_CHECK_EQ(api().cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, 128, add, 0),
              CUDA_ERROR_INVALID_VALUE);
  CU_OK(api().cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 50, add, 0));
  CU_CHECK_EQ(
      api().cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 101, add, 0),
      CUDA_ERROR_INVALID_VALUE);
  int count = 0;
  CU_OK(api().cuDeviceGetCount(&count));
  CU_CHECK_EQ(api().cuKernelGetAttribute(&v, CU_FUNC_ATTRIBUTE_NUM_REGS, add, count),
              CUDA_ERROR_INVALID_DEVICE);
  CU_CHECK_EQ(api().cuKernelGetAttribute(&v, CU_FUNC_ATTRIBUTE_NUM_REGS, add, -1),
              CUDA_ERROR_INVALID_DEVICE);
  CU_CHECK_EQ(api().cuKernelSetAttribute(dyn, 1000, add, count), CUDA_ERROR_INVALID_DEVICE);
  CU_CHECK_EQ(api().cuKernelGetAttribute(nullptr, CU_FUNC_ATTRIBUTE_NUM_REGS, add, 0),
              CUDA_ERROR_INVALID_VALUE);
  CU_CHECK_EQ(api().cuKernelGetAttribute(&v, CU_FUNC_ATTRIBUTE_NUM_REGS, nullptr, 0),
              CUDA_ERROR_INVALID_HANDLE);
  CU_CHECK_EQ(api().cuKernelGetAttribute(&v, static_cast<CUfunction_attribute>(99), add, 0),
              CUDA_ERROR_INVALID_VALUE);
  CU_CHECK_EQ(api().cuKernelSetAttribute(dyn, 1000, nullptr, 0), CUDA_ERROR_INVALID_HANDLE);

  // Launches are bounded by the kernel's dynamic shared memory on the stream's device.
  LaunchFixture fx;
  CUfunction fs = nullptr;
  CU_OK(api().cuKernelGetFunction(&fs, shared));
  CU_OK(api().cuLaunchKernel(fs, 1, 1, 1, 1, 1, 1, optin - 1024, fx.s, fx.args, nullptr));
  CU_CHECK_EQ(api().cuLaunchKernel(fs, 1, 1, 1, 1, 1, 1, optin - 1023, fx.s, fx.args, nullptr),
              CUDA_ERROR_INVALID_VALUE);
  CU_OK(api().cuKernelSetAttribute(dyn, 0, shared, 0));
  CU_CHECK_EQ(api().cuLaunchKernel(fs, 1, 1, 1, 1, 1, 1, 1, fx.s, fx.args, nullptr),
              CUDA_ERROR_INVALID_VALUE);
  CU_OK(api().cuLaunchKernel(fs, 1, 1, 1, 1, 1, 1, 0, fx.s, fx.args, nullptr));
  // A kernel left at its default: 48 KiB.
  LibraryHandle fresh;
  CUfunction fa = nullptr;
  CU_OK(api().cuKernelGetFunction(&fa, fresh.kernel("lib_add")));
  CU_OK(api().cuLaunchKernel(fa, 1, 1, 1, 1, 1, 1, 49152, fx.s, fx.args, nullptr));
  CU_CHECK_EQ(api().cuLaunchKernel(fa, 1, 1, 1, 1, 1, 1, 49153, fx.s, fx.args, nullptr),
              CUDA_ERROR_INVALID_VALUE);
  CU_OK(api().cuStreamSynchronize(fx.s));
}

TEST_CASE("kernels: parameter offsets and sizes from the PTX", "[conformance][library]") {
  REQUIRE_LIBRARIES();
  LibraryHandle lib;
  CUkernel add = lib.kernel("lib_add");
  size_t offset = 777, size = 777;
  CU_CHECK_EQ(api().cuKernelGetParamInfo(add, 0, nullptr, &size), CUDA_ERROR_INVALID_VALUE);
  CU_CHECK_EQ(api().cuKernelGetParamInfo(nullptr, 0, &offset, &size), CUDA_ERROR_INVALID_VALUE);
  CUcontext prev = nullptr;
  CU_OK(api().cuCtxGetCurrent(&prev));
  CU_OK(api().cuCtxSetCurrent(nullptr));  // the H200 needs a context here
  CU_CHECK_EQ(api().cuKernelGetParamInfo(add, 0, &offset, &size), CUDA_ERROR_INVALID_CONTEXT);
  CU_OK(api().cuCtxSetCurrent(prev));
  PrimaryScope scope;
  CU_OK(api().cuKernelGetParamInfo(add, 0, &offset, &size));
  CHECK(offset == 0);
  CHECK(size == 8);
  CU_OK(api().cuKernelGetParamInfo(add, 1, &offset, &size));
  CHECK(offset == 8);
  CHECK(size == 4);
  CU_OK(api().cuKernelGetParamInfo(add, 1, &offset, nullptr));
  CHECK(offset == 8);
  CU_CHECK_EQ(api().cuKernelGetParamInfo(add, 2, &offset, &size), CUDA_ERROR_INVALID_VALUE);
}

// Checks the (offset, size) of each parameter of `k` (cuKernelGetParamInfo, with the primary
// context current, as the H200 needs), and that the index past the last, and SIZE_MAX, are
// CUDA_ERROR_INVALID_VALUE.
void check_param_layout(CUkernel k, const std::vector<std::pair<size_t, size_t>>& expected) {
  PrimaryScope scope;
  for (size_t i = 0; i < expected.size(); ++i) {
    size_t offset = 777, size = 777;
    INFO(i);
    CU_OK(api().cuKernelGetParamInfo(k, i, &offset, &size));
    CHECK(offset == expected[i].first);
    CHECK(size == expected[i].second);
  }
  size_t offset = 777, size = 777;
  CU_CHECK_EQ(api().cuKernelGetParamInfo(k, expected.size(), &offset, &size),
              CUDA_ERROR_INVALID_VALUE);
  CU_CHECK_EQ(api().cuKernelGetParamInfo(k, SIZE_MAX, &offset, &size), CUDA_ERROR_INVALID_VALUE);
}

TEST_CASE("kernels: parameter offsets follow the PTX alignment", "[conformance][library]") {
  REQUIRE_LIBRARIES();
  LibraryHandle lib;
  // (.u32 a, .u64 b, .align 8 .b8 s[12], .u16 c)
  check_param_layout(lib.kernel("lib_mixed"), {{0, 4}, {8, 8}, {16, 12}, {28, 2}});
}

TEST_CASE("libraries: variables per context, managed variables for every context",
          "[conformance][library]") {
  REQUIRE_LIBRARIES();
  LibraryHandle lib;
  CUdeviceptr p = 0;
  size_t bytes = 0;
  CUcontext prev = nullptr;
  CU_OK(api().cuCtxGetCurrent(&prev));
  CU_OK(api().cuCtxSetCurrent(nullptr));
  CU_CHECK_EQ(api().cuLibraryGetGlobal(&p, &bytes, lib.lib, "counter"), CUDA_ERROR_INVALID_CONTEXT);
  CUdeviceptr managed = 0;
  CU_OK(api().cuLibraryGetManaged(&managed, &bytes, lib.lib, "managed_value"));  // no context
  CHECK(managed != 0);
  CHECK(bytes == 4);
  CU_OK(api().cuCtxSetCurrent(prev));

  PrimaryScope scope;
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  CU_OK(api().cuLibraryGetGlobal(&p, &bytes, lib.lib, "counter"));
  CHECK(bytes == 4);
  CHECK(read_int(p, s.s) == 0);
  CUdeviceptr p2 = 0;
  CU_OK(api().cuLibraryGetGlobal(&p2, nullptr, lib.lib, "counter"));
  CHECK(p2 == p);
  CU_OK(api().cuLibraryGetGlobal(nullptr, &bytes, lib.lib, "counter"));
  CU_CHECK_EQ(api().cuLibraryGetGlobal(nullptr, nullptr, lib.lib, "counter"),
              CUDA_ERROR_INVALID_VALUE);
  CU_OK(api().cuLibraryGetGlobal(&p2, &bytes, lib.lib, "initialized"));
  CHECK(bytes == 4);
  CHECK(read_int(p2, s.s) == 7);
  CU_OK(api().cuLibraryGetGlobal(&p2, &bytes, lib.lib, "table"));
  CHECK(bytes == 12);
  int table[3] = {};
  CU_OK(api().cuMemcpyDtoHAsync(table, p2, sizeof table, s.s));
  CU_OK(api().cuStreamSynchronize(s.s));
  CHECK((table[0] == 1 && table[1] == 2 && table[2] == 3));
  CU_OK(api().cuLibraryGetGlobal(&p2, &bytes, lib.lib, "hidden_var"));  // not .visible
  CHECK(bytes == 4);
  CU_CHECK_EQ(api().cuLibraryGetGlobal(&p2, &bytes, lib.lib, "no_such_variable"),
              CUDA_ERROR_NOT_FOUND);
  CU_CHECK_EQ(api().cuLibraryGetGlobal(&p2, &bytes, lib.lib, "lib_add"), CUDA_ERROR_INVALID_VALUE);
  CU_CHECK_EQ(api().cuLibraryGetGlobal(&p2, &bytes, lib.lib, nullptr), CUDA_ERROR_INVALID_VALUE);
  CU_CHECK_EQ(api().cuLibraryGetGlobal(&p2, &bytes, nullptr, "counter"), CUDA_ERROR_INVALID_HANDLE);
  // The managed variable: also a global, the same address; other names are not managed.
  CU_OK(api().cuLibraryGetGlobal(&p2, &bytes, lib.lib, "managed_value"));
  CHECK(p2 == managed);
  CU_CHECK_EQ(api().cuLibraryGetManaged(&p2, &bytes, lib.lib, "counter"), CUDA_ERROR_NOT_FOUND);
  CU_CHECK_EQ(api().cuLibraryGetManaged(&p2, &bytes, lib.lib, "no_such_variable"),
              CUDA_ERROR_NOT_FOUND);
  // Written here, read back.
  const int value = 42;
  CU_OK(api().cuMemcpyHtoDAsync(p, &value, sizeof value, s.s));
  CHECK(read_int(p, s.s) == 42);

  // Another context: its own variables (initialized from the image); a green context: the
  // primary context's.
  CUcontext created = nullptr;
  CU_OK(api().cuCtxCreate(&created, 0, 0));
  CUdeviceptr in_created = 0;
  CU_OK(api().cuLibraryGetGlobal(&in_created, nullptr, lib.lib, "counter"));
  CHECK(in_created != p);
  {
    StreamHandle cs(CU_STREAM_NON_BLOCKING);
    CHECK(read_int(in_created, cs.s) == 0);
    CU_OK(api().cuLibraryGetGlobal(&p2, nullptr, lib.lib, "managed_value"));
    CHECK(p2 == managed);
  }
  CU_OK(api().cuCtxDestroy(created));
  if (!missing_optional_entry()) {
    GreenScope green;
    CU_OK(api().cuCtxSetCurrent(green.ctx()));
    CU_OK(api().cuLibraryGetGlobal(&p2, nullptr, lib.lib, "counter"));
    CHECK(p2 == p);
    CU_OK(api().cuCtxSetCurrent(scope.ctx()));
  }
}

TEST_CASE("cuLaunchKernelEx: launches, configuration checks and cluster dimensions",
          "[conformance][library]") {
  REQUIRE_LIBRARIES();
  LibraryFixture fx;
  CUlaunchConfig c = launch_config(fx.s);
  CU_OK(api().cuLaunchKernelEx(&c, fx.f, fx.args, nullptr));
  CU_OK(api().cuLaunchKernelEx(&c, reinterpret_cast<CUfunction>(fx.k), fx.args, nullptr));
  CU_OK(api().cuStreamSynchronize(fx.s));  // a non-blocking stream: the legacy one does not wait
  CUlaunchConfig legacy = launch_config(nullptr);
  CU_OK(api().cuLaunchKernelEx(&legacy, fx.f, fx.args, nullptr));
  CU_OK(api().cuStreamSynchronize(nullptr));
  CHECK(fx.value() == 3);

  CU_CHECK_EQ(api().cuLaunchKernelEx(nullptr, fx.f, fx.args, nullptr), CUDA_ERROR_INVALID_VALUE);
  CU_CHECK_EQ(api().cuLaunchKernelEx(&c, nullptr, fx.args, nullptr), CUDA_ERROR_INVALID_HANDLE);
  CUlaunchConfig no_attrs = c;
  no_attrs.numAttrs = 1;
  CU_CHECK_EQ(api().cuLaunchKernelEx(&no_attrs, fx.f, fx.args, nullptr), CUDA_ERROR_INVALID_VALUE);
  CUlaunchConfig bad = launch_config(fx.s, 0);
  CU_CHECK_EQ(api().cuLaunchKernelEx(&bad, fx.f, fx.args, nullptr), CUDA_ERROR_INVALID_VALUE);
  bad = launch_config(fx.s, 1, 1025);
  CU_CHECK_EQ(api().cuLaunchKernelEx(&bad, fx.f, fx.args, nullptr), CUDA_ERROR_INVALID_VALUE);
  bad = launch_config(fx.s);
  bad.sharedMemBytes = 49153;
  CU_CHECK_EQ(api().cuLaunchKernelEx(&bad, fx.f, fx.args, nullptr), CUDA_ERROR_INVALID_VALUE);

  // The attributes a launch takes; a stream attribute and an unknown one are refused.
  CUlaunchAttribute a{};
  a.id = CU_LAUNCH_ATTRIBUTE_IGNORE;
  CU_OK(launch_ex_with(fx.f, c, a, fx.args));
  a.id = CU_LAUNCH_ATTRIBUTE_PRIORITY;
  for (int priority : {-3, 100, -100}) {
    a.value.priority = priority;
    CU_OK(launch_ex_with(fx.f, c, a, fx.args));
  }
  a = {};
  a.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  a.value.programmaticStreamSerializationAllowed = 1;
  CU_OK(launch_ex_with(fx.f, c, a, fx.args));
  a = {};
  a.id = CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN;
  a.value.memSyncDomain = CU_LAUNCH_MEM_SYNC_DOMAIN_REMOTE;
  CU_OK(launch_ex_with(fx.f, c, a, fx.args));
  a.value.memSyncDomain = static_cast<CUlaunchMemSyncDomain>(7);
  CU_CHECK_EQ(launch_ex_with(fx.f, c, a, fx.args), CUDA_ERROR_INVALID_VALUE);
  a = {};
  a.id = CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY;
  a.value.syncPolicy = CU_SYNC_POLICY_AUTO;
  CU_CHECK_EQ(launch_ex_with(fx.f, c, a, fx.args), CUDA_ERROR_INVALID_VALUE);
  a = {};
  a.id = static_cast<CUlaunchAttributeID>(99);
  CU_CHECK_EQ(launch_ex_with(fx.f, c, a, fx.args), CUDA_ERROR_INVALID_VALUE);

  // Clusters: each dimension divides the grid; all zero means none; at most 8 blocks unless the
  // kernel allows a non-portable size (16 on the H200).
  CU_OK(launch_ex_with(fx.f, launch_config(fx.s, 4), cluster_attr(2), fx.args));
  CU_CHECK_EQ(launch_ex_with(fx.f, launch_config(fx.s, 3), cluster_attr(2), fx.args),
              CUDA_ERROR_INVALID_CLUSTER_SIZE);
  CU_CHECK_EQ(launch_ex_with(fx.f, launch_config(fx.s, 4), cluster_attr(0), fx.args),
              CUDA_ERROR_INVALID_CLUSTER_SIZE);
  CU_OK(launch_ex_with(fx.f, launch_config(fx.s, 4), cluster_attr(0, 0, 0), fx.args));
  CU_CHECK_EQ(launch_ex_with(fx.f, launch_config(fx.s, 4), cluster_attr(2, 2), fx.args),
              CUDA_ERROR_INVALID_CLUSTER_SIZE);
  CU_OK(launch_ex_with(fx.f, launch_config(fx.s, 16), cluster_attr(8), fx.args));
  CU_CHECK_EQ(launch_ex_with(fx.f, launch_config(fx.s, 16), cluster_attr(16), fx.args),
              CUDA_ERROR_INVALID_CLUSTER_SIZE);
  CU_CHECK_EQ(launch_ex_with(fx.f, launch_config(fx.s, 32), cluster_attr(32), fx.args),
              CUDA_ERROR_INVALID_CLUSTER_SIZE);
  CU_OK(api().cuStreamSynchronize(fx.s));
}

TEST_CASE("cuLaunchKernelEx: a non-portable cluster size once the kernel allows it",
          "[conformance][library]") {
  REQUIRE_LIBRARIES();
  LibraryFixture fx("lib_internal");  // no parameters
  CU_CHECK_EQ(launch_ex_with(fx.f, launch_config(fx.s, 16), cluster_attr(16), nullptr),
              CUDA_ERROR_INVALID_CLUSTER_SIZE);
  CU_OK(
      api().cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1, fx.k, 0));
  CU_OK(launch_ex_with(fx.f, launch_config(fx.s, 16), cluster_attr(16), nullptr));
  CU_CHECK_EQ(launch_ex_with(fx.f, launch_config(fx.s, 32), cluster_attr(32), nullptr),
              CUDA_ERROR_INVALID_CLUSTER_SIZE);
  // Any value is taken (the H200).
  CU_OK(
      api().cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 2, fx.k, 0));
  CU_OK(api().cuStreamSynchronize(fx.s));
}

TEST_CASE("cuLaunchKernelEx: cooperative launches are bounded by the co-resident blocks",
          "[conformance][library]") {
  REQUIRE_LIBRARIES();
  LibraryFixture fx;
  int sms = 0;
  CU_OK(api().cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0));
  const unsigned n = static_cast<unsigned>(sms);
  CUlaunchAttribute a{};
  a.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
  a.value.cooperative = 1;
  // 2,048 threads and 32 blocks per SM (a small kernel): 2 blocks of 1,024 threads, 32 of 32.
  CU_OK(launch_ex_with(fx.f, launch_config(fx.s, 2 * n, 1024), a, fx.args));
  CU_CHECK_EQ(launch_ex_with(fx.f, launch_config(fx.s, 2 * n + 1, 1024), a, fx.args),
              CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE);
  CU_OK(launch_ex_with(fx.f, launch_config(fx.s, 32 * n, 32), a, fx.args));
  CU_CHECK_EQ(launch_ex_with(fx.f, launch_config(fx.s, 32 * n + 1, 32), a, fx.args),
              CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE);
  a.value.cooperative = 0;  // not cooperative: any grid
  CU_OK(launch_ex_with(fx.f, launch_config(fx.s, 64 * n, 32), a, fx.args));
  // Cooperative and clustered together.
  CUlaunchAttribute both[2] = {cluster_attr(2), {}};
  both[1].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
  both[1].value.cooperative = 1;
  CUlaunchConfig c = launch_config(fx.s, 4);
  c.attrs = both;
  c.numAttrs = 2;
  CU_OK(api().cuLaunchKernelEx(&c, fx.f, fx.args, nullptr));
  CU_OK(api().cuStreamSynchronize(fx.s));
}

TEST_CASE("cuLaunchKernelEx: captured as a kernel node; a refused launch invalidates the capture",
          "[conformance][library]") {
  REQUIRE_LIBRARIES();
  LibraryFixture fx;
  fx.amount = 2;
  CU_OK(api().cuStreamBeginCapture(fx.s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU_OK(launch_ex_with(fx.f, launch_config(fx.s), cluster_attr(1), fx.args));
  CUgraph g = nullptr;
  CU_OK(api().cuStreamEndCapture(fx.s, &g));
  REQUIRE(g != nullptr);
  CUgraphNode node = nullptr;
  size_t n = 1;
  CU_OK(api().cuGraphGetNodes(g, &node, &n));
  REQUIRE(n == 1);
  CUgraphNodeType type{};
  CU_OK(api().cuGraphNodeGetType(node, &type));
  CHECK(type == CU_GRAPH_NODE_TYPE_KERNEL);
  CUgraphExec exec = instantiate(g);
  CU_OK(api().cuGraphLaunch(exec, fx.s));
  CU_OK(api().cuGraphLaunch(exec, fx.s));
  CHECK(fx.value() == 4);
  CU_OK(api().cuGraphExecDestroy(exec));
  CU_OK(api().cuGraphDestroy(g));
  // A bad cluster size in a capture: refused, and the capture is invalidated.
  CU_OK(api().cuStreamBeginCapture(fx.s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU_CHECK_EQ(launch_ex_with(fx.f, launch_config(fx.s, 3), cluster_attr(2), fx.args),
              CUDA_ERROR_INVALID_CLUSTER_SIZE);
  CHECK(capture_status(fx.s) == CU_STREAM_CAPTURE_STATUS_INVALIDATED);
  CHECK(end_capture_result(fx.s) == nm(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED));
}

TEST_CASE("a refused cuLaunchKernel invalidates the capture", "[conformance][library]") {
  REQUIRE_LIBRARIES();
  LibraryFixture fx;
  CU_OK(api().cuStreamBeginCapture(fx.s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU_CHECK_EQ(api().cuLaunchKernel(fx.f, 1, 1, 1, 1025, 1, 1, 0, fx.s, fx.args, nullptr),
              CUDA_ERROR_INVALID_VALUE);
  CHECK(capture_status(fx.s) == CU_STREAM_CAPTURE_STATUS_INVALIDATED);
  CHECK(end_capture_result(fx.s) == nm(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED));
  for (unsigned shared : {0u, 49153u}) {
    CU_OK(api().cuStreamBeginCapture(fx.s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CU_CHECK_EQ(
        api().cuLaunchKernel(fx.f, shared ? 1 : 0, 1, 1, 1, 1, 1, shared, fx.s, fx.args, nullptr),
        CUDA_ERROR_INVALID_VALUE);
    CHECK(capture_status(fx.s) == CU_STREAM_CAPTURE_STATUS_INVALIDATED);
    CHECK(end_capture_result(fx.s) == nm(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED));
  }
  // A refused launch attribute, though, leaves the capture valid.
  CU_OK(api().cuStreamBeginCapture(fx.s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CUlaunchAttribute unknown{};
  unknown.id = static_cast<CUlaunchAttributeID>(99);
  CU_CHECK_EQ(launch_ex_with(fx.f, launch_config(fx.s), unknown, fx.args),
              CUDA_ERROR_INVALID_VALUE);
  CHECK(capture_status(fx.s) == CU_STREAM_CAPTURE_STATUS_ACTIVE);
  CHECK(end_capture_result(fx.s) == nm(CUDA_SUCCESS));
}

TEST_CASE("lazy loading while a stream captures keeps the capture valid, in every mode",
          "[conformance][library]") {
  REQUIRE_LIBRARIES();
  LaunchFixture fx;
  for (CUstreamCaptureMode mode :
       {CU_STREAM_CAPTURE_MODE_GLOBAL, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
        CU_STREAM_CAPTURE_MODE_RELAXED}) {
    INFO("mode " << mode);
    // The first cuKernelGetFunction in this context (here and from another thread), the first
    // variable: the capture stays valid and records nothing.
    {
      LibraryHandle lib;
      CUkernel k = lib.kernel("lib_add");
      CUkernel other = lib.kernel("lib_shared");
      CU_OK(api().cuStreamBeginCapture(fx.s, mode));
      CUfunction f = nullptr;
      CU_OK(api().cuKernelGetFunction(&f, k));
      CUresult from_thread = CUDA_ERROR_UNKNOWN;
      std::thread t([&] {
        CUfunction g = nullptr;
        if (api().cuCtxSetCurrent(fx.scope.ctx()) == CUDA_SUCCESS)
          from_thread = api().cuKernelGetFunction(&g, other);
      });
      t.join();
      CU_CHECK_EQ(from_thread, CUDA_SUCCESS);
      CUdeviceptr var = 0;
      CU_OK(api().cuLibraryGetGlobal(&var, nullptr, lib.lib, "counter"));
      CHECK(capture_status(fx.s) == CU_STREAM_CAPTURE_STATUS_ACTIVE);
      CUgraph g = nullptr;
      CU_OK(api().cuStreamEndCapture(fx.s, &g));
      REQUIRE(g != nullptr);
      CHECK(node_count(g) == 0);
      CU_OK(api().cuGraphDestroy(g));
      CUfunction again = nullptr;
      CU_OK(api().cuKernelGetFunction(&again, k));
      CHECK(again == f);
    }
    // A launch of a kernel not loaded in this context yet (cuLaunchKernel, cuLaunchKernelEx):
    // loaded, captured as kernel nodes that run at each replay.
    {
      LibraryHandle lib;
      CUkernel k = lib.kernel("lib_add");
      CU_OK(api().cuStreamBeginCapture(fx.s, mode));
      CU_OK(api().cuLaunchKernel(reinterpret_cast<CUfunction>(k), 1, 1, 1, 1, 1, 1, 0, fx.s,
                                 fx.args, nullptr));
      CUlaunchConfig c = launch_config(fx.s);
      CU_OK(api().cuLaunchKernelEx(&c, reinterpret_cast<CUfunction>(k), fx.args, nullptr));
      CHECK(capture_status(fx.s) == CU_STREAM_CAPTURE_STATUS_ACTIVE);
      CUgraph g = nullptr;
      CU_OK(api().cuStreamEndCapture(fx.s, &g));
      REQUIRE(g != nullptr);
      CHECK(node_count(g) == 2);
      const int before = fx.value();
      CUgraphExec exec = instantiate(g);
      CU_OK(api().cuGraphLaunch(exec, fx.s));
      CHECK(fx.value() == before + 2);
      CU_OK(api().cuGraphExecDestroy(exec));
      CU_OK(api().cuGraphDestroy(g));
    }
    // Loading a library during a capture is allowed too.
    {
      CU_OK(api().cuStreamBeginCapture(fx.s, mode));
      CUlibrary lib = nullptr;
      CU_OK(api().cuLibraryLoadData(&lib, kLibraryPtx, nullptr, nullptr, 0, nullptr, nullptr, 0));
      CUkernel k = nullptr;
      CU_OK(api().cuLibraryGetKernel(&k, lib, "lib_add"));
      CHECK(capture_status(fx.s) == CU_STREAM_CAPTURE_STATUS_ACTIVE);
      CHECK(end_capture_result(fx.s) == nm(CUDA_SUCCESS));
      CU_OK(api().cuLibraryUnload(lib));
    }
  }
}

TEST_CASE("cuLibraryUnload during a global or thread-local capture is unsupported and invalidates",
          "[conformance][library]") {
  REQUIRE_LIBRARIES();
  LaunchFixture fx;
  for (CUstreamCaptureMode mode :
       {CU_STREAM_CAPTURE_MODE_GLOBAL, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL}) {
    INFO("mode " << mode);
    CUlibrary lib = nullptr;
    CU_OK(api().cuLibraryLoadData(&lib, kLibraryPtx, nullptr, nullptr, 0, nullptr, nullptr, 0));
    CUfunction f = nullptr;
    CUkernel k = nullptr;
    CU_OK(api().cuLibraryGetKernel(&k, lib, "lib_add"));
    CU_OK(api().cuKernelGetFunction(&f, k));
    CU_OK(api().cuStreamBeginCapture(fx.s, mode));
    CU_CHECK_EQ(api().cuLibraryUnload(lib), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    CHECK(capture_status(fx.s) == CU_STREAM_CAPTURE_STATUS_INVALIDATED);
    CHECK(end_capture_result(fx.s) == nm(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED));
    // Refused: the library is still loaded.
    CU_OK(api().cuLibraryGetKernel(&k, lib, "lib_add"));
    CU_OK(api().cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, fx.s, fx.args, nullptr));
    CU_OK(api().cuStreamSynchronize(fx.s));
    CU_OK(api().cuLibraryUnload(lib));
  }
  CHECK(fx.value() == 2);
  const auto load = [] {
    CUlibrary lib = nullptr;
    CU_OK(api().cuLibraryLoadData(&lib, kLibraryPtx, nullptr, nullptr, 0, nullptr, nullptr, 0));
    return lib;
  };
  // Relaxed: allowed.
  CU_OK(api().cuStreamBeginCapture(fx.s, CU_STREAM_CAPTURE_MODE_RELAXED));
  CU_OK(api().cuLibraryUnload(load()));
  CHECK(capture_status(fx.s) == CU_STREAM_CAPTURE_STATUS_ACTIVE);
  CHECK(end_capture_result(fx.s) == nm(CUDA_SUCCESS));
  // From another thread: refused during a global capture, allowed during a thread-local one.
  for (CUstreamCaptureMode mode :
       {CU_STREAM_CAPTURE_MODE_GLOBAL, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL}) {
    INFO("other thread, mode " << mode);
    CUlibrary lib = load();
    CU_OK(api().cuStreamBeginCapture(fx.s, mode));
    CUresult r = CUDA_ERROR_UNKNOWN;
    std::thread t([&] { r = api().cuLibraryUnload(lib); });
    t.join();
    const bool global = mode == CU_STREAM_CAPTURE_MODE_GLOBAL;
    CU_CHECK_EQ(r, global ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS);
    CHECK(capture_status(fx.s) ==
          (global ? CU_STREAM_CAPTURE_STATUS_INVALIDATED : CU_STREAM_CAPTURE_STATUS_ACTIVE));
    CHECK(end_capture_result(fx.s) ==
          nm(global ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_SUCCESS));
    if (global) CU_OK(api().cuLibraryUnload(lib));
  }
  // A thread whose own capture mode is relaxed may unload during its own global capture.
  CUlibrary lib = load();
  CU_OK(api().cuStreamBeginCapture(fx.s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  CU_OK(api().cuThreadExchangeStreamCaptureMode(&mode));
  CU_OK(api().cuLibraryUnload(lib));
  CU_OK(api().cuThreadExchangeStreamCaptureMode(&mode));
  CHECK(capture_status(fx.s) == CU_STREAM_CAPTURE_STATUS_ACTIVE);
  CHECK(end_capture_result(fx.s) == nm(CUDA_SUCCESS));
}

TEST_CASE("cuLibraryUnload: its functions become invalid handles; launches in flight complete",
          "[conformance][library]") {
  REQUIRE_LIBRARIES();
  LaunchFixture fx;
  CUlibrary lib = nullptr;
  CU_OK(api().cuLibraryLoadData(&lib, kLibraryPtx, nullptr, nullptr, 0, nullptr, nullptr, 0));
  CUkernel k = nullptr;
  CU_OK(api().cuLibraryGetKernel(&k, lib, "lib_add"));
  CUfunction f = nullptr;
  CU_OK(api().cuKernelGetFunction(&f, k));
  CUmodule m = nullptr;
  CU_OK(api().cuLibraryGetModule(&m, lib));
  // Launches in flight when the library is unloaded complete. (A graph executable holding a
  // launch of its kernels must not be launched afterwards: the H200 crashed once in two runs;
  // the emulator answers CUDA_ERROR_INVALID_HANDLE, [emu-only] case.)
  CU_OK(api().cuLaunchHostFunc(fx.s, sleep_20ms, nullptr));
  for (int i = 0; i < 10; ++i)
    CU_OK(api().cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, fx.s, fx.args, nullptr));
  CU_OK(api().cuLibraryUnload(lib));
  CU_OK(api().cuStreamSynchronize(fx.s));
  CHECK(fx.value() == 10);
  // What the H200 answers after the unload (other calls on the library or its kernels crash
  // it: see the [emu-only] case).
  CU_CHECK_EQ(api().cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, fx.s, fx.args, nullptr),
              CUDA_ERROR_INVALID_HANDLE);
  CUlaunchConfig c = launch_config(fx.s);
  CU_CHECK_EQ(api().cuLaunchKernelEx(&c, f, fx.args, nullptr), CUDA_ERROR_INVALID_HANDLE);
  CUfunction from_module = nullptr;
  CU_CHECK_EQ(api().cuModuleGetFunction(&from_module, m, "lib_add"), CUDA_ERROR_INVALID_HANDLE);
  CU_CHECK_EQ(api().cuModuleUnload(m), CUDA_ERROR_INVALID_HANDLE);
  CU_OK(api().cuStreamSynchronize(fx.s));
  CHECK(fx.value() == 10);
}

// ============================================================================================
// Occupancy, function attributes and kernel-node parameters: what custream asks of a kernel
// before it launches it, and of a graph's kernel nodes when it instantiates the graph
// ============================================================================================

namespace {

// lib_params(.u64 a, .u32 b, .f32 c, .u64 d): parameters at offsets 0, 8, 12 and 16.
constexpr const char* kParamsPtx = R"(
.version 7.0
.target sm_70
.address_size 64

.visible .entry lib_params(
  .param .u64 a,
  .param .u32 b,
  .param .f32 c,
  .param .u64 d
)
{
  ret;
}
)";

// Prints a value that the emulator's model only approximates, so that a run on a GPU records
// what the GPU answered ("fact: what = value").
void fact(const std::string& what, long long value) {
  std::printf("fact: %s = %lld\n", what.c_str(), value);
  std::fflush(stdout);
}

int sm_count(int dev = 0) {
  int sms = 0;
  CU_OK(api().cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
  return sms;
}

int occupancy(CUfunction f, int block, size_t dynamic_shared) {
  int n = -1;
  CU_OK(api().cuOccupancyMaxActiveBlocksPerMultiprocessor(&n, f, block, dynamic_shared));
  return n;
}

int func_attribute(CUfunction f, CUfunction_attribute a) {
  int v = -1;
  CU_OK(api().cuFuncGetAttribute(&v, a, f));
  return v;
}

// What a call answering a number answered: the number, or the error's name.
std::string number_or_error(CUresult r, int n) {
  return r == CUDA_SUCCESS ? std::to_string(n) : nm(r);
}

std::string occupancy_of(CUfunction f, int block, size_t dynamic_shared) {
  int n = -1;
  const CUresult r =
      api().cuOccupancyMaxActiveBlocksPerMultiprocessor(&n, f, block, dynamic_shared);
  return number_or_error(r, n);
}

// cuOccupancyMaxActiveClusters of f for configuration c with the given attributes.
CUresult clusters_with(int* n, CUfunction f, CUlaunchConfig c,
                       std::vector<CUlaunchAttribute> attrs) {
  c.attrs = attrs.empty() ? nullptr : attrs.data();
  c.numAttrs = static_cast<unsigned>(attrs.size());
  return api().cuOccupancyMaxActiveClusters(n, f, &c);
}

// The two arguments of a lib_add launch, read from a kernel node's copies.
std::pair<CUdeviceptr, int> lib_add_arguments(void** params) {
  std::pair<CUdeviceptr, int> out{0, -1};
  std::memcpy(&out.first, params[0], sizeof out.first);
  std::memcpy(&out.second, params[1], sizeof out.second);
  return out;
}

}  // namespace

TEST_CASE("kernels: cuKernelGetParamInfo of (.u64, .u32, .f32, .u64) parameters",
          "[conformance][library]") {
  REQUIRE_LIBRARIES();
  LibraryHandle lib(kParamsPtx);
  check_param_layout(lib.kernel("lib_params"), {{0, 8}, {8, 4}, {12, 4}, {16, 8}});
}

TEST_CASE("cuFuncGetAttribute: a library's function answers its kernel's attributes",
          "[conformance][library]") {
  REQUIRE_LIBRARIES();
  LibraryFixture fx;
  CUfunction shared = nullptr;
  CU_OK(api().cuKernelGetFunction(&shared, fx.lib.kernel("lib_shared")));
  CHECK(func_attribute(fx.f, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK) == 1024);
  CHECK(func_attribute(fx.f, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES) == 0);
  CHECK(func_attribute(shared, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES) == 1024);
  const int regs = func_attribute(fx.f, CU_FUNC_ATTRIBUTE_NUM_REGS);
  CHECK((regs > 0 && regs <= 255));
  CHECK(func_attribute(fx.f, CU_FUNC_ATTRIBUTE_PTX_VERSION) == 70);
  CHECK(func_attribute(fx.f, CU_FUNC_ATTRIBUTE_BINARY_VERSION) == 10 * compute_capability_major());
  CHECK(func_attribute(fx.f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) == 49152);
  CHECK(func_attribute(shared, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) == 49152 - 1024);
  // What cuKernelGetAttribute answers for the function's device, also once set there.
  CU_OK(
      api().cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 100000, fx.k, 0));
  CU_OK(
      api().cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1, fx.k, 0));
  for (CUfunction_attribute a :
       {CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
        CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES,
        CU_FUNC_ATTRIBUTE_NUM_REGS, CU_FUNC_ATTRIBUTE_PTX_VERSION, CU_FUNC_ATTRIBUTE_BINARY_VERSION,
        CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
        CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
        CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED,
        CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH}) {
    INFO("attribute " << a);
    int v = -1;
    CU_OK(api().cuKernelGetAttribute(&v, a, fx.k, 0));
    CHECK(func_attribute(fx.f, a) == v);
  }
  CHECK(func_attribute(fx.f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) == 100000);
  CHECK(func_attribute(fx.f, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED) == 1);
  // A CUkernel cast to a CUfunction is no function here (unlike the launch and occupancy calls).
  int v = -1;
  CU_CHECK_EQ(api().cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                       reinterpret_cast<CUfunction>(fx.k)),
              CUDA_ERROR_INVALID_HANDLE);
  CU_CHECK_EQ(api().cuFuncGetAttribute(nullptr, CU_FUNC_ATTRIBUTE_NUM_REGS, fx.f),
              CUDA_ERROR_INVALID_VALUE);
  CU_CHECK_EQ(api().cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_NUM_REGS, nullptr),
              CUDA_ERROR_INVALID_HANDLE);
  CU_CHECK_EQ(api().cuFuncGetAttribute(&v, static_cast<CUfunction_attribute>(99), fx.f),
              CUDA_ERROR_INVALID_VALUE);
  // A module's function: 48 KiB of dynamic shared memory, as no attribute was set.
  CUmodule m = nullptr;
  CU_OK(api().cuModuleLoadData(&m, kKernelPtx));
  CUfunction add = nullptr;
  CU_OK(api().cuModuleGetFunction(&add, m, "add"));
  CHECK(func_attribute(add, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK) == 1024);
  CHECK(func_attribute(add, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES) == 0);
  CHECK(func_attribute(add, CU_FUNC_ATTRIBUTE_PTX_VERSION) == 70);
  CHECK(func_attribute(add, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) == 49152);
  CU_OK(api().cuModuleUnload(m));
}

TEST_CASE("occupancy: blocks per SM, exactly the bound of a cooperative launch",
          "[conformance][library]") {
  REQUIRE_LIBRARIES();
  LibraryFixture fx;
  CUfunction shared = nullptr;  // 1 KiB of static shared memory
  CU_OK(api().cuKernelGetFunction(&shared, fx.lib.kernel("lib_shared")));
  // At most 32 blocks and 2,048 threads (whole warps) per SM; 228 KiB of shared memory per SM,
  // of which each block takes its own, 1 KiB more, in 128-byte units.
  CHECK(occupancy_of(fx.f, 1024, 0) == "2");
  CHECK(occupancy_of(fx.f, 1000, 0) == "2");
  CHECK(occupancy_of(fx.f, 256, 0) == "8");
  CHECK(occupancy_of(fx.f, 32, 0) == "32");
  CHECK(occupancy_of(fx.f, 1, 0) == "32");
  CHECK(occupancy_of(fx.f, 32, 22316) == "9");  // 23,340 bytes with the KiB, 23,424 allocated
  CHECK(occupancy_of(shared, 32, 20000) == "10");
  CHECK(occupancy_of(fx.f, 32, 49152) == "4");
  CHECK(occupancy_of(fx.f, 32, 49153) == "0");  // more than the kernel may ask for
  // A CUkernel cast to a CUfunction: its function in the current context.
  const auto cast = reinterpret_cast<CUfunction>(fx.k);
  CHECK(occupancy_of(cast, 256, 0) == "8");
  // Block sizes the calculator refuses, or that fit no block.
  CHECK(occupancy_of(fx.f, 0, 0) == nm(CUDA_ERROR_INVALID_VALUE));
  CHECK(occupancy_of(fx.f, -1, 0) == nm(CUDA_ERROR_INVALID_VALUE));
  CHECK(occupancy_of(fx.f, 1025, 0) == "0");
  int n = -1;
  CU_CHECK_EQ(api().cuOccupancyMaxActiveBlocksPerMultiprocessor(nullptr, fx.f, 32, 0),
              CUDA_ERROR_INVALID_VALUE);
  CU_CHECK_EQ(api().cuOccupancyMaxActiveBlocksPerMultiprocessor(&n, nullptr, 32, 0),
              CUDA_ERROR_INVALID_HANDLE);
  // A context must be current, for a function too.
  CU_OK(api().cuCtxSetCurrent(nullptr));
  CHECK(occupancy_of(fx.f, 32, 0) == nm(CUDA_ERROR_INVALID_CONTEXT));
  CHECK(occupancy_of(cast, 32, 0) == nm(CUDA_ERROR_INVALID_CONTEXT));
  CU_OK(api().cuCtxSetCurrent(fx.scope.ctx()));

  // A cooperative launch takes exactly the occupancy times the SMs.
  const unsigned sms = static_cast<unsigned>(sm_count());
  CUlaunchAttribute coop{};
  coop.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
  coop.value.cooperative = 1;
  const std::pair<unsigned, unsigned> configs[] = {{1024, 0}, {32, 0}, {32, 22316}, {256, 40000}};
  for (const auto& [block, dynamic_shared] : configs) {
    INFO(block << " threads, " << dynamic_shared << " bytes");
    const unsigned limit = static_cast<unsigned>(occupancy(fx.f, block, dynamic_shared)) * sms;
    CUlaunchConfig c = launch_config(fx.s, limit, block);
    c.sharedMemBytes = dynamic_shared;
    CU_CHECK_EQ(launch_ex_with(fx.f, c, coop, fx.args), CUDA_SUCCESS);
    c.gridDimX = limit + 1;
    CU_CHECK_EQ(launch_ex_with(fx.f, c, coop, fx.args), CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE);
  }
  CU_OK(api().cuStreamSynchronize(fx.s));
}

// The H200 answered 528, 30 and 14 clusters for the three sizes below: fewer than the SMs
// would hold, as its GPCs (at most 18 SMs) bound them; the emulator answers that upper bound.
TEST_CASE("occupancy: the clusters that can co-exist on the device", "[conformance][library]") {
  REQUIRE_LIBRARIES();
  LibraryFixture fx("lib_internal");  // no parameters
  const auto cast = reinterpret_cast<CUfunction>(fx.k);
  const int sms = sm_count();
  // At most the groups of cluster-size SMs times the blocks an SM holds.
  const auto check_clusters = [&](unsigned size, unsigned block, const char* what) {
    INFO(what);
    int n = -1;
    CU_CHECK_EQ(clusters_with(&n, fx.f, launch_config(fx.s, 16, block), {cluster_attr(size)}),
                CUDA_SUCCESS);
    CHECK(n > 0);
    CHECK(n <= sms / static_cast<int>(size) * occupancy(fx.f, static_cast<int>(block), 0));
    fact(what, n);
    return n;
  };
  check_clusters(2, 128, "clusters of 2 blocks of 128 threads");
  const int eights = check_clusters(8, 1024, "clusters of 8 blocks of 1024 threads");
  // A CUkernel: its function in the configuration's stream's context.
  int n = -1;
  CU_CHECK_EQ(clusters_with(&n, cast, launch_config(fx.s, 16, 1024), {cluster_attr(8)}),
              CUDA_SUCCESS);
  CHECK(n == eights);
  // Refused as a launch would be: over 8 blocks without the kernel's non-portable attribute; a
  // cluster that does not divide the grid.
  n = -1;
  CU_CHECK_EQ(clusters_with(&n, fx.f, launch_config(fx.s, 16, 1024), {cluster_attr(16)}),
              CUDA_ERROR_INVALID_CLUSTER_SIZE);
  CU_CHECK_EQ(clusters_with(&n, fx.f, launch_config(fx.s, 3, 128), {cluster_attr(2)}),
              CUDA_ERROR_INVALID_CLUSTER_SIZE);
  CHECK(n == -1);
  // No cluster size: none fits (not an error).
  CU_CHECK_EQ(clusters_with(&n, fx.f, launch_config(fx.s, 16, 128), {}), CUDA_SUCCESS);
  CHECK(n == 0);
  // 16 blocks once the kernel allows a non-portable size; 32, none.
  CU_OK(
      api().cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1, fx.k, 0));
  check_clusters(16, 1024, "clusters of 16 non-portable blocks of 1024 threads");
  n = -1;
  CU_CHECK_EQ(clusters_with(&n, fx.f, launch_config(fx.s, 32, 128), {cluster_attr(32)}),
              CUDA_SUCCESS);
  CHECK(n == 0);
  CUlaunchConfig c = launch_config(fx.s, 16, 128);
  CU_CHECK_EQ(api().cuOccupancyMaxActiveClusters(nullptr, fx.f, &c), CUDA_ERROR_INVALID_VALUE);
  CU_CHECK_EQ(api().cuOccupancyMaxActiveClusters(&n, fx.f, nullptr), CUDA_ERROR_INVALID_VALUE);
}

TEST_CASE(
    "cuLaunchKernelEx: a cluster that does not divide the grid is refused and invalidates "
    "the capture",
    "[conformance][library]") {
  REQUIRE_LIBRARIES();
  LibraryFixture fx;
  const auto cast = reinterpret_cast<CUfunction>(fx.k);
  CUlaunchConfig c = launch_config(fx.s, 4);
  c.gridDimY = 3;  // 2 x 2 clusters: the height does not divide
  for (CUfunction f : {fx.f, cast}) {
    CU_CHECK_EQ(launch_ex_with(f, c, cluster_attr(2, 2), fx.args), CUDA_ERROR_INVALID_CLUSTER_SIZE);
    CU_OK(api().cuStreamBeginCapture(fx.s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CU_CHECK_EQ(launch_ex_with(f, c, cluster_attr(2, 2), fx.args), CUDA_ERROR_INVALID_CLUSTER_SIZE);
    CHECK(capture_status(fx.s) == CU_STREAM_CAPTURE_STATUS_INVALIDATED);
    CHECK(end_capture_result(fx.s) == nm(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED));
  }
  c.gridDimY = 4;
  CU_OK(launch_ex_with(fx.f, c, cluster_attr(2, 2), fx.args));
  CU_OK(api().cuStreamSynchronize(fx.s));
}

TEST_CASE("cuGraphKernelNodeGetParams: captured launches of a library's kernel",
          "[conformance][library]") {
  REQUIRE_LIBRARIES();
  LibraryFixture fx;
  fx.amount = 3;
  const auto cast = reinterpret_cast<CUfunction>(fx.k);
  CUmodule m = nullptr;
  CU_OK(api().cuModuleLoadData(&m, kKernelPtx));
  CUfunction add = nullptr;
  CU_OK(api().cuModuleGetFunction(&add, m, "add"));
  // Each launch has a grid width of its own, which finds its node below: the function, then
  // the CUkernel cast to a CUfunction, each with cuLaunchKernel and cuLaunchKernelEx; a module's
  // function.
  CU_OK(api().cuStreamBeginCapture(fx.s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU_OK(api().cuMemsetD32Async(fx.buf.p, 0, 1, fx.s));
  CU_OK(api().cuLaunchKernel(fx.f, 1, 1, 1, 32, 1, 1, 0, fx.s, fx.args, nullptr));
  CUlaunchConfig c = launch_config(fx.s, 2, 64);
  c.sharedMemBytes = 128;
  CU_OK(api().cuLaunchKernelEx(&c, fx.f, fx.args, nullptr));
  CU_OK(api().cuLaunchKernel(cast, 3, 1, 1, 1, 1, 1, 0, fx.s, fx.args, nullptr));
  c.gridDimX = 4;
  CU_OK(api().cuLaunchKernelEx(&c, cast, fx.args, nullptr));
  CU_OK(api().cuLaunchKernel(add, 5, 1, 1, 1, 1, 1, 0, fx.s, fx.args, nullptr));
  CUgraph g = nullptr;
  CU_OK(api().cuStreamEndCapture(fx.s, &g));
  REQUIRE(g != nullptr);
  fx.amount = 99;  // after the launches: the nodes hold copies
  size_t count = 0;
  CU_OK(api().cuGraphGetNodes(g, nullptr, &count));
  REQUIRE(count == 6);
  std::vector<CUgraphNode> nodes(count);
  CU_OK(api().cuGraphGetNodes(g, nodes.data(), &count));
  std::map<unsigned, CUDA_KERNEL_NODE_PARAMS> by_grid;
  CUgraphNode memset_node = nullptr, kernel_node = nullptr;
  for (CUgraphNode node : nodes) {
    CUgraphNodeType type{};
    CU_OK(api().cuGraphNodeGetType(node, &type));
    if (type != CU_GRAPH_NODE_TYPE_KERNEL) {
      memset_node = node;
      continue;
    }
    kernel_node = node;
    CUDA_KERNEL_NODE_PARAMS p{};
    CU_OK(api().cuGraphKernelNodeGetParams(node, &p));
    // The CUDA 10.0 ABI: the same, without the kernel and the context.
    CUDA_KERNEL_NODE_PARAMS_v1 v1{};
    CU_OK(api().cuGraphKernelNodeGetParams_v1(node, &v1));
    CHECK(v1.func == p.func);
    CHECK(v1.gridDimX == p.gridDimX);
    CHECK(v1.kernelParams == p.kernelParams);
    by_grid[p.gridDimX] = p;
  }
  REQUIRE(by_grid.size() == 5);
  REQUIRE(memset_node != nullptr);
  for (const auto& [grid, p] : by_grid) {
    INFO("the launch of grid " << grid);
    CHECK((p.gridDimY == 1 && p.gridDimZ == 1 && p.blockDimY == 1 && p.blockDimZ == 1));
    CHECK(p.extra == nullptr);
    REQUIRE(p.kernelParams != nullptr);
    CHECK(p.kernelParams != fx.args);
    CHECK(lib_add_arguments(p.kernelParams) == std::make_pair(fx.buf.p, 3));
  }
  CHECK(by_grid[1].blockDimX == 32);
  CHECK(by_grid[1].sharedMemBytes == 0);
  CHECK(by_grid[2].blockDimX == 64);
  CHECK(by_grid[2].sharedMemBytes == 128);
  // As the H200 reports them: func is the function launched, for a CUkernel its function in
  // the stream's context; kern is the library's kernel of that function, however it was
  // launched (NULL for a module's function); ctx is the stream's context.
  for (unsigned grid : {1u, 2u, 3u, 4u}) {
    INFO("the launch of grid " << grid);
    CHECK(by_grid[grid].func == fx.f);
    CHECK(by_grid[grid].kern == fx.k);
  }
  CHECK(by_grid[5].func == add);
  CHECK(by_grid[5].kern == nullptr);
  for (const auto& [grid, p] : by_grid) CHECK(p.ctx == fx.scope.ctx());
  // Another kind of node; NULL arguments.
  CUDA_KERNEL_NODE_PARAMS p{};
  CU_CHECK_EQ(api().cuGraphKernelNodeGetParams(memset_node, &p), CUDA_ERROR_INVALID_VALUE);
  CU_CHECK_EQ(api().cuGraphKernelNodeGetParams(kernel_node, nullptr), CUDA_ERROR_INVALID_VALUE);
  CU_CHECK_EQ(api().cuGraphKernelNodeGetParams(nullptr, &p), CUDA_ERROR_INVALID_VALUE);
  // The graph runs; its nodes answer the same afterwards.
  CUgraphExec exec = instantiate(g);
  CU_OK(api().cuGraphLaunch(exec, fx.s));
  CU_OK(api().cuStreamSynchronize(fx.s));
  CU_OK(api().cuGraphExecDestroy(exec));
  CU_OK(api().cuGraphKernelNodeGetParams(kernel_node, &p));
  CHECK(by_grid.count(p.gridDimX) == 1);
  CHECK(lib_add_arguments(p.kernelParams) == std::make_pair(fx.buf.p, 3));
  CU_OK(api().cuGraphDestroy(g));
  CU_OK(api().cuModuleUnload(m));
}

// ============================================================================================
// Host-mapped memory and stream memory operations
// ============================================================================================

namespace {

constexpr unsigned kMapped = CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP;

// cuMemHostAlloc'd memory, zeroed, with its device pointer; freed with cuMemFreeHost.
struct HostMapped {
  void* p = nullptr;
  CUdeviceptr d = 0;
  explicit HostMapped(size_t bytes, unsigned flags = kMapped) {
    CU_OK(api().cuMemHostAlloc(&p, bytes, flags));
    REQUIRE(p != nullptr);
    std::memset(p, 0, bytes);
    CU_OK(api().cuMemHostGetDevicePointer(&d, p, 0));
  }
  ~HostMapped() {
    if (p) api().cuMemFreeHost(p);
  }
  HostMapped(const HostMapped&) = delete;
  HostMapped& operator=(const HostMapped&) = delete;
};

// What a watcher thread does with a word the stream writes: acquire loads and release stores.
template <class U>
U load_word(const void* base, size_t offset) {
  return __atomic_load_n(reinterpret_cast<const U*>(static_cast<const char*>(base) + offset),
                         __ATOMIC_ACQUIRE);
}
template <class U>
void store_word(void* base, size_t offset, U value) {
  __atomic_store_n(reinterpret_cast<U*>(static_cast<char*>(base) + offset), value,
                   __ATOMIC_RELEASE);
}

// A host function that holds its stream until the test opens the gate (the destructor opens
// it, so that a failed case does not leave the stream blocked on a destroyed gate).
struct Gate {
  std::atomic<bool> entered{false};
  std::atomic<bool> open{false};
  std::atomic<bool> left{false};
  std::function<void()> fn = [this] {
    entered = true;
    while (!open.load()) std::this_thread::sleep_for(1ms);
    left = true;
  };
  ~Gate() {
    open = true;
    if (entered.load()) wait_until([this] { return left.load(); });
  }
};

// Runs `f` at scope exit, also when a REQUIRE throws: releases what a failed case left blocked
// before the streams and the memory it waits on go.
struct AtExit {
  std::function<void()> f;
  ~AtExit() { f(); }
};

int device_attribute(CUdevice_attribute a) {
  int v = -1;
  CU_OK(api().cuDeviceGetAttribute(&v, a, 0));
  return v;
}

}  // namespace

TEST_CASE("host-mapped memory: cuMemHostAlloc, its device pointer, cuMemFreeHost",
          "[conformance][memops]") {
  REQUIRE_MEMOPS();
  PrimaryScope scope;
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  constexpr size_t kBytes = 4096;
  DeviceBuffer dev(kBytes);
  for (unsigned flags :
       {kMapped, unsigned{CU_MEMHOSTALLOC_DEVICEMAP}, kMapped | CU_MEMHOSTALLOC_WRITECOMBINED}) {
    INFO("flags " << flags);
    void* p = nullptr;
    CU_OK(api().cuMemHostAlloc(&p, kBytes, flags));
    REQUIRE(p != nullptr);
    std::memset(p, 0xab, kBytes);  // host memory
    CUdeviceptr d = 0;
    CU_OK(api().cuMemHostGetDevicePointer(&d, p, 0));
    // Unified addressing (and every device the H200's process sees can use host pointers):
    // the device pointer is the host address, for every address inside the allocation.
    CHECK(d == reinterpret_cast<CUdeviceptr>(p));
    CUdeviceptr inner = 0;
    CU_OK(api().cuMemHostGetDevicePointer(&inner, static_cast<char*>(p) + 256, 0));
    CHECK(inner == d + 256);
    // The device pointer is device memory to memset and memcpy, in stream order.
    std::vector<uint32_t> out(kBytes / 4);
    CU_OK(api().cuMemsetD32Async(d, 0x01020304u, kBytes / 4, s.s));
    CU_OK(api().cuMemcpyAsync(dev.p, d, kBytes, s.s));
    CU_OK(api().cuMemsetD8Async(d + 8, 0, kBytes - 8, s.s));
    CU_OK(api().cuMemcpyDtoHAsync(out.data(), dev.p, kBytes, s.s));
    CU_OK(api().cuStreamSynchronize(s.s));
    CHECK(out == std::vector<uint32_t>(kBytes / 4, 0x01020304u));
    const auto* words = static_cast<const uint32_t*>(p);
    CHECK(words[0] == 0x01020304u);
    CHECK(words[1] == 0x01020304u);
    CHECK(words[2] == 0u);
    CHECK(words[kBytes / 4 - 1] == 0u);
    CU_OK(api().cuMemFreeHost(p));
  }
}

TEST_CASE("stream memory operations: the device attributes", "[conformance][memops]") {
  REQUIRE_MEMOPS();
  const std::pair<CUdevice_attribute, const char*> attributes[] = {
      {CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, "CAN_MAP_HOST_MEMORY"},
      {CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, "UNIFIED_ADDRESSING"},
      {CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM,
       "CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM"},
      {CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1, "CAN_USE_STREAM_MEM_OPS_V1"},
      {CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS_V1, "CAN_USE_64_BIT_STREAM_MEM_OPS_V1"},
      {CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR_V1, "CAN_USE_STREAM_WAIT_VALUE_NOR_V1"},
      {CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES, "CAN_FLUSH_REMOTE_WRITES"},
      {CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, "CAN_USE_64_BIT_STREAM_MEM_OPS"},
      {CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR, "CAN_USE_STREAM_WAIT_VALUE_NOR"},
  };
  std::map<std::string, int> got;
  for (const auto& [a, name] : attributes) {
    got[name] = device_attribute(a);
    fact(std::string("attribute ") + name, got[name]);
  }
  CHECK(got["CAN_MAP_HOST_MEMORY"] == 1);
  CHECK(got["UNIFIED_ADDRESSING"] == 1);
  CHECK(got["CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM"] == 1);
  // The v1 operations (CUDA 8.0 / 9.0 ABIs) need a kernel-module option; the v2 ones,
  // cuStreamWriteValue64 included, work whatever these say.
  CHECK(got["CAN_USE_STREAM_MEM_OPS_V1"] == 0);
  CHECK(got["CAN_USE_64_BIT_STREAM_MEM_OPS_V1"] == 0);
  CHECK(got["CAN_USE_STREAM_WAIT_VALUE_NOR_V1"] == 0);
  CHECK(got["CAN_FLUSH_REMOTE_WRITES"] == 0);
  CHECK(got["CAN_USE_64_BIT_STREAM_MEM_OPS"] == 1);
  CHECK(got["CAN_USE_STREAM_WAIT_VALUE_NOR"] == 1);
}

TEST_CASE("cuStreamWriteValue32/64 write when the stream reaches them, not before",
          "[conformance][memops]") {
  REQUIRE_MEMOPS();
  PrimaryScope scope;
  HostMapped m(4096);
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  Gate gate;
  CU_OK(api().cuMemsetD32Async(m.d, 7, 4, s.s));  // words 0..3
  CU_OK(launch(s.s, &gate.fn));
  CU_OK(api().cuStreamWriteValue32(s.s, m.d, 42, 0));
  CU_OK(api().cuStreamWriteValue64(s.s, m.d + 8, 0x1122334455667788ull, 0));
  REQUIRE(wait_until([&] { return gate.entered.load(); }));
  // The memset before the host function has run; the writes after it have not.
  CHECK(load_word<uint32_t>(m.p, 0) == 7u);
  std::this_thread::sleep_for(50ms);
  CHECK(load_word<uint32_t>(m.p, 0) == 7u);
  CHECK(load_word<uint64_t>(m.p, 8) == 0x0000000700000007ull);
  CU_EQ(api().cuStreamQuery(s.s), CUDA_ERROR_NOT_READY);
  gate.open = true;
  // A watcher sees them with plain acquire loads, without synchronizing with the stream.
  CHECK(wait_until([&] { return load_word<uint64_t>(m.p, 8) == 0x1122334455667788ull; }));
  CHECK(load_word<uint32_t>(m.p, 0) == 42u);
  CHECK(load_word<uint32_t>(m.p, 4) == 7u);  // a 32-bit write writes 32 bits
  CU_OK(api().cuStreamSynchronize(s.s));
  // On the legacy and per-thread streams too, and through a device pointer of device memory.
  DeviceBuffer dev(16);
  uint64_t back[2] = {};
  CU_OK(api().cuMemsetD8Async(dev.p, 0, 16, CU_STREAM_LEGACY));
  CU_OK(api().cuStreamWriteValue64(CU_STREAM_LEGACY, dev.p, 0xfedcba9876543210ull, 0));
  CU_OK(api().cuStreamWriteValue32(CU_STREAM_PER_THREAD, dev.p + 8, 0x5a5a5a5au, 0));
  CU_OK(api().cuMemcpyDtoHAsync(back, dev.p, 16, CU_STREAM_PER_THREAD));
  CU_OK(api().cuStreamSynchronize(CU_STREAM_PER_THREAD));
  CHECK(back[0] == 0xfedcba9876543210ull);
  CHECK(back[1] == 0x5a5a5a5aull);
}

TEST_CASE("a watcher that reads the written sequence number sees the stream's earlier work",
          "[conformance][memops]") {
  REQUIRE_MEMOPS();
  PrimaryScope scope;
  // Word 0: the sequence number; from byte 256 on, one 256-byte slot per round, filled by a
  // memset before the round's write (the completion engine's pattern: work, then a number).
  constexpr uint64_t kRounds = 200;
  constexpr size_t kSlot = 256;
  HostMapped m(kSlot * (kRounds + 1));
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  std::atomic<int> stale{0};
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> last{0};
  std::thread watcher([&] {
    uint64_t seen = 0;
    while (seen < kRounds && !stop.load()) {
      const uint64_t now = load_word<uint64_t>(m.p, 0);
      if (now == seen) {
        std::this_thread::yield();
        continue;
      }
      if (now < seen) stale.fetch_add(1);  // the numbers only grow
      // Every round up to `now` has finished its memset.
      for (uint64_t r = seen + 1; r <= now && r <= kRounds; ++r) {
        const auto* slot = reinterpret_cast<const uint32_t*>(static_cast<char*>(m.p) + kSlot * r);
        for (size_t i = 0; i < kSlot / 4; ++i)
          if (slot[i] != static_cast<uint32_t>(r)) stale.fetch_add(1);
      }
      seen = now;
      last = now;
    }
  });
  AtExit join{[&] {
    stop = true;
    watcher.join();
  }};
  for (uint64_t r = 1; r <= kRounds; ++r) {
    CU_OK(api().cuMemsetD32Async(m.d + kSlot * r, static_cast<unsigned>(r), kSlot / 4, s.s));
    CU_OK(api().cuStreamWriteValue64(s.s, m.d, r, 0));
  }
  CHECK(wait_until([&] { return last.load() == kRounds; }));
  CU_OK(api().cuStreamSynchronize(s.s));
  CHECK(stale.load() == 0);
}

TEST_CASE("cuStreamWaitValue32/64 hold the stream until the word satisfies the condition",
          "[conformance][memops]") {
  REQUIRE_MEMOPS();
  PrimaryScope scope;
  const bool nor = device_attribute(CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR) == 1;
  struct Case {
    const char* name;
    bool wide;
    unsigned flags;
    uint64_t value, initial, still_blocked, releases;
  };
  const Case cases[] = {
      {"GEQ 32", false, CU_STREAM_WAIT_VALUE_GEQ, 10, 3, 9, 11},
      // Cyclic: (int32_t)(word - value) >= 0.
      {"GEQ 32 cyclic", false, CU_STREAM_WAIT_VALUE_GEQ, 0xfffffff0u, 0x7ffffff0u, 0xffffffe0u, 5},
      {"EQ 32", false, CU_STREAM_WAIT_VALUE_EQ, 77, 0, 78, 77},
      {"AND 32", false, CU_STREAM_WAIT_VALUE_AND, 0x10, 0, 0x0f, 0x30},
      {"NOR 32", false, CU_STREAM_WAIT_VALUE_NOR, 0xffff0000u, 0x0000ffffu, 0x0001ffffu,
       0x0000ff00u},
      {"GEQ 64", true, CU_STREAM_WAIT_VALUE_GEQ, 1ull << 40, 0, (1ull << 40) - 1, (1ull << 40) + 1},
      {"GEQ 64 cyclic", true, CU_STREAM_WAIT_VALUE_GEQ, ~0ull - 15, 1ull << 63, ~0ull - 31, 5},
      {"EQ 64", true, CU_STREAM_WAIT_VALUE_EQ, 0x1234567800000000ull, 0, 0x1234567800000001ull,
       0x1234567800000000ull},
      {"AND 64", true, CU_STREAM_WAIT_VALUE_AND, 1ull << 40, 0xffffffffull,
       0xffffffffull | (1ull << 39), 1ull << 40},
      {"NOR 64", true, CU_STREAM_WAIT_VALUE_NOR, 0xffffffff00000000ull, 0xffffffffull,
       0x1ffffffffull, 0},
  };
  constexpr size_t kCases = sizeof cases / sizeof cases[0];
  HostMapped m(8 * kCases);
  std::vector<std::unique_ptr<StreamHandle>> streams;
  std::vector<std::unique_ptr<std::atomic<bool>>> ran;
  std::vector<std::function<void()>> after(kCases);
  std::vector<bool> enqueued(kCases, false);
  for (size_t i = 0; i < kCases; ++i) {
    streams.push_back(std::make_unique<StreamHandle>(CU_STREAM_NON_BLOCKING));
    ran.push_back(std::make_unique<std::atomic<bool>>(false));
    after[i] = [flag = ran.back().get()] { *flag = true; };
  }
  // Whatever happens, every word ends up satisfying its wait before the streams go.
  AtExit release{[&] {
    for (size_t i = 0; i < kCases; ++i) {
      if (cases[i].wide) {
        store_word<uint64_t>(m.p, 8 * i, cases[i].releases);
      } else {
        store_word<uint32_t>(m.p, 8 * i, static_cast<uint32_t>(cases[i].releases));
      }
    }
    for (auto& s : streams) api().cuStreamSynchronize(s->s);
  }};
  auto write = [&](size_t i, uint64_t v) {
    if (cases[i].wide) {
      store_word<uint64_t>(m.p, 8 * i, v);
    } else {
      store_word<uint32_t>(m.p, 8 * i, static_cast<uint32_t>(v));
    }
  };
  for (size_t i = 0; i < kCases; ++i) {
    INFO(cases[i].name);
    write(i, cases[i].initial);
    const CUstream s = streams[i]->s;
    const CUresult r =
        cases[i].wide
            ? api().cuStreamWaitValue64(s, m.d + 8 * i, cases[i].value, cases[i].flags)
            : api().cuStreamWaitValue32(s, m.d + 8 * i, static_cast<cuuint32_t>(cases[i].value),
                                        cases[i].flags);
    if (cases[i].flags == CU_STREAM_WAIT_VALUE_NOR && !nor) {
      CU_CHECK_EQ(r, CUDA_ERROR_NOT_SUPPORTED);
      continue;
    }
    CU_CHECK_EQ(r, CUDA_SUCCESS);
    if (r != CUDA_SUCCESS) continue;
    enqueued[i] = true;
    CU_OK(launch(s, &after[i]));
  }
  std::this_thread::sleep_for(30ms);
  for (size_t i = 0; i < kCases; ++i) {
    if (!enqueued[i]) continue;
    INFO(cases[i].name << ": initial word");
    CHECK(!ran[i]->load());
    CU_CHECK_EQ(api().cuStreamQuery(streams[i]->s), CUDA_ERROR_NOT_READY);
    write(i, cases[i].still_blocked);
  }
  std::this_thread::sleep_for(30ms);
  for (size_t i = 0; i < kCases; ++i) {
    if (!enqueued[i]) continue;
    INFO(cases[i].name << ": still blocked");
    CHECK(!ran[i]->load());
  }
  // Released one at a time: each stream goes on by itself, the others stay held.
  for (size_t i = 0; i < kCases; ++i) {
    if (!enqueued[i]) continue;
    INFO(cases[i].name << ": released");
    write(i, cases[i].releases);
    CHECK(wait_until([&] { return ran[i]->load(); }));
    CU_CHECK_EQ(api().cuStreamSynchronize(streams[i]->s), CUDA_SUCCESS);
    for (size_t j = i + 1; j < kCases; ++j)
      if (enqueued[j]) CHECK(!ran[j]->load());
  }
}

TEST_CASE("a wait on one stream is released by a write on another", "[conformance][memops]") {
  REQUIRE_MEMOPS();
  PrimaryScope scope;
  DeviceBuffer word(8);
  CU_OK(api().cuMemsetD8Async(word.p, 0, 8, CU_STREAM_LEGACY));
  CU_OK(api().cuStreamSynchronize(CU_STREAM_LEGACY));
  StreamHandle waiter(CU_STREAM_NON_BLOCKING), writer(CU_STREAM_NON_BLOCKING);
  Gate gate;
  std::atomic<bool> ran{false};
  std::function<void()> mark = [&] { ran = true; };
  CU_OK(launch(writer.s, &gate.fn));
  CU_OK(api().cuStreamWriteValue64(writer.s, word.p, 3, 0));
  CU_OK(api().cuStreamWaitValue64(waiter.s, word.p, 3, CU_STREAM_WAIT_VALUE_EQ));
  CU_OK(launch(waiter.s, &mark));
  REQUIRE(wait_until([&] { return gate.entered.load(); }));
  std::this_thread::sleep_for(30ms);
  CHECK(!ran.load());
  CU_EQ(api().cuStreamQuery(waiter.s), CUDA_ERROR_NOT_READY);
  gate.open = true;
  CHECK(wait_until([&] { return ran.load(); }));
  CU_OK(api().cuStreamSynchronize(waiter.s));
  CU_OK(api().cuStreamSynchronize(writer.s));
}

TEST_CASE("captured writes and waits are memory-operation nodes, replayed by each launch",
          "[conformance][memops]") {
  REQUIRE_MEMOPS();
  PrimaryScope scope;
  HostMapped m(64);
  StreamHandle cap(CU_STREAM_NON_BLOCKING), run(CU_STREAM_NON_BLOCKING);
  CU_OK(api().cuStreamBeginCapture(cap.s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  const CUresult wait = api().cuStreamWaitValue32(cap.s, m.d + 16, 1, CU_STREAM_WAIT_VALUE_GEQ);
  const CUresult w32 = api().cuStreamWriteValue32(cap.s, m.d, 5, 0);
  const CUresult w64 = api().cuStreamWriteValue64(cap.s, m.d + 8, 6, 0);
  fact("captured cuStreamWaitValue32", wait);
  fact("captured cuStreamWriteValue32", w32);
  fact("captured cuStreamWriteValue64", w64);
  CUgraph g = nullptr;
  const CUresult end = api().cuStreamEndCapture(cap.s, &g);
  fact("cuStreamEndCapture after memory operations", end);
  CU_CHECK_EQ(wait, CUDA_SUCCESS);
  CU_CHECK_EQ(w32, CUDA_SUCCESS);
  CU_CHECK_EQ(w64, CUDA_SUCCESS);
  CU_EQ(end, CUDA_SUCCESS);
  REQUIRE(g != nullptr);
  CHECK(load_word<uint32_t>(m.p, 0) == 0u);  // nothing ran during the capture
  const size_t n = node_count(g);
  fact("nodes of 3 captured memory operations", static_cast<long long>(n));
  CHECK(n == 3);
  std::vector<CUgraphNode> nodes(n);
  size_t got = n;
  CU_OK(api().cuGraphGetNodes(g, nodes.data(), &got));
  for (CUgraphNode node : nodes) {
    CUgraphNodeType t{};
    CU_OK(api().cuGraphNodeGetType(node, &t));
    fact("captured memory operation node type", t);
    CHECK(t == CU_GRAPH_NODE_TYPE_BATCH_MEM_OP);
  }
  CUgraphExec e = instantiate(g);
  AtExit release{[&] {
    store_word<uint32_t>(m.p, 16, 1);
    api().cuStreamSynchronize(run.s);
    api().cuGraphExecDestroy(e);
    api().cuGraphDestroy(g);
  }};
  // The word waited on is 0: the launch is held, then goes on when the host writes it.
  std::atomic<bool> ran{false};
  std::function<void()> mark = [&] { ran = true; };
  CU_OK(api().cuGraphLaunch(e, run.s));
  CU_OK(launch(run.s, &mark));
  std::this_thread::sleep_for(30ms);
  CHECK(!ran.load());
  CHECK(load_word<uint32_t>(m.p, 0) == 0u);
  store_word<uint32_t>(m.p, 16, 1);
  CHECK(wait_until([&] { return ran.load(); }));
  CU_OK(api().cuStreamSynchronize(run.s));
  CHECK(load_word<uint32_t>(m.p, 0) == 5u);
  CHECK(load_word<uint64_t>(m.p, 8) == 6u);
  // A second launch writes again.
  store_word<uint32_t>(m.p, 0, 0);
  store_word<uint64_t>(m.p, 8, 0);
  CU_OK(api().cuGraphLaunch(e, run.s));
  CU_OK(api().cuStreamSynchronize(run.s));
  CHECK(load_word<uint32_t>(m.p, 0) == 5u);
  CHECK(load_word<uint64_t>(m.p, 8) == 6u);
}

// Measured on the H200 (driver 580.159.04), like the two cases after it.
TEST_CASE("host-mapped memory and memory operations: errors", "[conformance][memops]") {
  REQUIRE_MEMOPS();
  PrimaryScope scope;
  HostMapped m(64);
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  auto probe = [](const char* what, CUresult got, CUresult expected) {
    fact(what, got);
    INFO(what);
    CU_CHECK_EQ(got, expected);
  };
  void* p = nullptr;
  probe("cuMemHostAlloc(NULL)", api().cuMemHostAlloc(nullptr, 64, kMapped),
        CUDA_ERROR_INVALID_VALUE);
  const CUresult bad_flags = api().cuMemHostAlloc(&p, 64, 0x80);
  if (bad_flags == CUDA_SUCCESS) api().cuMemFreeHost(p);
  probe("cuMemHostAlloc(flags 0x80)", bad_flags, CUDA_ERROR_INVALID_VALUE);
  // 0 bytes is no error, unlike cuMemAlloc's (the pointer the H200 gave was not recorded).
  p = nullptr;
  const CUresult zero = api().cuMemHostAlloc(&p, 0, kMapped);
  if (zero == CUDA_SUCCESS && p) api().cuMemFreeHost(p);
  probe("cuMemHostAlloc(0 bytes)", zero, CUDA_SUCCESS);
  CUdeviceptr d = 0;
  probe("cuMemHostGetDevicePointer(NULL, p)", api().cuMemHostGetDevicePointer(nullptr, m.p, 0),
        CUDA_ERROR_INVALID_VALUE);
  probe("cuMemHostGetDevicePointer(&d, NULL)", api().cuMemHostGetDevicePointer(&d, nullptr, 0),
        CUDA_ERROR_INVALID_VALUE);
  probe("cuMemHostGetDevicePointer(flags 1)", api().cuMemHostGetDevicePointer(&d, m.p, 1),
        CUDA_ERROR_INVALID_VALUE);
  std::vector<uint64_t> pageable(8);
  probe("cuMemHostGetDevicePointer(pageable memory)",
        api().cuMemHostGetDevicePointer(&d, pageable.data(), 0), CUDA_ERROR_INVALID_VALUE);
  {
    DeviceBuffer dev(64);
    probe("cuMemHostGetDevicePointer(device memory)",
          api().cuMemHostGetDevicePointer(&d, reinterpret_cast<void*>(dev.p), 0),
          CUDA_ERROR_INVALID_VALUE);
  }
  // Host memory allocated without CU_MEMHOSTALLOC_DEVICEMAP is mapped all the same (unified
  // addressing).
  void* unmapped = nullptr;
  CU_OK(api().cuMemHostAlloc(&unmapped, 64, 0));
  d = 0;
  probe("cuMemHostGetDevicePointer(no DEVICEMAP)", api().cuMemHostGetDevicePointer(&d, unmapped, 0),
        CUDA_SUCCESS);
  CHECK(d == reinterpret_cast<CUdeviceptr>(unmapped));
  CU_OK(api().cuMemFreeHost(unmapped));
  probe("cuMemFreeHost(NULL)", api().cuMemFreeHost(nullptr), CUDA_SUCCESS);

  // No current context: the special stream handles, and the allocation calls.
  void* alloc = m.p;
  std::thread([&] {
    probe("no context: cuStreamWriteValue32(NULL stream)",
          api().cuStreamWriteValue32(nullptr, m.d, 1, 0), CUDA_ERROR_INVALID_CONTEXT);
    probe("no context: cuStreamWaitValue64(legacy stream)",
          api().cuStreamWaitValue64(CU_STREAM_LEGACY, m.d + 8, 0, 0), CUDA_ERROR_INVALID_CONTEXT);
    void* q = nullptr;
    const CUresult r = api().cuMemHostAlloc(&q, 64, kMapped);
    probe("no context: cuMemHostAlloc", r, CUDA_ERROR_INVALID_CONTEXT);
    if (r == CUDA_SUCCESS) alloc = q;
    CUdeviceptr dq = 0;
    probe("no context: cuMemHostGetDevicePointer", api().cuMemHostGetDevicePointer(&dq, m.p, 0),
          CUDA_ERROR_INVALID_CONTEXT);
  }).join();
  if (alloc != m.p) api().cuMemFreeHost(alloc);
  // Freeing needs no context (the memory is the process's, portable or not).
  void* f = nullptr;
  CU_OK(api().cuMemHostAlloc(&f, 64, kMapped));
  CUresult freed = CUDA_ERROR_UNKNOWN;
  std::thread([&] { freed = api().cuMemFreeHost(f); }).join();
  if (freed != CUDA_SUCCESS) api().cuMemFreeHost(f);
  probe("no context: cuMemFreeHost", freed, CUDA_SUCCESS);

  // Flags: writes take none (cuda.h: no NO_MEMORY_BARRIER in the v2 API); waits one of the four
  // conditions, and no remote-write flush on this device.
  probe("cuStreamWriteValue32(NO_MEMORY_BARRIER)",
        api().cuStreamWriteValue32(s.s, m.d, 1, CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER),
        CUDA_ERROR_INVALID_VALUE);
  probe("cuStreamWriteValue64(flags 2)", api().cuStreamWriteValue64(s.s, m.d + 8, 1, 2),
        CUDA_ERROR_INVALID_VALUE);
  probe("cuStreamWaitValue32(flags 4)", api().cuStreamWaitValue32(s.s, m.d, 0, 4),
        CUDA_ERROR_INVALID_VALUE);
  probe("cuStreamWaitValue64(FLUSH)",
        api().cuStreamWaitValue64(s.s, m.d + 8, 0,
                                  CU_STREAM_WAIT_VALUE_GEQ | CU_STREAM_WAIT_VALUE_FLUSH),
        CUDA_ERROR_NOT_SUPPORTED);
  // Had the driver accepted one of them, its operation might never complete: the stream is
  // drained with a bound, and the memory left allocated if it does not drain.
  const bool drained =
      wait_until([&] { return api().cuStreamQuery(s.s) != CUDA_ERROR_NOT_READY; }, 2000ms);
  fact("stream drained after the flag probes", drained);
  CHECK(drained);
  if (!drained) m.p = nullptr;
}

TEST_CASE("host-mapped memory and memory operations: invalid addresses", "[conformance][memops]") {
  // Separate from the other errors: a driver that accepted one of these would fault on the
  // GPU, and the fault would end every later case of the process (the H200 refuses them all).
  REQUIRE_MEMOPS();
  PrimaryScope scope;
  HostMapped m(64);
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  auto probe = [](const char* what, CUresult got, CUresult expected) {
    fact(what, got);
    INFO(what);
    CU_CHECK_EQ(got, expected);
  };
  probe("cuStreamWriteValue32(address 0)", api().cuStreamWriteValue32(s.s, 0, 1, 0),
        CUDA_ERROR_INVALID_VALUE);
  probe("cuStreamWaitValue32(address 0)", api().cuStreamWaitValue32(s.s, 0, 0, 0),
        CUDA_ERROR_INVALID_VALUE);
  probe("cuStreamWriteValue32(address % 4 == 2)", api().cuStreamWriteValue32(s.s, m.d + 2, 1, 0),
        CUDA_ERROR_INVALID_VALUE);
  probe("cuStreamWriteValue64(address % 8 == 4)", api().cuStreamWriteValue64(s.s, m.d + 4, 1, 0),
        CUDA_ERROR_INVALID_VALUE);
  probe("cuStreamWaitValue64(address % 8 == 4)", api().cuStreamWaitValue64(s.s, m.d + 4, 0, 0),
        CUDA_ERROR_INVALID_VALUE);
  probe("cuStreamSynchronize after them", api().cuStreamSynchronize(s.s), CUDA_SUCCESS);
  std::vector<uint64_t> pageable(8);
  probe("cuMemFreeHost(pageable memory)", api().cuMemFreeHost(pageable.data()),
        CUDA_ERROR_INVALID_VALUE);
  {
    DeviceBuffer dev(64);
    probe("cuMemFreeHost(device memory)", api().cuMemFreeHost(reinterpret_cast<void*>(dev.p)),
          CUDA_ERROR_INVALID_VALUE);
  }
  void* twice = nullptr;
  CU_OK(api().cuMemHostAlloc(&twice, 64, kMapped));
  CU_OK(api().cuMemFreeHost(twice));
  probe("cuMemFreeHost twice", api().cuMemFreeHost(twice), CUDA_ERROR_INVALID_VALUE);
}

// The v1 ABIs need the kernel module's NVreg_EnableStreamMemOPs=1, which
// CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1 reports (0 on the H200).
TEST_CASE("the CUDA 8.0 / 9.0 memory operations are not supported", "[conformance][memops]") {
  REQUIRE_MEMOPS();
  PrimaryScope scope;
  HostMapped m(64);
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  store_word<uint64_t>(m.p, 8, 1);  // any wait below is satisfied
  const CUresult w32 = api().cuStreamWriteValue32_v1(s.s, m.d, 9, 0);
  const CUresult w64 = api().cuStreamWriteValue64_v1(s.s, m.d + 16, 9, 0);
  const CUresult a32 = api().cuStreamWaitValue32_v1(s.s, m.d + 8, 1, CU_STREAM_WAIT_VALUE_GEQ);
  const CUresult a64 = api().cuStreamWaitValue64_v1(s.s, m.d + 8, 1, CU_STREAM_WAIT_VALUE_GEQ);
  fact("cuStreamWriteValue32 at 8000", w32);
  fact("cuStreamWriteValue64 at 9000", w64);
  fact("cuStreamWaitValue32 at 8000", a32);
  fact("cuStreamWaitValue64 at 9000", a64);
  CU_OK(api().cuStreamSynchronize(s.s));
  fact("word written by the 8000 ABI", load_word<uint32_t>(m.p, 0));
  CU_CHECK_EQ(w32, CUDA_ERROR_NOT_SUPPORTED);
  CU_CHECK_EQ(w64, CUDA_ERROR_NOT_SUPPORTED);
  CU_CHECK_EQ(a32, CUDA_ERROR_NOT_SUPPORTED);
  CU_CHECK_EQ(a64, CUDA_ERROR_NOT_SUPPORTED);
  CHECK(load_word<uint32_t>(m.p, 0) == 0u);
}

// ============================================================================================
// Emulator-only: fault injection and leak accounting
// ============================================================================================

TEST_CASE("fault injection: the nth call fails without side effects", "[emu-only]") {
  REQUIRE_EMULATOR();
  auto fail = emu_control<void (*)(const char*, int, CUresult)>("custream_emu_fail_call");
  auto reset = emu_control<void (*)()>("custream_emu_reset");
  auto live = emu_control<long (*)()>("custream_emu_live_objects");
  REQUIRE(fail);
  REQUIRE(reset);
  REQUIRE(live);
  PrimaryScope scope;
  const long before = live();
  fail("cuStreamCreate", 2, CUDA_ERROR_OUT_OF_MEMORY);
  CUstream a = nullptr, b = nullptr, c = nullptr;
  CU_OK(api().cuStreamCreate(&a, 0));
  CU_EQ(api().cuStreamCreate(&b, 0), CUDA_ERROR_OUT_OF_MEMORY);
  CHECK(b == nullptr);
  CHECK(live() == before + 1);
  CU_OK(api().cuStreamCreate(&c, 0));
  CU_OK(api().cuStreamDestroy(a));
  CU_OK(api().cuStreamDestroy(c));
  CHECK(live() == before);
  // Every ABI version of an entry point counts as the same entry point.
  fail("cuStreamGetCtx", 1, CUDA_ERROR_INVALID_CONTEXT);
  CUcontext ctx = nullptr;
  CUgreenCtx green = nullptr;
  CU_EQ(api().cuStreamGetCtx_v2(nullptr, &ctx, &green), CUDA_ERROR_INVALID_CONTEXT);
  CU_OK(api().cuStreamGetCtx(nullptr, &ctx));
  fail("cuEventRecord", 1, CUDA_ERROR_LAUNCH_FAILED);
  reset();
  EventHandle e;
  CU_OK(api().cuEventRecord(e.e, nullptr));
}

TEST_CASE("fault injection: sticky error", "[emu-only]") {
  REQUIRE_EMULATOR();
  auto sticky = emu_control<void (*)(CUresult)>("custream_emu_set_sticky_error");
  REQUIRE(sticky);
  PrimaryScope scope;
  StreamHandle s;
  sticky(CUDA_ERROR_ILLEGAL_ADDRESS);
  CU_EQ(api().cuStreamQuery(s.s), CUDA_ERROR_ILLEGAL_ADDRESS);
  CU_EQ(api().cuStreamSynchronize(s.s), CUDA_ERROR_ILLEGAL_ADDRESS);
  CUevent e = nullptr;
  CU_EQ(api().cuEventCreate(&e, 0), CUDA_ERROR_ILLEGAL_ADDRESS);
  const char* name = nullptr;
  CU_OK(api().cuGetErrorName(CUDA_ERROR_ILLEGAL_ADDRESS, &name));
  int v = 0;
  CU_OK(api().cuDriverGetVersion(&v));
  sticky(CUDA_SUCCESS);
  CU_OK(api().cuStreamQuery(s.s));
}

TEST_CASE("live objects return to their baseline", "[emu-only]") {
  REQUIRE_EMULATOR();
  auto live = emu_control<long (*)()>("custream_emu_live_objects");
  auto idle = emu_control<int (*)(int)>("custream_emu_wait_idle");
  REQUIRE(live);
  REQUIRE(idle);
  PrimaryScope scope;
  REQUIRE(idle(5000) == 1);
  const long before = live();
  {
    StreamHandle s;
    EventHandle e;
    DeviceBuffer b(64);
    CUdeviceptr p = 0;
    CU_OK(api().cuMemAllocAsync(&p, 128, s.s));
    CU_OK(api().cuMemsetD8Async(p, 1, 128, s.s));
    CU_OK(api().cuMemFreeAsync(p, s.s));  // no longer counted
    CUgraph g = nullptr;
    CU_OK(api().cuGraphCreate(&g, 0));
    CUgraphNode n = nullptr;
    CU_OK(api().cuGraphAddEmptyNode(&n, g, nullptr, 0));
    CUgraphExec x = instantiate(g);
    CHECK(live() == before + 5);  // stream, event, buffer, graph, executable
    GreenScope green;
    GreenStream gs(green.get());
    CUcontext created = nullptr;
    CU_OK(api().cuCtxCreate(&created, 0, 0));
    CU_OK(api().cuCtxPopCurrent(nullptr));
    CHECK(live() == before + 8);  // and a green context, its stream, a created context
    CU_OK(api().cuCtxDestroy(created));
    CU_OK(api().cuGraphLaunch(x, gs.s));
    CU_OK(api().cuGraphLaunch(x, s.s));
    CU_OK(api().cuGraphExecDestroy(x));
    CU_OK(api().cuGraphDestroy(g));
  }
  CHECK(idle(5000) == 1);
  CHECK(live() == before);
}

TEST_CASE("emulator: a destroyed created context's streams answer CONTEXT_IS_DESTROYED",
          "[emu-only]") {
  REQUIRE_EMULATOR();
  auto live = emu_control<long (*)()>("custream_emu_live_objects");
  auto idle = emu_control<int (*)(int)>("custream_emu_wait_idle");
  REQUIRE(live);
  REQUIRE(idle);
  PrimaryScope scope;
  EventHandle primary_event;  // made first: a freed handle's address is not reused for it
  REQUIRE(idle(5000) == 1);
  const long before = live();
  CUcontext created = nullptr;
  CU_OK(api().cuCtxCreate(&created, 0, 0));
  CUstream s = nullptr;
  CU_OK(api().cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUevent e = nullptr;
  CU_OK(api().cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
  CUmodule m = nullptr;
  CU_OK(api().cuModuleLoadData(&m, kKernelPtx));
  CHECK(live() == before + 4);  // context, stream, event, module
  CU_OK(api().cuEventRecord(e, s));
  CU_OK(api().cuCtxDestroy(created));
  CHECK(live() == before);  // destroyed with their context
  // Where the H200 crashes, the emulator answers CONTEXT_IS_DESTROYED.
  CU_CHECK_EQ(api().cuStreamQuery(s), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  CU_CHECK_EQ(api().cuStreamSynchronize(s), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  CUcontext c = nullptr;
  CU_CHECK_EQ(api().cuStreamGetCtx(s, &c), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  CUgreenCtx g = nullptr;
  CU_CHECK_EQ(api().cuStreamGetCtx_v2(s, &c, &g), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  CU_CHECK_EQ(api().cuEventRecord(primary_event.e, s), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  std::function<void()> nothing = [] {};
  CU_CHECK_EQ(launch(s, &nothing), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  CU_CHECK_EQ(api().cuStreamDestroy(s), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  CUdevice dev = -1;
  CU_CHECK_EQ(api().cuCtxGetDevice_v2(&dev, created), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  // Its events and modules went with it.
  CU_CHECK_EQ(api().cuEventQuery(e), CUDA_ERROR_INVALID_HANDLE);
  CU_CHECK_EQ(api().cuModuleUnload(m), CUDA_ERROR_INVALID_HANDLE);
  CU_CHECK_EQ(api().cuCtxSetCurrent(created), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  CHECK(live() == before);
}

TEST_CASE("emulator: green contexts in the live-object count, and fault injection", "[emu-only]") {
  REQUIRE_EMULATOR();
  auto live = emu_control<long (*)()>("custream_emu_live_objects");
  auto idle = emu_control<int (*)(int)>("custream_emu_wait_idle");
  auto fail = emu_control<void (*)(const char*, int, CUresult)>("custream_emu_fail_call");
  auto reset = emu_control<void (*)()>("custream_emu_reset");
  REQUIRE(live);
  REQUIRE(idle);
  REQUIRE(fail);
  REQUIRE(reset);
  PrimaryScope scope;
  REQUIRE(idle(5000) == 1);
  const long before = live();
  {
    GreenScope green;
    GreenStream gs(green.get());
    CHECK(live() == before + 2);  // the green context and its stream; descriptors are not
  }
  CHECK(live() == before);
  // A stream left alive when its green context is destroyed leaks (cuda.h): still counted.
  CUstream orphan = nullptr;
  {
    GreenScope green;
    CU_OK(api().cuGreenCtxStreamCreate(&orphan, green.get(), CU_STREAM_NON_BLOCKING, 0));
  }
  CHECK(live() == before + 1);
  CU_CHECK_EQ(api().cuStreamDestroy(orphan), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  // The converted context of a destroyed green context cannot be made current (the H200 says
  // CUDA_SUCCESS and may then abort on a double free in the driver).
  {
    CUcontext converted = nullptr;
    {
      GreenScope gone;
      converted = gone.ctx();
    }
    CU_CHECK_EQ(api().cuCtxSetCurrent(converted), CUDA_ERROR_CONTEXT_IS_DESTROYED);
    CU_CHECK_EQ(api().cuCtxPushCurrent(converted), CUDA_ERROR_CONTEXT_IS_DESTROYED);
    CUcontext now = nullptr;
    CU_OK(api().cuCtxGetCurrent(&now));
    CHECK(now == scope.ctx());
  }

  // Every new entry point goes through fault injection: the injected error, no side effect.
  GreenScope green;
  GreenStream gs(green.get());
  EventHandle e;
  CUdevResource whole = device_sm_resource();
  CUdevResource r{};
  unsigned n = 1;
  CUdevResourceDesc desc = nullptr;
  CU_OK(api().cuDevResourceGenerateDesc(&desc, &whole, 1));
  CUgreenCtx g = nullptr;
  CUcontext c = nullptr;
  CUstream s = nullptr;
  unsigned long long id = 0;
  const long mid = live();
  const std::vector<std::pair<const char*, std::function<CUresult()>>> calls = {
      {"cuDeviceGetDevResource",
       [&] { return api().cuDeviceGetDevResource(0, &r, CU_DEV_RESOURCE_TYPE_SM); }},
      {"cuCtxGetDevResource",
       [&] { return api().cuCtxGetDevResource(scope.ctx(), &r, CU_DEV_RESOURCE_TYPE_SM); }},
      {"cuGreenCtxGetDevResource",
       [&] { return api().cuGreenCtxGetDevResource(green.get(), &r, CU_DEV_RESOURCE_TYPE_SM); }},
      {"cuDevSmResourceSplitByCount",
       [&] { return api().cuDevSmResourceSplitByCount(&r, &n, &whole, nullptr, 0, 8); }},
      {"cuDevResourceGenerateDesc", [&] { return api().cuDevResourceGenerateDesc(&desc, &r, 1); }},
      {"cuGreenCtxCreate",
       [&] { return api().cuGreenCtxCreate(&g, desc, 0, CU_GREEN_CTX_DEFAULT_STREAM); }},
      {"cuGreenCtxDestroy", [&] { return api().cuGreenCtxDestroy(green.get()); }},
      {"cuCtxFromGreenCtx", [&] { return api().cuCtxFromGreenCtx(&c, green.get()); }},
      {"cuStreamGetGreenCtx", [&] { return api().cuStreamGetGreenCtx(gs.s, &g); }},
      {"cuGreenCtxRecordEvent", [&] { return api().cuGreenCtxRecordEvent(green.get(), e.e); }},
      {"cuGreenCtxWaitEvent", [&] { return api().cuGreenCtxWaitEvent(green.get(), e.e); }},
      {"cuGreenCtxGetId", [&] { return api().cuGreenCtxGetId(green.get(), &id); }},
      {"cuCtxRecordEvent", [&] { return api().cuCtxRecordEvent(scope.ctx(), e.e); }},
      {"cuCtxWaitEvent", [&] { return api().cuCtxWaitEvent(scope.ctx(), e.e); }},
      {"cuGreenCtxStreamCreate",
       [&] { return api().cuGreenCtxStreamCreate(&s, green.get(), CU_STREAM_NON_BLOCKING, 0); }},
      {"cuCtxGetId", [&] { return api().cuCtxGetId(scope.ctx(), &id); }},
  };
  for (const auto& [name, call] : calls) {
    INFO(name);
    fail(name, 1, CUDA_ERROR_LAUNCH_FAILED);
    CU_CHECK_EQ(call(), CUDA_ERROR_LAUNCH_FAILED);
    CHECK(live() == mid);
  }
  reset();
  CHECK(g == nullptr);
  CHECK(s == nullptr);
  CU_OK(api().cuGreenCtxGetId(green.get(), &id));  // still alive
}

TEST_CASE("emulator: an unloaded library's handles answer INVALID_HANDLE where the H200 crashes",
          "[emu-only][library]") {
  REQUIRE_EMULATOR();
  PrimaryScope scope;
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  CUlibrary lib = nullptr;
  CU_OK(api().cuLibraryLoadData(&lib, kLibraryPtx, nullptr, nullptr, 0, nullptr, nullptr, 0));
  CUkernel k = nullptr, never_loaded = nullptr;
  CU_OK(api().cuLibraryGetKernel(&k, lib, "lib_add"));
  CU_OK(api().cuLibraryGetKernel(&never_loaded, lib, "lib_shared"));
  CUfunction f = nullptr;
  CU_OK(api().cuKernelGetFunction(&f, k));
  // A graph executable holding a launch of the kernel (the function and the CUkernel).
  CU_OK(api().cuStreamBeginCapture(s.s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU_OK(api().cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s.s, nullptr, nullptr));
  CUgraph graph = nullptr;
  CU_OK(api().cuStreamEndCapture(s.s, &graph));
  CUgraphExec exec = instantiate(graph);
  CU_OK(api().cuGraphLaunch(exec, s.s));
  CU_OK(api().cuLibraryUnload(lib));
  CU_OK(api().cuStreamSynchronize(s.s));
  // Launching the executable now: the H200 crashed once in two runs.
  CU_CHECK_EQ(api().cuGraphLaunch(exec, s.s), CUDA_ERROR_INVALID_HANDLE);
  CU_OK(api().cuGraphExecDestroy(exec));
  CU_OK(api().cuGraphDestroy(graph));
  // The H200 answers the first three from freed memory (CUDA_SUCCESS); the others crash it
  // (SIGSEGV; a second cuLibraryUnload aborts on a double free).
  const char* name = nullptr;
  int v = 0;
  CUlibrary back = nullptr;
  CU_CHECK_EQ(api().cuKernelGetName(&name, k), CUDA_ERROR_INVALID_HANDLE);
  CU_CHECK_EQ(api().cuKernelGetAttribute(&v, CU_FUNC_ATTRIBUTE_NUM_REGS, k, 0),
              CUDA_ERROR_INVALID_HANDLE);
  CU_CHECK_EQ(api().cuKernelGetLibrary(&back, k), CUDA_ERROR_INVALID_HANDLE);
  CU_CHECK_EQ(api().cuKernelGetFunction(&f, k), CUDA_ERROR_INVALID_HANDLE);
  CU_CHECK_EQ(api().cuKernelGetFunction(&f, never_loaded), CUDA_ERROR_INVALID_HANDLE);
  CU_CHECK_EQ(api().cuLaunchKernel(reinterpret_cast<CUfunction>(k), 1, 1, 1, 1, 1, 1, 0, s.s,
                                   nullptr, nullptr),
              CUDA_ERROR_INVALID_HANDLE);
  CU_CHECK_EQ(
      api().cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 1000, k, 0),
      CUDA_ERROR_INVALID_HANDLE);
  size_t offset = 0, size = 0;
  CU_CHECK_EQ(api().cuKernelGetParamInfo(k, 0, &offset, &size), CUDA_ERROR_INVALID_HANDLE);
  CUkernel again = nullptr;
  unsigned count = 0;
  CU_CHECK_EQ(api().cuLibraryGetKernel(&again, lib, "lib_add"), CUDA_ERROR_INVALID_HANDLE);
  CU_CHECK_EQ(api().cuLibraryGetKernelCount(&count, lib), CUDA_ERROR_INVALID_HANDLE);
  CU_CHECK_EQ(api().cuLibraryEnumerateKernels(&again, 1, lib), CUDA_ERROR_INVALID_HANDLE);
  CUmodule m = nullptr;
  CU_CHECK_EQ(api().cuLibraryGetModule(&m, lib), CUDA_ERROR_INVALID_HANDLE);
  CUdeviceptr p = 0;
  CU_CHECK_EQ(api().cuLibraryGetGlobal(&p, nullptr, lib, "counter"), CUDA_ERROR_INVALID_HANDLE);
  CU_CHECK_EQ(api().cuLibraryGetManaged(&p, nullptr, lib, "managed_value"),
              CUDA_ERROR_INVALID_HANDLE);
  CU_CHECK_EQ(api().cuLibraryUnload(lib), CUDA_ERROR_INVALID_HANDLE);

  // A destroyed context forgets the library's module there; the library stays loaded.
  LibraryHandle kept;
  CUcontext created = nullptr;
  CU_OK(api().cuCtxCreate(&created, 0, 0));
  CU_OK(api().cuLibraryGetModule(&m, kept.lib));
  CUfunction in_created = nullptr;
  CU_OK(api().cuKernelGetFunction(&in_created, kept.kernel("lib_add")));
  CU_OK(api().cuCtxDestroy(created));
  CUfunction g = nullptr;
  CU_CHECK_EQ(api().cuModuleGetFunction(&g, m, "lib_add"), CUDA_ERROR_INVALID_HANDLE);
  CU_CHECK_EQ(api().cuLaunchKernel(in_created, 1, 1, 1, 1, 1, 1, 0, s.s, nullptr, nullptr),
              CUDA_ERROR_INVALID_HANDLE);
  CU_OK(api().cuKernelGetFunction(&g, kept.kernel("lib_add")));
  // NULL option arrays with a count: refused (the H200 crashes).
  CU_CHECK_EQ(api().cuLibraryLoadData(&lib, kLibraryPtx, nullptr, nullptr, 0, nullptr, nullptr, 1),
              CUDA_ERROR_INVALID_VALUE);
}

TEST_CASE("emulator: a library of a binary image resolves any kernel name", "[emu-only][library]") {
  REQUIRE_EMULATOR();
  auto register_kernel =
      emu_control<decltype(&custream_emu_register_kernel)>("custream_emu_register_kernel");
  REQUIRE(register_kernel != nullptr);
  PrimaryScope scope;
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  const unsigned char elf[] = {0x7f, 'E', 'L', 'F', 2, 1, 1, 0};
  LibraryHandle lib(reinterpret_cast<const char*>(elf));
  unsigned count = 99;
  CU_OK(api().cuLibraryGetKernelCount(&count, lib.lib));
  CHECK(count == 0);
  CUkernel k = lib.kernel("bin_add");
  CU_OK(api().cuLibraryGetKernelCount(&count, lib.lib));
  CHECK(count == 1);
  size_t offset = 0, size = 0;
  CU_CHECK_EQ(api().cuKernelGetParamInfo(k, 0, &offset, &size), CUDA_ERROR_NOT_SUPPORTED);
  CUdeviceptr p = 0;
  CU_CHECK_EQ(api().cuLibraryGetGlobal(&p, nullptr, lib.lib, "counter"), CUDA_ERROR_NOT_FOUND);
  // A registered CPU implementation needs the parameter sizes.
  DeviceBuffer buf(sizeof(int));
  CU_OK(api().cuMemsetD32Async(buf.p, 0, 1, s.s));
  CUdeviceptr dp = buf.p;
  int amount = 4;
  void* args[] = {&dp, &amount};
  REQUIRE(register_kernel("bin_add", cpu_lib_add, nullptr, nullptr, 0) == 0);
  CU_CHECK_EQ(api().cuLaunchKernel(reinterpret_cast<CUfunction>(k), 1, 1, 1, 1, 1, 1, 0, s.s, args,
                                   nullptr),
              CUDA_ERROR_NOT_SUPPORTED);
  const size_t sizes[] = {sizeof(CUdeviceptr), sizeof(int)};
  REQUIRE(register_kernel("bin_add", cpu_lib_add, nullptr, sizes, 2) == 0);
  CU_OK(api().cuLaunchKernel(reinterpret_cast<CUfunction>(k), 1, 1, 1, 1, 1, 1, 0, s.s, args,
                             nullptr));
  CHECK(read_int(buf.p, s.s) == 4);
  REQUIRE(register_kernel("bin_add", nullptr, nullptr, nullptr, 0) == 0);
}

TEST_CASE("emulator: kernel-node parameters outlive the library; unknown sizes give none",
          "[emu-only][library]") {
  REQUIRE_EMULATOR();
  LaunchFixture fx;
  CUlibrary lib = nullptr;
  CU_OK(api().cuLibraryLoadData(&lib, kLibraryPtx, nullptr, nullptr, 0, nullptr, nullptr, 0));
  CUkernel k = nullptr;
  CU_OK(api().cuLibraryGetKernel(&k, lib, "lib_add"));
  const unsigned char elf[] = {0x7f, 'E', 'L', 'F', 2, 1, 1, 0};
  LibraryHandle binary(reinterpret_cast<const char*>(elf));
  CUkernel unknown = binary.kernel("bin_anything");  // its parameters are not known here
  CU_OK(api().cuStreamBeginCapture(fx.s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU_OK(api().cuLaunchKernel(reinterpret_cast<CUfunction>(k), 1, 1, 1, 1, 1, 1, 0, fx.s, fx.args,
                             nullptr));
  CU_OK(api().cuLaunchKernel(reinterpret_cast<CUfunction>(unknown), 2, 1, 1, 1, 1, 1, 0, fx.s,
                             fx.args, nullptr));
  CUgraph g = nullptr;
  CU_OK(api().cuStreamEndCapture(fx.s, &g));
  CU_OK(api().cuLibraryUnload(lib));
  CUgraphNode nodes[2] = {};
  size_t count = 2;
  CU_OK(api().cuGraphGetNodes(g, nodes, &count));
  REQUIRE(count == 2);
  CUDA_KERNEL_NODE_PARAMS p{};
  CU_OK(api().cuGraphKernelNodeGetParams(nodes[0], &p));
  CHECK(p.gridDimX == 1);
  CHECK(p.kern == k);  // a stale handle now, as a driver's would be
  CHECK(p.func != nullptr);
  REQUIRE(p.kernelParams != nullptr);
  CHECK(lib_add_arguments(p.kernelParams) == std::make_pair(fx.buf.p, 1));
  CU_OK(api().cuGraphKernelNodeGetParams(nodes[1], &p));
  CHECK(p.gridDimX == 2);
  CHECK(p.kern == unknown);
  CHECK(p.kernelParams == nullptr);
  CU_OK(api().cuGraphDestroy(g));
}

TEST_CASE("emulator: libraries in the live-object count, and fault injection",
          "[emu-only][library]") {
  REQUIRE_EMULATOR();
  auto live = emu_control<long (*)()>("custream_emu_live_objects");
  auto idle = emu_control<int (*)(int)>("custream_emu_wait_idle");
  auto fail = emu_control<void (*)(const char*, int, CUresult)>("custream_emu_fail_call");
  auto reset = emu_control<void (*)()>("custream_emu_reset");
  REQUIRE(live);
  REQUIRE(idle);
  REQUIRE(fail);
  REQUIRE(reset);
  PrimaryScope scope;
  REQUIRE(idle(5000) == 1);
  const long before = live();
  {
    LibraryHandle lib;
    CHECK(live() == before + 1);  // the library; not its modules in contexts
    CUfunction f = nullptr;
    CU_OK(api().cuKernelGetFunction(&f, lib.kernel("lib_add")));
    CUcontext created = nullptr;
    CU_OK(api().cuCtxCreate(&created, 0, 0));
    CU_OK(api().cuKernelGetFunction(&f, lib.kernel("lib_add")));
    CHECK(live() == before + 2);  // and the created context
    CU_OK(api().cuCtxDestroy(created));
    CHECK(live() == before + 1);
  }
  CHECK(live() == before);

  // Every new entry point goes through fault injection: the injected error, no side effect.
  LibraryHandle lib;
  CUkernel k = lib.kernel("lib_add");
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  CUlibrary l = nullptr;
  CUkernel kk = nullptr;
  CUfunction f = nullptr;
  CUmodule m = nullptr;
  CUdeviceptr p = 0;
  const char* name = nullptr;
  unsigned count = 0;
  int v = 0;
  size_t offset = 0;
  CUlaunchConfig c = launch_config(s.s);
  // A kernel node (captured before the library's function was made: f stays NULL).
  CU_OK(api().cuStreamBeginCapture(s.s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU_OK(api().cuLaunchKernelEx(&c, reinterpret_cast<CUfunction>(k), nullptr, nullptr));
  CUgraph graph = nullptr;
  CU_OK(api().cuStreamEndCapture(s.s, &graph));
  CUgraphNode kernel_node = nullptr;
  size_t nodes = 1;
  CU_OK(api().cuGraphGetNodes(graph, &kernel_node, &nodes));
  CUDA_KERNEL_NODE_PARAMS node_params{};
  CUDA_KERNEL_NODE_PARAMS_v1 node_params_v1{};
  const long mid = live();
  const std::vector<std::pair<const char*, std::function<CUresult()>>> calls = {
      {"cuLibraryLoadData",
       [&] {
         return api().cuLibraryLoadData(&l, kLibraryPtx, nullptr, nullptr, 0, nullptr, nullptr, 0);
       }},
      {"cuLibraryLoadFromFile",
       [&] {
         return api().cuLibraryLoadFromFile(&l, "/nonexistent", nullptr, nullptr, 0, nullptr,
                                            nullptr, 0);
       }},
      {"cuLibraryUnload", [&] { return api().cuLibraryUnload(lib.lib); }},
      {"cuLibraryGetKernel", [&] { return api().cuLibraryGetKernel(&kk, lib.lib, "lib_add"); }},
      {"cuLibraryGetKernelCount", [&] { return api().cuLibraryGetKernelCount(&count, lib.lib); }},
      {"cuLibraryEnumerateKernels",
       [&] { return api().cuLibraryEnumerateKernels(&kk, 1, lib.lib); }},
      {"cuLibraryGetModule", [&] { return api().cuLibraryGetModule(&m, lib.lib); }},
      {"cuLibraryGetGlobal",
       [&] { return api().cuLibraryGetGlobal(&p, nullptr, lib.lib, "counter"); }},
      {"cuLibraryGetManaged",
       [&] { return api().cuLibraryGetManaged(&p, nullptr, lib.lib, "managed_value"); }},
      {"cuKernelGetFunction", [&] { return api().cuKernelGetFunction(&f, k); }},
      {"cuKernelGetName", [&] { return api().cuKernelGetName(&name, k); }},
      {"cuKernelGetLibrary", [&] { return api().cuKernelGetLibrary(&l, k); }},
      {"cuKernelGetAttribute",
       [&] { return api().cuKernelGetAttribute(&v, CU_FUNC_ATTRIBUTE_NUM_REGS, k, 0); }},
      {"cuKernelSetAttribute",
       [&] {
         return api().cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 0, k,
                                           0);
       }},
      {"cuKernelGetParamInfo", [&] { return api().cuKernelGetParamInfo(k, 0, &offset, nullptr); }},
      {"cuLaunchKernelEx",
       [&] {
         return api().cuLaunchKernelEx(&c, reinterpret_cast<CUfunction>(k), nullptr, nullptr);
       }},
      {"cuFuncGetAttribute",
       [&] {
         return api().cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_NUM_REGS,
                                         reinterpret_cast<CUfunction>(k));
       }},
      {"cuOccupancyMaxActiveBlocksPerMultiprocessor",
       [&] {
         return api().cuOccupancyMaxActiveBlocksPerMultiprocessor(
             &v, reinterpret_cast<CUfunction>(k), 32, 0);
       }},
      {"cuOccupancyMaxActiveClusters",
       [&] { return clusters_with(&v, reinterpret_cast<CUfunction>(k), c, {cluster_attr(1)}); }},
      {"cuGraphKernelNodeGetParams",
       [&] { return api().cuGraphKernelNodeGetParams(kernel_node, &node_params); }},
      {"cuGraphKernelNodeGetParams",
       [&] { return api().cuGraphKernelNodeGetParams_v1(kernel_node, &node_params_v1); }},
  };
  for (const auto& [entry, call] : calls) {
    INFO(entry);
    fail(entry, 1, CUDA_ERROR_LAUNCH_FAILED);
    CU_CHECK_EQ(call(), CUDA_ERROR_LAUNCH_FAILED);
    CHECK(live() == mid);
  }
  reset();
  CHECK(l == nullptr);
  CHECK(f == nullptr);
  CHECK(node_params.func == nullptr);
  CHECK(node_params_v1.func == nullptr);
  CU_OK(api().cuKernelGetName(&name, k));  // still loaded
  CHECK(std::string(name) == "lib_add");
  CU_OK(api().cuGraphDestroy(graph));
}

TEST_CASE("emulator: every served symbol has exactly the ABI versions of cudaTypedefs.h",
          "[emu-only]") {
  REQUIRE_EMULATOR();
  const std::string path = CUSTREAM_EMU_TYPEDEFS_H;
  std::ifstream in(path);
  if (path.empty() || !in) CUSTREAM_SKIP("cudaTypedefs.h not found at build time");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  // name -> versions, from "PFN_<name>_v<N>)" and "PFN_<name>_v<N>_pt??)".
  std::map<std::string, std::set<int>> versions;
  for (size_t pos = text.find("PFN_"); pos != std::string::npos; pos = text.find("PFN_", pos + 4)) {
    const size_t end = text.find_first_of(")(; ", pos);
    std::string id = text.substr(pos + 4, end - pos - 4);
    for (const char* suffix : {"_ptsz", "_ptds"})
      if (id.size() > 5 && id.compare(id.size() - 5, 5, suffix) == 0) id.resize(id.size() - 5);
    const size_t v = id.rfind("_v");
    if (v == std::string::npos || v + 2 >= id.size()) continue;
    const std::string digits = id.substr(v + 2);
    if (digits.find_first_not_of("0123456789") != std::string::npos) continue;
    versions[id.substr(0, v)].insert(std::stoi(digits));
  }
  REQUIRE(versions.size() > 100);
  auto gpa = driver().get_proc;
  int served = 0;
  for (const auto& [name, vs] : versions) {
    void* fn = nullptr;
    CUdriverProcAddressQueryResult st{};
    if (gpa(name.c_str(), &fn, 13000, 0, &st) != CUDA_SUCCESS || fn == nullptr) continue;
    ++served;
    INFO(name);
    CHECK(gpa(name.c_str(), &fn, *vs.begin() - 1, 0, &st) == CUDA_SUCCESS);
    CHECK(st == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    for (int v : vs) {
      CHECK(gpa(name.c_str(), &fn, v, 0, &st) == CUDA_SUCCESS);
      CHECK(fn != nullptr);
    }
  }
  CHECK(served > 60);
}

TEST_CASE("emulator: two devices of compute capability 9.0", "[emu-only]") {
  REQUIRE_EMULATOR();
  PrimaryScope scope;
  int count = 0;
  CU_OK(api().cuDeviceGetCount(&count));
  CHECK(count == driver().device_count);
  int major = 0;
  CU_OK(api().cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0));
  CHECK(major == 9);
}

namespace {
// add(int* data, int amount) on the CPU: data[0] += amount, as registered with the emulator.
void cpu_add(const custream_emu_kernel_launch* l) {
  int* data = nullptr;
  int amount = 0;
  std::memcpy(&data, l->params[0], sizeof data);
  std::memcpy(&amount, l->params[1], sizeof amount);
  *data += amount * static_cast<int>(l->grid[0]) * *static_cast<int*>(l->user);
}
}  // namespace

TEST_CASE("emulator: a kernel runs its registered CPU implementation, eagerly and in a graph",
          "[emu-only]") {
  REQUIRE_EMULATOR();
  auto register_kernel =
      emu_control<decltype(&custream_emu_register_kernel)>("custream_emu_register_kernel");
  auto runs = emu_control<decltype(&custream_emu_kernel_runs)>("custream_emu_kernel_runs");
  REQUIRE(register_kernel != nullptr);
  REQUIRE(runs != nullptr);
  PrimaryScope scope;
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  CUmodule m = nullptr;
  CU_OK(api().cuModuleLoadData(&m, kKernelPtx));
  CUfunction add = nullptr;
  CU_OK(api().cuModuleGetFunction(&add, m, "add"));
  DeviceBuffer buf(sizeof(int));
  CU_OK(api().cuMemsetD32Async(buf.p, 0, 1, s.s));
  CUdeviceptr p = buf.p;
  int amount = 5;
  void* args[] = {&p, &amount};
  const long before = runs("add");
  // Unregistered: a no-op that still runs in stream order (and counts).
  CU_OK(api().cuLaunchKernel(add, 1, 1, 1, 32, 1, 1, 0, s.s, args, nullptr));
  CU_OK(api().cuStreamSynchronize(s.s));
  CHECK(runs("add") == before + 1);
  int host = -1;
  CU_OK(api().cuMemcpyDtoHAsync(&host, buf.p, sizeof host, s.s));
  CU_OK(api().cuStreamSynchronize(s.s));
  CHECK(host == 0);
  // Registered (sizes from the PTX): arguments are copied at launch.
  int factor = 1;
  REQUIRE(register_kernel("add", cpu_add, &factor, nullptr, 0) == 0);
  CU_OK(api().cuLaunchKernel(add, 2, 1, 1, 32, 1, 1, 0, s.s, args, nullptr));
  amount = 1000;  // after the launch: not seen
  CU_OK(api().cuStreamSynchronize(s.s));
  CU_OK(api().cuMemcpyDtoHAsync(&host, buf.p, sizeof host, s.s));
  CU_OK(api().cuStreamSynchronize(s.s));
  CHECK(host == 10);
  // Captured: a kernel node, run at every replay.
  amount = 1;
  CU_OK(api().cuStreamBeginCapture(s.s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU_OK(api().cuLaunchKernel(add, 1, 1, 1, 1, 1, 1, 0, s.s, args, nullptr));
  CUgraph g = nullptr;
  CU_OK(api().cuStreamEndCapture(s.s, &g));
  CUgraphNode node = nullptr;
  size_t n = 1;
  CU_OK(api().cuGraphGetNodes(g, &node, &n));
  CUgraphNodeType type{};
  CU_OK(api().cuGraphNodeGetType(node, &type));
  CHECK(type == CU_GRAPH_NODE_TYPE_KERNEL);
  CUgraphExec e = instantiate(g);
  for (int i = 0; i < 3; ++i) CU_OK(api().cuGraphLaunch(e, s.s));
  CU_OK(api().cuStreamSynchronize(s.s));
  CU_OK(api().cuMemcpyDtoHAsync(&host, buf.p, sizeof host, s.s));
  CU_OK(api().cuStreamSynchronize(s.s));
  CHECK(host == 13);
  // A binary image: any name resolves; a registered kernel needs its parameter sizes.
  const unsigned char elf[] = {0x7f, 'E', 'L', 'F', 2, 1, 1, 0};
  CUmodule bin = nullptr;
  CU_OK(api().cuModuleLoadData(&bin, elf));
  CUfunction add_bin = nullptr;
  CU_OK(api().cuModuleGetFunction(&add_bin, bin, "add"));
  CU_EQ(api().cuLaunchKernel(add_bin, 1, 1, 1, 1, 1, 1, 0, s.s, args, nullptr),
        CUDA_ERROR_NOT_SUPPORTED);
  const size_t sizes[] = {sizeof(CUdeviceptr), sizeof(int)};
  factor = 2;
  REQUIRE(register_kernel("add", cpu_add, &factor, sizes, 2) == 0);
  CU_OK(api().cuLaunchKernel(add_bin, 1, 1, 1, 1, 1, 1, 0, s.s, args, nullptr));
  CU_OK(api().cuStreamSynchronize(s.s));
  CU_OK(api().cuMemcpyDtoHAsync(&host, buf.p, sizeof host, s.s));
  CU_OK(api().cuStreamSynchronize(s.s));
  CHECK(host == 15);
  REQUIRE(register_kernel("add", nullptr, nullptr, nullptr, 0) == 0);  // a no-op again
  CU_OK(api().cuLaunchKernel(add, 1, 1, 1, 1, 1, 1, 0, s.s, args, nullptr));
  CU_OK(api().cuStreamSynchronize(s.s));
  CU_OK(api().cuMemcpyDtoHAsync(&host, buf.p, sizeof host, s.s));
  CU_OK(api().cuStreamSynchronize(s.s));
  CHECK(host == 15);
  CHECK(register_kernel(nullptr, cpu_add, nullptr, nullptr, 0) == -1);
  CHECK(register_kernel("add", cpu_add, nullptr, nullptr, 2) == -1);
  CU_OK(api().cuGraphExecDestroy(e));
  CU_OK(api().cuGraphDestroy(g));
  CU_OK(api().cuModuleUnload(bin));
  CU_OK(api().cuModuleUnload(m));
}

TEST_CASE("emulator: the entry points under the symbol names libcuda.so.1 exports", "[emu-only]") {
  REQUIRE_EMULATOR();
  // cuda.h 13.0 compiles a call of cuStreamDestroy to cuStreamDestroy_v2, cuMemAlloc to
  // cuMemAlloc_v2 and so on; a program linked against libcuda finds these symbols.
  for (const char* name : {"cuInit",
                           "cuGreenCtxCreate",
                           "cuStreamGetGreenCtx",
                           "cuCtxGetId",
                           "cuDeviceGet",
                           "cuCtxGetCurrent",
                           "cuDevicePrimaryCtxRetain",
                           "cuDevicePrimaryCtxRelease_v2",
                           "cuStreamCreate",
                           "cuStreamDestroy_v2",
                           "cuStreamGetCtx",
                           "cuStreamGetCtx_v2",
                           "cuStreamBeginCapture_v2",
                           "cuStreamGetCaptureInfo_v3",
                           "cuEventDestroy_v2",
                           "cuMemAlloc_v2",
                           "cuMemFree_v2",
                           "cuMemcpyHtoDAsync_v2",
                           "cuGraphExecUpdate_v2",
                           "cuGraphInstantiateWithParams",
                           "cuLaunchKernel",
                           "cuModuleLoadData",
                           "cuLibraryLoadData",
                           "cuKernelGetFunction",
                           "cuKernelGetParamInfo",
                           "cuLaunchKernelEx",
                           "cuFuncGetAttribute",
                           "cuOccupancyMaxActiveBlocksPerMultiprocessor",
                           "cuOccupancyMaxActiveClusters",
                           "cuGraphKernelNodeGetParams",
                           "cuGraphKernelNodeGetParams_v2",
                           "cuCtxGetDevice_v2"}) {
    INFO(name);
    CHECK(dlsym(driver().lib, name) != nullptr);
  }
  // The same function cuGetProcAddress serves for the current ABI: called through the
  // exported symbol, cuStreamGetCtx_v2 answers like the 12050 entry point.
  PrimaryScope scope;
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  auto get_ctx_v2 =
      reinterpret_cast<PFN_cuStreamGetCtx_v12050>(dlsym(driver().lib, "cuStreamGetCtx_v2"));
  REQUIRE(get_ctx_v2 != nullptr);
  CUcontext a = nullptr, b = nullptr;
  CUgreenCtx green = reinterpret_cast<CUgreenCtx>(1);
  CU_OK(get_ctx_v2(s.s, &a, &green));
  CU_OK(api().cuStreamGetCtx_v2(s.s, &b, nullptr));
  CHECK(a == b);
  CHECK(green == nullptr);
}

TEST_CASE("emulator: host-mapped memory in the live-object count; memory operations, faults",
          "[emu-only][memops]") {
  REQUIRE_EMULATOR();
  REQUIRE_MEMOPS();
  auto fail = emu_control<void (*)(const char*, int, CUresult)>("custream_emu_fail_call");
  auto live = emu_control<long (*)()>("custream_emu_live_objects");
  auto idle = emu_control<int (*)(int)>("custream_emu_wait_idle");
  REQUIRE(fail);
  REQUIRE(live);
  REQUIRE(idle);
  PrimaryScope scope;
  const long before = live();
  void* p = nullptr;
  CU_OK(api().cuMemHostAlloc(&p, 64, kMapped));
  CHECK(live() == before + 1);
  // Host memory is not cuMemAlloc's, and device memory not cuMemHostAlloc's.
  CU_EQ(api().cuMemFree(reinterpret_cast<CUdeviceptr>(p)), CUDA_ERROR_INVALID_VALUE);
  {
    DeviceBuffer dev(64);
    CUdeviceptr d = 0;
    CU_EQ(api().cuMemHostGetDevicePointer(&d, reinterpret_cast<void*>(dev.p), 0),
          CUDA_ERROR_INVALID_VALUE);
    CU_EQ(api().cuMemFreeHost(reinterpret_cast<void*>(dev.p)), CUDA_ERROR_INVALID_VALUE);
  }
  CU_OK(api().cuMemFreeHost(p));
  CHECK(live() == before);
  // 0 bytes: no error (the H200) and no allocation here.
  p = &p;  // overwritten
  CU_OK(api().cuMemHostAlloc(&p, 0, kMapped));
  CHECK(p == nullptr);
  CHECK(live() == before);
  fail("cuMemHostAlloc", 1, CUDA_ERROR_OUT_OF_MEMORY);
  p = nullptr;
  CU_EQ(api().cuMemHostAlloc(&p, 64, kMapped), CUDA_ERROR_OUT_OF_MEMORY);
  CHECK(p == nullptr);
  CHECK(live() == before);

  // The 32-bit ABI of cuMemHostGetDevicePointer (CUdeviceptr_v1: unsigned int, a type cuda.h
  // declares only for the driver's own build) cannot hold a host address.
  void* v1 = nullptr;
  CUdriverProcAddressQueryResult st{};
  CU_OK(driver().get_proc("cuMemHostGetDevicePointer", &v1, 2020, 0, &st));
  REQUIRE(v1 != nullptr);
  HostMapped m(64);
  unsigned int d32 = 1;
  using GetDevicePointer2020 = CUresult(CUDAAPI*)(unsigned int*, void*, unsigned int);
  CU_EQ(reinterpret_cast<GetDevicePointer2020>(v1)(&d32, m.p, 0), CUDA_ERROR_NOT_SUPPORTED);
  CHECK(d32 == 0);

  // An injected failure enqueues nothing: the word keeps its value.
  StreamHandle s(CU_STREAM_NON_BLOCKING), other(CU_STREAM_NON_BLOCKING);
  fail("cuStreamWriteValue64", 1, CUDA_ERROR_UNKNOWN);
  CU_EQ(api().cuStreamWriteValue64(s.s, m.d, 5, 0), CUDA_ERROR_UNKNOWN);
  fail("cuStreamWaitValue32", 1, CUDA_ERROR_UNKNOWN);
  CU_EQ(api().cuStreamWaitValue32(s.s, m.d + 8, 1, 0), CUDA_ERROR_UNKNOWN);
  CU_OK(api().cuStreamSynchronize(s.s));
  CHECK(load_word<uint64_t>(m.p, 0) == 0u);

  // A wait that is not satisfied holds its stream's worker and nothing else: other streams and
  // queries go on; the emulator is not idle until the word is written. (Frees wait for every
  // stream, as cuMemFree does: none may run before the wait is over.)
  DeviceBuffer dev(64), more(64);
  AtExit release{[&] {
    store_word<uint32_t>(m.p, 8, 1);
    api().cuStreamSynchronize(s.s);
  }};
  CU_OK(api().cuStreamWaitValue32(s.s, m.d + 8, 1, CU_STREAM_WAIT_VALUE_EQ));
  CU_OK(api().cuStreamWriteValue32(s.s, m.d + 16, 2, 0));
  CU_OK(api().cuMemsetD8Async(more.p, 1, 64, other.s));
  CU_OK(api().cuMemcpyAsync(dev.p, more.p, 64, other.s));
  CU_OK(api().cuStreamWriteValue64(other.s, m.d + 24, 3, 0));
  CU_OK(api().cuStreamSynchronize(other.s));
  CHECK(load_word<uint64_t>(m.p, 24) == 3u);
  CU_EQ(api().cuStreamQuery(s.s), CUDA_ERROR_NOT_READY);
  CHECK(idle(50) == 0);
  CHECK(load_word<uint32_t>(m.p, 16) == 0u);
  store_word<uint32_t>(m.p, 8, 1);
  CU_OK(api().cuStreamSynchronize(s.s));
  CHECK(load_word<uint32_t>(m.p, 16) == 2u);
  CHECK(idle(5000) == 1);
}

// ============================================================================================
// Libraries: what another thread may do during a global capture (custream's library cache)
// ============================================================================================

// custream's library cache loads and unloads on whichever thread loads or clears it
// (docs/design/libraries.md, invariant 4): the loads while another thread captures in global
// mode, and the unloads with the thread's capture mode relaxed.
TEST_CASE("libraries: another thread loads during a global capture, and unloads in relaxed mode",
          "[conformance][library]") {
  REQUIRE_LIBRARIES();
  LaunchFixture fx;
  CUlibrary old = nullptr;
  CU_OK(api().cuLibraryLoadData(&old, kLibraryPtx, nullptr, nullptr, 0, nullptr, nullptr, 0));
  CU_OK(api().cuStreamBeginCapture(fx.s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CUresult load = CUDA_ERROR_UNKNOWN, relax = CUDA_ERROR_UNKNOWN, unload = CUDA_ERROR_UNKNOWN,
           restore = CUDA_ERROR_UNKNOWN;
  CUstreamCaptureMode before = CU_STREAM_CAPTURE_MODE_RELAXED,
                      after = CU_STREAM_CAPTURE_MODE_GLOBAL;
  CUlibrary loaded = nullptr;
  std::thread t([&] {
    load = api().cuLibraryLoadData(&loaded, kLibraryPtx, nullptr, nullptr, 0, nullptr, nullptr, 0);
    relax = api().cuThreadExchangeStreamCaptureMode(&before);
    unload = api().cuLibraryUnload(old);
    after = before;
    restore = api().cuThreadExchangeStreamCaptureMode(&after);
  });
  t.join();
  CU_CHECK_EQ(load, CUDA_SUCCESS);
  CU_CHECK_EQ(relax, CUDA_SUCCESS);
  CHECK(before == CU_STREAM_CAPTURE_MODE_GLOBAL);  // a new thread's mode
  CU_CHECK_EQ(unload, CUDA_SUCCESS);
  CU_CHECK_EQ(restore, CUDA_SUCCESS);
  CHECK(after == CU_STREAM_CAPTURE_MODE_RELAXED);
  CHECK(capture_status(fx.s) == CU_STREAM_CAPTURE_STATUS_ACTIVE);
  CHECK(end_capture_result(fx.s) == nm(CUDA_SUCCESS));
  if (unload != CUDA_SUCCESS) api().cuLibraryUnload(old);
  if (loaded) CU_OK(api().cuLibraryUnload(loaded));
}

// ============================================================================================
// Emulator fidelity: cuMemFree after a destroyed stream, a kernel fault kills the context,
// cuCtxCreate's flags
// ============================================================================================

namespace {

// cuMemFree of memory that a held stream will still write (memset, then copied back to
// host-mapped memory, then a written word): the free returns only once that work has run. The
// stream is destroyed first, unless `destroy` is false.
void expect_free_waits_for_held_writer(bool destroy) {
  HostMapped m(4096);  // word 0: gate; word 2: done; bytes 64..319: the copy
  CUdeviceptr buf = 0;
  CU_OK(api().cuMemAlloc(&buf, 256));
  CUstream s = nullptr;
  CU_OK(api().cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  std::thread opener;
  AtExit release{[&] {
    store_word<uint32_t>(m.p, 0, 1);
    if (opener.joinable()) opener.join();
    if (!destroy) api().cuStreamSynchronize(s);
  }};
  CU_OK(api().cuStreamWaitValue32(s, m.d, 1, CU_STREAM_WAIT_VALUE_EQ));
  CU_OK(api().cuMemsetD32Async(buf, 0xC0FFEEu, 64, s));
  CU_OK(api().cuMemcpyDtoHAsync(static_cast<char*>(m.p) + 64, buf, 256, s));
  CU_OK(api().cuStreamWriteValue32(s, m.d + 8, 1, 0));
  if (destroy) CU_OK(api().cuStreamDestroy(s));
  CU_EQ(api().cuStreamQuery(CU_STREAM_LEGACY), CUDA_SUCCESS);  // a non-blocking stream
  opener = std::thread([&m] {
    std::this_thread::sleep_for(200ms);
    store_word<uint32_t>(m.p, 0, 1);
  });
  CU_OK(api().cuMemFree(buf));
  const uint32_t done_when_freed = load_word<uint32_t>(m.p, 8);
  opener.join();
  CHECK(done_when_freed == 1u);  // the free returned after the stream's last operation
  CHECK(load_word<uint32_t>(m.p, 64) == 0xC0FFEEu);
  CHECK(load_word<uint32_t>(m.p, 64 + 252) == 0xC0FFEEu);
}

}  // namespace

TEST_CASE("cuMemFree waits for the queued work of a destroyed stream that writes the memory",
          "[conformance][memfree]") {
  REQUIRE_MEMOPS();
  SECTION("a stream of the primary context") {
    PrimaryScope scope;
    expect_free_waits_for_held_writer(true);
  }
  SECTION("a stream of a created context") {
    CUcontext created = nullptr;
    CU_OK(api().cuCtxCreate(&created, 0, 0));
    AtExit destroy{[&] { api().cuCtxDestroy(created); }};
    expect_free_waits_for_held_writer(true);
  }
  SECTION("a live stream of a created context") {
    CUcontext created = nullptr;
    CU_OK(api().cuCtxCreate(&created, 0, 0));
    AtExit destroy{[&] { api().cuCtxDestroy(created); }};
    expect_free_waits_for_held_writer(false);
  }
}

namespace {

// fault_store(p): *p = 1. Launched with p = 8, an address no allocation holds: on a GPU an
// illegal address (CUDA_ERROR_ILLEGAL_ADDRESS, sticky); the emulator's CPU twin injects the
// same sticky error at that point of the stream.
constexpr const char* kFaultPtx = R"(
.version 7.0
.target sm_70
.address_size 64

.visible .entry fault_store(
  .param .u64 p
)
{
  .reg .b32 %r<2>;
  .reg .b64 %rd<2>;
  ld.param.u64 %rd1, [p];
  mov.u32 %r1, 1;
  st.global.u32 [%rd1], %r1;
  ret;
}
)";

// Status of the last callback (cuStreamAddCallback) that ran, and how many ran.
std::atomic<int> g_callback_status{-1};
std::atomic<int> g_callback_runs{0};

void CUDA_CB record_fault_callback(CUstream, CUresult status, void*) {
  g_callback_status = static_cast<int>(status);
  ++g_callback_runs;
}

void cpu_fault_store(const custream_emu_kernel_launch*) {
  emu_control<decltype(&custream_emu_set_sticky_error)>("custream_emu_set_sticky_error")(
      CUDA_ERROR_ILLEGAL_ADDRESS);
}

constexpr const char* kStickyChildEnv = "CUSTREAM_CONFORMANCE_STICKY_CHILD";

// Runs the hidden test case `name` of this binary in a child process (a sticky error cannot be
// undone in a process) and answers its exit status and output.
std::pair<int, std::string> run_child_case(const std::string& name) {
  char exe[4096] = {};
  REQUIRE(readlink("/proc/self/exe", exe, sizeof exe - 1) > 0);
  const std::string cmd = std::string(kStickyChildEnv) + "=1 '" + exe + "' '" + name + "' 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::string out;
  char buf[4096];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  return {status, out};
}

}  // namespace

TEST_CASE("a kernel fault kills the context: queued work never runs, every query fails",
          "[conformance][sticky]") {
  REQUIRE_DRIVER_LOADED();
  if (const char* missing = missing_memop_entry()) CUSTREAM_SKIP("the driver lacks " << missing);
  const auto [status, out] = run_child_case("sticky child: work queued behind a kernel fault");
  INFO(out);
  CHECK(status == 0);
  CHECK(out.find("All tests passed") != std::string::npos);
}

TEST_CASE("sticky child: work queued behind a kernel fault", "[.][sticky-child]") {
  if (!std::getenv(kStickyChildEnv)) CUSTREAM_SKIP("runs in the child of the [sticky] case");
  REQUIRE_MEMOPS();
  if (driver().emulated) {
    auto reg = emu_control<decltype(&custream_emu_register_kernel)>("custream_emu_register_kernel");
    REQUIRE(reg != nullptr);
    REQUIRE(reg("fault_store", cpu_fault_store, nullptr, nullptr, 0) == 0);
  }
  PrimaryScope scope;
  CUmodule mod = nullptr;
  CU_OK(api().cuModuleLoadData(&mod, kFaultPtx));
  CUfunction fault = nullptr;
  CU_OK(api().cuModuleGetFunction(&fault, mod, "fault_store"));
  // Words: 0 gate of s, 1 gate of s2; 8 memset, 10 written, 12 copied, 14 written by s2,
  // 15 written by s3.
  HostMapped m(4096);
  auto word = [&m](size_t i) { return load_word<uint32_t>(m.p, 4 * i); };
  DeviceBuffer seven(4);
  CU_OK(api().cuMemsetD32Async(seven.p, 7, 1, CU_STREAM_LEGACY));
  CU_OK(api().cuStreamSynchronize(CU_STREAM_LEGACY));
  CUstream s = nullptr, s2 = nullptr, s3 = nullptr;
  CU_OK(api().cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CU_OK(api().cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
  CU_OK(api().cuStreamCreate(&s3, CU_STREAM_NON_BLOCKING));
  CUevent ev = nullptr, ev2 = nullptr;
  CU_OK(api().cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
  CU_OK(api().cuEventCreate(&ev2, CU_EVENT_DISABLE_TIMING));
  std::atomic<int> host_runs{0};
  std::function<void()> count = [&host_runs] { ++host_runs; };

  CUdeviceptr bad = 8;
  void* args[] = {&bad};
  CU_OK(api().cuStreamWaitValue32(s, m.d, 1, CU_STREAM_WAIT_VALUE_EQ));
  CU_OK(api().cuLaunchKernel(fault, 1, 1, 1, 1, 1, 1, 0, s, args, nullptr));
  CU_OK(api().cuMemsetD32Async(m.d + 4 * 8, 7, 1, s));
  CU_OK(launch(s, &count));
  CU_OK(api().cuStreamAddCallback(s, record_fault_callback, nullptr, 0));
  CU_OK(api().cuEventRecord(ev, s));
  CU_OK(api().cuStreamWriteValue32(s, m.d + 4 * 10, 9, 0));
  CU_OK(api().cuMemcpyDtoHAsync(static_cast<char*>(m.p) + 4 * 12, seven.p, 4, s));
  // Another stream's work, queued before the fault and held until after it.
  CU_OK(api().cuStreamWaitValue32(s2, m.d + 4, 1, CU_STREAM_WAIT_VALUE_EQ));
  CU_OK(api().cuStreamWriteValue32(s2, m.d + 4 * 14, 3, 0));
  CU_OK(launch(s2, &count));
  CU_OK(api().cuEventRecord(ev2, s2));
  // Work that completed before the fault.
  CU_OK(api().cuStreamWriteValue32(s3, m.d + 4 * 15, 4, 0));
  CU_OK(api().cuStreamSynchronize(s3));

  store_word<uint32_t>(m.p, 0, 1);  // the kernel runs and faults
  CU_EQ(api().cuStreamSynchronize(s), CUDA_ERROR_ILLEGAL_ADDRESS);
  store_word<uint32_t>(m.p, 4, 1);
  std::this_thread::sleep_for(300ms);
  CHECK(word(8) == 0u);          // the memset after the kernel did not run
  CHECK(word(10) == 0u);         // nor the write
  CHECK(word(12) == 0u);         // nor the copy
  CHECK(word(14) == 0u);         // nor another stream's work queued before the fault
  CHECK(word(15) == 4u);         // work done before the fault stays done
  CHECK(host_runs.load() == 0);  // host functions queued behind the fault never run
  // A callback runs once, with the error (cuda.h; as the H100, driver 580.159.04).
  CHECK(g_callback_runs.load() == 1);
  CHECK(g_callback_status.load() == static_cast<int>(CUDA_ERROR_ILLEGAL_ADDRESS));
  CU_CHECK_EQ(api().cuStreamQuery(s), CUDA_ERROR_ILLEGAL_ADDRESS);
  CU_CHECK_EQ(api().cuStreamQuery(s2), CUDA_ERROR_ILLEGAL_ADDRESS);
  CU_CHECK_EQ(api().cuStreamSynchronize(s2), CUDA_ERROR_ILLEGAL_ADDRESS);
  CU_CHECK_EQ(api().cuEventQuery(ev), CUDA_ERROR_ILLEGAL_ADDRESS);
  CU_CHECK_EQ(api().cuEventSynchronize(ev), CUDA_ERROR_ILLEGAL_ADDRESS);
  CU_CHECK_EQ(api().cuEventQuery(ev2), CUDA_ERROR_ILLEGAL_ADDRESS);
  CU_CHECK_EQ(api().cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  CUstream another = nullptr;
  CU_CHECK_EQ(api().cuStreamCreate(&another, 0), CUDA_ERROR_ILLEGAL_ADDRESS);
  CU_CHECK_EQ(launch(s3, &count), CUDA_ERROR_ILLEGAL_ADDRESS);
  std::this_thread::sleep_for(100ms);
  CHECK(host_runs.load() == 0);
  // The process ends here, with the context dead: nothing is released.
  std::fflush(stdout);
}

namespace {

// cuCtxCreate at each of its ABIs (2: flags, 3: execution affinity, 4: CUctxCreateParams, with
// NULL and with empty parameters): what each answers for `flags` on device 0. A context made is
// destroyed at once.
std::vector<std::string> ctx_create_results(unsigned flags) {
  void* v3 = nullptr;
  void* v4 = nullptr;
  CUdriverProcAddressQueryResult st{};
  CU_OK(driver().get_proc("cuCtxCreate", &v3, 11040, CU_GET_PROC_ADDRESS_DEFAULT, &st));
  CU_OK(driver().get_proc("cuCtxCreate", &v4, 12050, CU_GET_PROC_ADDRESS_DEFAULT, &st));
  const auto create_v3 = reinterpret_cast<PFN_cuCtxCreate_v11040>(v3);
  const auto create_v4 = reinterpret_cast<PFN_cuCtxCreate_v12050>(v4);
  CUctxCreateParams params{};
  const std::function<CUresult(CUcontext*)> creates[] = {
      [&](CUcontext* c) { return api().cuCtxCreate(c, flags, 0); },
      [&](CUcontext* c) { return create_v3(c, nullptr, 0, flags, 0); },
      [&](CUcontext* c) { return create_v4(c, nullptr, flags, 0); },
      [&](CUcontext* c) { return create_v4(c, &params, flags, 0); },
  };
  std::vector<std::string> out;
  for (const auto& create : creates) {
    CUcontext c = nullptr;
    const CUresult r = create(&c);
    out.push_back(nm(r));
    if (r == CUDA_SUCCESS) CU_OK(api().cuCtxDestroy(c));
  }
  return out;
}

}  // namespace

TEST_CASE("cuCtxCreate accepts the documented flags and refuses unknown bits",
          "[conformance][ctx-flags]") {
  REQUIRE_DRIVER_LOADED();
  CUcontext before = nullptr;
  CU_OK(api().cuCtxGetCurrent(&before));
  const std::vector<std::string> ok(4, "CUDA_SUCCESS");
  const std::vector<std::string> invalid(4, "CUDA_ERROR_INVALID_VALUE");
  for (unsigned flags : {0u, unsigned{CU_CTX_SCHED_SPIN}, unsigned{CU_CTX_SCHED_YIELD},
                         unsigned{CU_CTX_SCHED_BLOCKING_SYNC}, unsigned{CU_CTX_MAP_HOST},
                         unsigned{CU_CTX_LMEM_RESIZE_TO_MAX}, unsigned{CU_CTX_SYNC_MEMOPS},
                         unsigned{CU_CTX_SCHED_BLOCKING_SYNC | CU_CTX_MAP_HOST |
                                  CU_CTX_LMEM_RESIZE_TO_MAX | CU_CTX_SYNC_MEMOPS}}) {
    INFO("flags " << flags);
    CHECK(ctx_create_results(flags) == ok);
  }
  for (unsigned flags : {0x100u, 0x200u, 0x1000u, 0x10000u, 0x80000000u, 0x1FFu}) {
    INFO("flags " << flags);
    CHECK(ctx_create_results(flags) == invalid);
  }
  CUcontext after = nullptr;
  CU_OK(api().cuCtxGetCurrent(&after));
  CHECK(after == before);  // nothing refused was pushed, everything made was popped
}

TEST_CASE("emulator: a fault abandons queued work in-process; clearing it lets later work run",
          "[emu-only][sticky]") {
  REQUIRE_EMULATOR();
  REQUIRE_MEMOPS();
  auto sticky =
      emu_control<decltype(&custream_emu_set_sticky_error)>("custream_emu_set_sticky_error");
  auto idle = emu_control<decltype(&custream_emu_wait_idle)>("custream_emu_wait_idle");
  auto live = emu_control<decltype(&custream_emu_live_objects)>("custream_emu_live_objects");
  REQUIRE(sticky);
  REQUIRE(idle);
  REQUIRE(live);
  PrimaryScope scope;
  HostMapped m(64);
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  AtExit clear{[&] {
    sticky(CUDA_SUCCESS);
    store_word<uint32_t>(m.p, 0, 1);
    idle(5000);
  }};
  const long before = live();
  CUdeviceptr async = 0;
  CU_OK(api().cuMemAllocAsync(&async, 64, s.s));
  std::atomic<int> host_runs{0};
  std::function<void()> count = [&host_runs] { ++host_runs; };
  static std::atomic<int> callback_status{-1};
  callback_status = -1;
  CU_OK(api().cuStreamWaitValue32(s.s, m.d, 1, CU_STREAM_WAIT_VALUE_EQ));
  CU_OK(launch(s.s, &count));
  CU_OK(api().cuStreamAddCallback(
      s.s, [](CUstream, CUresult r, void*) { callback_status = static_cast<int>(r); }, nullptr, 0));
  CU_OK(api().cuMemFreeAsync(async, s.s));  // abandoned, its memory is still released
  CU_OK(api().cuStreamWriteValue32(s.s, m.d + 8, 5, 0));
  sticky(CUDA_ERROR_ILLEGAL_ADDRESS);
  store_word<uint32_t>(m.p, 0, 1);
  CHECK(idle(5000) == 1);
  CHECK(host_runs.load() == 0);
  CHECK(callback_status.load() == static_cast<int>(CUDA_ERROR_ILLEGAL_ADDRESS));  // cuda.h
  CHECK(load_word<uint32_t>(m.p, 8) == 0u);
  CHECK(live() == before);  // the allocation went with cuMemFreeAsync (LeakSanitizer: freed)
  sticky(CUDA_SUCCESS);
  // A test convenience a GPU lacks: cleared, the context runs work again.
  CU_OK(api().cuStreamWriteValue32(s.s, m.d + 8, 6, 0));
  CU_OK(launch(s.s, &count));
  CU_OK(api().cuStreamSynchronize(s.s));
  CHECK(load_word<uint32_t>(m.p, 8) == 6u);
  CHECK(host_runs.load() == 1);
}

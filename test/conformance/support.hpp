// Driver conformance suite: what every file of test/conformance/ shares: the driver loaded
// through dlopen + cuGetProcAddress_v2 (never custream), the entry points each case may use,
// and small RAII helpers. The suite's rules (tags [conformance], [unsure], [emu-only]) are
// in test/conformance/README.md.
#pragma once

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
#include "emu_control.h"

namespace conformance {

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
  X(cuGraphReleaseUserObject, cuGraphReleaseUserObject, 11030)                   \
  X(cuModuleLoadData, cuModuleLoadData, 2000)                                    \
  X(cuModuleUnload, cuModuleUnload, 2000)                                        \
  X(cuModuleGetFunction, cuModuleGetFunction, 2000)                              \
  X(cuLaunchKernel, cuLaunchKernel, 4000)

// Entry points a driver may lack (green contexts: CUDA 12.4 and later): loaded when served,
// NULL otherwise; a case that needs them skips without them (REQUIRE_GREEN_CONTEXTS).
#define CONFORMANCE_OPTIONAL_ENTRIES(X)                                            \
  X(cuCtxGetId, cuCtxGetId, 12000)                                                 \
  X(cuDeviceGetDevResource, cuDeviceGetDevResource, 12040)                         \
  X(cuCtxGetDevResource, cuCtxGetDevResource, 12040)                               \
  X(cuGreenCtxGetDevResource, cuGreenCtxGetDevResource, 12040)                     \
  X(cuDevSmResourceSplitByCount, cuDevSmResourceSplitByCount, 12040)               \
  X(cuDevResourceGenerateDesc, cuDevResourceGenerateDesc, 12040)                   \
  X(cuGreenCtxCreate, cuGreenCtxCreate, 12040)                                     \
  X(cuGreenCtxDestroy, cuGreenCtxDestroy, 12040)                                   \
  X(cuCtxFromGreenCtx, cuCtxFromGreenCtx, 12040)                                   \
  X(cuStreamGetGreenCtx, cuStreamGetGreenCtx, 12040)                               \
  X(cuGreenCtxRecordEvent, cuGreenCtxRecordEvent, 12040)                           \
  X(cuGreenCtxWaitEvent, cuGreenCtxWaitEvent, 12040)                               \
  X(cuGreenCtxGetId, cuGreenCtxGetId, 12090)                                       \
  X(cuCtxRecordEvent, cuCtxRecordEvent, 12050)                                     \
  X(cuCtxWaitEvent, cuCtxWaitEvent, 12050)                                         \
  X(cuGreenCtxStreamCreate, cuGreenCtxStreamCreate, 12050)                         \
  X(cuGraphAddNode, cuGraphAddNode, 12030)                                         \
  X(cuGraphNodeSetParams, cuGraphNodeSetParams, 12020)                             \
  X(cuGraphExecNodeSetParams, cuGraphExecNodeSetParams, 12020)                     \
  X(cuGraphConditionalHandleCreate, cuGraphConditionalHandleCreate, 12030)         \
  X(cuStreamBeginCaptureToGraph, cuStreamBeginCaptureToGraph, 12030)               \
  X(cuGraphChildGraphNodeGetGraph, cuGraphChildGraphNodeGetGraph, 10000)           \
  X(cuGraphNodeGetDependencies, cuGraphNodeGetDependencies, 12030)                 \
  X(cuGraphNodeGetDependentNodes, cuGraphNodeGetDependentNodes, 12030)             \
  X(cuGraphGetEdges, cuGraphGetEdges, 12030)                                       \
  X(cuGraphAddDependencies, cuGraphAddDependencies, 12030)                         \
  X(cuGraphExecKernelNodeSetParams, cuGraphExecKernelNodeSetParams, 12000)         \
  X(cuGraphExecMemsetNodeSetParams, cuGraphExecMemsetNodeSetParams, 10020)         \
  X(cuGraphExecMemcpyNodeSetParams, cuGraphExecMemcpyNodeSetParams, 10020)         \
  X(cuGraphExecHostNodeSetParams, cuGraphExecHostNodeSetParams, 10020)             \
  X(cuGraphExecChildGraphNodeSetParams, cuGraphExecChildGraphNodeSetParams, 11010) \
  X(cuGraphNodeSetEnabled, cuGraphNodeSetEnabled, 11060)                           \
  X(cuGraphNodeGetEnabled, cuGraphNodeGetEnabled, 11060)

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

// Memory pools (stream-ordered allocation, CUDA 11.2) and the 16-bit memset: loaded when
// served; a case that needs them skips without them (REQUIRE_MEMPOOLS).
#define CONFORMANCE_MEMPOOL_ENTRIES(X)                          \
  X(cuMemsetD16Async, cuMemsetD16Async, 3020)                   \
  X(cuDeviceGetDefaultMemPool, cuDeviceGetDefaultMemPool, 11020) \
  X(cuMemPoolGetAttribute, cuMemPoolGetAttribute, 11020)         \
  X(cuMemPoolSetAttribute, cuMemPoolSetAttribute, 11020)         \
  X(cuMemPoolTrimTo, cuMemPoolTrimTo, 11020)

struct Api {
#define CONFORMANCE_FIELD(field, symbol, version) PFN_##symbol##_v##version field = nullptr;
  CONFORMANCE_ENTRIES(CONFORMANCE_FIELD)
  CONFORMANCE_OPTIONAL_ENTRIES(CONFORMANCE_FIELD)
  CONFORMANCE_LIBRARY_ENTRIES(CONFORMANCE_FIELD)
  CONFORMANCE_MEMOP_ENTRIES(CONFORMANCE_FIELD)
  CONFORMANCE_MEMPOOL_ENTRIES(CONFORMANCE_FIELD)
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

inline const Driver& driver() {
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
    CONFORMANCE_MEMPOOL_ENTRIES(CONFORMANCE_LOAD_OPTIONAL)
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

inline const Api& api() { return driver().api; }

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
inline const char* missing_optional_entry() {
#define CONFORMANCE_MISSING(field, symbol, version) \
  if (!driver().api.field) return #symbol " at " #version;
  CONFORMANCE_OPTIONAL_ENTRIES(CONFORMANCE_MISSING)
#undef CONFORMANCE_MISSING
  return nullptr;
}

// The first library entry point the driver does not serve, or NULL.
inline const char* missing_library_entry() {
#define CONFORMANCE_MISSING(field, symbol, version) \
  if (!driver().api.field) return #symbol " at " #version;
  CONFORMANCE_LIBRARY_ENTRIES(CONFORMANCE_MISSING)
#undef CONFORMANCE_MISSING
  return nullptr;
}

// The first host-mapped memory or memory-operation entry point the driver does not serve, or
// NULL.
inline const char* missing_memop_entry() {
#define CONFORMANCE_MISSING(field, symbol, version) \
  if (!driver().api.field) return #symbol " at " #version;
  CONFORMANCE_MEMOP_ENTRIES(CONFORMANCE_MISSING)
#undef CONFORMANCE_MISSING
  return nullptr;
}

// The first memory-pool entry point the driver does not serve, or NULL.
inline const char* missing_mempool_entry() {
#define CONFORMANCE_MISSING(field, symbol, version) \
  if (!driver().api.field) return #symbol " at " #version;
  CONFORMANCE_MEMPOOL_ENTRIES(CONFORMANCE_MISSING)
#undef CONFORMANCE_MISSING
  return nullptr;
}

#define REQUIRE_MEMPOOLS()                                                         \
  do {                                                                             \
    REQUIRE_DRIVER_LOADED();                                                       \
    if (const char* missing_ = missing_mempool_entry())                            \
      CUSTREAM_SKIP("no memory pools: the driver does not serve " << missing_);    \
  } while (false)

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

inline std::string nm(CUresult r) {
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
inline void call_function(void* p) { (*static_cast<std::function<void()>*>(p))(); }

inline CUresult launch(CUstream s, std::function<void()>* f) {
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

inline CUstreamCaptureStatus capture_status(CUstream s) {
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  CU_OK(api().cuStreamIsCapturing(s, &st));
  return st;
}

inline size_t node_count(CUgraph g) {
  size_t n = 0;
  CU_OK(api().cuGraphGetNodes(g, nullptr, &n));
  return n;
}

inline CUgraphExec instantiate(CUgraph g) {
  CUgraphExec e = nullptr;
  CU_OK(api().cuGraphInstantiateWithFlags(&e, g, 0));
  return e;
}

// Ends a capture whose outcome the test does not assert, freeing a graph if one came back.
inline void end_capture_quietly(CUstream s) {
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

}  // namespace conformance

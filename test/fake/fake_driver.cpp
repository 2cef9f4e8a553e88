// A deliberately incomplete "driver" for the loader's failure paths. CUSTREAM_FAKE_MODE:
//   missing-symbol    every entry but cuGraphExecUpdate
//   init-fails        cuInit returns CUDA_ERROR_NO_DEVICE
//   optional-missing  every entry but cuStreamGetId
//   unused-missing    every entry but the ones custream never calls itself (only tests and
//                     tools do): cuGetErrorName, cuCtxPushCurrent, cuGraphCreate, …
//   negative-count    cuDeviceGetCount reports -1 devices
//   count-throws      cuDeviceGetCount throws std::length_error (a C++ exception, not a
//                     custream::Error, escaping the first load)
//   slow-retain       cuDevicePrimaryCtxRetain of device 0 waits (up to 5 s) until a retain
//                     of device 1 has begun, and fails with CUDA_ERROR_UNKNOWN if none does
//   (anything else)   every entry; driver 12.3.45, three devices
// cuInit, cuDriverGetVersion, cuDeviceGetCount, cuDeviceGet, cuDevicePrimaryCtxRetain,
// cuCtxGetCurrent / cuCtxSetCurrent (one context per thread, no stack) and
// cuStreamCreateWithPriority / cuStreamDestroy (counted handles, no work) do something; every
// other entry is a stub returning CUDA_ERROR_NOT_SUPPORTED. Nothing here calls operator new
// (except count-throws' exception): a loader test fails the library's allocations.
#include <cuda.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <thread>

namespace {

bool mode_is(const char* name) {
  const char* m = std::getenv("CUSTREAM_FAKE_MODE");
  return m != nullptr && std::strcmp(m, name) == 0;
}

constexpr int kDevices = 3;
std::atomic<bool> retain_entered[kDevices] = {};
std::atomic<long> live_streams{0};
std::atomic<std::uintptr_t> next_stream{0x5000};
thread_local CUcontext current_context = nullptr;

CUcontext context_of(CUdevice device) {
  return reinterpret_cast<CUcontext>(static_cast<std::uintptr_t>(0x1000 + 0x100 * device));
}

CUresult CUDAAPI stub() { return CUDA_ERROR_NOT_SUPPORTED; }
CUresult CUDAAPI init(unsigned) {
  return mode_is("init-fails") ? CUDA_ERROR_NO_DEVICE : CUDA_SUCCESS;
}
CUresult CUDAAPI driver_version(int* v) {
  *v = 12345;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI device_count(int* n) {
  if (mode_is("count-throws")) throw std::length_error("fake driver: no count for you");
  *n = mode_is("negative-count") ? -1 : kDevices;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI device_get(CUdevice* d, int ordinal) {
  if (ordinal < 0 || ordinal >= kDevices) return CUDA_ERROR_INVALID_DEVICE;
  *d = ordinal;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI primary_ctx_retain(CUcontext* context, CUdevice device) {
  if (device < 0 || device >= kDevices) return CUDA_ERROR_INVALID_DEVICE;
  retain_entered[device].store(true);
  if (mode_is("slow-retain") && device == 0) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!retain_entered[1].load()) {
      if (std::chrono::steady_clock::now() > deadline) return CUDA_ERROR_UNKNOWN;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  *context = context_of(device);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI ctx_get_current(CUcontext* context) {
  *context = current_context;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI ctx_set_current(CUcontext context) {
  current_context = context;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI stream_create(CUstream* stream, unsigned, int) {
  if (current_context == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  *stream = reinterpret_cast<CUstream>(next_stream.fetch_add(0x10));
  live_streams.fetch_add(1);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI stream_destroy(CUstream) {
  live_streams.fetch_sub(1);
  return CUDA_SUCCESS;
}

struct Named {
  const char* name;
  void* fn;
};

// The entries custream does not call itself (driver_table.hpp lists them as optional).
constexpr const char* kUnused[] = {
    "cuGetErrorName",    "cuDevicePrimaryCtxRelease",
    "cuCtxPushCurrent",  "cuCtxPopCurrent",
    "cuCtxSynchronize",  "cuStreamCreate",
    "cuGraphCreate",     "cuThreadExchangeStreamCaptureMode",
    "cuMemcpyDtoDAsync",
};

bool missing(const char* symbol) {
  if (mode_is("missing-symbol")) return std::strcmp(symbol, "cuGraphExecUpdate") == 0;
  if (mode_is("optional-missing")) return std::strcmp(symbol, "cuStreamGetId") == 0;
  if (mode_is("unused-missing")) {
    for (const char* name : kUnused) {
      if (std::strcmp(symbol, name) == 0) return true;
    }
  }
  return false;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) CUresult CUDAAPI cuGetProcAddress_v2(
    const char* symbol, void** pfn, int, cuuint64_t, CUdriverProcAddressQueryResult* status) {
  if (missing(symbol)) {
    *pfn = nullptr;
    if (status) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_ERROR_NOT_FOUND;
  }
  static const Named kNamed[] = {
      {"cuInit", reinterpret_cast<void*>(&init)},
      {"cuDriverGetVersion", reinterpret_cast<void*>(&driver_version)},
      {"cuDeviceGetCount", reinterpret_cast<void*>(&device_count)},
      {"cuDeviceGet", reinterpret_cast<void*>(&device_get)},
      {"cuDevicePrimaryCtxRetain", reinterpret_cast<void*>(&primary_ctx_retain)},
      {"cuCtxGetCurrent", reinterpret_cast<void*>(&ctx_get_current)},
      {"cuCtxSetCurrent", reinterpret_cast<void*>(&ctx_set_current)},
      {"cuStreamCreateWithPriority", reinterpret_cast<void*>(&stream_create)},
      {"cuStreamDestroy", reinterpret_cast<void*>(&stream_destroy)},
  };
  *pfn = reinterpret_cast<void*>(&stub);
  for (const Named& n : kNamed) {
    if (std::strcmp(symbol, n.name) == 0) *pfn = n.fn;
  }
  if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
  return CUDA_SUCCESS;
}

/// Test control: whether cuDevicePrimaryCtxRetain of `device` has been called.
extern "C" __attribute__((visibility("default"))) int custream_fake_retain_entered(int device) {
  return device >= 0 && device < kDevices && retain_entered[device].load() ? 1 : 0;
}

/// Test control: streams created and not yet destroyed.
extern "C" __attribute__((visibility("default"))) long custream_fake_live_streams() {
  return live_streams.load();
}

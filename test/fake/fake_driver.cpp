// A deliberately incomplete "driver" for the loader's failure paths. CUSTREAM_FAKE_MODE:
//   missing-symbol    every entry but cuGraphExecUpdate
//   init-fails        cuInit returns CUDA_ERROR_NO_DEVICE
//   optional-missing  every entry but cuStreamGetId
//   negative-count    cuDeviceGetCount reports -1 devices
//   (anything else)   every entry; driver 12.3.45, three devices
// Only cuInit, cuDriverGetVersion, cuDeviceGetCount, cuDeviceGet and the primary-context
// calls do anything; every other entry is a stub returning CUDA_ERROR_NOT_SUPPORTED.
#include <cuda.h>

#include <cstdlib>
#include <cstring>

namespace {

const char* mode() {
  const char* m = std::getenv("CUSTREAM_FAKE_MODE");
  return m ? m : "";
}

CUresult CUDAAPI stub() { return CUDA_ERROR_NOT_SUPPORTED; }
CUresult CUDAAPI init(unsigned) {
  return std::strcmp(mode(), "init-fails") == 0 ? CUDA_ERROR_NO_DEVICE : CUDA_SUCCESS;
}
CUresult CUDAAPI driver_version(int* v) {
  *v = 12345;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI device_count(int* n) {
  *n = std::strcmp(mode(), "negative-count") == 0 ? -1 : 3;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI device_get(CUdevice* d, int ordinal) {
  *d = ordinal;
  return CUDA_SUCCESS;
}

struct Named {
  const char* name;
  void* fn;
};

}  // namespace

extern "C" __attribute__((visibility("default"))) CUresult CUDAAPI cuGetProcAddress_v2(
    const char* symbol, void** pfn, int, cuuint64_t, CUdriverProcAddressQueryResult* status) {
  const char* missing = std::strcmp(mode(), "missing-symbol") == 0     ? "cuGraphExecUpdate"
                        : std::strcmp(mode(), "optional-missing") == 0 ? "cuStreamGetId"
                                                                       : "";
  if (std::strcmp(symbol, missing) == 0) {
    *pfn = nullptr;
    if (status) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_ERROR_NOT_FOUND;
  }
  static const Named kNamed[] = {
      {"cuInit", reinterpret_cast<void*>(&init)},
      {"cuDriverGetVersion", reinterpret_cast<void*>(&driver_version)},
      {"cuDeviceGetCount", reinterpret_cast<void*>(&device_count)},
      {"cuDeviceGet", reinterpret_cast<void*>(&device_get)},
  };
  *pfn = reinterpret_cast<void*>(&stub);
  for (const Named& n : kNamed) {
    if (std::strcmp(symbol, n.name) == 0) *pfn = n.fn;
  }
  if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
  return CUDA_SUCCESS;
}

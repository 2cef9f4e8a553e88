// A plain driver-API program, linked against libcuda like any other (no custream): on a GPU it
// uses the driver, in CI the emulator (LD_LIBRARY_PATH=<libdir>/custream).
#include <cuda.h>

#include <cstdio>
#include <cstring>

namespace {

bool ok(CUresult r, const char* call) {
  if (r == CUDA_SUCCESS) return true;
  const char* name = nullptr;
  cuGetErrorName(r, &name);
  std::printf("FAILED: %s: %s\n", call, name ? name : "unknown error");
  return false;
}

}  // namespace

int main() {
  CUdevice dev;
  CUcontext ctx;
  CUstream stream;
  CUdeviceptr p;
  if (!ok(cuInit(0), "cuInit") || !ok(cuDeviceGet(&dev, 0), "cuDeviceGet") ||
      !ok(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain") ||
      !ok(cuCtxSetCurrent(ctx), "cuCtxSetCurrent") ||
      !ok(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate") ||
      !ok(cuMemAlloc(&p, 64 * sizeof(unsigned)), "cuMemAlloc")) {
    return 1;
  }
  unsigned host[64] = {};
  if (!ok(cuMemsetD32Async(p, 7u, 64, stream), "cuMemsetD32Async") ||
      !ok(cuMemcpyDtoHAsync(host, p, sizeof host, stream), "cuMemcpyDtoHAsync") ||
      !ok(cuStreamSynchronize(stream), "cuStreamSynchronize")) {
    return 1;
  }
  char name[128] = {};
  cuDeviceGetName(name, sizeof name, dev);
  const bool right = host[0] == 7u && host[63] == 7u;
  std::printf("%s: memset and copy on %s\n", right ? "PASS" : "FAILED", name);
  if (!ok(cuMemFree(p), "cuMemFree") || !ok(cuStreamDestroy(stream), "cuStreamDestroy") ||
      !ok(cuDevicePrimaryCtxRelease(dev), "cuDevicePrimaryCtxRelease")) {
    return 1;
  }
  return right ? 0 : 1;
}

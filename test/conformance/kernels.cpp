// Driver conformance: Kernels
#include "helpers.hpp"

namespace conformance {
namespace {

TEST_CASE("a garbage module image is refused", "[conformance]") {
  REQUIRE_DRIVER_LOADED();
  PrimaryScope scope;
  const char junk[] = "this is not a cubin";
  CUmodule m = nullptr;
  CHECK(api().cuModuleLoadData(&m, junk) != CUDA_SUCCESS);
}

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

}  // namespace
}  // namespace conformance

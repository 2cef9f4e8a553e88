// Driver conformance: Devices and contexts
#include "helpers.hpp"

namespace conformance {
namespace {

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

}  // namespace
}  // namespace conformance

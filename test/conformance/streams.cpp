// Driver conformance: Streams
#include "helpers.hpp"

namespace conformance {
namespace {

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

}  // namespace
}  // namespace conformance

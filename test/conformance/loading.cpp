// Driver conformance: Entry points and versions
#include "helpers.hpp"

namespace conformance {
namespace {

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

}  // namespace
}  // namespace conformance

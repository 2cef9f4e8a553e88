// The loader's paths, each in a process of its own (the driver is loaded once per process):
// test/meson.build runs this binary once per tag, with its own CUSTREAM_LIBCUDA.
#include <dlfcn.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "catch_compat.hpp"
#include "custream/current_stream.hpp"
#include "custream/device.hpp"
#include "custream/driver.hpp"
#include "custream/error.hpp"
#include "custream/event.hpp"
#include "custream/stream.hpp"
#include "driver.hpp"

namespace {

std::string contains_text(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos ? needle : haystack;
}

// Every API call throws the same error, and keeps throwing it.
std::string expect_load_failure(CUresult expected) {
  CHECK_FALSE(custream::driver_available());
  std::string first;
  for (int attempt = 0; attempt < 2; ++attempt) {
    try {
      (void)custream::Device::count();
      FAIL("Device::count() did not throw");
    } catch (const custream::Error& e) {
      CHECK(e.result() == expected);
      if (attempt == 0) first = e.what();
      CHECK(first == e.what());
    }
  }
  CHECK_THROWS_AS(custream::Device(0), custream::Error);
  CHECK_THROWS_AS(custream::driver_info(), custream::Error);
  // A host function's payload is destroyed when its enqueue throws (nothing to enqueue on).
  auto destroyed = std::make_shared<int>(0);
  struct Counted {
    std::shared_ptr<int> count;
    Counted(std::shared_ptr<int> c) : count(std::move(c)) {}
    Counted(Counted&& other) noexcept = default;
    ~Counted() {
      if (count) ++*count;
    }
    void operator()() const {}
  };
  try {
    custream::Stream().launch_host_func(Counted(destroyed));
    FAIL("launch_host_func did not throw");
  } catch (const custream::Error& e) {
    CHECK(e.result() == expected);
    CHECK(first == e.what());
  }
  CHECK(*destroyed == 1);  // the moved-from temporary holds no count
  return first;
}

// A cuGetProcAddress that is not the first one handed over.
CUresult CUDAAPI another_get_proc_address(const char*, void**, int, cuuint64_t,
                                          CUdriverProcAddressQueryResult*) {
  return CUDA_ERROR_NOT_FOUND;
}

}  // namespace

TEST_CASE("no library: a clear error from every call", "[loader-no-library]") {
  const std::string what = expect_load_failure(CUDA_ERROR_NOT_INITIALIZED);
  CHECK(contains_text(what, "no CUDA driver found (") == "no CUDA driver found (");
  CHECK(contains_text(what, "cannot open shared object file") == "cannot open shared object file");
  CHECK(contains_text(what, std::getenv("CUSTREAM_LIBCUDA")) == std::getenv("CUSTREAM_LIBCUDA"));
}

TEST_CASE("a library without cuGetProcAddress_v2", "[loader-no-entry-point]") {
  const std::string what = expect_load_failure(CUDA_ERROR_NOT_FOUND);
  CHECK(contains_text(what, "has no cuGetProcAddress_v2") == "has no cuGetProcAddress_v2");
}

TEST_CASE("a driver that lacks a required entry point", "[loader-missing-symbol]") {
  const std::string what = expect_load_failure(CUDA_ERROR_NOT_FOUND);
  CHECK(contains_text(what, "lacks cuGraphExecUpdate (ABI 12000") ==
        "lacks cuGraphExecUpdate (ABI 12000");
  CHECK(contains_text(what, "needs a driver >= 12.0") == "needs a driver >= 12.0");
}

TEST_CASE("a driver whose cuInit fails", "[loader-init-fails]") {
  const std::string what = expect_load_failure(CUDA_ERROR_NO_DEVICE);
  CHECK(contains_text(what, "cuInit failed: CUDA_ERROR_NO_DEVICE") ==
        "cuInit failed: CUDA_ERROR_NO_DEVICE");
}

TEST_CASE("a driver missing an optional entry point disables only that feature",
          "[loader-optional-missing]") {
  REQUIRE(custream::driver_available());
  CHECK(custream::detail::api().cuStreamGetId == nullptr);
  try {
    custream::detail::require(custream::detail::api().cuStreamGetId, "cuStreamGetId");
    FAIL("no throw");
  } catch (const custream::Error& e) {
    CHECK(e.result() == CUDA_ERROR_NOT_SUPPORTED);
    CHECK(contains_text(e.what(), "needs a CUDA driver >= 12.0") == "needs a CUDA driver >= 12.0");
  }
}

TEST_CASE("an application-supplied cuGetProcAddress", "[loader-user-entry-point]") {
  void* fake = dlopen(std::getenv("CUSTREAM_FAKE_DRIVER"), RTLD_NOW | RTLD_LOCAL);
  REQUIRE(fake != nullptr);
  auto gpa = reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(fake, "cuGetProcAddress_v2"));
  REQUIRE(gpa != nullptr);
  CHECK_THROWS_AS(custream::use_driver_entry_point(nullptr), custream::Error);
  custream::use_driver_entry_point(gpa);
  // Concurrent first use loads once.
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) threads.emplace_back([] { (void)custream::driver_info(); });
  for (auto& t : threads) t.join();
  CHECK(custream::driver_info().library == "(application-supplied cuGetProcAddress)");
  CHECK(custream::driver_info().version == 12345);
  CHECK(custream::Device::count() == 3);
  // Too late now.
  try {
    custream::use_driver_entry_point(gpa);
    FAIL("no throw");
  } catch (const custream::Error& e) {
    CHECK(contains_text(e.what(), "already loaded") == "already loaded");
  }
}

TEST_CASE("primary contexts are retained exactly once across threads", "[loader-retain-once]") {
  if (!custream::driver_available()) {
    CUSTREAM_SKIP("needs a CUDA driver (real or emulated)");
  }
  const auto& api = custream::detail::api();
  for (int d = 0; d < custream::Device::count(); ++d) {
    custream::Device device(d);
    unsigned flags = 0;
    int active = 1;
    REQUIRE(api.cuDevicePrimaryCtxGetState(device.handle(), &flags, &active) == CUDA_SUCCESS);
    REQUIRE(active == 0);  // A fresh process: nobody holds it yet.
    std::vector<std::thread> threads;
    for (int t = 0; t < 16; ++t) threads.emplace_back([&] { (void)device.primary_context(); });
    for (auto& t : threads) t.join();
    REQUIRE(api.cuDevicePrimaryCtxGetState(device.handle(), &flags, &active) == CUDA_SUCCESS);
    CHECK(active == 1);
    // One release by hand drops the count to zero only if custream retained exactly once.
    REQUIRE(api.cuDevicePrimaryCtxRelease(device.handle()) == CUDA_SUCCESS);
    REQUIRE(api.cuDevicePrimaryCtxGetState(device.handle(), &flags, &active) == CUDA_SUCCESS);
    CHECK(active == 0);
    CUcontext again = nullptr;  // Give custream its reference back.
    REQUIRE(api.cuDevicePrimaryCtxRetain(&again, device.handle()) == CUDA_SUCCESS);
  }
}

TEST_CASE("a driver reporting -1 devices: a clear error, twice", "[loader-negative-count]") {
  // Before: std::length_error escaped the first load and the second call dereferenced an
  // empty failure record (SIGSEGV).
  const std::string what = expect_load_failure(CUDA_ERROR_UNKNOWN);
  CHECK(contains_text(what, "reported -1 devices") == "reported -1 devices");
  try {
    custream::use_driver_entry_point(&another_get_proc_address);
    FAIL("no throw");
  } catch (const custream::Error& e) {
    CHECK(contains_text(e.what(), "attempted and failed") == "attempted and failed");
  }
}

TEST_CASE("no device: every call that needs one says so, nothing reads past the end",
          "[loader-no-devices]") {
  // Before: a special handle with no current context read device 0's slot of an empty array
  // (AddressSanitizer: heap-buffer-overflow).
  REQUIRE(custream::driver_available());
  REQUIRE(custream::Device::count() == 0);
  auto expect_no_device = [](auto&& call) {
    try {
      call();
      FAIL("no throw");
    } catch (const custream::Error& e) {
      CHECK(e.name() == "CUDA_ERROR_NO_DEVICE");
    }
  };
  expect_no_device([] { (void)custream::Device::current(); });
  expect_no_device([] { (void)custream::current_stream(); });
  expect_no_device([] { custream::Stream::null().synchronize(); });
  expect_no_device([] { (void)custream::Stream::null().done(); });
  expect_no_device([] { (void)custream::Stream(true); });
  expect_no_device([] { (void)custream::Event(); });
  expect_no_device([] { custream::Stream::legacy().launch_host_func([] {}); });
  expect_no_device([] { custream::Stream::per_thread().begin_capture(); });
  CHECK_THROWS_AS(custream::Device(0), custream::Error);
}

TEST_CASE("the same cuGetProcAddress twice is fine; another one is refused",
          "[loader-user-entry-point-twice]") {
  void* fake = dlopen(std::getenv("CUSTREAM_FAKE_DRIVER"), RTLD_NOW | RTLD_LOCAL);
  REQUIRE(fake != nullptr);
  auto gpa = reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(fake, "cuGetProcAddress_v2"));
  REQUIRE(gpa != nullptr);
  custream::use_driver_entry_point(gpa);
  custream::use_driver_entry_point(gpa);  // before: silently replaced; now a no-op
  try {
    custream::use_driver_entry_point(&another_get_proc_address);
    FAIL("a second, different entry point was accepted");
  } catch (const custream::Error& e) {
    CHECK(contains_text(e.what(), "already handed over") == "already handed over");
  }
  CHECK(custream::Device::count() == 3);  // the first one is in use
}

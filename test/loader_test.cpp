// The loader's paths, each in a process of its own (the driver is loaded once per process):
// test/meson.build runs this binary once per tag, with its own CUSTREAM_LIBCUDA.
#include <dlfcn.h>
#include <unistd.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "catch_compat.hpp"
#include "custream/capture.hpp"
#include "custream/current_stream.hpp"
#include "custream/device.hpp"
#include "custream/device_buffer.hpp"
#include "custream/driver.hpp"
#include "custream/error.hpp"
#include "custream/event.hpp"
#include "custream/external_stream.hpp"
#include "custream/host_function.hpp"
#include "custream/stream.hpp"
#include "driver.hpp"
#include "test_support.hpp"

using custream_test::contains_text;

namespace {

// When set, the next operator new on this thread throws std::bad_alloc (and clears it).
thread_local bool fail_next_allocation = false;
// When >= 0, operator new on this thread succeeds that many more times, then throws
// std::bad_alloc every time until it is set back to -1.
thread_local int allocations_before_failure = -1;

}  // namespace

// Replaces the global allocation functions of this process, every non-aligned form (malloc
// and free underneath, as libstdc++'s own; AddressSanitizer would otherwise pair its own forms
// with these), so that a test can fail one allocation.
void* operator new(std::size_t size) {
  if (fail_next_allocation) {
    fail_next_allocation = false;
    throw std::bad_alloc();
  }
  if (allocations_before_failure == 0) throw std::bad_alloc();
  if (allocations_before_failure > 0) --allocations_before_failure;
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t size) { return ::operator new(size); }
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  try {
    return ::operator new(size);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept {
  return ::operator new(size, std::nothrow);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

namespace {

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

// The fake driver's test control `name` (test/fake/fake_driver.cpp), or null.
template <typename Fn>
Fn fake_symbol(const char* name) {
  (void)custream::driver_available();  // loads the fake
  void* handle = dlopen(std::getenv("CUSTREAM_LIBCUDA"), RTLD_NOW | RTLD_NOLOAD);
  return handle != nullptr ? reinterpret_cast<Fn>(dlsym(handle, name)) : nullptr;
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
  const std::string named = "(the library CUSTREAM_LIBCUDA names)";
  CHECK(contains_text(what, named) == named);
}

TEST_CASE("no library and none named: the error says how to run on the emulator",
          "[loader-no-library-unnamed]") {
  if (void* real = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)) {
    dlclose(real);
    WARN("a libcuda.so.1 is installed here: nothing to check");
    return;
  }
  const std::string what = expect_load_failure(CUDA_ERROR_NOT_INITIALIZED);
  CHECK(contains_text(what, "no CUDA driver found (libcuda.so.1") ==
        "no CUDA driver found (libcuda.so.1");
  const std::string hint = "without a GPU, set CUSTREAM_LIBCUDA to custream's CPU driver emulator";
  CHECK(contains_text(what, hint) == hint);
}

TEST_CASE("CUSTREAM_EMU_FAIL takes a result by its name", "[loader-emu-fail-named]") {
  const std::string what = expect_load_failure(CUDA_ERROR_UNKNOWN);
  CHECK(contains_text(what, "cuDeviceGetCount") == "cuDeviceGetCount");
}

// A fault the emulator cannot inject ends the process with a message: a test meant to fail a
// call would otherwise pass without it.
TEST_CASE("CUSTREAM_EMU_FAIL refuses what it cannot inject, loudly", "[loader-emu-fail-refused]") {
  const std::pair<const char*, const char*> cases[] = {
      {"cuDeviceGetCont:1:2", "names no entry point the emulator serves"},
      {"cuDeviceGetCount:1:CUDA_ERROR_NO_SUCH_THING", "has no error result"},
      {"cuDeviceGetCount:first:2", "has no positive call count"},
      {"cuDeviceGetCount:0:2", "has no positive call count"},
      {"cuDeviceGetCount", "is not entry:nth:result"},
      {"cuDeviceGetCount:1:2,cuInit:1:0", "has no error result"},
  };
  for (const auto& [spec, why] : cases) {
    INFO(spec);
    int out[2];
    REQUIRE(pipe(out) == 0);
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      dup2(out[1], 2);
      setenv("CUSTREAM_EMU_FAIL", spec, 1);
      try {
        (void)custream::Device::count();
      } catch (...) {
      }
      _exit(0);  // the fault was taken: not what is expected
    }
    close(out[1]);
    std::string text;
    char buffer[512];
    for (ssize_t n; (n = read(out[0], buffer, sizeof buffer)) > 0;) text.append(buffer, n);
    close(out[0]);
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 2);
    CHECK(contains_text(text, "CUSTREAM_EMU_FAIL") == "CUSTREAM_EMU_FAIL");
    CHECK(contains_text(text, why) == why);
  }
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
    custream::detail::entry<&custream::detail::DriverApi::cuStreamGetId>(custream::detail::api());
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
  const int count = custream::Device::count();
  REQUIRE(count >= 2);  // the emulator's default; every device is raced at once
  std::vector<custream::Device> devices;
  for (int d = 0; d < count; ++d) {
    devices.emplace_back(d);
    unsigned flags = 0;
    int active = 1;
    REQUIRE(api.cuDevicePrimaryCtxGetState(devices[d].handle(), &flags, &active) == CUDA_SUCCESS);
    REQUIRE(active == 0);  // A fresh process: nobody holds it yet.
  }
  // 16 threads per device, each starting at another device, all released together.
  std::atomic<bool> go{false};
  std::vector<std::vector<CUcontext>> seen(16 * count);
  std::vector<std::thread> threads;
  for (int t = 0; t < 16 * count; ++t) {
    threads.emplace_back([&, t] {
      while (!go.load()) std::this_thread::yield();
      for (int i = 0; i < count; ++i)
        seen[t].push_back(devices[(t + i) % count].primary_context().handle());
    });
  }
  go.store(true);
  for (auto& t : threads) t.join();
  for (int t = 0; t < 16 * count; ++t) {
    for (int i = 0; i < count; ++i) {
      CHECK(seen[t][i] == devices[(t + i) % count].primary_context().handle());  // one context each
    }
  }
  for (const custream::Device& device : devices) {
    unsigned flags = 0;
    int active = 0;
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

TEST_CASE("retaining one device's primary context does not wait for another's",
          "[loader-retain-per-device]") {
  // The fake's retain of device 0 returns only once a retain of device 1 has begun (else
  // CUDA_ERROR_UNKNOWN after 5 s). Before: one process-wide lock held across every first
  // retain, so device 1 waited behind device 0, which timed out.
  auto entered = fake_symbol<int (*)(int)>("custream_fake_retain_entered");
  REQUIRE(entered != nullptr);
  std::string failure;
  std::thread first([&failure] {
    try {
      (void)custream::Device(0).primary_context().handle();
    } catch (const custream::Error& e) {
      failure = e.what();
    }
  });
  while (entered(0) == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const auto begin = std::chrono::steady_clock::now();
  CUcontext one = custream::Device(1).primary_context().handle();
  const auto waited = std::chrono::steady_clock::now() - begin;
  first.join();
  CHECK(failure.empty());
  CHECK(one != nullptr);
  CHECK(waited < std::chrono::seconds(2));
  CHECK(custream::Device(0).primary_context().handle() != one);
}

TEST_CASE("a driver whose device count throws a C++ exception: a clear error, twice",
          "[loader-count-throws]") {
  // Before: the std::length_error escaped the first load as is, and the second call
  // dereferenced an empty failure record (SIGSEGV).
  const std::string what = expect_load_failure(CUDA_ERROR_UNKNOWN);
  CHECK(contains_text(what, "loading the CUDA driver failed: fake driver: no count for you") ==
        "loading the CUDA driver failed: fake driver: no count for you");
}

TEST_CASE("a first load that runs out of memory while recording why: a clear error after",
          "[loader-load-out-of-memory]") {
  // The first allocation (the loader's state) succeeds, every later one fails: the load
  // fails, and so does building the message that records why. Before: the attempt counted,
  // nothing was recorded, and the next call threw from an empty std::optional (SIGSEGV).
  allocations_before_failure = 1;
  bool bad_alloc = false;
  std::string first_error;
  try {
    (void)custream::Device::count();
  } catch (const std::bad_alloc&) {
    bad_alloc = true;
  } catch (const custream::Error& e) {
    allocations_before_failure = -1;
    first_error = e.what();
  }
  allocations_before_failure = -1;
  CHECK((bad_alloc || !first_error.empty()));
  try {  // before anything recorded the reason; before: "the driver was already loaded"
    custream::use_driver_entry_point(&another_get_proc_address);
    FAIL("no throw");
  } catch (const custream::Error& e) {
    CHECK(contains_text(e.what(), "attempted and failed") == "attempted and failed");
  }
  std::string second;
  for (int attempt = 0; attempt < 2; ++attempt) {
    try {
      (void)custream::Device::count();
      FAIL("Device::count() did not throw");
    } catch (const custream::Error& e) {
      CHECK(e.name() == "CUDA_ERROR_OUT_OF_MEMORY");
      CHECK(contains_text(e.what(), "out of memory") == "out of memory");
      if (attempt == 0) second = e.what();
      CHECK(second == e.what());  // recorded once, never retried
    }
  }
  CHECK_FALSE(custream::driver_available());
}

TEST_CASE("a driver without the entries only tests and tools call still loads",
          "[loader-unused-missing]") {
  // Before: nine entries custream never calls were required, and such a driver did not load.
  REQUIRE(custream::driver_available());
  const auto& api = custream::detail::api();
  CHECK(api.cuGetErrorName == nullptr);
  CHECK(api.cuDevicePrimaryCtxRelease == nullptr);
  CHECK(api.cuCtxPushCurrent == nullptr);
  CHECK(api.cuCtxPopCurrent == nullptr);
  CHECK(api.cuCtxSynchronize == nullptr);
  CHECK(api.cuStreamCreate == nullptr);
  CHECK(api.cuGraphCreate == nullptr);
  CHECK(api.cuThreadExchangeStreamCaptureMode == nullptr);
  CHECK(api.cuMemcpyDtoDAsync == nullptr);
  // Errors are still named (from custream's own table) and streams still work.
  CHECK(custream::result_name(CUDA_ERROR_INVALID_VALUE) == "CUDA_ERROR_INVALID_VALUE");
  custream::Stream s(custream::Device(0), custream::StreamFlags::non_blocking);
  CHECK(s.device_id() == 0);
}

TEST_CASE("a stream whose owner cannot be allocated leaks no CUstream",
          "[loader-stream-owner-first]") {
  // Before: cuStreamCreateWithPriority ran first, and the std::bad_alloc of the owner left
  // the created CUstream behind with nobody to destroy it.
  auto live = fake_symbol<long (*)()>("custream_fake_live_streams");
  REQUIRE(live != nullptr);
  const custream::Device device(0);
  (void)device.primary_context().handle();  // retained outside the failing construction
  {
    custream::Stream s(device, custream::StreamFlags::non_blocking);
    CHECK(live() == 1);
  }
  REQUIRE(live() == 0);
  bool threw = false;
  fail_next_allocation = true;
  try {
    custream::Stream s(device, custream::StreamFlags::non_blocking);
  } catch (const std::bad_alloc&) {
    threw = true;
  }
  const bool still_armed = fail_next_allocation;
  fail_next_allocation = false;
  CHECK(threw);
  CHECK_FALSE(still_armed);
  CHECK(live() == 0);
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
  static int calls = 0;
  auto expect_no_device = [](auto&& call) {
    INFO("call " << ++calls);
    try {
      call();
      FAIL("no throw");
    } catch (const custream::Error& e) {
      CHECK(e.name() == "CUDA_ERROR_NO_DEVICE");
      CHECK(contains_text(e.what(), "the driver reports no device") ==
            "the driver reports no device");
    }
  };
  expect_no_device([] { (void)custream::Device::current(); });
  expect_no_device([] { (void)custream::current_stream(); });
  expect_no_device([] { custream::Stream::null().synchronize(); });
  expect_no_device([] { (void)custream::Stream::null().done(); });
  expect_no_device([] { (void)custream::Stream(custream::StreamFlags::non_blocking); });
  expect_no_device([] { (void)custream::Event(); });
  expect_no_device([] { custream::Stream::legacy().launch_host_func([] {}); });
  expect_no_device([] { custream::Stream::per_thread().begin_capture(); });
  expect_no_device([] { custream::Stream::null().launch_host_func([] {}); });
  expect_no_device([] { (void)custream::Stream::null().priority(); });
  expect_no_device([] { (void)custream::DeviceBuffer(16); });
  expect_no_device([] { (void)custream::DeviceBuffer(16, custream::Stream::null()); });
  expect_no_device([] { (void)custream::ExternalStream(nullptr, 0); });
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

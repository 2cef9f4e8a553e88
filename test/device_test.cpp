// Devices, primary contexts, the current device and scopes. Runs on the emulator and the GPU.
#include <set>
#include <thread>
#include <vector>

#include "context.hpp"
#include "custream/context_scope.hpp"
#include "custream/device_scope.hpp"
#include "test_support.hpp"

using custream::ContextScope;
using custream::Device;
using custream::DeviceScope;
using custream_test::on_fresh_thread;

namespace {

CUcontext current_context() {
  CUcontext c = nullptr;
  REQUIRE(custream::detail::api().cuCtxGetCurrent(&c) == CUDA_SUCCESS);
  return c;
}

void set_current(CUcontext c) {
  REQUIRE(custream::detail::api().cuCtxSetCurrent(c) == CUDA_SUCCESS);
}

}  // namespace

TEST_CASE("driver version and devices", "[gpu][device]") {
  REQUIRE_DRIVER();
  const auto& info = custream::driver_info();
  CHECK(info.version >= 12000);
  CHECK_FALSE(info.library.empty());
  REQUIRE(Device::count() >= 1);
  for (int i = 0; i < Device::count(); ++i) {
    Device d(i);
    CHECK(d.ordinal() == i);
    CHECK_FALSE(d.name().empty());
    CHECK(d.compute_capability().major >= 5);
    CHECK(d.total_memory() > 0);
    CHECK(d.attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT) > 0);
    UNSCOPED_INFO("device " << i << ": " << d.name() << ", cc " << d.compute_capability().major
                            << "." << d.compute_capability().minor);
  }
}

TEST_CASE("a bad ordinal throws naming it and the count", "[gpu][device]") {
  REQUIRE_DRIVER();
  const int n = Device::count();
  for (int bad : {-1, n, n + 7}) {
    try {
      Device d(bad);
      FAIL("no throw for " << bad);
    } catch (const custream::Error& e) {
      CHECK(e.result() == CUDA_ERROR_INVALID_DEVICE);
      CHECK(std::string(e.what()).find("device " + std::to_string(bad)) != std::string::npos);
      CHECK(std::string(e.what()).find(std::to_string(n) + " device(s)") != std::string::npos);
    }
  }
}

TEST_CASE("the current device follows the current context", "[gpu][device]") {
  REQUIRE_DRIVER();
  on_fresh_thread([] {
    CHECK(current_context() == nullptr);
    CHECK(Device::current().ordinal() == 0);  // none current: device 0
    const int last = Device::count() - 1;
    Device(last).make_current();
    CHECK(current_context() == Device(last).primary_context().handle());
    CHECK(Device::current().ordinal() == last);
    // Foreign code switches contexts behind custream's back: custream agrees.
    set_current(Device(0).primary_context().handle());
    CHECK(Device::current().ordinal() == 0);
    set_current(nullptr);
    CHECK(Device::current().ordinal() == 0);
  });
}

TEST_CASE("a context custream did not retain still maps to its device", "[gpu][device]") {
  REQUIRE_DRIVER();
  const auto& api = custream::detail::api();
  const int last = Device::count() - 1;
  on_fresh_thread([&] {
    // Retain through the raw driver so the lookup cannot use custream's slots… unless
    // custream already retained it, in which case the handle is the same one.
    CUcontext raw = nullptr;
    REQUIRE(api.cuDevicePrimaryCtxRetain(&raw, Device(last).handle()) == CUDA_SUCCESS);
    CHECK(custream::detail::device_of_context(raw) == last);
    set_current(raw);
    CHECK(Device::current().ordinal() == last);
    set_current(nullptr);
    REQUIRE(api.cuDevicePrimaryCtxRelease(Device(last).handle()) == CUDA_SUCCESS);
  });
}

TEST_CASE("primary contexts are retained once and shared by all threads", "[gpu][device]") {
  REQUIRE_DRIVER();
  for (int d = 0; d < Device::count(); ++d) {
    std::vector<CUcontext> seen(16);
    std::vector<std::thread> threads;
    for (int t = 0; t < 16; ++t) {
      threads.emplace_back([&, t] { seen[t] = Device(d).primary_context().handle(); });
    }
    for (auto& t : threads) t.join();
    CHECK(std::set<CUcontext>(seen.begin(), seen.end()).size() == 1);
    CHECK(seen[0] != nullptr);
    CHECK(Device(d).primary_context_active());
  }
}

TEST_CASE("scopes restore exactly the previous context", "[gpu][device]") {
  REQUIRE_DRIVER();
  const int last = Device::count() - 1;
  on_fresh_thread([&] {
    SECTION("from none") {
      {
        DeviceScope scope(last);
        CHECK(current_context() == Device(last).primary_context().handle());
        CHECK(Device::current().ordinal() == last);
      }
      CHECK(current_context() == nullptr);
    }
    SECTION("nested, across devices") {
      Device(0).make_current();
      {
        DeviceScope outer(last);
        {
          DeviceScope inner(0);
          CHECK(Device::current().ordinal() == 0);
        }
        CHECK(Device::current().ordinal() == last);
      }
      CHECK(current_context() == Device(0).primary_context().handle());
    }
    SECTION("a context scope that needs no switch changes nothing") {
      Device(0).make_current();
      {
        ContextScope scope(Device(0).primary_context().handle());
        CHECK(scope.previous() == Device(0).primary_context().handle());
      }
      CHECK(current_context() == Device(0).primary_context().handle());
    }
    SECTION("restores on exceptions") {
      try {
        DeviceScope scope(last);
        throw std::runtime_error("unwind");
      } catch (const std::runtime_error&) {
      }
      CHECK(current_context() == nullptr);
    }
    set_current(nullptr);
  });
}

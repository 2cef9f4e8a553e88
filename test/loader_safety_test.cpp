// Loader and release safety that one process can test (the paths that need a process of their
// own are in loader_test.cpp): device ids refused with the device count, failed releases in
// destructors reported (never thrown, never silent), handlers that misbehave.
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "custream/device.hpp"
#include "custream/device_buffer.hpp"
#include "custream/external_stream.hpp"
#include "custream/release_error_handler.hpp"
#include "custream/stream.hpp"
#include "graph_support.hpp"
#include "release_support.hpp"

using custream::Error;
using custream::ExternalStream;
using custream::ReleaseError;
using custream::Stream;
using custream_test::captured_stderr;
using custream_test::contains_text;
using custream_test::drop_stream_failing_destroy;
using custream_test::emu_fail_call;
using custream_test::raw;

namespace {

using Reports = custream_test::ReleaseReports;

}  // namespace

TEST_CASE("ExternalStream refuses a device id out of range, naming the device count",
          "[gpu][loader-safety][external]") {
  REQUIRE_DRIVER();
  const int count = custream::Device::count();
  const std::string reports = "the driver reports " + std::to_string(count) + " device(s)";
  Stream created(custream::StreamFlags::non_blocking);
  // Before: a special handle's error named custream::Device, not the wrapper; a created
  // stream's handle was inferred first and the error said only that it belongs to device 0.
  for (CUstream h : {CUstream{nullptr}, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD, created.handle()}) {
    for (int id : {99, count, -2}) {
      INFO("handle " << h << ", device " << id);
      try {
        ExternalStream s(h, id);
        FAIL("accepted device " << id);
      } catch (const Error& e) {
        CHECK(e.name() == "CUDA_ERROR_INVALID_DEVICE");
        CHECK(contains_text(e.what(), "custream::ExternalStream") == "custream::ExternalStream");
        CHECK(contains_text(e.what(), "device " + std::to_string(id)) ==
              "device " + std::to_string(id));
        CHECK(contains_text(e.what(), reports) == reports);
      }
    }
  }
  // A valid id: checked for a created stream, refused (with what to do) for a special handle.
  CHECK(ExternalStream(created.handle(), created.device_id()).device_id() == created.device_id());
  try {
    ExternalStream s(CU_STREAM_LEGACY, 0);
    FAIL("a special handle took device 0");
  } catch (const Error& e) {
    CHECK(e.name() == "CUDA_ERROR_INVALID_VALUE");
    CHECK(contains_text(e.what(), "pass -1") == "pass -1");
  }
}

TEST_CASE("Device refuses an ordinal out of range, naming the count",
          "[gpu][loader-safety][device]") {
  REQUIRE_DRIVER();
  const int count = custream::Device::count();
  for (int ordinal : {-1, count, 1000}) {
    try {
      custream::Device d(ordinal);
      FAIL("accepted ordinal " << ordinal);
    } catch (const Error& e) {
      CHECK(e.name() == "CUDA_ERROR_INVALID_DEVICE");
      CHECK(contains_text(e.what(), "custream::Device") == "custream::Device");
      CHECK(contains_text(e.what(), "reports " + std::to_string(count) + " device(s)") ==
            "reports " + std::to_string(count) + " device(s)");
    }
  }
}

TEST_CASE("a failed cuMemFreeAsync of a stream-ordered buffer is reported once",
          "[gpu][loader-safety][release][emu-only]") {
  REQUIRE_EMULATOR();
  const long live = custream_test::emu_live_objects();
  {
    Reports reports;
    CUdeviceptr ptr = 0;
    {
      Stream s(custream::StreamFlags::non_blocking);
      custream::DeviceBuffer buffer(128, s);
      ptr = buffer.get();
      emu_fail_call("cuMemFreeAsync", 1, CUDA_ERROR_UNKNOWN);
    }
    const std::vector<ReleaseError> seen = reports.seen();
    REQUIRE(seen.size() == 1);
    CHECK(seen[0].call == "cuMemFreeAsync");
    CHECK(seen[0].result == CUDA_ERROR_UNKNOWN);
    CHECK(seen[0].subject.rfind("device allocation 0x", 0) == 0);
    CHECK(raw().cuMemFree(ptr) == CUDA_SUCCESS);  // the fault left it allocated
  }
  custream_test::expect_emulator_back_to(live);
}

TEST_CASE("a release-error handler that throws does not escape the destructor",
          "[gpu][loader-safety][release][emu-only]") {
  REQUIRE_EMULATOR();
  const long live = custream_test::emu_live_objects();
  int calls = 0;
  auto previous = custream::set_release_error_handler([&calls](const ReleaseError&) {
    ++calls;
    throw std::runtime_error("handler failure");
  });
  CUstream handle = nullptr;
  const std::string text = captured_stderr([&] {
    handle = drop_stream_failing_destroy(CUDA_ERROR_UNKNOWN);
  });  // ~Stream is noexcept: a throw escaping it would have terminated the process
  custream::set_release_error_handler(std::move(previous));
  CHECK(calls == 1);
  CHECK(text == "custream: an error handler threw; exception dropped\n");
  CHECK(raw().cuStreamDestroy(handle) == CUDA_SUCCESS);
  custream_test::expect_emulator_back_to(live);
}

TEST_CASE("a release-error handler may replace itself while it runs",
          "[gpu][loader-safety][release][emu-only]") {
  REQUIRE_EMULATOR();
  std::vector<std::string> calls;
  auto previous = custream::set_release_error_handler({});
  custream::set_release_error_handler([&calls](const ReleaseError& e) {
    calls.push_back("first " + e.call);
    // Installing a handler from inside one must not deadlock (the slot's lock is not held).
    custream::set_release_error_handler(
        [&calls](const ReleaseError& e2) { calls.push_back("second " + e2.call); });
  });
  CUstream handles[2] = {};
  for (CUstream& handle : handles) handle = drop_stream_failing_destroy(CUDA_ERROR_UNKNOWN);
  custream::set_release_error_handler(std::move(previous));
  CHECK(calls == std::vector<std::string>{"first cuStreamDestroy", "second cuStreamDestroy"});
  for (CUstream handle : handles) CHECK(raw().cuStreamDestroy(handle) == CUDA_SUCCESS);
  custream_test::emu_reset();
}

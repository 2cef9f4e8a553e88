// Where the emulator used to differ from the driver on the H200, and what custream does about
// it: a capture ended from the wrong thread, a stream destroyed while it captures, an event
// recorded with another device current; and the Event and CaptureScope failure paths next to
// them (an end whose status query fails too, an event owner that cannot be allocated). Each
// case failed before its fix; they run on the emulator and on the GPU (the [emu-only] ones
// inject faults or count driver calls).
#include <atomic>
#include <initializer_list>
#include <memory>
#include <new>
#include <string>
#include <thread>

#include "custream/capture.hpp"
#include "custream/capture_scope.hpp"
#include "custream/current_stream.hpp"
#include "custream/device.hpp"
#include "custream/event.hpp"
#include "custream/external_stream.hpp"
#include "custream/graph.hpp"
#include "custream/host_function.hpp"
#include "custream/stream.hpp"
#include "graph_support.hpp"

using custream::CaptureMode;
using custream::CaptureScope;
using custream::Error;
using custream::Event;
using custream::Stream;
using custream_test::eventually;
using custream_test::Payload;
using custream_test::Probe;

namespace {

// A CaptureScope over one captured payload whose end() fails, with each of `failing` failing
// once (CUDA_ERROR_UNKNOWN): end() throws, the capture still runs and is still the scope's, and
// the scope's destructor ends it, freeing the payload unrun; nothing is left behind.
void expect_scope_ends_after_failed_end(std::initializer_list<const char*> failing) {
  Stream s(custream::StreamFlags::non_blocking);
  const long live = custream_test::emu_live_objects();
  auto probe = std::make_shared<Probe>();
  {
    CaptureScope capture(s);
    s.launch_host_func(Payload(probe));
    for (const char* call : failing) custream_test::emu_fail_call(call, 1, CUDA_ERROR_UNKNOWN);
    CHECK_THROWS_AS(capture.end(), Error);
    CHECK(s.is_capturing());
    CHECK(capture.active());
  }
  CHECK_FALSE(s.is_capturing());
  CHECK(eventually([&] { return probe->destroyed == 1; }));
  CHECK(probe->runs == 0);
  custream_test::expect_emulator_back_to(live);
}

}  // namespace

TEST_CASE("CaptureScope::end from another thread: wrong thread, and the capture is over",
          "[gpu][fidelity][capture]") {
  REQUIRE_DRIVER();
  Stream s(custream::StreamFlags::non_blocking);
  auto probe = std::make_shared<Probe>();
  {
    CaptureScope capture(s, CaptureMode::global);
    s.launch_host_func(Payload(probe));
    std::string name;
    std::thread([&] {
      try {
        (void)capture.end();
      } catch (const Error& e) {
        name = e.name();
      }
    }).join();
    CHECK(name == "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD");
    CHECK_FALSE(s.is_capturing());  // before the emulator fix: still capturing
    CHECK_FALSE(capture.active());  // the scope asked the driver, which says it is over
    CHECK(eventually([&] { return probe->destroyed == 1; }));  // the graph was discarded
    // The scope has nothing left to end.
  }
  CHECK(probe->destroyed == 1);
  CHECK(probe->runs == 0);
  s.begin_capture();  // the stream works again
  (void)s.end_capture();
}

TEST_CASE("a failed end that leaves the capture running: the scope's destructor ends it",
          "[gpu][fidelity][capture][emu-only]") {
  REQUIRE_EMULATOR();
  // The failed cuStreamEndCapture has no effect. Before the fix the scope gave up: the capture
  // was left running.
  expect_scope_ends_after_failed_end({"cuStreamEndCapture"});
}

TEST_CASE("a scope never ends a capture it did not begin", "[gpu][fidelity][capture]") {
  REQUIRE_DRIVER();
  Stream s(custream::StreamFlags::non_blocking);
  {
    CaptureScope capture(s);
    // Somebody else ends this capture and begins another one on the stream.
    (void)s.end_capture();
    s.begin_capture();
  }
  CHECK(s.is_capturing());  // the second capture is not the scope's
  (void)s.end_capture();
}

TEST_CASE("a stream destroyed while it captures frees the captured payloads once",
          "[gpu][fidelity][capture]") {
  REQUIRE_DRIVER();
  const bool emulated = custream_test::emulated();
  const long live = emulated ? custream_test::emu_live_objects() : 0;
  auto probe = std::make_shared<Probe>();
  {
    Stream s(custream::StreamFlags::non_blocking);
    s.begin_capture();
    s.launch_host_func(Payload(probe));
  }  // the last reference: cuStreamDestroy while capturing
  CHECK(eventually([&] { return probe->destroyed == 1; }));  // before the fix: leaked
  CHECK(probe->runs == 0);
  if (emulated) custream_test::expect_emulator_back_to(live);
}

TEST_CASE("Event::record() records on its own device, whatever device is current",
          "[gpu][fidelity][event][multi]") {
  REQUIRE_DRIVER();
  if (custream::Device::count() < 2) CUSTREAM_SKIP("needs 2 devices; this machine has 1");
  std::atomic<bool> release{false};
  std::atomic<bool>* flag = &release;
  custream::Device(1).make_current();
  // Device 1's null stream waits until released.
  Stream::null().launch_host_func([flag] {
    while (!flag->load()) std::this_thread::yield();
  });
  Event e(custream::Device(1));
  custream::Device(0).make_current();
  e.record();  // before the fix: on device 0's null stream (the driver refuses it there)
  Stream::null().synchronize();  // device 0's null stream: a record there would be done now
  CHECK_FALSE(e.done());         // device 1's work is still blocked
  release = true;
  e.synchronize();
  CHECK(e.done());
}

TEST_CASE("Event refuses flag bits it does not know, before any driver call",
          "[gpu][fidelity][event]") {
  REQUIRE_DRIVER();
  try {
    Event e(static_cast<custream::EventFlags>(0x80));
    FAIL("accepted unknown flags");
  } catch (const Error& err) {
    CHECK(err.name() == "CUDA_ERROR_INVALID_VALUE");
    CHECK(std::string(err.what()).find("0x80") != std::string::npos);
  }
}

TEST_CASE("ExternalStream of a special handle takes no device id", "[gpu][fidelity][external]") {
  REQUIRE_DRIVER();
  auto expect = [](CUstream h, int id, const char* name) {
    try {
      custream::ExternalStream s(h, id);
      FAIL("accepted device " << id);
    } catch (const Error& e) {
      CHECK(e.name() == name);
    }
  };
  for (CUstream h : {CUstream{nullptr}, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD}) {
    expect(h, 99, "CUDA_ERROR_INVALID_DEVICE");  // before: accepted silently
    expect(h, 0, "CUDA_ERROR_INVALID_VALUE");
    CHECK(custream::ExternalStream(h, -1).device_id() == -1);
  }
}

TEST_CASE("a failed end whose status query fails too: the scope still ends the capture",
          "[gpu][fidelity][capture][emu-only]") {
  REQUIRE_EMULATOR();
  // An unknown capture status is not "over". Before the fix the scope gave the capture up: it
  // was still capturing after the scope, its payload never freed.
  expect_scope_ends_after_failed_end({"cuStreamEndCapture", "cuStreamGetCaptureInfo"});
}

// The switch of the test binary's replacement operator new (test/external_stream_test.cpp):
// arms (1) or disarms (0) a failure of the next allocation on the calling thread and returns
// the previous state. Absent where operator new is not replaced (AddressSanitizer keeps its
// own); the allocation-failure cases skip then.
extern "C" __attribute__((weak)) int custream_test_arm_allocation_failure(int arm);

namespace {

// Calls of `name` counted by the emulator since counting began.
long emu_calls(const char* name) {
  auto fn = custream_test::emu_symbol<long (*)(const char*)>("custream_emu_call_count");
  REQUIRE(fn != nullptr);
  return fn(name);
}

void emu_count_calls(bool on) {
  auto fn = custream_test::emu_symbol<void (*)(int)>("custream_emu_count_calls");
  REQUIRE(fn != nullptr);
  fn(on ? 1 : 0);
}

// Runs `make` with the next allocation of this thread failing; true when it threw
// std::bad_alloc and consumed the armed failure.
template <typename Make>
bool fails_allocation(Make make) {
  bool threw = false;
  custream_test_arm_allocation_failure(1);
  try {
    make();
  } catch (const std::bad_alloc&) {
    threw = true;
  }
  const bool still_armed = custream_test_arm_allocation_failure(0) != 0;
  return threw && !still_armed;
}

}  // namespace

TEST_CASE("an Event whose owner cannot be allocated makes no CUevent",
          "[gpu][fidelity][event][emu-only]") {
  REQUIRE_EMULATOR();
  if (custream_test_arm_allocation_failure == nullptr) {
    CUSTREAM_SKIP("operator new is not replaced in this build (AddressSanitizer)");
  }
  emu_count_calls(true);
  { Event warm(custream::Device(0)); }  // the same calls once, so nothing else allocates
  const long live = custream_test::emu_live_objects();
  const long creates = emu_calls("cuEventCreate");
  // Before: cuEventCreate ran first and the handle leaked when the owner's allocation threw.
  CHECK(fails_allocation([] { Event e(custream::Device(0)); }));
  CHECK(emu_calls("cuEventCreate") == creates);
  emu_count_calls(false);
  custream_test::expect_emulator_back_to(live);
}

TEST_CASE("Event::open_ipc whose owner cannot be allocated opens no CUevent",
          "[gpu][fidelity][event][emu-only]") {
  REQUIRE_EMULATOR();
  if (custream_test_arm_allocation_failure == nullptr) {
    CUSTREAM_SKIP("operator new is not replaced in this build (AddressSanitizer)");
  }
  custream::Device(0).make_current();
  Event exported(custream::Device(0), custream::EventFlags::interprocess);
  const CUipcEventHandle handle = exported.ipc_handle();
  emu_count_calls(true);
  { Event warm = Event::open_ipc(handle); }
  const long live = custream_test::emu_live_objects();
  const long opens = emu_calls("cuIpcOpenEventHandle");
  // Before: the owner was allocated in a noexcept constructor after the handle was opened
  // (std::terminate on std::bad_alloc).
  CHECK(fails_allocation([&] { (void)Event::open_ipc(handle); }));
  CHECK(emu_calls("cuIpcOpenEventHandle") == opens);
  emu_count_calls(false);
  custream_test::expect_emulator_back_to(live);
}

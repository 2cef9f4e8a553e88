// Fault injection on the capture path (split from graph_test.cpp; no leak, no dangling
// pointer): a driver call of begin_capture, launch_host_func or end_capture fails on
// the emulator (custream_emu_fail_call), and every payload and driver object is freed exactly
// once. All cases are [emu-only].
#include <cstddef>
#include <memory>
#include <string>

#include "custream/capture.hpp"
#include "custream/graph.hpp"
#include "custream/host_function.hpp"
#include "custream/stream.hpp"
#include "graph_support.hpp"

using custream::CaptureStatus;
using custream::Graph;
using custream::Stream;
using custream_test::eventually;
using custream_test::expect_error;
using custream_test::Payload;
using custream_test::Probe;

namespace {

// Launches a payload of `probe` into the capture of `s` with the next call of `call` failing
// with `result`; expects that error, its text naming `text`.
void launch_failing(const Stream& s, const std::shared_ptr<Probe>& probe, const char* call,
                    CUresult result, const std::string& text) {
  custream_test::emu_fail_call(call, 1, result);
  expect_error([&] { s.launch_host_func(Payload(probe)); }, result, text);
}

// Ends the capture of `s`, checks the graph's node count, launches it once and waits for it.
Graph end_and_launch_once(const Stream& s, std::size_t nodes) {
  Graph g = s.end_capture();
  CHECK(g.node_count() == nodes);
  g.launch(s);
  s.synchronize();
  return g;
}

}  // namespace

TEST_CASE("begin_capture on 0 and 1 never reaches the driver", "[gpu][graph][emu-only]") {
  REQUIRE_EMULATOR();
  custream::Device(0).make_current();
  // The next cuStreamBeginCapture the driver sees fails: custream's refusal must not be it.
  custream_test::emu_fail_call("cuStreamBeginCapture", 1, CUDA_ERROR_UNKNOWN);
  expect_error([] { Stream::null().begin_capture(); }, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  expect_error([] { Stream::legacy().begin_capture(); }, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  Stream s(custream::StreamFlags::non_blocking);
  expect_error([&] { s.begin_capture(); }, CUDA_ERROR_UNKNOWN, "cuStreamBeginCapture");
  custream_test::emu_reset();
  CHECK_FALSE(s.is_capturing());
}

TEST_CASE("cuUserObjectCreate fails: the payload is destroyed, the capture stays valid",
          "[gpu][graph][emu-only]") {
  REQUIRE_EMULATOR();
  Stream s(custream::StreamFlags::non_blocking);
  const long live = custream_test::emu_live_objects();
  auto probe = std::make_shared<Probe>();
  s.begin_capture();
  launch_failing(s, probe, "cuUserObjectCreate", CUDA_ERROR_OUT_OF_MEMORY, "cuUserObjectCreate");
  CHECK(probe->destroyed == 1);
  CHECK(s.capture_info().status == CaptureStatus::active);
  auto probe2 = std::make_shared<Probe>();
  s.launch_host_func(Payload(probe2));
  (void)end_and_launch_once(s, 1);
  CHECK(probe->runs == 0);
  CHECK(probe2->runs == 1);
  CHECK(eventually([&] { return probe2->destroyed == 1; }));
  custream_test::expect_emulator_back_to(live);
}

TEST_CASE(
    "cuGraphRetainUserObject fails: the user object is released, the payload destroyed "
    "once, the capture stays valid",
    "[gpu][graph][emu-only]") {
  REQUIRE_EMULATOR();
  Stream s(custream::StreamFlags::non_blocking);
  const long live = custream_test::emu_live_objects();
  auto probe = std::make_shared<Probe>();
  s.begin_capture();
  launch_failing(s, probe, "cuGraphRetainUserObject", CUDA_ERROR_INVALID_VALUE,
                 "cuGraphRetainUserObject");
  CHECK(eventually([&] { return probe->destroyed == 1; }));
  CHECK(s.capture_info().status == CaptureStatus::active);
  (void)end_and_launch_once(s, 0);
  CHECK(probe->runs == 0);
  CHECK(probe->destroyed == 1);
  custream_test::expect_emulator_back_to(live);
}

TEST_CASE(
    "cuLaunchHostFunc fails while capturing: the graph owns the payload and frees it "
    "with itself",
    "[gpu][graph][emu-only]") {
  REQUIRE_EMULATOR();
  Stream s(custream::StreamFlags::non_blocking);
  const long live = custream_test::emu_live_objects();
  auto probe = std::make_shared<Probe>();
  s.begin_capture();
  launch_failing(s, probe, "cuLaunchHostFunc", CUDA_ERROR_INVALID_VALUE, "capture graph owns it");
  CHECK(probe->destroyed == 0);  // owned by the capture graph, not dangling
  CHECK(s.capture_info().status == CaptureStatus::active);  // as the driver left it
  {
    Graph g = end_and_launch_once(s, 0);  // no node refers to the payload
    CHECK(probe->destroyed == 0);         // the graph and executable still hold it
  }
  CHECK(eventually([&] { return probe->destroyed == 1; }));
  CHECK(probe->runs == 0);
  custream_test::expect_emulator_back_to(live);
}

TEST_CASE("cuStreamEndCapture and instantiation failures leave nothing behind",
          "[gpu][graph][emu-only]") {
  REQUIRE_EMULATOR();
  Stream s(custream::StreamFlags::non_blocking);
  const long live = custream_test::emu_live_objects();
  auto probe = std::make_shared<Probe>();
  s.begin_capture();
  s.launch_host_func(Payload(probe));
  custream_test::emu_fail_call("cuGraphInstantiateWithParams", 1, CUDA_ERROR_OUT_OF_MEMORY);
  expect_error([&] { (void)s.end_capture(); }, CUDA_ERROR_OUT_OF_MEMORY,
               "cuGraphInstantiateWithParams");
  CHECK_FALSE(s.is_capturing());
  CHECK(eventually([&] { return probe->destroyed == 1; }));
  custream_test::expect_emulator_back_to(live);
}

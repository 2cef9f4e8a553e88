// Stream capture (split from graph_test.cpp): begin/end_capture and their
// errors, is_capturing and capture_info, fork/join through events, CaptureScope, and host
// functions and callbacks launched while capturing (captured host functions, replayed with the
// graph). Uses memset/memcpy/host nodes, so it runs on the emulator and on the GPU.
#include "custream/capture.hpp"

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "custream/capture_scope.hpp"
#include "custream/completions.hpp"
#include "custream/external_stream.hpp"
#include "custream/device_buffer.hpp"
#include "custream/event.hpp"
#include "custream/graph.hpp"
#include "custream/host_function.hpp"
#include "custream/host_function_error_handler.hpp"
#include "custream/stream.hpp"
#include "graph_support.hpp"

using custream::CaptureScope;
using custream::CaptureStatus;
using custream::Error;
using custream::Event;
using custream::Graph;
using custream::InstantiateFlags;
using custream::Stream;
using custream_test::eventually;
using custream_test::expect_error;
using custream_test::kN;
using custream_test::Payload;
using custream_test::Probe;
using custream_test::read;

TEST_CASE("is_capturing, capture_info and capture_id", "[gpu][graph][capture]") {
  REQUIRE_DRIVER();
  Stream s(custream::StreamFlags::non_blocking);
  CHECK_FALSE(s.is_capturing());
  CHECK(s.capture_info().status == CaptureStatus::none);
  CHECK(s.capture_id() == 0);
  s.begin_capture();
  CHECK(s.is_capturing());
  const custream::CaptureInfo info = s.capture_info();
  CHECK(info.result == CUDA_SUCCESS);
  CHECK(info.status == CaptureStatus::active);
  CHECK(info.id != 0);
  CHECK(s.capture_id() == info.id);
  Graph g = s.end_capture();
  CHECK_FALSE(s.is_capturing());
  CHECK(g.node_count() == 0);
  s.begin_capture(custream::CaptureMode::thread_local_);
  CHECK(s.capture_id() != info.id);  // a new capture sequence
  (void)s.end_capture();
  s.begin_capture(custream::CaptureMode::global);
  CHECK(s.is_capturing());
  (void)s.end_capture();
}

// custream's own refusals say they are custream's and never claim that the driver invalidated
// a capture: none was invalidated (the capture of a refused future() ends fine afterwards).
TEST_CASE("custream's refusals name custream's call and say only what happened",
          "[gpu][graph][capture][errors]") {
  REQUIRE_DRIVER();
  custream::Device(0).make_current();
  const auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      CHECK(e.result() == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
      return std::string(e.what());
    }
    FAIL("no throw");
    return std::string();
  };
  const std::string null_stream = message([] { Stream::null().begin_capture(); });
  CHECK(null_stream.rfind("custream::begin_capture(", 0) == 0);
  CHECK(null_stream.find("invalidated") == std::string::npos);
  CHECK(null_stream.find("custream refused it without calling the driver") != std::string::npos);

  Stream s(custream::StreamFlags::non_blocking);
  s.begin_capture();
  custream::Completions completions;
  const std::string future = message([&] { (void)completions.future(s); });
  CHECK(future.find("invalidated") == std::string::npos);
  const std::string flags = message([&] { (void)custream::ExternalStream(s.handle()).id(); });
  CHECK(flags.rfind("custream::StreamRef::id(", 0) == 0);
  CHECK(flags.find("has now invalidated") == std::string::npos);
  CHECK(s.capture_info().status == CaptureStatus::active);  // nothing invalidated it
  Graph g = s.end_capture();
  g.launch(s);
  s.synchronize();
}

TEST_CASE("begin_capture refuses the null and legacy streams; per-thread captures",
          "[gpu][graph][capture]") {
  REQUIRE_DRIVER();
  custream::Device(0).make_current();
  for (Stream special : {Stream::null(), Stream::legacy()}) {
    expect_error([&] { special.begin_capture(); }, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
                 "custream refused it without calling the driver");
    CHECK_FALSE(special.is_capturing());
  }
  Stream pt = Stream::per_thread();
  pt.begin_capture();
  CHECK(pt.is_capturing());
  std::atomic<int> runs{0};
  pt.launch_host_func([&runs] { ++runs; });
  Graph g = pt.end_capture();
  g.launch(pt);
  g.launch(pt);
  pt.synchronize();
  CHECK(runs == 2);
}

TEST_CASE("capture errors: twice, end without begin", "[gpu][graph][capture]") {
  REQUIRE_DRIVER();
  Stream s(custream::StreamFlags::non_blocking);
  expect_error([&] { (void)s.end_capture(); }, CUDA_ERROR_ILLEGAL_STATE, "not capturing");
  s.begin_capture();
  expect_error([&] { s.begin_capture(); }, CUDA_ERROR_ILLEGAL_STATE, "already capturing");
  CHECK(s.is_capturing());
  (void)s.end_capture();
}

TEST_CASE(
    "synchronize during capture: unsupported, then end says invalidated, then the "
    "stream works again",
    "[gpu][graph][capture]") {
  REQUIRE_DRIVER();
  Stream s(custream::StreamFlags::non_blocking);
  custream::DeviceBuffer a(kN * 4);
  s.begin_capture();
  s.memset32(a.get(), 1, kN);
  expect_error([&] { s.synchronize(); }, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "invalidated");
  expect_error([&] { (void)s.is_capturing(); }, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  CHECK(s.capture_info().status == CaptureStatus::invalidated);
  CHECK(s.capture_info().result == CUDA_SUCCESS);
  // An invalidated capture refuses host functions without calling the driver.
  auto probe = std::make_shared<Probe>();
  expect_error([&] { s.launch_host_func(Payload(probe)); }, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  CHECK(probe->destroyed == 1);
  expect_error([&] { (void)s.end_capture(); }, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  CHECK_FALSE(s.is_capturing());
  s.memset32(a.get(), 5, kN);
  CHECK(read(s, a)[kN - 1] == 5);
  CHECK(s.done());
}

TEST_CASE("done during capture: unsupported, and the capture is invalidated",
          "[gpu][graph][capture]") {
  REQUIRE_DRIVER();
  Stream s(custream::StreamFlags::non_blocking);
  s.begin_capture();
  expect_error([&] { (void)s.done(); }, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  expect_error([&] { (void)s.end_capture(); }, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  CHECK(s.done());
}

TEST_CASE("capture on a blocking stream while the legacy stream is queried: implicit",
          "[gpu][graph][capture]") {
  REQUIRE_DRIVER();
  custream::Device(0).make_current();
  Stream blocking(custream::StreamFlags::none);
  blocking.begin_capture();
  expect_error([] { (void)Stream::legacy().done(); }, CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
  CHECK(Stream::legacy().capture_info().result == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
  expect_error([&] { (void)blocking.end_capture(); }, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  CHECK(Stream::legacy().done());
}

TEST_CASE("a small noexcept callable on the legacy stream never invalidates another capture",
          "[gpu][graph][capture][host_function]") {
  REQUIRE_DRIVER();
  custream::Device(0).make_current();
  Stream blocking(custream::StreamFlags::none);
  std::atomic<int> runs{0};
  std::atomic<int>* counter = &runs;
  blocking.begin_capture();
  // The heap path's capture check refuses it (the driver would invalidate the capture).
  expect_error([&] { Stream::legacy().launch_host_func([counter]() noexcept { ++*counter; }); },
               CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
  CHECK(blocking.is_capturing());
  Graph g = blocking.end_capture();  // still valid
  CHECK(runs == 0);
}

TEST_CASE("fork/join capture through events replays both branches", "[gpu][graph][capture]") {
  REQUIRE_DRIVER();
  Stream origin(custream::StreamFlags::non_blocking), side(custream::StreamFlags::non_blocking);
  Event fork, join;
  custream::DeviceBuffer a(kN * 4), b(kN * 4);
  origin.begin_capture();
  origin.memset32(a.get(), 3, kN);
  origin.record(fork);
  side.wait_event(fork);
  CHECK(side.is_capturing());
  CHECK(side.capture_id() == origin.capture_id());
  side.copy(b.get(), a.get(), kN * 4);
  side.record(join);
  origin.wait_event(join);
  origin.memset32(a.get(), 4, kN / 2);
  Graph g = origin.end_capture();
  CHECK_FALSE(side.is_capturing());
  CHECK(g.node_count() == 3);
  g.launch(origin);
  origin.synchronize();
  CHECK(read(origin, b) == std::vector<std::uint32_t>(kN, 3));
  const auto va = read(origin, a);
  CHECK(va[0] == 4);
  CHECK(va[kN - 1] == 3);
}

TEST_CASE("end on a joined stream: unmatched; an unjoined fork: unjoined",
          "[gpu][graph][capture]") {
  REQUIRE_DRIVER();
  Stream origin(custream::StreamFlags::non_blocking), side(custream::StreamFlags::non_blocking);
  Event fork, join;
  custream::DeviceBuffer a(kN * 4);
  {
    CaptureScope capture(origin);
    origin.record(fork);
    side.wait_event(fork);
    expect_error([&] { (void)side.end_capture(); }, CUDA_ERROR_STREAM_CAPTURE_UNMATCHED);
    CHECK_THROWS_AS(capture.end(), Error);  // the driver invalidated the capture
  }
  CHECK_FALSE(origin.is_capturing());
  CHECK_FALSE(side.is_capturing());

  origin.begin_capture();
  origin.record(fork);
  side.wait_event(fork);
  side.memset32(a.get(), 1, kN);  // never joined back
  expect_error([&] { (void)origin.end_capture(); }, CUDA_ERROR_STREAM_CAPTURE_UNJOINED, "joined");
  CHECK_FALSE(origin.is_capturing());
  CHECK_FALSE(side.is_capturing());
  side.memset32(a.get(), 2, kN);
  CHECK(read(side, a)[0] == 2);
}

TEST_CASE(
    "a captured host function runs once per replay, also after the callable is gone; "
    "its payload is destroyed once, with the graph",
    "[gpu][graph][host_function]") {
  REQUIRE_DRIVER();
  Stream s(custream::StreamFlags::non_blocking), other(custream::StreamFlags::non_blocking);
  auto probe = std::make_shared<Probe>();
  {
    Graph g;
    {
      s.begin_capture();
      {
        Payload payload(probe);
        s.launch_host_func(std::move(payload));
      }  // the original callable object is gone
      g = s.end_capture();
    }
    for (int i = 1; i <= 4; ++i) {
      g.launch(i % 2 ? s : other);
      (i % 2 ? s : other).synchronize();
      CHECK(probe->runs == i);
    }
    Graph copy = g;
    g = Graph();
    copy.launch(s);
    s.synchronize();
    CHECK(probe->runs == 5);
    CHECK(probe->destroyed == 0);  // the graph still holds it
  }
  CHECK(eventually([&] { return probe->destroyed == 1; }));
  CHECK(probe->runs == 5);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(probe->destroyed == 1);  // exactly once
}

TEST_CASE("a captured small noexcept callable (carried in userData) runs on every replay",
          "[gpu][graph][host_function]") {
  REQUIRE_DRIVER();
  Stream s(custream::StreamFlags::non_blocking);
  std::atomic<int> runs{0};
  Graph g;
  {
    std::atomic<int>* counter = &runs;
    s.begin_capture();
    s.launch_host_func([counter]() noexcept { counter->fetch_add(1); });
    g = s.end_capture();
  }
  for (int i = 1; i <= 3; ++i) {
    g.launch(s);
    s.synchronize();
    CHECK(runs == i);
  }
}

TEST_CASE(
    "a host function on a stream joined into another stream's capture runs once per "
    "replay",
    "[gpu][graph][host_function]") {
  REQUIRE_DRIVER();
  Stream origin(custream::StreamFlags::non_blocking), side(custream::StreamFlags::non_blocking);
  Event fork, join;
  auto probe = std::make_shared<Probe>();
  std::vector<int> order;
  {
    origin.begin_capture();
    origin.launch_host_func([&order] { order.push_back(1); });
    origin.record(fork);
    side.wait_event(fork);
    side.launch_host_func(Payload(probe));
    side.launch_host_func([&order] { order.push_back(2); });
    side.record(join);
    origin.wait_event(join);
    origin.launch_host_func([&order] { order.push_back(3); });
    Graph g = origin.end_capture();
    for (int i = 0; i < 3; ++i) g.launch(origin);
    origin.synchronize();
    CHECK(probe->runs == 3);
    CHECK(order == std::vector<int>{1, 2, 3, 1, 2, 3, 1, 2, 3});
  }
  CHECK(eventually([&] { return probe->destroyed == 1; }));
}

TEST_CASE("a host function in a capture begun by foreign code is attached to that graph",
          "[gpu][graph][host_function]") {
  REQUIRE_DRIVER();
  using custream_test::raw;
  Stream s(custream::StreamFlags::non_blocking);
  auto probe = std::make_shared<Probe>();
  REQUIRE(raw().cuStreamBeginCapture(s.handle(), CU_STREAM_CAPTURE_MODE_RELAXED) == CUDA_SUCCESS);
  s.launch_host_func(Payload(probe));
  CUgraph graph = nullptr;
  REQUIRE(raw().cuStreamEndCapture(s.handle(), &graph) == CUDA_SUCCESS);
  {
    Graph g = Graph::wrap(graph, InstantiateFlags::upload, s);
    g.launch(s);
    g.launch(s);
    s.synchronize();
    CHECK(probe->runs == 2);
  }
  // The foreign graph still owns the payload: wrap() did not destroy it.
  std::size_t nodes = 0;
  CHECK(raw().cuGraphGetNodes(graph, nullptr, &nodes) == CUDA_SUCCESS);
  CHECK(nodes == 1);
  CHECK(probe->destroyed == 0);
  REQUIRE(raw().cuGraphDestroy(graph) == CUDA_SUCCESS);
  CHECK(eventually([&] { return probe->destroyed == 1; }));
}

TEST_CASE("add_callback while capturing becomes a host node with status success",
          "[gpu][graph][host_function]") {
  REQUIRE_DRIVER();
  Stream s(custream::StreamFlags::non_blocking);
  std::vector<CUresult> statuses;
  int wrong_stream = 0;
  s.begin_capture();
  s.add_callback([&](Stream cs, CUresult status) {
    statuses.push_back(status);
    if (cs != s) ++wrong_stream;
  });
  CHECK(s.is_capturing());  // still valid: cuStreamAddCallback was not called
  std::vector<CUstream> raw_streams;
  s.add_callback(
      [](CUstream h, CUresult, void* p) { static_cast<std::vector<CUstream>*>(p)->push_back(h); },
      &raw_streams);
  CHECK(s.capture_info().status == CaptureStatus::active);
  Graph g = s.end_capture();
  CHECK(g.node_count() == 2);
  g.launch(s);
  g.launch(s);
  s.synchronize();
  CHECK(statuses == std::vector<CUresult>{CUDA_SUCCESS, CUDA_SUCCESS});
  CHECK(wrong_stream == 0);
  CHECK(raw_streams == std::vector<CUstream>{s.handle(), s.handle()});
}

TEST_CASE("an exception in a captured host function reaches the handler on every replay",
          "[gpu][graph][host_function]") {
  REQUIRE_DRIVER();
  Stream s(custream::StreamFlags::non_blocking);
  std::mutex m;
  std::vector<std::string> seen;
  std::vector<bool> captured;
  auto previous =
      custream::set_host_function_error_handler([&](const custream::HostFunctionError& e) {
        std::lock_guard<std::mutex> lock(m);
        seen.push_back(e.message());
        captured.push_back(e.captured);
      });
  s.begin_capture();
  s.launch_host_func([] { throw std::runtime_error("replayed failure"); });
  Graph g = s.end_capture();
  g.launch(s);
  g.launch(s);
  s.synchronize();
  custream::set_host_function_error_handler(std::move(previous));
  REQUIRE(seen.size() == 2);
  CHECK(seen[1].find("replayed failure") != std::string::npos);
  CHECK(seen[1].find("captured host function") != std::string::npos);
  CHECK(captured == std::vector<bool>{true, true});
}

TEST_CASE("CaptureScope ends the capture when an exception unwinds, freeing payloads",
          "[gpu][graph][capture]") {
  REQUIRE_DRIVER();
  Stream s(custream::StreamFlags::non_blocking);
  auto probe = std::make_shared<Probe>();
  try {
    CaptureScope capture(s);
    CHECK(capture.active());
    s.launch_host_func(Payload(probe));
    throw std::runtime_error("unwind");
  } catch (const std::runtime_error&) {
  }
  CHECK_FALSE(s.is_capturing());
  CHECK(eventually([&] { return probe->destroyed == 1; }));
  CHECK(probe->runs == 0);

  CaptureScope capture(s);
  auto probe2 = std::make_shared<Probe>();
  s.launch_host_func(Payload(probe2));
  Graph g = capture.end();
  CHECK_FALSE(capture.active());
  CHECK_FALSE(s.is_capturing());
  expect_error([&] { (void)capture.end(); }, CUDA_ERROR_ILLEGAL_STATE, "already ended");
  g.launch(s);
  s.synchronize();
  CHECK(probe2->runs == 1);
}

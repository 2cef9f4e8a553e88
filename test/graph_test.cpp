// Graphs: capture and replay equal to eager execution, launch and
// upload (also on the current stream), destruction during a launch, update, instantiate
// failures, DOT text and Graph::adopt. Capture itself is in capture_test.cpp, fault injection
// on the capture path in graph_fault_test.cpp. Uses memset/memcpy/host nodes, so it runs on the
// emulator and on the GPU.
#include "custream/graph.hpp"

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "custream/capture.hpp"
#include "custream/device_buffer.hpp"
#include "custream/graph_instantiate_error.hpp"
#include "custream/graph_update_error.hpp"
#include "custream/host_function.hpp"
#include "custream/stream.hpp"
#include "custream/stream_scope.hpp"
#include "graph_support.hpp"

using custream::Graph;
using custream::InstantiateFlags;
using custream::Stream;
using custream_test::eventually;
using custream_test::expect_error;
using custream_test::kN;
using custream_test::Payload;
using custream_test::Probe;
using custream_test::read;

namespace {

// The work replayed in the graph tests: a = 7; b = a; a[0..kN/2) = 9.
void work(const Stream& s, const custream::DeviceBuffer& a, const custream::DeviceBuffer& b) {
  s.memset32(a.get(), 7, kN);
  s.copy(b.get(), a.get(), kN * sizeof(std::uint32_t));
  s.memset32(a.get(), 9, kN / 2);
}

}  // namespace

TEST_CASE("capture and replay equal eager execution, on the same and another stream",
          "[gpu][graph]") {
  REQUIRE_DRIVER();
  Stream s(custream::StreamFlags::non_blocking), other(custream::StreamFlags::non_blocking);
  custream::DeviceBuffer a(kN * 4), b(kN * 4);
  work(s, a, b);
  const auto eager_a = read(s, a), eager_b = read(s, b);
  REQUIRE(eager_a[0] == 9);
  REQUIRE(eager_a[kN - 1] == 7);
  REQUIRE(eager_b[0] == 7);

  for (InstantiateFlags flags : {InstantiateFlags::upload, InstantiateFlags::none}) {
    s.begin_capture();
    work(s, a, b);
    Graph g = s.end_capture(flags);
    CHECK(g.flags() == flags);
    CHECK(g.node_count() == 3);
    for (const Stream* on : {&s, &other}) {
      s.memset32(a.get(), 0, kN);
      s.memset32(b.get(), 0, kN);
      s.synchronize();
      if (flags == InstantiateFlags::none) g.upload(*on);
      g.launch(*on);
      on->synchronize();
      CHECK(read(s, a) == eager_a);
      CHECK(read(s, b) == eager_b);
    }
  }
}

TEST_CASE("launch() and upload() use the current stream", "[gpu][graph]") {
  REQUIRE_DRIVER();
  custream::Device(0).make_current();
  Stream s(custream::StreamFlags::non_blocking);
  custream::DeviceBuffer a(kN * 4), b(kN * 4);
  s.begin_capture();
  work(s, a, b);
  Graph g = s.end_capture();
  s.memset32(a.get(), 0, kN);
  s.synchronize();
  {
    custream::StreamScope scope(s);
    g.upload();
    g.launch();
  }
  s.synchronize();
  CHECK(read(s, a)[kN - 1] == 7);
  Graph empty;
  CHECK_FALSE(empty);
  expect_error([&] { empty.launch(s); }, CUDA_ERROR_INVALID_VALUE, "empty custream::Graph");
}

TEST_CASE("graph destroyed while a launch with a host node is in flight", "[gpu][graph]") {
  REQUIRE_DRIVER();
  Stream s(custream::StreamFlags::non_blocking);
  auto probe = std::make_shared<Probe>();
  std::atomic<bool> gate{false};
  std::atomic<int> blocked{0};
  {
    s.begin_capture();
    s.launch_host_func([&gate, &blocked] {
      ++blocked;
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (!gate.load() && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
    });
    s.launch_host_func(Payload(probe));
    Graph g = s.end_capture();
    g.launch(s);
    REQUIRE(eventually([&] { return blocked == 1; }));
  }  // the Graph (graph and executable) is destroyed while its launch is blocked
  CHECK(probe->runs == 0);
  CHECK(probe->destroyed == 0);
  gate = true;
  s.synchronize();
  CHECK(probe->runs == 1);
  CHECK(eventually([&] { return probe->destroyed == 1; }));
}

TEST_CASE("update gives the executable a newer capture's parameters and keeps its payloads",
          "[gpu][graph][update]") {
  REQUIRE_DRIVER();
  Stream s(custream::StreamFlags::non_blocking);
  custream::DeviceBuffer a(kN * 4);
  auto p1 = std::make_shared<Probe>(), p2 = std::make_shared<Probe>();
  auto capture = [&](std::uint32_t value, std::shared_ptr<Probe> probe) {
    s.begin_capture();
    s.memset32(a.get(), value, kN);
    s.launch_host_func(Payload(std::move(probe)));
    return s.end_capture();
  };
  {
    Graph g1 = capture(1, p1);
    {
      Graph g2 = capture(2, p2);
      g1.update(g2);
    }  // the newer Graph is gone; the executable holds its own reference to the payload
    g1.launch(s);
    s.synchronize();
    CHECK(read(s, a) == std::vector<std::uint32_t>(kN, 2));
    CHECK(p2->runs == 1);
    CHECK(p1->runs == 0);
    CHECK(p2->destroyed == 0);

    // A different topology is refused, naming the reason; the executable still works.
    s.begin_capture();
    s.memset32(a.get(), 3, kN);
    s.memset32(a.get(), 4, kN);
    s.memset32(a.get(), 5, kN);
    Graph g3 = s.end_capture();
    try {
      g1.update(g3);
      FAIL("no throw");
    } catch (const custream::GraphUpdateError& e) {
      CHECK(e.update_result() == CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED);
      CHECK(e.result() == CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
      CHECK(std::string(e.what()).find("CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED") !=
            std::string::npos);
      CHECK(std::string(e.what()).find("unchanged") != std::string::npos);
    }
    g1.launch(s);
    s.synchronize();
    CHECK(p2->runs == 2);
  }
  CHECK(eventually([&] { return p1->destroyed == 1 && p2->destroyed == 1; }));
}

TEST_CASE("an update whose node type changed names the node", "[gpu][graph][update]") {
  REQUIRE_DRIVER();
  Stream s(custream::StreamFlags::non_blocking);
  custream::DeviceBuffer a(kN * 4);
  s.begin_capture();
  s.memset32(a.get(), 1, kN);
  Graph g1 = s.end_capture();
  s.begin_capture();
  s.launch_host_func([] {});
  Graph g2 = s.end_capture();
  try {
    g1.update(g2);
    FAIL("no throw");
  } catch (const custream::GraphUpdateError& e) {
    CHECK(e.update_result() != CU_GRAPH_EXEC_UPDATE_SUCCESS);
    CHECK(std::string(e.what()).find("CU_GRAPH_EXEC_UPDATE_ERROR") != std::string::npos);
    if (e.error_node() != nullptr) {
      CHECK(std::string(e.what()).find("node 0x") != std::string::npos);
    }
  }
}

TEST_CASE("instantiate failures are reported by result code, and nothing leaks",
          "[gpu][graph][instantiate]") {
  REQUIRE_DRIVER();
  Stream s(custream::StreamFlags::non_blocking);
  auto probe = std::make_shared<Probe>();
  s.begin_capture();
  s.launch_host_func(Payload(probe));
  try {
    (void)s.end_capture(InstantiateFlags::device_launch);
    FAIL("no throw");
  } catch (const custream::GraphInstantiateError& e) {
    CHECK(e.instantiate_result() != CUDA_GRAPH_INSTANTIATE_SUCCESS);
    CHECK(std::string(e.what()).find("CUDA_GRAPH_INSTANTIATE_") != std::string::npos);
    CHECK(std::string(e.what()).find("device_launch") != std::string::npos);
    if (custream_test::emulated()) {
      CHECK(e.instantiate_result() == CUDA_GRAPH_INSTANTIATE_NODE_OPERATION_NOT_SUPPORTED);
    }
  }
  CHECK_FALSE(s.is_capturing());
  CHECK(eventually([&] { return probe->destroyed == 1; }));  // the graph was destroyed

  s.begin_capture();
  expect_error(
      [&] {
        (void)s.end_capture(InstantiateFlags::device_launch |
                            InstantiateFlags::auto_free_on_launch);
      },
      CUDA_ERROR_INVALID_VALUE, "cuGraphInstantiateWithParams");
  CHECK_FALSE(s.is_capturing());
}

TEST_CASE("DOT text of a graph, plain and verbose", "[gpu][graph]") {
  REQUIRE_DRIVER();
  Stream s(custream::StreamFlags::non_blocking);
  custream::DeviceBuffer a(kN * 4);
  s.begin_capture();
  s.memset32(a.get(), 1, kN);
  s.launch_host_func([] {});
  Graph g = s.end_capture();
  const std::string plain = g.dot(), verbose = g.dot(true);
  CHECK(plain.find("digraph") != std::string::npos);
  CHECK(verbose.find("digraph") != std::string::npos);
  CHECK(verbose != plain);
  CHECK(verbose.size() > plain.size());
  CHECK(g.node_count() == 2);
}

TEST_CASE("a Graph adopted from a foreign capture is owned and destroyed",
          "[gpu][graph][emu-only]") {
  REQUIRE_EMULATOR();
  using custream_test::raw;
  Stream s(custream::StreamFlags::non_blocking);
  const long live = custream_test::emu_live_objects();
  REQUIRE(raw().cuStreamBeginCapture(s.handle(), CU_STREAM_CAPTURE_MODE_RELAXED) == CUDA_SUCCESS);
  s.launch_host_func([] {});
  CUgraph graph = nullptr;
  REQUIRE(raw().cuStreamEndCapture(s.handle(), &graph) == CUDA_SUCCESS);
  {
    Graph g = Graph::adopt(graph, InstantiateFlags::none, s);
    CHECK(g.graph() == graph);
    CHECK(g.node_count() == 1);
    CHECK(custream_test::emu_live_objects() == live + 3);  // graph, exec, user object
  }
  CHECK(custream_test::emu_wait_idle());
  CHECK(custream_test::emu_live_objects() == live);
}

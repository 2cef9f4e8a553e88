// Graph::update lifetimes (docs/design/graphs.md, invariant 4): a per-step update loop holds
// only what can still run, payloads are destroyed exactly once and never while a launch that
// runs them is pending, a failed update changes and drops nothing, a Graph launched into
// another capture is refused with the graph intact, update_from_capture, and updates from
// many threads.
// Host nodes only, so it runs on the emulator and on the GPU.
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "custream/device_buffer.hpp"
#include "custream/error.hpp"
#include "custream/graph.hpp"
#include "custream/graph_update_error.hpp"
#include "custream/host_function.hpp"
#include "custream/stream.hpp"
#include "graph_support.hpp"

using custream::Graph;
using custream::Stream;
using custream_test::eventually;
using custream_test::Payload;
using custream_test::Probe;

namespace {

using namespace std::chrono_literals;

// One step's work: a host function owning `probe`'s payload, captured on `s`.
Graph capture_step(const Stream& s, std::shared_ptr<Probe> probe) {
  s.begin_capture();
  s.launch_host_func(Payload(std::move(probe)));
  return s.end_capture();
}

std::vector<std::shared_ptr<Probe>> make_probes(int n) {
  std::vector<std::shared_ptr<Probe>> probes;
  for (int i = 0; i < n; ++i) probes.push_back(std::make_shared<Probe>());
  return probes;
}

// Holds `s` (not capturing) until open() is called; the host function blocks the stream.
class Gate {
 public:
  explicit Gate(const Stream& s) {
    s.launch_host_func([state = state_] {
      state->entered = true;
      const auto deadline = std::chrono::steady_clock::now() + 20s;
      while (!state->open.load() && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(100us);
      }
    });
    REQUIRE(eventually([&] { return state_->entered.load(); }));
  }
  Gate(const Gate&) = delete;
  Gate& operator=(const Gate&) = delete;
  ~Gate() { open(); }
  void open() { state_->open = true; }

 private:
  struct State {
    std::atomic<bool> entered{false}, open{false};
  };
  std::shared_ptr<State> state_ = std::make_shared<State>();
};

int total(const std::vector<std::shared_ptr<Probe>>& probes, std::atomic<int> Probe::*field) {
  int sum = 0;
  for (const auto& p : probes) sum += (*p.*field).load();
  return sum;
}

}  // namespace

TEST_CASE("a per-step update loop frees each superseded payload once its launch is done",
          "[gpu][graph][update]") {
  REQUIRE_DRIVER();
  Stream s(custream::StreamFlags::non_blocking);
  constexpr int kSteps = 200;
  const auto probes = make_probes(kSteps + 1);
  {
    Graph g = capture_step(s, probes[0]);
    for (int i = 1; i <= kSteps; ++i) {
      g.update(capture_step(s, probes[i]));  // the newer Graph handle is gone at once
      g.launch(s);
    }
    s.synchronize();
    // Each newer graph ran once; the one the executable holds now is the only one alive, with
    // the graph g was instantiated from (never launched after the first update).
    for (int i = 1; i <= kSteps; ++i) CHECK(probes[i]->runs == 1);
    CHECK(probes[0]->runs == 0);
    // Before, g kept every graph it was updated from: nothing below was destroyed until g was.
    CHECK(eventually([&] {
      for (int i = 1; i < kSteps; ++i)
        if (probes[i]->destroyed != 1) return false;
      return true;
    }));
    std::this_thread::sleep_for(20ms);
    CHECK(probes[kSteps]->destroyed == 0);  // the executable runs it on the next launch
    CHECK(probes[0]->destroyed == 0);       // g's own graph
    g.launch(s);
    s.synchronize();
    CHECK(probes[kSteps]->runs == 2);
  }
  CHECK(eventually([&] { return total(probes, &Probe::destroyed) == kSteps + 1; }));
  std::this_thread::sleep_for(20ms);
  for (const auto& p : probes) CHECK(p->destroyed == 1);
}

TEST_CASE("an update never frees a payload a pending launch still runs", "[gpu][graph][update]") {
  REQUIRE_DRIVER();
  Stream s(custream::StreamFlags::non_blocking);
  const auto p = make_probes(3);
  {
    Graph g = capture_step(s, p[0]);
    g.update(capture_step(s, p[1]));
    {
      Gate gate(s);
      g.launch(s);                      // will run p[1]
      g.update(capture_step(s, p[2]));  // replaces p[1] while that launch waits
      std::this_thread::sleep_for(50ms);
      CHECK(p[1]->runs == 0);
      CHECK(p[1]->destroyed == 0);
      gate.open();
      s.synchronize();
    }
    CHECK(p[1]->runs == 1);
    CHECK(eventually([&] { return p[1]->destroyed == 1; }));
    CHECK(p[2]->destroyed == 0);

    // A raw launch behind custream's back is held the same way: by the driver, per launch.
    {
      Gate gate(s);
      REQUIRE(custream_test::raw().cuGraphLaunch(g.exec(), s.handle()) == CUDA_SUCCESS);
      const auto p3 = std::make_shared<Probe>();
      g.update(capture_step(s, p3));
      std::this_thread::sleep_for(50ms);
      CHECK(p[2]->destroyed == 0);
      gate.open();
      s.synchronize();
      CHECK(p[2]->runs == 1);
      CHECK(eventually([&] { return p[2]->destroyed == 1; }));
      CHECK(p3->runs == 0);
      CHECK(p3->destroyed == 0);
    }
  }
  CHECK(eventually([&] { return p[0]->destroyed == 1; }));
}

TEST_CASE("a Graph destroyed while its updated launch is pending frees the payload after it ran",
          "[gpu][graph][update]") {
  REQUIRE_DRIVER();
  Stream s(custream::StreamFlags::non_blocking);
  const auto p = make_probes(3);
  Gate gate(s);
  {
    Graph g = capture_step(s, p[0]);
    g.update(capture_step(s, p[1]));
    g.launch(s);                      // runs p[1]
    g.update(capture_step(s, p[2]));  // runs p[2]
    g.launch(s);
  }  // graph, executable and every newer graph gone; two launches pending
  std::this_thread::sleep_for(50ms);
  CHECK(p[1]->destroyed == 0);
  CHECK(p[2]->destroyed == 0);
  gate.open();
  s.synchronize();
  CHECK(p[1]->runs == 1);
  CHECK(p[2]->runs == 1);
  // p[0] (never launched) may go as soon as its graph is gone; on the H200 user-object
  // destructors wait while a host function (the gate) holds the driver's thread.
  CHECK(eventually([&] { return total(p, &Probe::destroyed) == 3; }));
  CHECK(p[0]->runs == 0);
}

TEST_CASE("a failed update leaves the executable and what it holds unchanged",
          "[gpu][graph][update]") {
  REQUIRE_DRIVER();
  Stream s(custream::StreamFlags::non_blocking);
  const auto p = make_probes(3);
  {
    Graph g = capture_step(s, p[0]);
    g.update(capture_step(s, p[1]));
    {
      s.begin_capture();  // two nodes: another topology
      s.launch_host_func(Payload(p[2]));
      s.launch_host_func([] {});
      Graph other = s.end_capture();
      CHECK_THROWS_AS(g.update(other), custream::GraphUpdateError);
    }
    CHECK(eventually([&] { return p[2]->destroyed == 1; }));  // the refused graph is gone
    std::this_thread::sleep_for(20ms);
    CHECK(p[1]->destroyed == 0);  // what the executable held, it still holds
    CHECK(p[0]->destroyed == 0);
    g.launch(s);
    s.synchronize();
    CHECK(p[1]->runs == 1);
    CHECK(p[0]->runs == 0);
    CHECK(p[2]->runs == 0);
  }
  CHECK(eventually([&] { return p[0]->destroyed == 1 && p[1]->destroyed == 1; }));
}

TEST_CASE("a Graph launched into another capture is refused; it and its payloads are intact",
          "[gpu][graph][update]") {
  REQUIRE_DRIVER();
  Stream s(custream::StreamFlags::non_blocking), other(custream::StreamFlags::non_blocking);
  const auto p = make_probes(2);
  {
    Graph g = capture_step(s, p[0]);
    g.update(capture_step(s, p[1]));
    other.begin_capture();
    try {
      g.launch(other);  // the driver does not capture graph launches (no child-graph node)
      FAIL("no throw");
    } catch (const custream::Error& e) {
      CHECK(e.result() == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
      CHECK(std::string(e.what()).find("launch it after end_capture") != std::string::npos);
    }
    CHECK_THROWS_AS(other.end_capture(), custream::Error);  // invalidated by the driver
    CHECK_FALSE(other.is_capturing());
    std::this_thread::sleep_for(20ms);
    CHECK(p[1]->destroyed == 0);
    g.launch(s);
    s.synchronize();
    CHECK(p[1]->runs == 1);
  }
  CHECK(eventually([&] { return total(p, &Probe::destroyed) == 2; }));
  CHECK(p[0]->runs == 0);
}

TEST_CASE("update_from_capture updates without instantiating, and frees what it captured",
          "[gpu][graph][update]") {
  REQUIRE_DRIVER();
  Stream s(custream::StreamFlags::non_blocking);
  constexpr int kSteps = 50;
  const auto p = make_probes(kSteps + 2);
  {
    Graph g = capture_step(s, p[0]);
    for (int i = 1; i <= kSteps; ++i) {
      s.begin_capture();
      s.launch_host_func(Payload(p[static_cast<std::size_t>(i)]));
      g.update_from_capture(s);
      CHECK_FALSE(s.is_capturing());
      g.launch(s);
    }
    s.synchronize();
    for (int i = 1; i <= kSteps; ++i) CHECK(p[static_cast<std::size_t>(i)]->runs == 1);
    CHECK(eventually([&] {
      for (int i = 1; i < kSteps; ++i)
        if (p[static_cast<std::size_t>(i)]->destroyed != 1) return false;
      return true;
    }));
    // Another topology: refused, the stream has left capture mode, the captured payload is
    // freed and the executable still runs the last one.
    s.begin_capture();
    s.launch_host_func(Payload(p[kSteps + 1]));
    s.launch_host_func([] {});
    CHECK_THROWS_AS(g.update_from_capture(s), custream::GraphUpdateError);
    CHECK_FALSE(s.is_capturing());
    CHECK(eventually([&] { return p[kSteps + 1]->destroyed == 1; }));
    CHECK(p[kSteps]->destroyed == 0);
    g.launch(s);
    s.synchronize();
    CHECK(p[kSteps]->runs == 2);
    CHECK(p[kSteps + 1]->runs == 0);
    // Not capturing: the end fails as end_capture's does, and nothing changes.
    CHECK_THROWS_AS(g.update_from_capture(s), custream::Error);
    g.launch(s);
    s.synchronize();
    CHECK(p[kSteps]->runs == 3);
  }
  CHECK(eventually([&] { return total(p, &Probe::destroyed) == kSteps + 2; }));
  std::this_thread::sleep_for(20ms);
  for (const auto& probe : p) CHECK(probe->destroyed == 1);
}

TEST_CASE("updates from many threads: each payload destroyed exactly once",
          "[gpu][graph][update][threads]") {
  REQUIRE_DRIVER();
  constexpr int kThreads = 6, kSteps = 60, kSharedEvery = 6;
  // Per thread: its Graph's first payload, one per step, one per update of the shared Graph.
  const auto probes = make_probes(1 + kThreads * (1 + kSteps + kSteps / kSharedEvery));
  std::atomic<int> next{0};
  auto take = [&] { return probes[static_cast<std::size_t>(next++)]; };
  std::mutex shared_mutex;  // one Graph is updated and launched by every thread, in turn
  Stream shared_stream(custream::StreamFlags::non_blocking);
  Graph shared = capture_step(shared_stream, take());
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      Stream s(custream::StreamFlags::non_blocking);
      Graph own = capture_step(s, take());
      for (int i = 0; i < kSteps; ++i) {
        own.update(capture_step(s, take()));  // a Graph of this thread's own
        own.launch(s);
        if (i % kSharedEvery == 0) {
          Graph newer = capture_step(s, take());
          std::lock_guard<std::mutex> lock(shared_mutex);
          shared.update(newer);
          shared.launch(s);
        }
      }
      s.synchronize();
    });
  }
  for (auto& t : threads) t.join();
  const int made = next.load();
  shared = Graph();
  shared_stream.synchronize();
  CHECK(eventually([&] { return total(probes, &Probe::destroyed) == made; }));
  std::this_thread::sleep_for(20ms);
  int once = 0;
  for (int i = 0; i < made; ++i) once += probes[static_cast<std::size_t>(i)]->destroyed == 1;
  CHECK(once == made);
  // Every payload but each thread's first (instantiated, never launched after an update) ran.
  CHECK(made == static_cast<int>(probes.size()));
  CHECK(total(probes, &Probe::runs) == made - kThreads - 1);
}

// Per-node updates of an instantiated Graph (docs/design/graphs.md, "Per-node updates"): each
// update changes what later launches do and not what a launch enqueued before it does; a
// replaced host callable is destroyed exactly once, never before the launches enqueued before
// its replacement have finished, after the next launch, or when the Graph is dropped without
// one; refusals name the node and rule and change nothing. Memset, memcpy and host nodes run on
// the emulator and a GPU alike; kernel nodes run add_one (real PTX; on the emulator its CPU
// implementation, registered by add_one_support.hpp).
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "add_one_support.hpp"
#include "custream/device_buffer.hpp"
#include "custream/error.hpp"
#include "custream/graph.hpp"
#include "custream/graph_builder.hpp"
#include "custream/host_function.hpp"
#include "custream/kernel.hpp"
#include "custream/module.hpp"
#include "custream/release_error_handler.hpp"
#include "custream/stream.hpp"
#include "emu_control.h"
#include "error.hpp"
#include "graph_support.hpp"
#include "test_support.hpp"

using custream::DeviceBuffer;
using custream::Graph;
using custream::GraphBuilder;
using custream::GraphNode;
using custream::GraphNodeKind;
using custream::LaunchConfig;
using custream::Stream;
using custream_test::eventually;
using custream_test::expect_error;
using custream_test::Payload;
using custream_test::Probe;
using namespace custream_test::add_one;

namespace {

using namespace std::chrono_literals;

// Holds `s` until open(): launches enqueued meanwhile are pending.
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

// Counts the release errors reported while it lives, and checks there were none: a retired
// payload whose release calls the driver must not be released on the driver's callback thread,
// where the driver refuses the call (cuGraphDestroy: CUDA_ERROR_NOT_PERMITTED) and the object
// leaks.
class ReleaseErrors {
 public:
  ReleaseErrors()
      : previous_(custream::set_release_error_handler([this](const custream::ReleaseError& e) {
          std::lock_guard<std::mutex> lock(mutex_);
          seen_.push_back(e.message());
        })) {}
  ~ReleaseErrors() {
    custream::set_release_error_handler(std::move(previous_));
    std::lock_guard<std::mutex> lock(mutex_);
    for (const std::string& m : seen_) FAIL_CHECK("release error: " << m);
  }
  ReleaseErrors(const ReleaseErrors&) = delete;
  ReleaseErrors& operator=(const ReleaseErrors&) = delete;

 private:
  std::mutex mutex_;
  std::vector<std::string> seen_;
  custream::ReleaseErrorHandler previous_;
};

GraphNode only_node(const Graph& g, GraphNodeKind kind) {
  for (const GraphNode& n : g.nodes()) {
    if (n.kind() == kind) return n;
  }
  FAIL("no node of the kind");
  return {};
}

}  // namespace

TEST_CASE("update_memset: later launches write the new value where told, an enqueued one not",
          "[gpu][graph][graph-node-update]") {
  REQUIRE_DRIVER();
  const Settled settled;
  Stream s(custream::StreamFlags::non_blocking);
  DeviceBuffer a(kBytes), b(kBytes);
  s.memset32(a.get(), 0, custream_test::kN);
  s.memset32(b.get(), 0, custream_test::kN);
  GraphBuilder builder = GraphBuilder::create();
  const GraphNode set = builder.add_memset({}, a.get(), std::uint32_t{1}, custream_test::kN);
  Graph g = builder.instantiate();
  {
    Gate gate(s);
    g.launch(s);  // pending: writes 1 into a
    g.update_memset(set, b.get(), std::uint32_t{7}, custream_test::kN);
    g.launch(s);  // writes 7 into b
  }
  s.synchronize();
  CHECK(words(s, a) == std::vector<std::uint32_t>(custream_test::kN, 1u));
  CHECK(words(s, b) == std::vector<std::uint32_t>(custream_test::kN, 7u));
  // The builder's graph is unchanged: a new instantiation writes 1 into a again.
  s.memset32(a.get(), 0, custream_test::kN);
  builder.instantiate().launch(s);
  CHECK(words(s, a)[0] == 1u);
}

TEST_CASE("update_memcpy and the host copies: later launches copy what they are told",
          "[gpu][graph][graph-node-update]") {
  REQUIRE_DRIVER();
  const Settled settled;
  Stream s(custream::StreamFlags::non_blocking);
  DeviceBuffer src1(kBytes), src2(kBytes), dst1(kBytes), dst2(kBytes);
  s.memset32(src1.get(), 11, custream_test::kN);
  s.memset32(src2.get(), 22, custream_test::kN);
  s.memset32(dst1.get(), 0, custream_test::kN);
  s.memset32(dst2.get(), 0, custream_test::kN);
  GraphBuilder builder = GraphBuilder::create();
  const GraphNode copy = builder.add_memcpy({}, dst1.get(), src1.get(), kBytes);
  std::vector<std::uint32_t> host_in(custream_test::kN, 33u), host_out(custream_test::kN, 0u);
  const GraphNode up = builder.add_copy_to_device(copy, dst2.get(), host_in.data(), kBytes);
  Graph g = builder.instantiate();
  {
    Gate gate(s);
    g.launch(s);  // pending: dst1 <- src1 (11), dst2 <- host_in (33)
    g.update_memcpy(copy, dst2.get(), src2.get(), kBytes);
    g.update_copy_to_device(up, dst1.get(), host_in.data(), kBytes);
    g.launch(s);  // dst2 <- src2 (22), then dst1 <- host_in (33)
  }
  s.synchronize();
  CHECK(words(s, dst1)[5] == 33u);
  CHECK(words(s, dst2)[5] == 22u);
  // A device-to-host node, redirected.
  GraphBuilder down_builder = GraphBuilder::create();
  std::vector<std::uint32_t> other(custream_test::kN, 0u);
  const GraphNode down = down_builder.add_copy_to_host({}, host_out.data(), src1.get(), kBytes);
  Graph d = down_builder.instantiate();
  d.update_copy_to_host(down, other.data(), src2.get(), kBytes);
  d.launch(s);
  s.synchronize();
  CHECK(host_out[0] == 0u);
  CHECK(other[0] == 22u);
}

TEST_CASE("update_kernel: later launches take the new arguments, an enqueued one its own",
          "[gpu][graph][graph-node-update]") {
  REQUIRE_DRIVER();
  AddOneCase c;
  Stream& s = c.s;
  const custream::Kernel& add_one = c.add_one;
  DeviceBuffer a(kBytes), b(kBytes);
  s.memset32(a.get(), 0, custream_test::kN);
  s.memset32(b.get(), 0, custream_test::kN);
  const unsigned n = custream_test::kN;
  // A captured kernel node, listed by nodes() (a builder's add_kernel node updates the same way).
  s.begin_capture();
  add_one.launch(s, {1}, {64}, 0, a.get(), n);
  Graph g = s.end_capture();
  const GraphNode k = only_node(g, GraphNodeKind::kernel);
  CHECK(k.graph() == g.graph());
  {
    Gate gate(s);
    g.launch(s);  // pending: a[i] += 1
    g.update_kernel(k, LaunchConfig{{1}, {64}}, b.get(), 2u);
    g.launch(s);  // b[0..2) += 1
    g.update_kernel(k, LaunchConfig{{1}, {64}}, b.get(), 1u);
    g.launch(s);  // b[0] += 1
  }
  s.synchronize();
  const auto va = words(s, a), vb = words(s, b);
  CHECK(va[0] == 1u);
  CHECK(va[n - 1] == 1u);
  CHECK(vb[0] == 2u);
  CHECK(vb[1] == 1u);
  CHECK(vb[2] == 0u);

  SECTION("arguments that do not match the kernel's parameters are refused, nothing changed") {
    expect_error(
        [&] {
          g.update_kernel(k, LaunchConfig{{1}, {64}}, b.get());
        },
        CUDA_ERROR_INVALID_VALUE, "custream::Graph::update_kernel");
    expect_error(
        [&] {
          g.update_kernel(k, LaunchConfig{{1}, {64}}, b.get(), std::uint64_t{1});
        },
        CUDA_ERROR_INVALID_VALUE, "argument 1 has 8 bytes");
    LaunchConfig too_much_shared{{1}, {64}};  // after updates with these argument types
    too_much_shared.shared_bytes = std::size_t{1} << 33;
    expect_error([&] { g.update_kernel(k, too_much_shared, b.get(), 1u); },
                 CUDA_ERROR_INVALID_VALUE, "bytes of dynamic shared memory exceed");
    LaunchConfig with_priority{{1}, {64}};
    with_priority.priority = 0;
    expect_error([&] { g.update_kernel(k, with_priority, b.get(), 1u); }, CUDA_ERROR_INVALID_VALUE,
                 "launch attributes");
    g.launch(s);  // still b[0] += 1
    const auto after = words(s, b);
    CHECK(after[0] == 3u);
    CHECK(after[1] == 1u);
  }
}

TEST_CASE("update_kernel on a builder's kernel node, then a whole-graph update forgets it",
          "[gpu][graph][graph-node-update]") {
  REQUIRE_DRIVER();
  AddOneCase c;
  Stream& s = c.s;
  const custream::Kernel& add_one = c.add_one;
  DeviceBuffer a(kBytes), b(kBytes);
  s.memset32(a.get(), 0, custream_test::kN);
  s.memset32(b.get(), 0, custream_test::kN);
  GraphBuilder builder = GraphBuilder::create();
  const GraphNode k = builder.add_kernel({}, add_one, LaunchConfig{{1}, {64}}, a.get(), 1u);
  Graph g = builder.instantiate();
  g.update_kernel(k, LaunchConfig{{1}, {64}}, b.get(), 2u);
  g.launch(s);
  CHECK(words(s, a)[0] == 0u);
  CHECK(words(s, b)[1] == 1u);
  // A whole-graph update from the builder's graph again: a's parameters, then b's per node.
  g.update(builder.instantiate());
  g.launch(s);
  CHECK(words(s, a)[0] == 1u);
  g.update_kernel(k, LaunchConfig{{1}, {64}}, b.get(), 1u);
  g.launch(s);
  const auto vb = words(s, b);
  CHECK(vb[0] == 2u);
  CHECK(vb[1] == 1u);
}

TEST_CASE("update_kernel from a thread with no current context",
          "[gpu][graph][graph-node-update]") {
  REQUIRE_DRIVER();
  AddOneCase c;
  DeviceBuffer a(kBytes);
  c.s.memset32(a.get(), 0, custream_test::kN);
  GraphBuilder builder = GraphBuilder::create();
  const GraphNode k = builder.add_kernel({}, c.add_one, LaunchConfig{{1}, {64}}, a.get(), 1u);
  Graph g = builder.instantiate();
  // Updated here first: the node and its argument types cached, so that the update below takes
  // the fast path, which must still find no context current there.
  g.update_kernel(k, LaunchConfig{{1}, {64}}, a.get(), 1u);
  // A new thread has no current context: driver 580 crashed in cuGraphExecKernelNodeSetParams
  // there until update_kernel made the node's context current around it.
  const auto updated = custream_test::run_on_fresh_thread([&] {
    g.update_kernel(k, LaunchConfig{{1}, {64}}, a.get(), 2u);
  });
  CHECK(updated.current == nullptr);
  CHECK(updated.error.empty());
  CHECK(updated.after == nullptr);  // nothing left current
  g.launch(c.s);
  const auto va = words(c.s, a);
  CHECK(va[0] == 1u);
  CHECK(va[1] == 1u);
  CHECK(va[2] == 0u);
}

TEST_CASE("set_enabled: a disabled node does nothing in later launches, enabled() says so",
          "[gpu][graph][graph-node-update]") {
  REQUIRE_DRIVER();
  const Settled settled;
  Stream s(custream::StreamFlags::non_blocking);
  DeviceBuffer a(kBytes);
  s.memset32(a.get(), 0, custream_test::kN);
  GraphBuilder builder = GraphBuilder::create();
  const GraphNode set = builder.add_memset({}, a.get(), std::uint32_t{5}, custream_test::kN);
  auto probe = std::make_shared<Probe>();
  const GraphNode host = builder.add_host(set, Payload(probe));
  Graph g = builder.instantiate();
  CHECK(g.enabled(set));
  {
    Gate gate(s);
    g.launch(s);  // pending, enabled: writes 5
    g.set_enabled(set, false);
    CHECK_FALSE(g.enabled(set));
  }
  s.synchronize();
  CHECK(words(s, a)[0] == 5u);
  s.memset32(a.get(), 0, custream_test::kN);
  g.launch(s);  // disabled: a stays 0, the host node after it still runs
  s.synchronize();
  CHECK(words(s, a)[0] == 0u);
  CHECK(probe->runs.load() == 2);
  g.set_enabled(set, true);
  CHECK(g.enabled(set));
  g.launch(s);
  CHECK(words(s, a)[0] == 5u);
  // A host node cannot be disabled: custream refuses before the driver.
  expect_error([&] { g.set_enabled(host, false); }, CUDA_ERROR_INVALID_VALUE,
               "applies to a kernel or memset or memcpy node");
  expect_error([&] { (void)g.enabled(host); }, CUDA_ERROR_INVALID_VALUE, "host node");
}

TEST_CASE("set_host: the replaced callable is destroyed once, after the launches before it",
          "[gpu][graph][graph-node-update]") {
  REQUIRE_DRIVER();
  const Settled settled;
  Stream s(custream::StreamFlags::non_blocking);
  auto p1 = std::make_shared<Probe>(), p2 = std::make_shared<Probe>(),
       p3 = std::make_shared<Probe>();
  auto builder = std::make_unique<GraphBuilder>(GraphBuilder::create());
  const GraphNode host = builder->add_host({}, Payload(p1));
  auto g = std::make_unique<Graph>(builder->instantiate());
  {
    Gate gate(s);
    g->launch(s);  // pending: runs p1
    g->set_host(host, Payload(p2));
    g->launch(s);                    // pending: runs p2
    g->set_host(host, Payload(p3));  // p2 retired while a launch that runs it is pending
    std::this_thread::sleep_for(50ms);
    CHECK(p2->destroyed.load() == 0);
    CHECK(p2->runs.load() == 0);
  }
  s.synchronize();
  CHECK(p1->runs.load() == 1);
  CHECK(p2->runs.load() == 1);
  CHECK(p3->runs.load() == 0);
  // Retired, and no launch since: kept (the keeper or the next launch releases it).
  std::this_thread::sleep_for(50ms);
  CHECK(p2->destroyed.load() == 0);

  SECTION("the next launch releases it once that launch has finished") {
    {
      Gate gate(s);
      g->launch(s);  // runs p3; p2's release follows it
      std::this_thread::sleep_for(50ms);
      CHECK(p2->destroyed.load() == 0);  // the launch is pending
    }
    CHECK(eventually([&] { return p2->destroyed.load() == 1; }));
    s.synchronize();
    CHECK(p3->runs.load() == 1);
    CHECK(p3->destroyed.load() == 0);
    g.reset();  // the keeper goes: p3, the current callable, with it
    CHECK(eventually([&] { return p3->destroyed.load() == 1; }));
  }
  SECTION("dropping the Graph releases it and the current one once its launches finished") {
    {
      Gate gate(s);
      g->launch(s);  // runs p3; p2's release is enqueued after it
      g.reset();     // the executable goes with a launch pending
      std::this_thread::sleep_for(50ms);
      CHECK(p3->destroyed.load() == 0);
    }
    CHECK(eventually([&] { return p2->destroyed.load() == 1 && p3->destroyed.load() == 1; }));
    CHECK(p3->runs.load() == 1);
  }
  SECTION("dropping the Graph with no further launch releases both") {
    g.reset();
    CHECK(eventually([&] { return p2->destroyed.load() == 1 && p3->destroyed.load() == 1; }));
    CHECK(p3->runs.load() == 0);
  }
  builder.reset();  // p1 is the builder's: gone with its graph
  CHECK(eventually([&] { return p1->destroyed.load() == 1; }));
  std::this_thread::sleep_for(50ms);
  CHECK(p1->destroyed.load() == 1);
  CHECK(p2->destroyed.load() == 1);
  CHECK(p3->destroyed.load() == 1);
}

TEST_CASE("a whole-graph update retires set_host's callables; the keeper stays for later ones",
          "[gpu][graph][graph-node-update]") {
  REQUIRE_DRIVER();
  const Settled settled;
  Stream s(custream::StreamFlags::non_blocking);
  auto p1 = std::make_shared<Probe>(), p2 = std::make_shared<Probe>(),
       p3 = std::make_shared<Probe>();
  GraphBuilder builder = GraphBuilder::create();
  const GraphNode host = builder.add_host({}, Payload(p1));
  auto g = std::make_unique<Graph>(builder.instantiate());
  g->set_host(host, Payload(p2));
  {
    Gate gate(s);
    g->launch(s);                      // pending: runs p2
    g->update(builder.instantiate());  // every node back to the builder's: p2 retired
    std::this_thread::sleep_for(50ms);
    CHECK(p2->destroyed.load() == 0);
  }
  s.synchronize();
  CHECK(p2->runs.load() == 1);
  g->launch(s);  // runs p1 again; p2's release follows
  CHECK(eventually([&] { return p2->destroyed.load() == 1; }));
  CHECK(p1->runs.load() == 1);
  // The keeper followed the executable to the newer graph: a later set_host is owned exactly.
  g->set_host(host, Payload(p3));
  {
    Gate gate(s);
    g->launch(s);  // pending: runs p3
    g.reset();
    std::this_thread::sleep_for(50ms);
    CHECK(p3->destroyed.load() == 0);
  }
  CHECK(eventually([&] { return p3->destroyed.load() == 1; }));
  CHECK(p3->runs.load() == 1);
  CHECK(p2->destroyed.load() == 1);
}

TEST_CASE("refused per-node updates name the node and the rule and change nothing",
          "[gpu][graph][graph-node-update]") {
  REQUIRE_DRIVER();
  const Settled settled;
  Stream s(custream::StreamFlags::non_blocking);
  DeviceBuffer a(kBytes);
  s.memset32(a.get(), 0, custream_test::kN);
  auto kept = std::make_shared<Probe>(), refused = std::make_shared<Probe>();
  GraphBuilder builder = GraphBuilder::create();
  const GraphNode set = builder.add_memset({}, a.get(), std::uint32_t{3}, custream_test::kN);
  const GraphNode host = builder.add_host(set, Payload(kept));
  Graph g = builder.instantiate();
  GraphBuilder other = GraphBuilder::create();
  const GraphNode foreign = other.add_memset({}, a.get(), std::uint32_t{9}, custream_test::kN);
  (void)other.instantiate();

  // custream's own rules, before the driver.
  expect_error([&] { g.update_memset(foreign, a.get(), std::uint32_t{9}, custream_test::kN); },
               CUDA_ERROR_INVALID_VALUE, "not to the graph this Graph was instantiated from");
  expect_error([&] { g.update_memset(host, a.get(), std::uint32_t{9}, custream_test::kN); },
               CUDA_ERROR_INVALID_VALUE, "host node");
  expect_error([&] { g.set_host(set, Payload(refused)); }, CUDA_ERROR_INVALID_VALUE, "memset node");
  CHECK(refused->destroyed.load() == 1);  // the new callable freed at once
  expect_error([&] { Graph().set_enabled(set, false); }, CUDA_ERROR_INVALID_VALUE,
               "empty custream::Graph");
  // The driver's refusal, naming the node and the call: injected on the emulator; on a GPU a
  // zero-length memset (cuda.h: zero-sized operations are not supported).
  std::size_t count = custream_test::kN;
  if (custream_test::emulated()) {
    custream_test::emu_fail_call("cuGraphExecMemsetNodeSetParams", 1, CUDA_ERROR_INVALID_VALUE);
  } else {
    count = 0;
  }
  try {
    g.update_memset(set, a.get(), std::uint32_t{9}, count);
    FAIL("no throw");
  } catch (const custream::Error& e) {
    CHECK(e.call() == "cuGraphExecMemsetNodeSetParams");
    CHECK(e.result() == CUDA_ERROR_INVALID_VALUE);
    CHECK(std::string(e.what()).find(
              "memset node " + custream::detail::pointer_text(set.handle())) != std::string::npos);
    CHECK(std::string(e.what()).find("the executable is unchanged") != std::string::npos);
  }
  // A captured Graph has no keeper: set_host is refused, the callable freed.
  s.begin_capture();
  s.launch_host_func(Payload(std::make_shared<Probe>()));
  Graph captured = s.end_capture();
  const GraphNode captured_host = only_node(captured, GraphNodeKind::host);
  auto refused2 = std::make_shared<Probe>();
  expect_error([&] { captured.set_host(captured_host, Payload(refused2)); },
               CUDA_ERROR_NOT_SUPPORTED, "made by a GraphBuilder");
  CHECK(refused2->destroyed.load() == 1);
  // Nothing changed: the memset writes 3, the old callable runs.
  g.launch(s);
  s.synchronize();
  CHECK(words(s, a)[0] == 3u);
  CHECK(kept->runs.load() == 1);
  CHECK(kept->destroyed.load() == 0);
  CHECK(refused->runs.load() == 0);
}

TEST_CASE("set_child: later launches run the new child, whose payloads the Graph holds",
          "[gpu][graph][graph-node-update]") {
  REQUIRE_DRIVER();
  const ReleaseErrors errors;  // checked after everything below is released
  const Settled settled;
  Stream s(custream::StreamFlags::non_blocking);
  auto first = std::make_shared<Probe>(), second = std::make_shared<Probe>();
  GraphBuilder child1 = GraphBuilder::create();
  child1.add_host({}, Payload(first));
  auto child2 = std::make_unique<GraphBuilder>(GraphBuilder::create());
  child2->add_host({}, Payload(second));
  GraphBuilder parent = GraphBuilder::create();
  const GraphNode child = parent.add_child({}, child1);
  Graph g = parent.instantiate();
  {
    Gate gate(s);
    g.launch(s);  // pending: runs first
    g.set_child(child, *child2);
    child2.reset();  // the Graph holds what the new child's nodes own
    g.launch(s);
  }
  s.synchronize();
  CHECK(first->runs.load() == 1);
  CHECK(second->runs.load() == 1);
  CHECK(second->destroyed.load() == 0);
  // A child of another topology is refused by the driver, the executable unchanged.
  GraphBuilder two = GraphBuilder::create();
  two.add_empty(two.add_empty({}));
  expect_error([&] { g.set_child(child, two); }, CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE,
               "the executable is unchanged");
  g.launch(s);
  s.synchronize();
  CHECK(second->runs.load() == 2);
}

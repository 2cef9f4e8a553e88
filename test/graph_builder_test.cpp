// custream::GraphBuilder: each node kind's effect on data, dependency order, the refusals of bad
// input (the builder unchanged), and what nodes own: host payloads, libraries, child graphs,
// graph memory. On the emulator (kernels run their CPU twins) and on a GPU. Design:
// docs/design/graphs.md, "Builders".
#include "custream/graph_builder.hpp"

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "custream/capture_scope.hpp"
#include "custream/context.hpp"
#include "custream/device.hpp"
#include "custream/device_buffer.hpp"
#include "custream/event.hpp"
#include "custream/graph_instantiate_error.hpp"
#include "custream/graph_update_error.hpp"
#include "custream/host_function_error_handler.hpp"
#include "custream/kernel.hpp"
#include "custream/library.hpp"
#include "custream/library_kernel.hpp"
#include "custream/module.hpp"
#include "custream/stream.hpp"
#include "emu_control.h"
#include "error.hpp"
#include "graph_support.hpp"
#include "test_support.hpp"

using custream::Context;
using custream::Device;
using custream::DeviceBuffer;
using custream::Graph;
using custream::GraphBuilder;
using custream::GraphNode;
using custream::GraphNodeKind;
using custream::LaunchConfig;
using custream::Stream;
using custream::StreamFlags;
using custream_test::eventually;
using custream_test::expect_error;
using custream_test::Payload;
using custream_test::Probe;

namespace {

// builder_add(u32* data, u32 n, u32 value): data[i] += value for i < n.
constexpr const char* kPtx = R"(
.version 7.0
.target sm_70
.address_size 64

.visible .entry builder_add(
  .param .u64 data,
  .param .u32 n,
  .param .u32 value
)
{
  .reg .pred %p<2>;
  .reg .b32 %r<9>;
  .reg .b64 %rd<5>;
  ld.param.u64 %rd1, [data];
  ld.param.u32 %r1, [n];
  ld.param.u32 %r8, [value];
  mov.u32 %r2, %ctaid.x;
  mov.u32 %r3, %ntid.x;
  mov.u32 %r4, %tid.x;
  mad.lo.s32 %r5, %r2, %r3, %r4;
  setp.ge.u32 %p1, %r5, %r1;
  @%p1 bra DONE;
  cvta.to.global.u64 %rd2, %rd1;
  mul.wide.u32 %rd3, %r5, 4;
  add.s64 %rd4, %rd2, %rd3;
  ld.global.u32 %r6, [%rd4];
  add.s32 %r7, %r6, %r8;
  st.global.u32 [%rd4], %r7;
DONE:
  ret;
}
)";

// builder_add on the CPU (the emulator runs it for the PTX kernel of the same name).
void cpu_builder_add(const custream_emu_kernel_launch* l) {
  std::uint32_t* data = nullptr;
  std::uint32_t n = 0, value = 0;
  std::memcpy(&data, l->params[0], sizeof data);
  std::memcpy(&n, l->params[1], sizeof n);
  std::memcpy(&value, l->params[2], sizeof value);
  const unsigned threads = l->grid[0] * l->block[0];
  for (unsigned i = 0; i < threads && i < n; ++i) data[i] += value;
}

void register_builder_add() {
  if (!custream_test::emulated()) return;
  auto reg = custream_test::emu_symbol<decltype(&custream_emu_register_kernel)>(
      "custream_emu_register_kernel");
  REQUIRE(reg != nullptr);
  static const std::size_t sizes[] = {8, 4, 4};
  REQUIRE(reg("builder_add", cpu_builder_add, nullptr, sizes, 3) == 0);
}

std::vector<std::uint32_t> words(const Stream& s, const DeviceBuffer& b) {
  return custream_test::read(s, b);
}

// The error `f` throws (fails the test when it throws none).
custream::Error error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const custream::Error& e) {
    return e;
  }
  FAIL("no exception");
  throw;
}

}  // namespace

TEST_CASE("graph builder: memset, memcpy and copies move the data they say",
          "[graph-builder][gpu]") {
  REQUIRE_ADD_NODE();
  const Context ctx = Device(0).primary_context();
  const Stream s(Device(0), StreamFlags::non_blocking);
  constexpr std::size_t n = custream_test::kN;
  DeviceBuffer a(n * 4), b(n * 4), c(n * 4), bytes(n * 4);
  s.memset32(b.get(), 0, n);
  s.memset32(c.get(), 0, n);
  s.memset32(bytes.get(), 0, n);
  s.synchronize();
  std::vector<std::uint32_t> source(n), sink(n, 0);
  for (std::size_t i = 0; i < n; ++i) source[i] = static_cast<std::uint32_t>(1000 + i);

  GraphBuilder g(ctx);
  const GraphNode fill = g.add_memset({}, a.get(), std::uint32_t{0xC0FFEE}, n);
  const GraphNode copy = g.add_memcpy(fill, b.get(), a.get(), n * 4);
  g.add_copy_to_host(copy, sink.data(), b.get(), n * 4);
  g.add_copy_to_device({}, c.get(), source.data(), n * 4);
  const GraphNode ones = g.add_memset({}, bytes.get(), std::uint8_t{0x11}, 8);
  g.add_memset(ones, bytes.get() + 8, std::uint16_t{0x2233}, 2);
  CHECK(fill.kind() == GraphNodeKind::memset);
  CHECK(copy.kind() == GraphNodeKind::memcpy);
  CHECK(g.node_count() == 6);

  Graph exec = g.instantiate();
  CHECK(exec.node_count() == 6);
  exec.launch(s);
  s.synchronize();
  CHECK(words(s, a) == std::vector<std::uint32_t>(n, 0xC0FFEE));
  CHECK(words(s, b) == std::vector<std::uint32_t>(n, 0xC0FFEE));
  CHECK(sink == std::vector<std::uint32_t>(n, 0xC0FFEE));
  CHECK(words(s, c) == source);
  const auto v = words(s, bytes);
  CHECK(v[0] == 0x11111111u);
  CHECK(v[1] == 0x11111111u);
  CHECK(v[2] == 0x22332233u);
  CHECK(v[3] == 0u);
  // The host source is read at each launch.
  source[0] = 7;
  exec.launch(s);
  s.synchronize();
  CHECK(words(s, c)[0] == 7u);
}

TEST_CASE("graph builder: host nodes run in dependency order", "[graph-builder][gpu]") {
  REQUIRE_ADD_NODE();
  const Context ctx = Device(0).primary_context();
  const Stream s(Device(0), StreamFlags::non_blocking);
  std::mutex m;
  std::vector<int> order;
  const auto mark = [&](int id) {
    return [&, id] {
      std::lock_guard<std::mutex> lock(m);
      order.push_back(id);
    };
  };
  GraphBuilder g(ctx);
  const GraphNode a = g.add_host({}, mark(1));
  const GraphNode b = g.add_host(a, mark(2));
  const GraphNode c = g.add_host(a, mark(3));
  const GraphNode join = g.add_empty({b, c});
  const GraphNode d = g.add_host(join, mark(4));
  // Two independent nodes ordered by an explicit edge: y before x.
  const GraphNode x = g.add_host(d, mark(5));
  const GraphNode y = g.add_host(d, mark(6));
  g.add_dependency(y, x);
  CHECK(join.kind() == GraphNodeKind::empty);
  CHECK(a.kind() == GraphNodeKind::host);
  Graph exec = g.instantiate();
  for (int i = 0; i < 3; ++i) {
    order.clear();
    exec.launch(s);
    s.synchronize();
    REQUIRE(order.size() == 6);
    CHECK(order[0] == 1);
    CHECK(((order[1] == 2 && order[2] == 3) || (order[1] == 3 && order[2] == 2)));
    CHECK(order[3] == 4);
    CHECK(order[4] == 6);
    CHECK(order[5] == 5);
  }
}

TEST_CASE("graph builder: bad input is refused before the driver, naming the node and rule",
          "[graph-builder][gpu]") {
  REQUIRE_ADD_NODE();
  const Context ctx = Device(0).primary_context();
  const Stream s(Device(0), StreamFlags::non_blocking);
  GraphBuilder g(ctx);
  GraphBuilder other(ctx);
  const GraphNode a = g.add_empty({});
  const GraphNode b = g.add_empty(a);
  const GraphNode foreign = other.add_empty({});
  const std::size_t before = g.node_count();
  const auto unchanged = [&] { CHECK(g.node_count() == before); };

  SECTION("an empty GraphNode as a dependency") {
    const auto e = error_of([&] { g.add_empty({a, GraphNode()}); });
    CHECK(e.result() == CUDA_ERROR_INVALID_VALUE);
    CHECK(e.call() == "custream::GraphBuilder::add_empty");
    CHECK(std::string(e.what()).find("an empty GraphNode") != std::string::npos);
    CHECK(std::string(e.what()).find("without calling the driver") != std::string::npos);
    unchanged();
  }
  SECTION("a node of another builder") {
    const auto e = error_of([&] { g.add_host(foreign, [] {}); });
    CHECK(e.call() == "custream::GraphBuilder::add_host");
    const std::string text = e.what();
    CHECK(text.find("node " + custream::detail::pointer_text(foreign.handle()) + " (empty)") !=
          std::string::npos);
    CHECK(custream_test::contains_text(text, "not this builder's") == "not this builder's");
    unchanged();
    CHECK(other.node_count() == 1);
  }
  SECTION("a cycle, naming both nodes") {
    const auto e = error_of([&] { g.add_dependency(b, a); });
    const std::string text = e.what();
    CHECK(e.call() == "custream::GraphBuilder::add_dependency");
    CHECK(text.find(custream::detail::pointer_text(a.handle())) != std::string::npos);
    CHECK(text.find(custream::detail::pointer_text(b.handle())) != std::string::npos);
    CHECK(custream_test::contains_text(text, "cycle") == "cycle");
    expect_error([&] { g.add_dependency(a, a); }, CUDA_ERROR_INVALID_VALUE, "cycle");
    // Through a longer path: a -> b -> c, then c -> a.
    const GraphNode c = g.add_empty(b);
    expect_error([&] { g.add_dependency(c, a); }, CUDA_ERROR_INVALID_VALUE, "cycle");
    CHECK(g.node_count() == before + 1);
    Graph exec = g.instantiate();  // still a valid graph
    exec.launch(s);
    s.synchronize();
  }
  SECTION("graph memory freed twice, or not this graph's") {
    const auto alloc = g.add_alloc({}, 256);
    CHECK(alloc.address != 0);
    CHECK(alloc.node.kind() == GraphNodeKind::mem_alloc);
    const GraphNode freed = g.add_free(alloc.node, alloc.address);
    const std::size_t now = g.node_count();
    const auto e = error_of([&] { g.add_free(freed, alloc.address); });
    CHECK(e.call() == "custream::GraphBuilder::add_free");
    CHECK(std::string(e.what()).find("already freed by node " +
                                     custream::detail::pointer_text(freed.handle())) !=
          std::string::npos);
    DeviceBuffer mine(64);
    expect_error([&] { g.add_free(freed, mine.get()); }, CUDA_ERROR_INVALID_VALUE,
                 "was not allocated by an add_alloc of this builder");
    CHECK(g.node_count() == now);
  }
  SECTION("a kernel of a module loaded in another context") {
    register_builder_add();
    const Context created = Context::create(Device(0));
    const custream::Module m = custream::Module::from_ptx(kPtx, created);
    const custream::Kernel k = m.kernel("builder_add");
    DeviceBuffer data(64);
    const auto e = error_of([&] {
      g.add_kernel(a, k, LaunchConfig{{1}, {32}}, data.get(), std::uint32_t{1}, std::uint32_t{1});
    });
    CHECK(e.result() == CUDA_ERROR_INVALID_CONTEXT);
    CHECK(std::string(e.what()).find("its module was loaded in context") != std::string::npos);
    unchanged();
  }
  SECTION("a library kernel after a dependency of another builder: the library is not held") {
    if (custream::detail::api().cuLibraryLoadData == nullptr) CUSTREAM_SKIP("no libraries");
    register_builder_add();
    custream::Library lib = custream::Library::from_ptx(kPtx, custream::LibraryCache::bypass);
    DeviceBuffer data(64);
    const auto e = error_of([&] {
      const custream::LibraryKernel lk = lib.kernel("builder_add");
      g.add_kernel(foreign, lk, LaunchConfig{{1}, {32}}, data.get(), std::uint32_t{1}, 1u);
    });
    CHECK(e.result() == CUDA_ERROR_INVALID_VALUE);
    CHECK(std::string(e.what()).find("not this builder's") != std::string::npos);
    unchanged();
    lib.unload();  // the refused add left the builder without a hold on it
    CHECK_FALSE(lib);
  }
  SECTION("kernel arguments that do not match its parameters") {
    register_builder_add();
    const custream::Module m = custream::Module::from_ptx(kPtx, ctx);
    const custream::Kernel k = m.kernel("builder_add");
    DeviceBuffer data(64);
    if (custream::detail::api().cuFuncGetParamInfo == nullptr) {
      CUSTREAM_SKIP("the driver cannot tell a kernel's parameters (CUDA 12.4)");
    }
    const auto e = error_of([&] {
      g.add_kernel(a, k, LaunchConfig{{1}, {32}}, data.get(), std::uint32_t{1});
    });
    CHECK(e.result() == CUDA_ERROR_INVALID_VALUE);
    CHECK(e.call() == "custream::GraphBuilder::add_kernel");
    CHECK(std::string(e.what()).find("the launch gave 2 argument(s)") != std::string::npos);
    unchanged();
  }
  SECTION("an empty builder and an empty Event") {
    GraphBuilder none;
    CHECK_FALSE(none);
    expect_error([&] { none.add_empty({}); }, CUDA_ERROR_INVALID_VALUE,
                 "empty custream::GraphBuilder");
    expect_error([&] { (void)none.instantiate(); }, CUDA_ERROR_INVALID_VALUE,
                 "empty custream::GraphBuilder");
    expect_error([&] { (void)none.node_count(); }, CUDA_ERROR_INVALID_VALUE,
                 "empty custream::GraphBuilder");
    expect_error([&] { g.add_child(a, none); }, CUDA_ERROR_INVALID_VALUE, "child builder is empty");
    expect_error([&] { g.add_child(a, g); }, CUDA_ERROR_INVALID_VALUE, "cannot contain itself");
    custream::Event empty = custream::Event();
    custream::Event moved(std::move(empty));
    expect_error([&] { g.add_event_record(a, empty); }, CUDA_ERROR_INVALID_HANDLE,
                 "the Event is empty");
    DeviceBuffer dev(64);
    expect_error([&] { g.add_copy_to_host(a, nullptr, dev.get(), 4); }, CUDA_ERROR_INVALID_VALUE,
                 "the host memory is null");
    expect_error([&] { g.add_copy_to_device(a, dev.get(), nullptr, 4); }, CUDA_ERROR_INVALID_VALUE,
                 "the host memory is null");
    unchanged();
  }
}

TEST_CASE("graph builder: a host payload lives until the builder, every Graph and launch are gone",
          "[graph-builder][gpu]") {
  REQUIRE_ADD_NODE();
  const Context ctx = Device(0).primary_context();
  const Stream s(Device(0), StreamFlags::non_blocking);
  auto probe = std::make_shared<Probe>();
  std::atomic<bool> open{false};
  Graph exec;
  {
    GraphBuilder g(ctx);
    const GraphNode wait = g.add_host({}, [&open] {
      while (!open.load()) std::this_thread::yield();
    });
    g.add_host(wait, Payload(probe));
    exec = g.instantiate();
    Graph copy = g.instantiate();
    copy.launch(s);
    copy.launch(s);
    CHECK(probe->destroyed.load() == 0);
  }  // the builder and one Graph gone: two launches still queued
  CHECK(probe->destroyed.load() == 0);
  exec = Graph();  // every reference gone while the launches wait
  CHECK(probe->destroyed.load() == 0);
  open.store(true);
  s.synchronize();
  CHECK(probe->runs.load() == 2);
  CHECK(eventually([&] { return probe->destroyed.load() == 1; }));
  CHECK(probe->destroyed.load() == 1);  // exactly once
}

TEST_CASE("graph builder: a host node's exception goes to the host-function error handler",
          "[graph-builder][gpu]") {
  REQUIRE_ADD_NODE();
  const Context ctx = Device(0).primary_context();
  const Stream s(Device(0), StreamFlags::non_blocking);
  std::atomic<int> reported{0};
  std::string text;
  std::mutex m;
  auto previous =
      custream::set_host_function_error_handler([&](const custream::HostFunctionError& e) {
        std::lock_guard<std::mutex> lock(m);
        text = e.message();
        reported.fetch_add(1);
      });
  {
    GraphBuilder g(ctx);
    g.add_host({}, [] { throw std::runtime_error("node says no"); });
    Graph exec = g.instantiate();
    exec.launch(s);
    exec.launch(s);
    s.synchronize();
  }
  custream::set_host_function_error_handler(std::move(previous));
  CHECK(reported.load() == 2);
  CHECK(custream_test::contains_text(text, "node says no") == "node says no");
  CHECK(custream_test::contains_text(text, "graph replay") == "graph replay");
}

TEST_CASE("graph builder: kernel nodes of modules and libraries", "[graph-builder][gpu]") {
  REQUIRE_ADD_NODE();
  register_builder_add();
  const Context ctx = Device(0).primary_context();
  const Stream s(Device(0), StreamFlags::non_blocking);
  constexpr std::uint32_t n = custream_test::kN;
  DeviceBuffer data(n * 4);
  s.memset32(data.get(), 1, n);
  s.synchronize();
  const custream::Module m = custream::Module::from_ptx(kPtx, ctx);
  const custream::Kernel k = m.kernel("builder_add");
  GraphBuilder g(ctx);
  const GraphNode first = g.add_kernel({}, k, LaunchConfig{{1}, {n}}, data.get(), n, 2u);
  CHECK(first.kind() == GraphNodeKind::kernel);
  LaunchConfig prioritized{{1}, {n}};
  prioritized.priority = 0;
  if (custream::detail::api().cuGraphKernelNodeSetAttribute != nullptr) {
    g.add_kernel(first, k, prioritized, data.get(), n / 2, 10u);
  } else {  // refused before the node is added, naming the entry it lacks
    expect_error([&] { g.add_kernel(first, k, prioritized, data.get(), n / 2, 10u); },
                 CUDA_ERROR_NOT_SUPPORTED, "cuGraphKernelNodeSetAttribute");
    CHECK(g.node_count() == 1);
    g.add_kernel(first, k, LaunchConfig{{1}, {n}}, data.get(), n / 2, 10u);
  }
  LaunchConfig programmatic{{1}, {n}};
  programmatic.programmatic_serialization = true;  // a graph says this with an edge
  expect_error([&] { g.add_kernel(first, k, programmatic, data.get(), n, 1u); },
               CUDA_ERROR_NOT_SUPPORTED, "programmatic dependent launch is not a kernel node");
  CHECK(g.node_count() == 2);
  Graph exec = g.instantiate();
  exec.launch(s);
  exec.launch(s);
  auto v = words(s, data);
  CHECK(v[0] == 1u + 2 * (2 + 10));
  CHECK(v[n - 1] == 1u + 2 * 2);

  // A library kernel: the graph keeps the library loaded after every Library handle is gone.
  if (custream::detail::api().cuLibraryLoadData == nullptr) CUSTREAM_SKIP("no libraries");
  s.memset32(data.get(), 0, n);
  s.synchronize();
  Graph lib_exec;
  long library_graphs = 0;
  {
    GraphBuilder lg(ctx);
    {
      const custream::Library lib =
          custream::Library::from_ptx(kPtx, custream::LibraryCache::bypass);
      const custream::LibraryKernel lk = lib.kernel("builder_add");
      lg.add_kernel({}, lk, LaunchConfig{{1}, {n}}, data.get(), n, 5u);
      custream::Library copy = lib;
      expect_error([&] { copy.unload(); }, CUDA_ERROR_NOT_PERMITTED, "graph(s)");
      library_graphs = 1;
    }  // every Library handle gone: the builder holds it
    lib_exec = lg.instantiate();
  }  // the builder gone: the Graph holds it
  CHECK(library_graphs == 1);
  lib_exec.launch(s);
  lib_exec.launch(s);
  v = words(s, data);
  CHECK(v[0] == 10u);
  CHECK(v[n - 1] == 10u);
}

// U7's tests: a word array set to 1, and updates from builders made and dropped on the spot.
struct UpdateSources {
  const Context ctx = Device(0).primary_context();
  const Stream s{Device(0), StreamFlags::non_blocking};
  static constexpr std::uint32_t n = custream_test::kN;
  DeviceBuffer data{n * 4};
  UpdateSources() {
    register_builder_add();
    s.memset32(data.get(), 1, n);
    s.synchronize();
  }
  // Updates `g` `steps` times (`twice` each), each from the Graph of a new builder whose kernel,
  // of a module of its own, adds 7; module, builder and Graph are dropped before g launches.
  // Checks every launch's words; returns the emulator's live objects counted at the first
  // update (0 on a GPU).
  long update_from_new_builders(Graph& g, int steps, bool twice) {
    long live_before = 0;
    for (int step = 0; step < steps; ++step) {
      {
        const custream::Module mb = custream::Module::from_ptx(kPtx, ctx);
        GraphBuilder b(ctx);
        b.add_kernel({}, mb.kernel("builder_add"), LaunchConfig{{1}, {n}}, data.get(), n, 7u);
        const Graph newer = b.instantiate();
        if (step == 0 && custream_test::emulated()) live_before = custream_test::emu_live_objects();
        g.update(newer);
        if (twice) g.update(newer);  // the same source again: held once
      }
      g.launch(s);
      CHECK(words(s, data) == std::vector<std::uint32_t>(n, 1u + 7u * (step + 1)));
    }
    return live_before;
  }
};

TEST_CASE("graph builder: a Graph updated from another builder's graph keeps what it launches",
          "[graph-builder][gpu]") {
  REQUIRE_ADD_NODE();
  UpdateSources u;
  const custream::Module ma = custream::Module::from_ptx(kPtx, u.ctx);
  GraphBuilder a(u.ctx);
  a.add_kernel({}, ma.kernel("builder_add"), LaunchConfig{{1}, {u.n}}, u.data.get(), u.n, 2u);
  Graph g = a.instantiate();
  const long live_before = u.update_from_new_builders(g, 3, false);
  if (custream_test::emulated()) {
    // Counted at the first update: g's objects, the first source's module and builder graph,
    // and its Graph's executable and keeper. Now: the last source's module and builder graph
    // are held by g (not its executable or keeper, gone with its Graph); the earlier sources
    // went after the launch that followed their replacement (bounded, not one per update).
    CHECK(custream_test::emu_wait_idle());
    CHECK(custream_test::emu_live_objects() == live_before - 2);
    g = Graph();
    CHECK(custream_test::emu_wait_idle());
    CHECK(custream_test::emu_live_objects() < live_before - 2);  // g let go of the last source
  }
}

TEST_CASE("graph builder: a captured Graph updated from builders' graphs holds the last source",
          "[graph-builder][gpu]") {
  REQUIRE_ADD_NODE();
  UpdateSources u;
  const custream::Module ma = custream::Module::from_ptx(kPtx, u.ctx);
  Graph g;
  {
    custream::CaptureScope capture(u.s);
    ma.kernel("builder_add").launch(u.s, LaunchConfig{{1}, {u.n}}, u.data.get(), u.n, 2u);
    g = capture.end();
  }
  {
    // A refused update (another topology) leaves no keeper behind: nothing more is alive.
    GraphBuilder two(u.ctx);
    two.add_empty(two.add_empty({}));
    const Graph other = two.instantiate();
    const long before = custream_test::emulated() ? custream_test::emu_live_objects() : 0;
    CHECK_THROWS_AS(g.update(other), custream::GraphUpdateError);
    if (custream_test::emulated()) {
      CHECK(custream_test::emu_wait_idle());
      CHECK(custream_test::emu_live_objects() == before);
    }
  }
  const long live_before = u.update_from_new_builders(g, 3, true);
  if (custream_test::emulated()) {
    // Counted at the first update: g's objects, the first source's module, builder graph,
    // executable and keeper. Now: those four went (the source's Graph with its scope, the
    // module and builder graph after the launch that followed their replacement); g holds the
    // last source's module and builder graph, and the keeper its first update gave it (-4 +3):
    // bounded, not one source per update.
    CHECK(custream_test::emu_wait_idle());
    CHECK(custream_test::emu_live_objects() == live_before - 1);
    g = Graph();
    CHECK(custream_test::emu_wait_idle());
    CHECK(custream_test::emu_live_objects() < live_before - 4);  // g let go of all of it
  }
}

TEST_CASE("graph builder: a child graph's payloads live as long as the parent",
          "[graph-builder][gpu]") {
  REQUIRE_ADD_NODE();
  const Context ctx = Device(0).primary_context();
  const Stream s(Device(0), StreamFlags::non_blocking);
  auto probe = std::make_shared<Probe>();
  Graph exec;
  {
    GraphBuilder parent(ctx);
    {
      GraphBuilder child(ctx);
      child.add_host({}, Payload(probe));
      const GraphNode start = parent.add_empty({});
      const GraphNode nested = parent.add_child(start, child);
      CHECK(nested.kind() == GraphNodeKind::child_graph);
      CHECK(parent.node_count() == 2);
    }  // the child builder gone
    exec = parent.instantiate();
  }  // the parent builder gone
  exec.launch(s);
  exec.launch(s);
  s.synchronize();
  CHECK(probe->runs.load() == 2);
  CHECK(probe->destroyed.load() == 0);
  exec = Graph();
  CHECK(eventually([&] { return probe->destroyed.load() == 1; }));
}

TEST_CASE("graph builder: a graph instantiated for device launch runs; a host node refuses it",
          "[graph-builder][gpu]") {
  REQUIRE_ADD_NODE();
  const Stream s(Device(0), StreamFlags::non_blocking);
  constexpr std::size_t n = custream_test::kN;
  DeviceBuffer a(n * 4), b(n * 4);
  GraphBuilder g = GraphBuilder::create();
  const GraphNode fill = g.add_memset({}, a.get(), std::uint32_t{0xD1CE}, n);
  g.add_memcpy(fill, b.get(), a.get(), n * 4);
  // Launchable from the device (a kernel of the user's calls cudaGraphLaunch on exec()) and
  // from the host, as here.
  Graph exec = g.instantiate(
      custream::InstantiateFlags::device_launch | custream::InstantiateFlags::upload, s);
  CHECK(exec.flags() ==
        (custream::InstantiateFlags::device_launch | custream::InstantiateFlags::upload));
  exec.launch(s);
  s.synchronize();
  CHECK(words(s, b) == std::vector<std::uint32_t>(n, 0xD1CE));

  GraphBuilder with_host = GraphBuilder::create();
  with_host.add_host({}, [] {});
  try {
    (void)with_host.instantiate(custream::InstantiateFlags::device_launch);
    FAIL("no throw");
  } catch (const custream::GraphInstantiateError& e) {
    CHECK(e.instantiate_result() != CUDA_GRAPH_INSTANTIATE_SUCCESS);
    CHECK(std::string(e.what()).find("device_launch") != std::string::npos);
  }
  CHECK(with_host.node_count() == 1);  // the builder unchanged
}

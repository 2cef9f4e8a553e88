// Conditional nodes (IF, IF/ELSE, WHILE, SWITCH), the set-condition node, capture into a builder
// or a body (GraphCaptureScope) and the body rules. Tag [graph-conditional]. On the emulator the
// conditions are driven by (a) their default value, (b) a CPU kernel calling
// custream_emu_set_conditional and (c) custream's set-condition node reading a device value; on a
// GPU, (a) and (c) run as they are (the kernels are PTX; the CPU twins are the emulator's).
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "custream/custream.hpp"
#include "custream/graph_builder.hpp"
#include "custream/graph_capture_scope.hpp"
#include "emu_control.h"
#include "graph_builder/conditional.hpp"
#include "graph_builder/set_condition.hpp"
#include "graph_support.hpp"

using custream::ConditionalHandle;
using custream::ConditionalNode;
using custream::DeviceBuffer;
using custream::Graph;
using custream::GraphBuilder;
using custream::GraphCaptureScope;
using custream::GraphNode;
using custream::GraphNodeKind;
using custream::LaunchConfig;
using custream::Library;
using custream::LibraryCache;
using custream::LibraryKernel;
using custream::Stream;
using custream_test::expect_error;

namespace {

// cond_add(u32* data, u32 value): *data += value. cond_decrement(u32* counter): *counter -= 1.
// cond_cpu_set(u64 handle, u32 value): sets the condition (emulator only: a CPU twin calls
// custream_emu_set_conditional; on a GPU it would need the device runtime).
constexpr const char* kPtx = R"(
.version 7.0
.target sm_70
.address_size 64

.visible .entry cond_add(.param .u64 data, .param .u32 value)
{
  .reg .b32 %r<4>;
  .reg .b64 %rd<3>;
  ld.param.u64 %rd1, [data];
  ld.param.u32 %r1, [value];
  cvta.to.global.u64 %rd2, %rd1;
  ld.global.u32 %r2, [%rd2];
  add.s32 %r3, %r2, %r1;
  st.global.u32 [%rd2], %r3;
  ret;
}

.visible .entry cond_decrement(.param .u64 counter)
{
  .reg .b32 %r<3>;
  .reg .b64 %rd<3>;
  ld.param.u64 %rd1, [counter];
  cvta.to.global.u64 %rd2, %rd1;
  ld.global.u32 %r1, [%rd2];
  sub.s32 %r2, %r1, 1;
  st.global.u32 [%rd2], %r2;
  ret;
}

.visible .entry cond_cpu_set(.param .u64 handle, .param .u32 value)
{
  ret;
}

.visible .entry cond_cpu_countdown(.param .u64 handle, .param .u64 counter)
{
  ret;
}
)";

void cpu_add(const custream_emu_kernel_launch* l) {
  std::uint32_t* data = nullptr;
  std::uint32_t value = 0;
  std::memcpy(&data, l->params[0], sizeof data);
  std::memcpy(&value, l->params[1], sizeof value);
  *data += value;
}

void cpu_decrement(const custream_emu_kernel_launch* l) {
  std::uint32_t* counter = nullptr;
  std::memcpy(&counter, l->params[0], sizeof counter);
  *counter -= 1;
}

void cpu_set(const custream_emu_kernel_launch* l) {
  CUgraphConditionalHandle handle = 0;
  std::uint32_t value = 0;
  std::memcpy(&handle, l->params[0], sizeof handle);
  std::memcpy(&value, l->params[1], sizeof value);
  auto set = custream_test::emu_symbol<decltype(&custream_emu_set_conditional)>(
      "custream_emu_set_conditional");
  if (set != nullptr) (void)set(handle, value);
}

// *counter -= 1, then the condition = *counter (a WHILE counting down), from the CPU.
void cpu_countdown(const custream_emu_kernel_launch* l) {
  CUgraphConditionalHandle handle = 0;
  std::uint32_t* counter = nullptr;
  std::memcpy(&handle, l->params[0], sizeof handle);
  std::memcpy(&counter, l->params[1], sizeof counter);
  *counter -= 1;
  auto set = custream_test::emu_symbol<decltype(&custream_emu_set_conditional)>(
      "custream_emu_set_conditional");
  if (set != nullptr) (void)set(handle, *counter);
}

// The kernels, their CPU twins registered on the emulator.
struct Kernels {
  Library library;
  LibraryKernel add;
  LibraryKernel decrement;
  LibraryKernel cpu_set;
  LibraryKernel cpu_countdown;
};

const Kernels& kernels() {
  static const Kernels k = [] {
    if (custream_test::emulated()) {
      auto reg = custream_test::emu_symbol<decltype(&custream_emu_register_kernel)>(
          "custream_emu_register_kernel");
      REQUIRE(reg != nullptr);
      REQUIRE(reg("cond_add", cpu_add, nullptr, nullptr, 0) == 0);
      REQUIRE(reg("cond_decrement", cpu_decrement, nullptr, nullptr, 0) == 0);
      REQUIRE(reg("cond_cpu_set", cpu_set, nullptr, nullptr, 0) == 0);
      REQUIRE(reg("cond_cpu_countdown", cpu_countdown, nullptr, nullptr, 0) == 0);
    }
    Kernels made;
    made.library = Library::from_ptx(kPtx, LibraryCache::bypass);
    made.add = made.library.kernel("cond_add");
    made.decrement = made.library.kernel("cond_decrement");
    made.cpu_set = made.library.kernel("cond_cpu_set");
    made.cpu_countdown = made.library.kernel("cond_cpu_countdown");
    return made;
  }();
  return k;
}

bool has_conditionals() {
  const auto& api = custream::detail::api();
  return api.cuGraphConditionalHandleCreate != nullptr && api.cuGraphAddNode != nullptr &&
         custream::driver_info().version >= 12080;
}

#define REQUIRE_CONDITIONALS()                                                              \
  do {                                                                                      \
    REQUIRE_DRIVER();                                                                       \
    if (!has_conditionals()) CUSTREAM_SKIP("conditional nodes need a CUDA driver >= 12.8"); \
  } while (false)

// One 32-bit cell of device memory, set to `value` on `s`.
struct Cell {
  Cell(const Stream& s, std::uint32_t value) : buffer(sizeof(std::uint32_t), s) { set(s, value); }
  void set(const Stream& s, std::uint32_t value) const {
    s.memset32(buffer.get(), value, 1);
    s.synchronize();
  }
  std::uint32_t get(const Stream& s) const {
    std::uint32_t host = 0;
    s.copy(&host, buffer.get(), sizeof host);
    s.synchronize();
    return host;
  }
  CUdeviceptr ptr() const { return buffer.get(); }
  DeviceBuffer buffer;
};

const LaunchConfig kOne{custream::Dim3(1), custream::Dim3(1)};

// Launches `g` on `s`, waits, and returns `cell`'s value.
std::uint32_t run(const Graph& g, const Stream& s, const Cell& cell) {
  g.launch(s);
  s.synchronize();
  return cell.get(s);
}

}  // namespace

TEST_CASE("IF, IF/ELSE, SWITCH and WHILE by their default values", "[graph-conditional][gpu]") {
  REQUIRE_CONDITIONALS();
  const Kernels& k = kernels();
  Stream s = Stream::create();
  Cell data(s, 0);
  for (unsigned value : {0u, 1u}) {
    INFO("default " << value);
    GraphBuilder b = GraphBuilder::create();
    const ConditionalHandle c = b.add_condition(value);
    CHECK(c.default_value() == value);
    CHECK(c.assign_default());
    ConditionalNode n = b.add_if({}, c);
    CHECK(n.body_count() == 1);
    CHECK(n.node().kind() == GraphNodeKind::conditional);
    GraphBuilder then = n.body();
    CHECK(then.is_body());
    then.add_kernel({}, k.add, kOne, data.ptr(), 1u);
    const Graph g = b.instantiate();
    data.set(s, 0);
    CHECK(run(g, s, data) == value);
    CHECK(run(g, s, data) == 2 * value);
  }
  for (unsigned value : {0u, 1u}) {
    INFO("IF/ELSE default " << value);
    GraphBuilder b = GraphBuilder::create();
    ConditionalNode n = b.add_if_else({}, b.add_condition(value));
    REQUIRE(n.body_count() == 2);
    n.body(0).add_kernel({}, k.add, kOne, data.ptr(), 1u);
    n.body(1).add_kernel({}, k.add, kOne, data.ptr(), 10u);
    const Graph g = b.instantiate();
    data.set(s, 0);
    CHECK(run(g, s, data) == (value != 0 ? 1u : 10u));
  }
  for (unsigned value : {0u, 2u, 5u}) {
    INFO("SWITCH default " << value);
    GraphBuilder b = GraphBuilder::create();
    ConditionalNode n = b.add_switch({}, b.add_condition(value), 3);
    REQUIRE(n.body_count() == 3);
    for (unsigned i = 0; i < 3; ++i) n.body(i).add_kernel({}, k.add, kOne, data.ptr(), 1u << i);
    const Graph g = b.instantiate();
    data.set(s, 0);
    CHECK(run(g, s, data) == (value < 3 ? 1u << value : 0u));
  }
  {
    INFO("WHILE default 0: the body never runs");
    GraphBuilder b = GraphBuilder::create();
    ConditionalNode n = b.add_while({}, b.add_condition(0));
    n.body().add_kernel({}, k.add, kOne, data.ptr(), 1u);
    const Graph g = b.instantiate();
    data.set(s, 0);
    CHECK(run(g, s, data) == 0);
  }
}

TEST_CASE("conditions set by a CPU kernel (custream_emu_set_conditional)",
          "[graph-conditional][gpu]") {
  REQUIRE_CONDITIONALS();
  if (!custream_test::emulated()) CUSTREAM_SKIP("the CPU kernel is the emulator's");
  const Kernels& k = kernels();
  Stream s = Stream::create();
  Cell data(s, 0);
  Cell counter(s, 0);
  for (unsigned value : {0u, 1u}) {
    INFO("IF set to " << value);
    GraphBuilder b = GraphBuilder::create();
    const ConditionalHandle c = b.add_condition(1 - value);  // the kernel overrides it
    const GraphNode set = b.add_kernel({}, k.cpu_set, kOne, c.handle(), value);
    b.add_if(set, c).body().add_kernel({}, k.add, kOne, data.ptr(), 1u);
    const Graph g = b.instantiate();
    data.set(s, 0);
    CHECK(run(g, s, data) == value);
  }
  {
    INFO("WHILE: the body counts the counter down and sets the condition from it");
    GraphBuilder b = GraphBuilder::create();
    const ConditionalHandle c = b.add_condition(1);
    GraphBuilder body = b.add_while({}, c).body();
    const GraphNode add = body.add_kernel({}, k.add, kOne, data.ptr(), 1u);
    body.add_kernel(add, k.cpu_countdown, kOne, c.handle(), counter.ptr());
    const Graph g = b.instantiate();
    data.set(s, 0);
    counter.set(s, 5);
    CHECK(run(g, s, data) == 5);
    CHECK(counter.get(s) == 0);
  }
}

TEST_CASE("the set-condition node sets a condition from a device value",
          "[graph-conditional][gpu]") {
  REQUIRE_CONDITIONALS();
  if (!custream::detail::have_set_condition_kernel()) {
    CUSTREAM_SKIP("this libcustream was built without nvcc: no set-condition kernel");
  }
  const Kernels& k = kernels();
  Stream s = Stream::create();
  Cell data(s, 0);
  Cell flag(s, 0);
  GraphBuilder b = GraphBuilder::create();
  const ConditionalHandle c = b.add_condition(0, true);
  const GraphNode set = b.add_set_condition({}, c, flag.ptr());
  CHECK(set.kind() == GraphNodeKind::kernel);
  ConditionalNode sw = b.add_switch(set, c, 3);
  for (unsigned i = 0; i < 3; ++i) sw.body(i).add_kernel({}, k.add, kOne, data.ptr(), 1u << i);
  const Graph g = b.instantiate();
  for (unsigned value : {0u, 1u, 2u, 7u}) {
    INFO("flag " << value);
    flag.set(s, value);
    data.set(s, 0);
    CHECK(run(g, s, data) == (value < 3 ? 1u << value : 0u));
  }
}

TEST_CASE("a WHILE loop whose body is captured from stream work, counting down on the device",
          "[graph-conditional][gpu]") {
  REQUIRE_CONDITIONALS();
  if (!custream::detail::have_set_condition_kernel()) {
    CUSTREAM_SKIP("this libcustream was built without nvcc: no set-condition kernel");
  }
  const Kernels& k = kernels();
  Stream s = Stream::create();
  Cell data(s, 0);
  Cell counter(s, 0);
  DeviceBuffer scratch(4 * sizeof(std::uint32_t), s);
  GraphBuilder b = GraphBuilder::create();
  const ConditionalHandle c = b.add_condition(1, true);
  const GraphNode start = b.add_memset({}, counter.ptr(), std::uint32_t{4}, 1);
  ConditionalNode loop = b.add_while(start, c);
  GraphBuilder body = loop.body();
  std::vector<GraphNode> last;
  {
    GraphCaptureScope capture(s, body);
    k.add.launch(s, {1}, {1}, 0, data.ptr(), 3u);
    s.memset32(scratch.get(), 7, 4);
    k.decrement.launch(s, {1}, {1}, 0, counter.ptr());
    last = capture.end();
    CHECK_FALSE(capture.active());
  }
  REQUIRE(last.size() == 1);
  CHECK(last[0].kind() == GraphNodeKind::kernel);
  CHECK(last[0].graph() == body.handle());
  CHECK(body.node_count() == 3);
  body.add_set_condition(last, c, counter.ptr());
  CHECK(body.node_count() == 4);
  const Graph g = b.instantiate();
  data.set(s, 0);
  CHECK(run(g, s, data) == 12);  // 4 iterations of +3
  CHECK(counter.get(s) == 0);
  CHECK(run(g, s, data) == 24);  // the counter is set again by the root's memset
}

TEST_CASE("a body refuses the node kinds the driver does not accept there",
          "[graph-conditional][gpu]") {
  REQUIRE_CONDITIONALS();
  GraphBuilder b = GraphBuilder::create();
  GraphBuilder body = b.add_while({}, b.add_condition(0)).body();
  const std::size_t root_nodes = b.node_count();
  auto unchanged = [&] {
    CHECK(body.node_count() == 0);
    CHECK(b.node_count() == root_nodes);
  };
  const std::string rule = "a conditional body accepts only kernel, memset, memcpy, empty";
  expect_error([&] { body.add_host({}, [] {}); }, CUDA_ERROR_NOT_SUPPORTED,
               "custream::GraphBuilder::add_host");
  expect_error([&] { body.add_host({}, [] {}); }, CUDA_ERROR_NOT_SUPPORTED, rule);
  expect_error([&] { body.add_host({}, [] {}); }, CUDA_ERROR_NOT_SUPPORTED,
               "body 0 of the WHILE node");
  unchanged();
  custream::Event e;
  expect_error([&] { body.add_event_record({}, e); }, CUDA_ERROR_NOT_SUPPORTED,
               "a event_record node");
  expect_error([&] { body.add_event_wait({}, e); }, CUDA_ERROR_NOT_SUPPORTED, rule);
  expect_error([&] { (void)body.add_alloc({}, 256); }, CUDA_ERROR_NOT_SUPPORTED,
               "custream::GraphBuilder::add_alloc");
  unchanged();
  // A child graph holding a host node.
  GraphBuilder child = GraphBuilder::create();
  child.add_host({}, [] {});
  expect_error([&] { body.add_child({}, child); }, CUDA_ERROR_NOT_SUPPORTED, "holds a host node");
  unchanged();
  // What a body accepts goes in.
  body.add_empty({});
  GraphBuilder plain = GraphBuilder::create();
  plain.add_empty({});
  body.add_child({}, plain);
  CHECK(body.node_count() == 2);
  CHECK(b.node_count() == root_nodes);
}

TEST_CASE("conditions of another graph, bad indices and old drivers are refused",
          "[graph-conditional][gpu]") {
  REQUIRE_CONDITIONALS();
  GraphBuilder a = GraphBuilder::create();
  GraphBuilder other = GraphBuilder::create();
  const ConditionalHandle theirs = other.add_condition(1);
  const std::size_t before = a.node_count();
  expect_error([&] { (void)a.add_if({}, theirs); }, CUDA_ERROR_INVALID_VALUE,
               "the ConditionalHandle belongs to graph");
  expect_error([&] { (void)a.add_while({}, ConditionalHandle()); }, CUDA_ERROR_INVALID_VALUE,
               "the ConditionalHandle is empty");
  if (custream::detail::have_set_condition_kernel()) {
    Stream s = Stream::create();
    Cell flag(s, 0);
    expect_error([&] { (void)a.add_set_condition({}, theirs, flag.ptr()); },
                 CUDA_ERROR_INVALID_VALUE, "neither this graph nor part of it");
  }
  CHECK(a.node_count() == before);
  // A nested body's conditional node tests a handle of its own graph; a set-condition node in
  // a body may set the root's.
  const ConditionalHandle mine = a.add_condition(1);
  GraphBuilder body = a.add_while({}, mine).body();
  expect_error([&] { (void)body.add_if({}, mine); }, CUDA_ERROR_INVALID_VALUE,
               "made by add_condition of the builder it is added to");
  CHECK(body.node_count() == 0);
  ConditionalNode n = a.add_if({}, a.add_condition(0));
  expect_error([&] { (void)n.body(1); }, CUDA_ERROR_INVALID_VALUE, "there is no body 1");
  expect_error([&] { (void)ConditionalNode().body(); }, CUDA_ERROR_INVALID_VALUE,
               "empty custream::ConditionalNode");
  expect_error([&] { (void)a.add_switch({}, a.add_condition(0), 0); }, CUDA_ERROR_INVALID_VALUE,
               "at least one case");
  // The driver versions: IF and WHILE need 12.3, IF/ELSE and SWITCH 12.8 (refused before the
  // driver is called, naming the version).
  expect_error(
      [] {
        custream::detail::check_conditional_driver(12040, CU_GRAPH_COND_TYPE_IF, 2,
                                                   "custream::GraphBuilder::add_if_else");
      },
      CUDA_ERROR_NOT_SUPPORTED, "IF/ELSE nodes need a CUDA driver >= 12.8");
  expect_error(
      [] {
        custream::detail::check_conditional_driver(12040, CU_GRAPH_COND_TYPE_SWITCH, 3,
                                                   "custream::GraphBuilder::add_switch");
      },
      CUDA_ERROR_NOT_SUPPORTED, "the loaded driver is 12.4");
  custream::detail::check_conditional_driver(12040, CU_GRAPH_COND_TYPE_WHILE, 1, "x");
  expect_error(
      [] {
        custream::detail::check_conditional_driver(12020, CU_GRAPH_COND_TYPE_WHILE, 1,
                                                   "custream::GraphBuilder::add_while");
      },
      CUDA_ERROR_NOT_SUPPORTED, "WHILE nodes need a CUDA driver >= 12.3");
}

TEST_CASE("a body refuses a kernel of another context", "[graph-conditional][gpu]") {
  REQUIRE_CONDITIONALS();
  const custream::Context created = custream::Context::create(custream::Device::current());
  const custream::Module module = custream::Module::from_ptx(kPtx, created);
  const custream::Kernel add = module.kernel("cond_add");
  GraphBuilder b = GraphBuilder::create();
  GraphBuilder body = b.add_if({}, b.add_condition(1)).body();
  Stream s = Stream::create();
  Cell data(s, 0);
  expect_error([&] { (void)body.add_kernel({}, add, kOne, data.ptr(), 1u); },
               CUDA_ERROR_INVALID_CONTEXT,
               "every kernel of a conditional body (and of its nested bodies and child graphs) "
               "must belong to the conditional node's context");
  CHECK(body.node_count() == 0);
}

TEST_CASE("a host function captured into a conditional body is refused by custream",
          "[graph-conditional][gpu]") {
  REQUIRE_CONDITIONALS();
  GraphBuilder b = GraphBuilder::create();
  GraphBuilder body = b.add_while({}, b.add_condition(0)).body();
  Stream s = Stream::create();
  auto probe = std::make_shared<custream_test::Probe>();
  {
    GraphCaptureScope capture(s, body);
    expect_error([&] { s.launch_host_func(custream_test::Payload(probe)); },
                 CUDA_ERROR_NOT_SUPPORTED, "the stream captures into body 0 of the WHILE node");
    CHECK(probe->destroyed.load() == 1);  // refused: the payload is gone already
    CHECK(capture.end().empty());
  }
  CHECK(body.node_count() == 0);
  CHECK(probe->runs.load() == 0);
}

TEST_CASE("a raw host function captured into a body fails instantiation, naming the body rule",
          "[graph-conditional][gpu]") {
  REQUIRE_CONDITIONALS();
  GraphBuilder b = GraphBuilder::create();
  GraphBuilder body = b.add_if({}, b.add_condition(0)).body();
  Stream s = Stream::create();
  {
    // The raw form makes no capture check: the driver adds the host node to the body.
    GraphCaptureScope capture(s, body);
    s.launch_host_func([](void*) {}, nullptr);
    capture.end();
  }
  CHECK(body.node_count() == 1);
  expect_error([&] { (void)b.instantiate(); }, CUDA_ERROR_INVALID_VALUE, "body 0 of the IF node");
  expect_error([&] { (void)b.instantiate(); }, CUDA_ERROR_INVALID_VALUE,
               "holds a host node: a conditional body accepts only kernel, memset, memcpy");
}

namespace {
// A root builder with one conditional node of `type` whose body adds 1 to a cell (set to 0):
// `add_body` adds that kernel (on the calling thread, or where a case says).
struct OneBody {
  OneBody(CUgraphConditionalNodeType type, unsigned value)
      : node(type == CU_GRAPH_COND_TYPE_WHILE ? b.add_while({}, b.add_condition(value))
                                              : b.add_if({}, b.add_condition(value))) {}
  void add_body() const { node.body().add_kernel({}, kernels().add, kOne, data.ptr(), 1u); }
  Stream s = Stream::create();
  Cell data{s, 0};
  GraphBuilder b = GraphBuilder::create();
  ConditionalNode node;
};
}  // namespace

TEST_CASE("a body's kernel node is added from a thread with no current context",
          "[graph-conditional][gpu]") {
  REQUIRE_CONDITIONALS();
  const OneBody p(CU_GRAPH_COND_TYPE_IF, 1);
  (void)kernels();  // loaded here: the fresh thread only adds the node
  // A new thread has no current context: driver 580 crashed here (cuGraphAddNode) until the
  // builder made its context current around the add.
  const auto added = custream_test::run_on_fresh_thread([&] { p.add_body(); });
  CHECK(added.current == nullptr);
  CHECK(added.error.empty());
  CHECK(added.after == nullptr);  // nothing left current
  CHECK(run(p.b.instantiate(), p.s, p.data) == 1);
}

TEST_CASE("a graph with a conditional node has one executable at a time, the error says so",
          "[graph-conditional][gpu]") {
  REQUIRE_CONDITIONALS();
  const OneBody p(CU_GRAPH_COND_TYPE_WHILE, 0);
  p.add_body();
  {
    const Graph first = p.b.instantiate();
    expect_error([&] { (void)p.b.instantiate(); }, CUDA_ERROR_NOT_SUPPORTED,
                 "the graph holds a conditional node, and the driver makes one executable of "
                 "such a graph at a time");
    CHECK(run(first, p.s, p.data) == 0);  // the refusal left the first one as it was
  }
  CHECK(run(p.b.instantiate(), p.s, p.data) == 0);  // the first one gone: made
}

TEST_CASE("host functions captured into a builder: the graph owns them, exactly once",
          "[graph-conditional][gpu]") {
  REQUIRE_CONDITIONALS();
  auto probe = std::make_shared<custream_test::Probe>();
  Stream s = Stream::create();
  {
    Graph g;
    {
      GraphBuilder b = GraphBuilder::create();
      const GraphNode first = b.add_empty({});
      std::vector<GraphNode> last;
      {
        GraphCaptureScope capture(s, b, first);
        s.launch_host_func(custream_test::Payload(probe));
        s.launch_host_func(custream_test::Payload(probe));
        last = capture.end();
      }
      REQUIRE(last.size() == 1);
      CHECK(last[0].kind() == GraphNodeKind::host);
      CHECK(b.node_count() == 3);
      b.add_empty(last);
      CHECK(probe->destroyed.load() == 0);
      g = b.instantiate();
    }  // the builder goes: the executable keeps the payloads
    for (int i = 0; i < 3; ++i) g.launch(s);
    s.synchronize();
    CHECK(probe->runs.load() == 6);
    CHECK(probe->destroyed.load() == 0);
  }
  CHECK(custream_test::eventually([&] { return probe->destroyed.load() == 2; }));
  CHECK(probe->destroyed.load() == 2);
  CHECK(probe->runs.load() == 6);
}

TEST_CASE("GraphCaptureScope: ending twice, the destructor, a dependency of another graph",
          "[graph-conditional][gpu]") {
  REQUIRE_CONDITIONALS();
  Stream s = Stream::create();
  DeviceBuffer words(16, s);
  GraphBuilder b = GraphBuilder::create();
  GraphBuilder other = GraphBuilder::create();
  const GraphNode theirs = other.add_empty({});
  expect_error([&] { GraphCaptureScope capture(s, b, theirs); }, CUDA_ERROR_INVALID_VALUE,
               "not of the builder's");
  CHECK_FALSE(s.is_capturing());
  {
    GraphCaptureScope capture(s, b);
    CHECK(capture.active());
    CHECK(s.is_capturing());
    s.memset32(words.get(), 1, 4);
  }  // the destructor ends it: what was captured stays
  CHECK_FALSE(s.is_capturing());
  CHECK(b.node_count() == 1);
  GraphCaptureScope capture(s, b);
  (void)capture.end();
  expect_error([&] { (void)capture.end(); }, CUDA_ERROR_ILLEGAL_STATE, "already ended");
}

TEST_CASE("nodes captured into a builder are its own: edges, kinds, cycles refused",
          "[graph-conditional][gpu]") {
  REQUIRE_CONDITIONALS();
  Stream s = Stream::create();
  DeviceBuffer words(16, s);
  GraphBuilder b = GraphBuilder::create();
  const GraphNode first = b.add_empty({});
  std::vector<GraphNode> last;
  {
    GraphCaptureScope capture(s, b, first);
    s.memset32(words.get(), 1, 4);
    s.memset32(words.get(), 2, 4);
    last = capture.end();
  }
  REQUIRE(last.size() == 1);
  CHECK(last[0].kind() == GraphNodeKind::memset);
  // first -> memset -> memset: an edge back to `first` closes a cycle, refused by custream.
  expect_error([&] { b.add_dependency(last[0], first); }, CUDA_ERROR_INVALID_VALUE,
               "would close a cycle");
  CHECK(b.node_count() == 3);
  const std::string dot = b.dot();
  CHECK(custream_test::contains_text(dot, "memset") == "memset");
}

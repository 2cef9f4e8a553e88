// custream::GraphBuilder and the driver's graph: adds made whatever context the thread has
// current, and what the builder reads back from the driver rather than keeping a copy (DOT,
// the cycle check), graph memory and event nodes. On the emulator and on a GPU. Design:
// docs/design/graphs.md, "Builders" (B6, B7, B10).
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "custream/context.hpp"
#include "custream/device.hpp"
#include "custream/device_buffer.hpp"
#include "custream/event.hpp"
#include "custream/graph_builder.hpp"
#include "custream/stream.hpp"
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
using custream::Stream;
using custream::StreamFlags;
using custream_test::expect_error;
using custream_test::read;

// What the calling thread has current: nothing, or a context custream::Context::create made
// (not the builder's). The builder adds every node kind in either, and leaves it as it was.
TEST_CASE("graph builder: nodes are added whatever context is current, which stays current",
          "[graph-builder][gpu]") {
  REQUIRE_ADD_NODE();
  const Context ctx = Device(0).primary_context();
  const Stream s(Device(0), StreamFlags::non_blocking);
  const Context created = Context::create(Device(0));
  const auto& api = custream::detail::api();
  CUcontext before = nullptr;
  REQUIRE(api.cuCtxGetCurrent(&before) == CUDA_SUCCESS);
  for (const bool none : {true, false}) {
    INFO((none ? "no context current" : "a created context current"));
    DeviceBuffer a(16, ctx), b(16, ctx);
    std::atomic<int> ran{0};
    REQUIRE(api.cuCtxSetCurrent(none ? nullptr : created.handle()) == CUDA_SUCCESS);
    GraphBuilder g(ctx);
    const GraphNode fill = g.add_memset({}, a.get(), std::uint32_t{0x5EED}, 4);
    const GraphNode join = g.add_empty(fill);
    const GraphNode copy = g.add_memcpy(join, b.get(), a.get(), 16);
    g.add_host(copy, [&ran] { ran.fetch_add(1); });
    CUcontext current = reinterpret_cast<CUcontext>(1);
    REQUIRE(api.cuCtxGetCurrent(&current) == CUDA_SUCCESS);
    CHECK(current == (none ? nullptr : created.handle()));
    REQUIRE(api.cuCtxSetCurrent(ctx.handle()) == CUDA_SUCCESS);
    g.instantiate().launch(s);
    s.synchronize();
    CHECK(read(s, b) == std::vector<std::uint32_t>(4, 0x5EEDu));
    CHECK(ran.load() == 1);
  }
  REQUIRE(api.cuCtxSetCurrent(before) == CUDA_SUCCESS);
}

TEST_CASE("graph builder: graph memory, events and DOT", "[graph-builder][gpu]") {
  REQUIRE_ADD_NODE();
  const Context ctx = Device(0).primary_context();
  const Stream s(Device(0), StreamFlags::non_blocking);
  constexpr std::size_t n = 16;
  std::vector<std::uint32_t> out(n, 0);
  custream::Event done(ctx);
  GraphBuilder g(ctx);
  const auto alloc = g.add_alloc({}, n * 4);
  const GraphNode fill = g.add_memset(alloc.node, alloc.address, std::uint32_t{42}, n);
  const GraphNode back = g.add_copy_to_host(fill, out.data(), alloc.address, n * 4);
  const GraphNode freed = g.add_free(back, alloc.address);
  const GraphNode record = g.add_event_record(freed, done);
  CHECK(record.kind() == GraphNodeKind::event_record);
  CHECK(freed.kind() == GraphNodeKind::mem_free);
  Graph exec = g.instantiate();
  for (int i = 0; i < 2; ++i) {  // the same address at every launch
    std::fill(out.begin(), out.end(), 0u);
    exec.launch(s);
    s.synchronize();
    CHECK(out == std::vector<std::uint32_t>(n, 42u));
    CHECK(done.done());
  }
  const std::string dot = g.dot();
  CHECK(dot.find("// custream: graph " + custream::detail::pointer_text(g.handle()) + " node 0 " +
                 custream::detail::pointer_text(alloc.node.handle()) + " memory allocation") !=
        std::string::npos);
  CHECK(dot.find(" event record\n") != std::string::npos);
  CHECK(dot.rfind('}') > dot.find("custream: graph"));
}

// The builder keeps no copy of the graph: a node and an edge added with the raw driver on
// handle() count for the cycle check and appear in dot().
TEST_CASE("graph builder: the cycle check and DOT see nodes and edges added around it",
          "[graph-builder][gpu]") {
  REQUIRE_ADD_NODE();
  const auto& api = custream::detail::api();
  GraphBuilder b(Device(0).primary_context());
  const GraphNode first = b.add_empty({});
  const GraphNode second = b.add_empty({});
  CUgraphNodeParams p{};
  p.type = CU_GRAPH_NODE_TYPE_EMPTY;
  CUgraphNode raw = nullptr;
  const CUgraphNode after_first = first.handle();
  REQUIRE(api.cuGraphAddNode(&raw, b.handle(), &after_first, nullptr, 1, &p) == CUDA_SUCCESS);
  const CUgraphNode to_second = second.handle();
  REQUIRE(api.cuGraphAddDependencies(b.handle(), &raw, &to_second, 1) == CUDA_SUCCESS);
  // first -> raw -> second, all but the edges from `first` made around the builder.
  expect_error([&] { b.add_dependency(second, first); }, CUDA_ERROR_INVALID_VALUE,
               "would close a cycle");
  b.add_dependency(first, second);  // a redundant edge, no cycle
  CHECK(b.node_count() == 3);
  const std::string dot = b.dot();
  CHECK(dot.find(" " + custream::detail::pointer_text(raw) + " empty\n") != std::string::npos);
}

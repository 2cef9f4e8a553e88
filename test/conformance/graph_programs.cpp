// Driver conformance: graphs as programs: the generic node call (cuGraphAddNode), child graphs,
// memory nodes, dependencies, conditional nodes (driven by their default values, so that they
// run on a GPU without device code) and what their bodies take. Sources: cuda.h 13.0's
// documentation of each call (CUDA_CONDITIONAL_NODE_PARAMS for what a body may hold); [unsure]
// where it does not say what the driver answers.
#include "graph_programs.hpp"

namespace conformance {
namespace {

TEST_CASE("cuGraphAddNode: memset, memcpy, kernel, host and empty nodes run in dependency order",
          "[conformance]") {
  REQUIRE_GRAPH_PROGRAMS();
  PrimaryScope scope;
  ProgramModule mod;
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  DeviceBuffer a(4 * sizeof(int)), b(4 * sizeof(int));
  GraphHandle g;
  Log log;
  std::function<void()> first = [&] { log.add(1); }, second = [&] { log.add(2); };
  CUgraphNode set = add(g.g, {}, memset_params(a.p, 7, 4, scope.ctx()));
  CUgraphNode copy = add(g.g, {set}, memcpy_params(b.p, a.p, 4 * sizeof(int), scope.ctx()));
  CUdeviceptr target = b.p;
  int amount = 5;
  void* args[] = {&target, &amount};
  CUgraphNode kernel = add(g.g, {copy}, kernel_params(mod.add(), args));
  amount = 100;  // the node copied the arguments
  CUgraphNode h1 = add(g.g, {kernel}, host_params(&first));
  CUgraphNode h2 = add(g.g, {h1}, host_params(&second));
  CUgraphNodeParams empty{};
  empty.type = CU_GRAPH_NODE_TYPE_EMPTY;
  CUgraphNode join = add(g.g, {h2, kernel}, empty);
  CUgraphNodeType type{};
  CU_OK(api().cuGraphNodeGetType(kernel, &type));
  CHECK(type == CU_GRAPH_NODE_TYPE_KERNEL);
  CU_OK(api().cuGraphNodeGetType(copy, &type));
  CHECK(type == CU_GRAPH_NODE_TYPE_MEMCPY);
  CU_OK(api().cuGraphNodeGetType(join, &type));
  CHECK(type == CU_GRAPH_NODE_TYPE_EMPTY);
  size_t n = 0;
  CU_OK(api().cuGraphNodeGetDependencies(join, nullptr, nullptr, &n));
  CHECK(n == 2);
  CUgraphNode deps[3] = {};
  n = 3;
  CU_OK(api().cuGraphNodeGetDependencies(kernel, deps, nullptr, &n));
  CHECK(n == 1);
  CHECK(deps[0] == copy);
  CHECK(deps[1] == nullptr);
  CU_OK(api().cuGraphGetEdges(g.g, nullptr, nullptr, nullptr, &n));
  CHECK(n == 6);
  n = 3;
  CU_OK(api().cuGraphNodeGetDependentNodes(kernel, deps, nullptr, &n));
  REQUIRE(n == 2);
  CHECK(std::set<CUgraphNode>{deps[0], deps[1]} == std::set<CUgraphNode>{h1, join});
  ExecHandle e(g.g);
  launch_and_wait(e.e, s.s);
  CHECK(read_ints(b.p, 4, s.s) == std::vector<int>{12, 7, 7, 7});
  CHECK(log.get() == std::vector<int>{1, 2});
  launch_and_wait(e.e, s.s);  // the memcpy resets b[0]: the same result
  CHECK(read_ints(b.p, 4, s.s) == std::vector<int>{12, 7, 7, 7});
  CHECK(log.get() == std::vector<int>{1, 2, 1, 2});
}

TEST_CASE("cuGraphAddNode: event record and wait nodes", "[conformance]") {
  REQUIRE_GRAPH_PROGRAMS();
  PrimaryScope scope;
  StreamHandle s(CU_STREAM_NON_BLOCKING), other(CU_STREAM_NON_BLOCKING);
  EventHandle done, before;
  DeviceBuffer a(sizeof(int));
  GraphHandle g;
  CUgraphNodeParams wait{};
  wait.type = CU_GRAPH_NODE_TYPE_WAIT_EVENT;
  wait.eventWait.event = before.e;
  CUgraphNode w = add(g.g, {}, wait);
  CUgraphNode set = add(g.g, {w}, memset_params(a.p, 6, 1, scope.ctx()));
  CUgraphNodeParams record{};
  record.type = CU_GRAPH_NODE_TYPE_EVENT_RECORD;
  record.eventRecord.event = done.e;
  CUgraphNode r = add(g.g, {set}, record);
  CUgraphNodeType type{};
  CU_OK(api().cuGraphNodeGetType(r, &type));
  CHECK(type == CU_GRAPH_NODE_TYPE_EVENT_RECORD);
  ExecHandle e(g.g);
  Gate gate;
  CU_OK(launch(other.s, &gate.fn));  // `before` completes when the gate opens
  CU_OK(api().cuEventRecord(before.e, other.s));
  CU_OK(api().cuGraphLaunch(e.e, s.s));
  std::this_thread::sleep_for(20ms);
  CU_EQ(api().cuEventQuery(done.e), CUDA_ERROR_NOT_READY);
  gate.open = true;
  CU_OK(api().cuEventSynchronize(done.e));
  CHECK(read_ints(a.p, 1, s.s) == std::vector<int>{6});
}

TEST_CASE("cuGraphAddNode: memcpy nodes to and from pageable host memory",
          "[conformance][unsure]") {
  REQUIRE_GRAPH_PROGRAMS();
  PrimaryScope scope;
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  DeviceBuffer a(4 * sizeof(int));
  std::vector<int> in{1, 2, 3, 4}, out(4, 0);
  GraphHandle g;
  CUgraphNodeParams up = memcpy_params(a.p, 0, 4 * sizeof(int), scope.ctx());
  up.memcpy.copyParams.srcMemoryType = CU_MEMORYTYPE_HOST;
  up.memcpy.copyParams.srcHost = in.data();
  CUgraphNode first = add(g.g, {}, up);
  CUgraphNodeParams down = memcpy_params(0, a.p, 4 * sizeof(int), scope.ctx());
  down.memcpy.copyParams.dstMemoryType = CU_MEMORYTYPE_HOST;
  down.memcpy.copyParams.dstHost = out.data();
  add(g.g, {first}, down);
  ExecHandle e(g.g);
  launch_and_wait(e.e, s.s);
  CHECK(out == in);
}

TEST_CASE("cuGraphAddNode refuses non-default edge data", "[conformance]") {
  REQUIRE_GRAPH_PROGRAMS();
  PrimaryScope scope;
  GraphHandle g;
  CUgraphNodeParams empty{};
  empty.type = CU_GRAPH_NODE_TYPE_EMPTY;
  CUgraphNode first = add(g.g, {}, empty);
  CUgraphEdgeData edge{};
  edge.type = 0x7f;  // no such dependency type
  CUgraphNode n = nullptr;
  CU_EQ(api().cuGraphAddNode(&n, g.g, &first, &edge, 1, &empty), CUDA_ERROR_INVALID_VALUE);
  edge = CUgraphEdgeData{};
  CU_OK(api().cuGraphAddNode(&n, g.g, &first, &edge, 1, &empty));
}

TEST_CASE("a child graph node embeds a clone of the child graph", "[conformance]") {
  REQUIRE_GRAPH_PROGRAMS();
  PrimaryScope scope;
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  DeviceBuffer a(2 * sizeof(int));
  GraphHandle child, parent;
  add(child.g, {}, memset_params(a.p, 3, 2, scope.ctx()));
  CUgraphNodeParams p{};
  p.type = CU_GRAPH_NODE_TYPE_GRAPH;
  p.graph.graph = child.g;
  CUgraphNode node = add(parent.g, {}, p);
  add(child.g, {}, memset_params(a.p, 9, 2, scope.ctx()));  // after the clone: not embedded
  CUgraph embedded = nullptr;
  CU_OK(api().cuGraphChildGraphNodeGetGraph(node, &embedded));
  CHECK(embedded != child.g);
  CHECK(node_count(embedded) == 1);
  ExecHandle e(parent.g);
  launch_and_wait(e.e, s.s);
  CHECK(read_ints(a.p, 2, s.s) == std::vector<int>{3, 3});
}

TEST_CASE("cuGraphAddDependencies refuses an existing edge", "[conformance]") {
  REQUIRE_GRAPH_PROGRAMS();
  PrimaryScope scope;
  GraphHandle g;
  CUgraphNodeParams empty{};
  empty.type = CU_GRAPH_NODE_TYPE_EMPTY;
  CUgraphNode a = add(g.g, {}, empty);
  CUgraphNode b = add(g.g, {}, empty);
  CU_OK(api().cuGraphAddDependencies(g.g, &a, &b, nullptr, 1));
  CU_EQ(api().cuGraphAddDependencies(g.g, &a, &b, nullptr, 1), CUDA_ERROR_INVALID_VALUE);
  size_t n = 0;
  CU_OK(api().cuGraphGetEdges(g.g, nullptr, nullptr, nullptr, &n));
  CHECK(n == 1);
}

TEST_CASE("a dependency cycle: refused when added, or at instantiation", "[conformance][unsure]") {
  REQUIRE_GRAPH_PROGRAMS();
  PrimaryScope scope;
  GraphHandle g;
  CUgraphNodeParams empty{};
  empty.type = CU_GRAPH_NODE_TYPE_EMPTY;
  CUgraphNode a = add(g.g, {}, empty);
  CUgraphNode b = add(g.g, {a}, empty);
  const CUresult r = api().cuGraphAddDependencies(g.g, &b, &a, nullptr, 1);
  if (r != CUDA_SUCCESS) {
    CHECK(nm(r) == "CUDA_ERROR_INVALID_VALUE");
    return;
  }
  CUDA_GRAPH_INSTANTIATE_PARAMS p{};
  CUgraphExec e = nullptr;
  CHECK(api().cuGraphInstantiateWithParams(&e, g.g, &p) != CUDA_SUCCESS);
  CHECK(p.result_out == CUDA_GRAPH_INSTANTIATE_INVALID_STRUCTURE);
  if (e) api().cuGraphExecDestroy(e);
}

TEST_CASE("memory nodes: a fixed address, used between allocation and free", "[conformance]") {
  REQUIRE_GRAPH_PROGRAMS();
  PrimaryScope scope;
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  DeviceBuffer out(4 * sizeof(int));
  GraphHandle g;
  CUgraphNodeParams alloc{};
  alloc.type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
  alloc.alloc.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  alloc.alloc.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  alloc.alloc.poolProps.location.id = 0;
  alloc.alloc.bytesize = 4 * sizeof(int);
  CUgraphNode a = nullptr;
  CU_OK(try_add(&a, g.g, {}, &alloc));
  const CUdeviceptr dptr = alloc.alloc.dptr;
  REQUIRE(dptr != 0);
  CUgraphNode set = add(g.g, {a}, memset_params(dptr, 5, 4, scope.ctx()));
  CUgraphNode copy = add(g.g, {set}, memcpy_params(out.p, dptr, 4 * sizeof(int), scope.ctx()));
  CUgraphNodeParams free_node{};
  free_node.type = CU_GRAPH_NODE_TYPE_MEM_FREE;
  free_node.free.dptr = out.p;  // not allocated by a node of this graph
  CUgraphNode f = nullptr;
  CU_EQ(try_add(&f, g.g, {copy}, &free_node), CUDA_ERROR_INVALID_VALUE);
  free_node.free.dptr = dptr;
  CU_OK(try_add(&f, g.g, {copy}, &free_node));
  CU_EQ(try_add(&f, g.g, {copy}, &free_node), CUDA_ERROR_INVALID_VALUE);  // freed twice
  CUgraphNodeType type{};
  CU_OK(api().cuGraphNodeGetType(a, &type));
  CHECK(type == CU_GRAPH_NODE_TYPE_MEM_ALLOC);
  ExecHandle e(g.g);
  launch_and_wait(e.e, s.s);
  CHECK(read_ints(out.p, 4, s.s) == std::vector<int>{5, 5, 5, 5});
  launch_and_wait(e.e, s.s);
  CHECK(read_ints(out.p, 4, s.s) == std::vector<int>{5, 5, 5, 5});
}

TEST_CASE("an allocation its graph does not free is freed with cuMemFreeAsync after the launch",
          "[conformance]") {
  REQUIRE_GRAPH_PROGRAMS();
  PrimaryScope scope;
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  GraphHandle g;
  CUgraphNodeParams alloc{};
  alloc.type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
  alloc.alloc.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  alloc.alloc.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  alloc.alloc.bytesize = 2 * sizeof(int);
  CUgraphNode a = nullptr;
  CU_OK(try_add(&a, g.g, {}, &alloc));
  const CUdeviceptr dptr = alloc.alloc.dptr;
  add(g.g, {a}, memset_params(dptr, 3, 2, scope.ctx()));
  ExecHandle e(g.g);
  CU_OK(api().cuGraphLaunch(e.e, s.s));
  CHECK(read_ints(dptr, 2, s.s) == std::vector<int>{3, 3});  // usable after the launch
  CU_OK(api().cuMemFreeAsync(dptr, s.s));
  CU_OK(api().cuStreamSynchronize(s.s));
}

TEST_CASE("conditional IF and IF/ELSE nodes run by their default values", "[conformance]") {
  REQUIRE_GRAPH_PROGRAMS();
  PrimaryScope scope;
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  DeviceBuffer out(2 * sizeof(int));
  GraphHandle g;
  CUgraphNode init = add(g.g, {}, memset_params(out.p, 0, 2, scope.ctx()));
  auto taken = make_handle(g.g, scope.ctx(), 1);
  auto bodies = add_conditional(g.g, {init}, taken, CU_GRAPH_COND_TYPE_IF, 1, scope.ctx());
  body_writes(bodies[0], out.p, 11, scope.ctx());
  auto not_taken = make_handle(g.g, scope.ctx(), 0);
  auto branches = add_conditional(g.g, {init}, not_taken, CU_GRAPH_COND_TYPE_IF, 2, scope.ctx());
  REQUIRE(branches.size() == 2);
  CHECK(branches[0] != branches[1]);
  body_writes(branches[0], out.p + sizeof(int), 21, scope.ctx());
  body_writes(branches[1], out.p + sizeof(int), 22, scope.ctx());
  ExecHandle e(g.g);
  launch_and_wait(e.e, s.s);
  CHECK(read_ints(out.p, 2, s.s) == std::vector<int>{11, 22});
}

// custream's GraphBuilder::instantiate in raw calls (lib/graph.cpp, node_updates.cpp): a
// user object moved to the graph, instantiation with upload, the graph's reference dropped,
// launches. So that a failure on a GPU tells the driver's part from custream's.
TEST_CASE("an IF graph with a user object moved to it, instantiated with upload, launched",
          "[conformance]") {
  REQUIRE_GRAPH_PROGRAMS();
  PrimaryScope scope;
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  ProgramModule mod;
  DeviceBuffer out(sizeof(int));
  CU_OK(api().cuMemsetD32Async(out.p, 0, 1, s.s));
  GraphHandle g;
  static std::atomic<int> destroyed{0};
  destroyed = 0;
  CUuserObject obj = nullptr;
  CU_OK(api().cuUserObjectCreate(
      &obj, nullptr, [](void*) { destroyed.fetch_add(1); }, 1, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC));
  CU_OK(api().cuGraphRetainUserObject(g.g, obj, 1, CU_GRAPH_USER_OBJECT_MOVE));
  for (unsigned value : {0u, 1u}) {
    auto h = make_handle(g.g, scope.ctx(), value);
    CUgraph body = add_conditional(g.g, {}, h, CU_GRAPH_COND_TYPE_IF, 1, scope.ctx())[0];
    CUdeviceptr target = out.p;
    int amount = 1;
    void* args[] = {&target, &amount};
    add(body, {}, kernel_params(mod.add(), args));
  }
  CUDA_GRAPH_INSTANTIATE_PARAMS p{};
  p.flags = CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD;
  p.hUploadStream = s.s;
  CUgraphExec e = nullptr;
  CU_OK(api().cuGraphInstantiateWithParams(&e, g.g, &p));
  CHECK(p.result_out == CUDA_GRAPH_INSTANTIATE_SUCCESS);
  CU_OK(api().cuGraphReleaseUserObject(g.g, obj, 1));  // the executable holds its own
  launch_and_wait(e, s.s);
  launch_and_wait(e, s.s);
  CHECK(read_ints(out.p, 1, s.s) == std::vector<int>{2});  // one IF taken, one not, twice
  CHECK(destroyed.load() == 0);
  CU_OK(api().cuGraphExecDestroy(e));
  CHECK(wait_until([&] { return destroyed.load() == 1; }));
}

TEST_CASE("conditional WHILE with a zero default never runs its body; SWITCH runs body[value]",
          "[conformance]") {
  REQUIRE_GRAPH_PROGRAMS();
  PrimaryScope scope;
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  DeviceBuffer out(3 * sizeof(int));
  GraphHandle g;
  CUgraphNode init = add(g.g, {}, memset_params(out.p, 0, 3, scope.ctx()));
  auto never = make_handle(g.g, scope.ctx(), 0);
  auto loop = add_conditional(g.g, {init}, never, CU_GRAPH_COND_TYPE_WHILE, 1, scope.ctx());
  body_writes(loop[0], out.p, 9, scope.ctx());
  auto one = make_handle(g.g, scope.ctx(), 1);
  auto cases = add_conditional(g.g, {init}, one, CU_GRAPH_COND_TYPE_SWITCH, 3, scope.ctx());
  for (unsigned i = 0; i < 3; ++i) body_writes(cases[i], out.p + sizeof(int), 30 + i, scope.ctx());
  auto past = make_handle(g.g, scope.ctx(), 5);
  auto none = add_conditional(g.g, {init}, past, CU_GRAPH_COND_TYPE_SWITCH, 2, scope.ctx());
  body_writes(none[0], out.p + 2 * sizeof(int), 40, scope.ctx());
  body_writes(none[1], out.p + 2 * sizeof(int), 41, scope.ctx());
  ExecHandle e(g.g);
  launch_and_wait(e.e, s.s);
  CHECK(read_ints(out.p, 3, s.s) == std::vector<int>{0, 31, 0});
}

TEST_CASE(
    "a conditional body takes kernel, empty, memset, memcpy, child graph and conditional "
    "nodes",
    "[conformance]") {
  REQUIRE_GRAPH_PROGRAMS();
  PrimaryScope scope;
  ProgramModule mod;
  DeviceBuffer a(sizeof(int)), b(sizeof(int));
  GraphHandle g, child;
  add(child.g, {}, memset_params(a.p, 1, 1, scope.ctx()));
  auto h = make_handle(g.g, scope.ctx(), 1);
  auto body = add_conditional(g.g, {}, h, CU_GRAPH_COND_TYPE_IF, 1, scope.ctx())[0];
  CUdeviceptr target = a.p;
  int amount = 1;
  void* args[] = {&target, &amount};
  add(body, {}, kernel_params(mod.add(), args));
  CUgraphNodeParams empty{};
  empty.type = CU_GRAPH_NODE_TYPE_EMPTY;
  add(body, {}, empty);
  add(body, {}, memset_params(a.p, 2, 1, scope.ctx()));
  add(body, {}, memcpy_params(b.p, a.p, sizeof(int), scope.ctx()));
  CUgraphNodeParams p{};
  p.type = CU_GRAPH_NODE_TYPE_GRAPH;
  p.graph.graph = child.g;
  add(body, {}, p);
  auto inner = make_handle(g.g, scope.ctx(), 0);
  add_conditional(body, {}, inner, CU_GRAPH_COND_TYPE_WHILE, 1, scope.ctx());
  CHECK(node_count(body) == 6);
}

// What the driver answers for a node kind cuda.h 13.0 does not list for a body (kernel, empty,
// child graph, memset, memcpy, conditional): at cuGraphAddNode, and at instantiation.
struct BodyOutcome {
  CUresult add = CUDA_SUCCESS;
  CUresult instantiate = CUDA_SUCCESS;
  CUgraphInstantiateResult result = CUDA_GRAPH_INSTANTIATE_SUCCESS;
};

BodyOutcome unlisted_node_in_body(CUgraphNodeType type, CUgraphConditionalNodeType cond) {
  PrimaryScope scope;
  GraphHandle g;
  EventHandle ev;
  auto h = make_handle(g.g, scope.ctx(), 0);
  auto body = add_conditional(g.g, {}, h, cond, 1, scope.ctx())[0];
  std::function<void()> nothing = [] {};
  CUgraphNodeParams p{};
  switch (type) {
    case CU_GRAPH_NODE_TYPE_HOST:
      p = host_params(&nothing);
      break;
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
      p.type = type;
      p.eventRecord.event = ev.e;
      break;
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
      p.type = type;
      p.eventWait.event = ev.e;
      break;
    default:
      p.type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
      p.alloc.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
      p.alloc.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      p.alloc.bytesize = 256;
      break;
  }
  BodyOutcome out;
  CUgraphNode n = nullptr;
  out.add = try_add(&n, body, {}, &p);
  if (out.add != CUDA_SUCCESS) return out;
  CUgraphExec e = nullptr;
  CUDA_GRAPH_INSTANTIATE_PARAMS ip{};
  out.instantiate = api().cuGraphInstantiateWithParams(&e, g.g, &ip);
  out.result = ip.result_out;
  if (e != nullptr) api().cuGraphExecDestroy(e);  // a driver that takes it: nothing launched
  return out;
}

TEST_CASE("a conditional body: host, event and memory nodes are added; instantiation refuses them",
          "[conformance][unsure]") {
  REQUIRE_GRAPH_PROGRAMS();
  const std::pair<CUgraphNodeType, const char*> kinds[] = {
      {CU_GRAPH_NODE_TYPE_HOST, "host"},
      {CU_GRAPH_NODE_TYPE_EVENT_RECORD, "event record"},
      {CU_GRAPH_NODE_TYPE_WAIT_EVENT, "event wait"},
      {CU_GRAPH_NODE_TYPE_MEM_ALLOC, "memory allocation"}};
  for (const auto cond : {CU_GRAPH_COND_TYPE_IF, CU_GRAPH_COND_TYPE_WHILE}) {
    for (const auto& kind : kinds) {
      const BodyOutcome out = unlisted_node_in_body(kind.first, cond);
      WARN("a " << kind.second << " node in a " << (cond == CU_GRAPH_COND_TYPE_IF ? "IF" : "WHILE")
                << " body: add " << nm(out.add) << ", instantiate " << nm(out.instantiate)
                << " (result " << out.result << ")");
      CU_CHECK_EQ(out.add, CUDA_SUCCESS);
      CU_CHECK_EQ(out.instantiate, CUDA_ERROR_INVALID_VALUE);  // so on an H100, driver 580
    }
  }
}

namespace {
// Instantiates `g` again while `first` (an executable of it) lives, with and without upload on
// `s`; the two result codes. Destroys what succeeded.
std::pair<CUresult, CUresult> instantiate_again(CUgraph g, CUstream s) {
  CUgraphExec second = nullptr, third = nullptr;
  CUDA_GRAPH_INSTANTIATE_PARAMS ip{};
  const CUresult r = api().cuGraphInstantiateWithParams(&second, g, &ip);
  CUDA_GRAPH_INSTANTIATE_PARAMS up{};
  up.flags = CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD;
  up.hUploadStream = s;
  const CUresult r3 = api().cuGraphInstantiateWithParams(&third, g, &up);
  if (r == CUDA_SUCCESS && second) api().cuGraphExecDestroy(second);
  if (r3 == CUDA_SUCCESS && third) api().cuGraphExecDestroy(third);
  return {r, r3};
}
}  // namespace

TEST_CASE("a graph with a conditional node has one executable at a time", "[conformance]") {
  REQUIRE_GRAPH_PROGRAMS();
  PrimaryScope scope;
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  for (CUgraphConditionalNodeType type : {CU_GRAPH_COND_TYPE_WHILE, CU_GRAPH_COND_TYPE_IF}) {
    const char* name = type == CU_GRAPH_COND_TYPE_WHILE ? "WHILE" : "IF";
    INFO(name);
    GraphHandle g;
    auto h = make_handle(g.g, scope.ctx(), 0);
    auto body = add_conditional(g.g, {}, h, type, 1, scope.ctx())[0];
    CUgraphNodeParams empty{};
    empty.type = CU_GRAPH_NODE_TYPE_EMPTY;
    add(body, {}, empty);
    {
      ExecHandle first(g.g);
      const auto [r, with_upload] = instantiate_again(g.g, s.s);
      WARN("a " << name << " graph instantiated while an executable of it lives: " << nm(r)
                << "; with upload " << nm(with_upload));
      CU_EQ(r, CUDA_ERROR_NOT_SUPPORTED);  // WHILE and IF: so on an H100, driver 580
      CU_EQ(with_upload, CUDA_ERROR_NOT_SUPPORTED);
    }
    ExecHandle again(g.g);  // the first one destroyed: a new one is made
    CHECK(again.e != nullptr);
  }
}

TEST_CASE("a graph with a memory allocation node has one executable at a time", "[conformance]") {
  REQUIRE_GRAPH_PROGRAMS();
  PrimaryScope scope;
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  GraphHandle g;
  CUgraphNodeParams alloc{};
  alloc.type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
  alloc.alloc.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  alloc.alloc.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  alloc.alloc.bytesize = 256;
  CUgraphNode a = nullptr;
  CU_OK(try_add(&a, g.g, {}, &alloc));
  CUgraphNodeParams free_node{};
  free_node.type = CU_GRAPH_NODE_TYPE_MEM_FREE;
  free_node.free.dptr = alloc.alloc.dptr;
  CUgraphNode f = nullptr;
  CU_OK(try_add(&f, g.g, {a}, &free_node));
  ExecHandle first(g.g);
  const auto [r, with_upload] = instantiate_again(g.g, s.s);
  WARN("a graph with memory nodes instantiated while an executable of it lives: "
       << nm(r) << "; with upload " << nm(with_upload));
  CU_EQ(r, CUDA_ERROR_NOT_SUPPORTED);  // so on an H100, driver 580 ("at most one", its page)
  CU_EQ(with_upload, CUDA_ERROR_NOT_SUPPORTED);
}

TEST_CASE("a conditional node refuses a handle of an unrelated graph", "[conformance][unsure]") {
  REQUIRE_GRAPH_PROGRAMS();
  PrimaryScope scope;
  GraphHandle g, other;
  auto h = make_handle(other.g, scope.ctx(), 0);
  CUgraphNodeParams p{};
  p.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
  p.conditional.handle = h;
  p.conditional.type = CU_GRAPH_COND_TYPE_IF;
  p.conditional.size = 1;
  p.conditional.ctx = scope.ctx();
  CUgraphNode n = nullptr;
  CU_EQ(try_add(&n, g.g, {}, &p), CUDA_ERROR_INVALID_VALUE);
  auto ok = add_conditional(other.g, {}, h, CU_GRAPH_COND_TYPE_IF, 1, scope.ctx());
  CHECK(ok.size() == 1);
}

TEST_CASE("cuGraphNodeSetParams changes a node before instantiation", "[conformance]") {
  REQUIRE_GRAPH_PROGRAMS();
  PrimaryScope scope;
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  DeviceBuffer a(sizeof(int));
  GraphHandle g;
  CUgraphNode set = add(g.g, {}, memset_params(a.p, 1, 1, scope.ctx()));
  CUgraphNodeParams p = memset_params(a.p, 42, 1, scope.ctx());
  CU_OK(api().cuGraphNodeSetParams(set, &p));
  CUgraphNodeParams wrong{};
  wrong.type = CU_GRAPH_NODE_TYPE_EMPTY;
  CHECK(api().cuGraphNodeSetParams(set, &wrong) != CUDA_SUCCESS);  // the kind cannot change
  ExecHandle e(g.g);
  launch_and_wait(e.e, s.s);
  CHECK(read_ints(a.p, 1, s.s) == std::vector<int>{42});
}

TEST_CASE("a whole-graph update takes a conditional handle's new default value", "[conformance]") {
  REQUIRE_GRAPH_PROGRAMS();
  PrimaryScope scope;
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  DeviceBuffer a(sizeof(int));
  GraphHandle first, second;
  for (unsigned value : {0u, 1u}) {
    CUgraph g = value ? second.g : first.g;
    CUgraphNode init = add(g, {}, memset_params(a.p, 0, 1, scope.ctx()));
    auto h = make_handle(g, scope.ctx(), value);
    auto body = add_conditional(g, {init}, h, CU_GRAPH_COND_TYPE_IF, 1, scope.ctx())[0];
    body_writes(body, a.p, 5, scope.ctx());
  }
  ExecHandle e(first.g);
  launch_and_wait(e.e, s.s);
  CHECK(read_ints(a.p, 1, s.s) == std::vector<int>{0});
  CUgraphExecUpdateResultInfo info{};
  CU_OK(api().cuGraphExecUpdate(e.e, second.g, &info));
  CHECK(info.result == CU_GRAPH_EXEC_UPDATE_SUCCESS);
  launch_and_wait(e.e, s.s);
  CHECK(read_ints(a.p, 1, s.s) == std::vector<int>{5});
}

TEST_CASE("a conditional handle no node uses fails the instantiation", "[conformance][unsure]") {
  REQUIRE_GRAPH_PROGRAMS();
  PrimaryScope scope;
  GraphHandle g;
  CUgraphNodeParams empty{};
  empty.type = CU_GRAPH_NODE_TYPE_EMPTY;
  add(g.g, {}, empty);
  make_handle(g.g, scope.ctx(), 0);
  CUDA_GRAPH_INSTANTIATE_PARAMS p{};
  CUgraphExec e = nullptr;
  CHECK(api().cuGraphInstantiateWithParams(&e, g.g, &p) != CUDA_SUCCESS);
  CHECK(p.result_out == CUDA_GRAPH_INSTANTIATE_CONDITIONAL_HANDLE_UNUSED);
  if (e) api().cuGraphExecDestroy(e);
}

}  // namespace
}  // namespace conformance

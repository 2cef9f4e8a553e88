// Driver conformance: graphs as programs, continued: capture into an existing graph or a
// conditional body, per-node updates of an executable, the whole-graph update's refusals, user
// objects under per-node updates, and the emulator's conditional control and fault injection.
// Sources: cuda.h 13.0's documentation of each call; [unsure] where it does not say what the
// driver answers.
#include "graph_programs.hpp"

namespace conformance {
namespace {

TEST_CASE("a host function captured into a conditional body is captured; instantiation refuses it",
          "[conformance][unsure]") {
  REQUIRE_GRAPH_PROGRAMS();
  PrimaryScope scope;
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  GraphHandle g;
  auto h = make_handle(g.g, scope.ctx(), 1);
  CUgraph body = add_conditional(g.g, {}, h, CU_GRAPH_COND_TYPE_IF, 1, scope.ctx())[0];
  CU_OK(api().cuStreamBeginCaptureToGraph(s.s, body, nullptr, nullptr, 0,
                                          CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  std::function<void()> nothing = [] {};
  const CUresult enqueued = launch(s.s, &nothing);
  CUgraph ended = nullptr;
  const CUresult end = api().cuStreamEndCapture(s.s, &ended);
  CUgraphExec e = nullptr;
  const CUresult inst = api().cuGraphInstantiateWithFlags(&e, g.g, 0);
  if (e) api().cuGraphExecDestroy(e);
  WARN("a host function captured into an IF body: cuLaunchHostFunc "
       << nm(enqueued) << ", end capture " << nm(end) << ", body nodes " << node_count(body)
       << ", instantiate " << nm(inst));
  CU_CHECK_EQ(enqueued, CUDA_SUCCESS);
  CU_CHECK_EQ(end, CUDA_SUCCESS);
  CHECK(node_count(body) == 1);
  CU_CHECK_EQ(inst, CUDA_ERROR_INVALID_VALUE);  // so on an H100, driver 580
}

TEST_CASE("cuStreamBeginCaptureToGraph appends to the graph after the given nodes",
          "[conformance]") {
  REQUIRE_GRAPH_PROGRAMS();
  PrimaryScope scope;
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  DeviceBuffer a(2 * sizeof(int));
  GraphHandle g;
  CUgraphNode first = add(g.g, {}, memset_params(a.p, 1, 2, scope.ctx()));
  CU_OK(api().cuStreamBeginCaptureToGraph(s.s, g.g, &first, nullptr, 1,
                                          CU_STREAM_CAPTURE_MODE_GLOBAL));
  CHECK(capture_status(s.s) == CU_STREAM_CAPTURE_STATUS_ACTIVE);
  CUstreamCaptureStatus st{};
  CUgraph capturing = nullptr;
  const CUgraphNode* deps = nullptr;
  size_t ndeps = 0;
  CU_OK(api().cuStreamGetCaptureInfo_v3(s.s, &st, nullptr, &capturing, &deps, nullptr, &ndeps));
  CHECK(capturing == g.g);
  REQUIRE(ndeps == 1);
  CHECK(deps[0] == first);
  CU_OK(api().cuMemsetD32Async(a.p + sizeof(int), 2, 1, s.s));
  CUgraph ended = nullptr;
  CU_OK(api().cuStreamEndCapture(s.s, &ended));
  CHECK(ended == g.g);
  REQUIRE(node_count(g.g) == 2);
  CUgraphNode nodes[2] = {};
  size_t n = 2;
  CU_OK(api().cuGraphGetNodes(g.g, nodes, &n));
  CUgraphNode captured = nodes[0] == first ? nodes[1] : nodes[0];
  CUgraphNode dep = nullptr;
  n = 1;
  CU_OK(api().cuGraphNodeGetDependencies(captured, &dep, nullptr, &n));
  CHECK(n == 1);
  CHECK(dep == first);
  ExecHandle e(g.g);
  launch_and_wait(e.e, s.s);
  CHECK(read_ints(a.p, 2, s.s) == std::vector<int>{1, 2});
}

TEST_CASE("capture into a conditional body", "[conformance]") {
  REQUIRE_GRAPH_PROGRAMS();
  PrimaryScope scope;
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  DeviceBuffer a(sizeof(int));
  GraphHandle g;
  CUgraphNode init = add(g.g, {}, memset_params(a.p, 0, 1, scope.ctx()));
  auto h = make_handle(g.g, scope.ctx(), 1);
  CUgraph body = add_conditional(g.g, {init}, h, CU_GRAPH_COND_TYPE_IF, 1, scope.ctx())[0];
  CU_OK(api().cuStreamBeginCaptureToGraph(s.s, body, nullptr, nullptr, 0,
                                          CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  CU_OK(api().cuMemsetD32Async(a.p, 8, 1, s.s));
  CUgraph ended = nullptr;
  CU_OK(api().cuStreamEndCapture(s.s, &ended));
  CHECK(ended == body);
  CHECK(node_count(body) == 1);
  ExecHandle e(g.g);
  launch_and_wait(e.e, s.s);
  CHECK(read_ints(a.p, 1, s.s) == std::vector<int>{8});
}

TEST_CASE("per-node updates apply to launches made after them", "[conformance]") {
  REQUIRE_GRAPH_PROGRAMS();
  PrimaryScope scope;
  ProgramModule mod;
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  DeviceBuffer a(sizeof(int)), r1(2 * sizeof(int)), r2(2 * sizeof(int));
  GraphHandle g;
  CUgraphNode set = add(g.g, {}, memset_params(a.p, 1, 1, scope.ctx()));
  CUdeviceptr target = a.p;
  int amount = 10;
  void* args[] = {&target, &amount};
  CUgraphNode kernel = add(g.g, {set}, kernel_params(mod.add(), args));
  ExecHandle e(g.g);
  Gate gate;
  CU_OK(launch(s.s, &gate.fn));  // holds the stream until opened
  CU_OK(api().cuGraphLaunch(e.e, s.s));
  CU_OK(api().cuMemcpyDtoDAsync(r1.p, a.p, sizeof(int), s.s));
  // Enqueued, not run (the gate holds the stream): the launch keeps what it was made with.
  CUDA_MEMSET_NODE_PARAMS m{};
  m.dst = a.p;
  m.value = 2;
  m.elementSize = 4;
  m.width = 1;
  m.height = 1;
  CU_OK(api().cuGraphExecMemsetNodeSetParams(e.e, set, &m, scope.ctx()));
  amount = 20;
  CUDA_KERNEL_NODE_PARAMS k{};
  k.func = mod.add();
  k.gridDimX = k.gridDimY = k.gridDimZ = 1;
  k.blockDimX = k.blockDimY = k.blockDimZ = 1;
  k.kernelParams = args;
  CU_OK(api().cuGraphExecKernelNodeSetParams(e.e, kernel, &k));
  CU_OK(api().cuGraphLaunch(e.e, s.s));
  CU_OK(api().cuMemcpyDtoDAsync(r2.p, a.p, sizeof(int), s.s));
  gate.open = true;
  CU_OK(api().cuStreamSynchronize(s.s));
  CHECK(read_ints(r1.p, 1, s.s) == std::vector<int>{11});
  CHECK(read_ints(r2.p, 1, s.s) == std::vector<int>{22});
}

TEST_CASE("a disabled node is skipped; only kernel, memset and memcpy nodes can be disabled",
          "[conformance]") {
  REQUIRE_GRAPH_PROGRAMS();
  PrimaryScope scope;
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  DeviceBuffer a(2 * sizeof(int));
  GraphHandle g;
  Log log;
  std::function<void()> note = [&] { log.add(1); };
  CUgraphNode set = add(g.g, {}, memset_params(a.p, 4, 2, scope.ctx()));
  CUgraphNode over = add(g.g, {set}, memset_params(a.p, 6, 1, scope.ctx()));
  CUgraphNode host = add(g.g, {over}, host_params(&note));
  ExecHandle e(g.g);
  unsigned enabled = 7;
  CU_OK(api().cuGraphNodeGetEnabled(e.e, over, &enabled));
  CHECK(enabled == 1);
  CU_OK(api().cuGraphNodeSetEnabled(e.e, over, 0));
  CU_OK(api().cuGraphNodeGetEnabled(e.e, over, &enabled));
  CHECK(enabled == 0);
  CU_EQ(api().cuGraphNodeSetEnabled(e.e, host, 0), CUDA_ERROR_INVALID_VALUE);
  launch_and_wait(e.e, s.s);
  CHECK(read_ints(a.p, 2, s.s) == std::vector<int>{4, 4});
  CHECK(log.get() == std::vector<int>{1});
  CU_OK(api().cuGraphNodeSetEnabled(e.e, over, 1));
  launch_and_wait(e.e, s.s);
  CHECK(read_ints(a.p, 2, s.s) == std::vector<int>{6, 4});
}

TEST_CASE(
    "per-node updates of host, memcpy and child graph nodes; a child of another topology "
    "is refused",
    "[conformance]") {
  REQUIRE_GRAPH_PROGRAMS();
  PrimaryScope scope;
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  DeviceBuffer a(2 * sizeof(int)), b(2 * sizeof(int));
  GraphHandle g, child, same, other;
  Log log;
  std::function<void()> one = [&] { log.add(1); }, two = [&] { log.add(2); };
  add(child.g, {}, memset_params(a.p, 3, 2, scope.ctx()));
  CUgraphNodeParams p{};
  p.type = CU_GRAPH_NODE_TYPE_GRAPH;
  p.graph.graph = child.g;
  CUgraphNode sub = add(g.g, {}, p);
  CUgraphNode copy = add(g.g, {sub}, memcpy_params(b.p, a.p, sizeof(int), scope.ctx()));
  CUgraphNode host = add(g.g, {copy}, host_params(&one));
  ExecHandle e(g.g);
  add(same.g, {}, memset_params(a.p, 5, 2, scope.ctx()));
  CU_OK(api().cuGraphExecChildGraphNodeSetParams(e.e, sub, same.g));
  add(other.g, {}, memset_params(a.p, 5, 2, scope.ctx()));
  add(other.g, {}, memset_params(a.p, 5, 2, scope.ctx()));
  CU_EQ(api().cuGraphExecChildGraphNodeSetParams(e.e, sub, other.g),
        CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);  // so on an H100, driver 580
  CUgraphNodeParams c = memcpy_params(b.p + sizeof(int), a.p, sizeof(int), scope.ctx());
  CU_OK(api().cuGraphExecNodeSetParams(e.e, copy, &c));
  CUDA_HOST_NODE_PARAMS hp{call_function, &two};
  CU_OK(api().cuGraphExecHostNodeSetParams(e.e, host, &hp));
  CU_OK(api().cuMemsetD32Async(b.p, 0, 2, s.s));
  launch_and_wait(e.e, s.s);
  CHECK(read_ints(b.p, 2, s.s) == std::vector<int>{0, 5});
  CHECK(log.get() == std::vector<int>{2});
}

TEST_CASE("a refused whole-graph update names the kernel node whose context changed",
          "[conformance][unsure]") {
  REQUIRE_GRAPH_PROGRAMS();
  PrimaryScope scope;
  ProgramModule mod;
  DeviceBuffer a(sizeof(int));
  CUcontext created = nullptr;
  CU_OK(api().cuCtxCreate(&created, 0, 0));  // pushed: current
  CUmodule other_module = nullptr;
  CU_OK(api().cuModuleLoadData(&other_module, kProgramPtx));
  CUfunction other = nullptr;
  CU_OK(api().cuModuleGetFunction(&other, other_module, "gp_add"));
  CUcontext popped = nullptr;
  CU_OK(api().cuCtxPopCurrent(&popped));
  CUdeviceptr target = a.p;
  int amount = 1;
  void* args[] = {&target, &amount};
  GraphHandle g, moved, retyped;
  add(g.g, {}, kernel_params(mod.add(), args));
  ExecHandle e(g.g);
  CUgraphNode changed = add(moved.g, {}, kernel_params(other, args));
  CUgraphExecUpdateResultInfo info{};
  CU_EQ(api().cuGraphExecUpdate(e.e, moved.g, &info), CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
  CHECK(info.result == CU_GRAPH_EXEC_UPDATE_ERROR_UNSUPPORTED_FUNCTION_CHANGE);
  CHECK(info.errorNode == changed);
  CHECK(info.errorFromNode == nullptr);
  CUgraphNode memset_node = add(retyped.g, {}, memset_params(a.p, 0, 1, scope.ctx()));
  info = CUgraphExecUpdateResultInfo{};
  CU_EQ(api().cuGraphExecUpdate(e.e, retyped.g, &info), CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
  CHECK(info.result == CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED);
  CHECK(info.errorNode == memset_node);
  CU_OK(api().cuModuleUnload(other_module));
  CU_OK(api().cuCtxDestroy(created));
}

TEST_CASE("a host node's user object lives while the executable does, per-node updates or not",
          "[conformance]") {
  REQUIRE_GRAPH_PROGRAMS();
  PrimaryScope scope;
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  std::atomic<int> destroyed{0};
  Log log;
  std::function<void()> first = [&] { log.add(1); }, second = [&] { log.add(2); };
  CUgraph g = host_graph_with_payload(&first, &destroyed, &log);
  CUgraphNode host = nullptr;
  size_t n = 1;
  CU_OK(api().cuGraphGetNodes(g, &host, &n));
  CUgraphExec e = instantiate(g);
  CUDA_HOST_NODE_PARAMS hp{call_function, &second};
  CU_OK(api().cuGraphExecHostNodeSetParams(e, host, &hp));
  CU_OK(api().cuGraphDestroy(g));  // the executable holds its own reference
  launch_and_wait(e, s.s);
  std::this_thread::sleep_for(20ms);
  CHECK(destroyed.load() == 0);
  CU_OK(api().cuGraphExecDestroy(e));
  CHECK(wait_until([&] { return destroyed.load() == 1; }));
  CHECK(log.get() == std::vector<int>{2, -1});
}

// ---- emulator only ----

std::atomic<int> g_countdown_runs{0};
int (*g_set_conditional)(CUgraphConditionalHandle, unsigned) = nullptr;

// gp_countdown's CPU twin: --*counter, and the handle keeps the loop going while it is nonzero.
void cpu_countdown(const custream_emu_kernel_launch* l) {
  CUgraphConditionalHandle h = 0;
  int* counter = nullptr;
  std::memcpy(&h, l->params[0], sizeof h);
  std::memcpy(&counter, l->params[1], sizeof counter);
  --*counter;
  g_countdown_runs.fetch_add(1);
  g_set_conditional(h, *counter != 0 ? 1u : 0u);
}

TEST_CASE("emulator: a WHILE loop counts down through custream_emu_set_conditional", "[emu-only]") {
  REQUIRE_EMULATOR();
  REQUIRE_GRAPH_PROGRAMS();
  g_set_conditional = emu_control<decltype(g_set_conditional)>("custream_emu_set_conditional");
  REQUIRE(g_set_conditional != nullptr);
  CHECK(g_set_conditional(12345, 1) == -1);  // no launch runs on this thread
  PrimaryScope scope;
  ProgramModule mod;
  ProgramModule::registrar()("gp_countdown", cpu_countdown, nullptr, nullptr, 0);
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  DeviceBuffer counter(sizeof(int));
  GraphHandle g;
  CUgraphNode init = add(g.g, {}, memset_params(counter.p, 4, 1, scope.ctx()));
  auto h = make_handle(g.g, scope.ctx(), 1);
  auto body = add_conditional(g.g, {init}, h, CU_GRAPH_COND_TYPE_WHILE, 1, scope.ctx())[0];
  CUdeviceptr c = counter.p;
  void* args[] = {&h, &c};
  add(body, {}, kernel_params(mod.function("gp_countdown"), args));
  ExecHandle e(g.g);
  g_countdown_runs = 0;
  launch_and_wait(e.e, s.s);
  CHECK(g_countdown_runs.load() == 4);
  CHECK(read_ints(counter.p, 1, s.s) == std::vector<int>{0});
  launch_and_wait(e.e, s.s);  // ASSIGN_DEFAULT: the loop starts again
  CHECK(g_countdown_runs.load() == 8);
  ProgramModule::registrar()("gp_countdown", nullptr, nullptr, nullptr, 0);
}

TEST_CASE("emulator: destroying the graph a stream captures into invalidates the capture",
          "[emu-only]") {
  REQUIRE_EMULATOR();
  REQUIRE_GRAPH_PROGRAMS();
  PrimaryScope scope;
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  DeviceBuffer a(sizeof(int));
  CUgraph g = nullptr;
  CU_OK(api().cuGraphCreate(&g, 0));
  CU_OK(api().cuStreamBeginCaptureToGraph(s.s, g, nullptr, nullptr, 0,
                                          CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU_OK(api().cuMemsetD32Async(a.p, 1, 1, s.s));
  CU_OK(api().cuGraphDestroy(g));
  CU_EQ(api().cuMemsetD32Async(a.p, 2, 1, s.s), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  CUgraph ended = reinterpret_cast<CUgraph>(1);
  CU_EQ(api().cuStreamEndCapture(s.s, &ended), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  CHECK(ended == nullptr);
  CHECK(capture_status(s.s) == CU_STREAM_CAPTURE_STATUS_NONE);
}

TEST_CASE("emulator: the built-in custream_set_condition twin sets a handle", "[emu-only]") {
  REQUIRE_EMULATOR();
  REQUIRE_GRAPH_PROGRAMS();
  PrimaryScope scope;
  ProgramModule mod;
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  DeviceBuffer value(sizeof(unsigned)), out(sizeof(int));
  CU_OK(api().cuMemsetD32Async(value.p, 1, 1, s.s));
  CU_OK(api().cuMemsetD32Async(out.p, 0, 1, s.s));
  GraphHandle g;
  auto h = make_handle(g.g, scope.ctx(), 0);
  CUdeviceptr v = value.p;
  void* args[] = {&h, &v};
  CUgraphNode set = add(g.g, {}, kernel_params(mod.function("custream_set_condition"), args));
  auto body = add_conditional(g.g, {set}, h, CU_GRAPH_COND_TYPE_IF, 1, scope.ctx())[0];
  body_writes(body, out.p, 77, scope.ctx());
  ExecHandle e(g.g);
  launch_and_wait(e.e, s.s);
  CHECK(read_ints(out.p, 1, s.s) == std::vector<int>{77});
}

TEST_CASE("emulator: the graph-program entry points take injected faults; DOT names the kinds",
          "[emu-only]") {
  REQUIRE_EMULATOR();
  REQUIRE_GRAPH_PROGRAMS();
  auto fail = emu_control<void (*)(const char*, int, CUresult)>("custream_emu_fail_call");
  REQUIRE(fail != nullptr);
  PrimaryScope scope;
  GraphHandle g;
  CUgraphNodeParams empty{};
  empty.type = CU_GRAPH_NODE_TYPE_EMPTY;
  CUgraphNode n = nullptr;
  fail("cuGraphAddNode", 1, CUDA_ERROR_OUT_OF_MEMORY);
  CU_EQ(try_add(&n, g.g, {}, &empty), CUDA_ERROR_OUT_OF_MEMORY);
  CHECK(node_count(g.g) == 0);
  fail("cuGraphConditionalHandleCreate", 1, CUDA_ERROR_OUT_OF_MEMORY);
  CUgraphConditionalHandle h = 0;
  CU_EQ(api().cuGraphConditionalHandleCreate(&h, g.g, scope.ctx(), 0, 0), CUDA_ERROR_OUT_OF_MEMORY);
  h = make_handle(g.g, scope.ctx(), 0);
  add_conditional(g.g, {}, h, CU_GRAPH_COND_TYPE_IF, 1, scope.ctx());
  CUgraphExec e = instantiate(g.g);
  fail("cuGraphNodeSetEnabled", 1, CUDA_ERROR_LAUNCH_FAILED);
  CU_EQ(api().cuGraphNodeSetEnabled(e, n, 0), CUDA_ERROR_LAUNCH_FAILED);
  CU_OK(api().cuGraphExecDestroy(e));
  const std::string path = "/tmp/custream_graph_programs_" + std::to_string(getpid()) + ".dot";
  CU_OK(api().cuGraphDebugDotPrint(g.g, path.c_str(), 0));
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::remove(path.c_str());
  CHECK(text.str().find("CONDITIONAL") != std::string::npos);
}

}  // namespace
}  // namespace conformance

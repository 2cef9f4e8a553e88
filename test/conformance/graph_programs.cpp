// Driver conformance: graphs as programs: the generic node call (cuGraphAddNode), child graphs,
// memory nodes, dependencies, conditional nodes (driven by their default values, so that they
// run on a GPU without device code), capture into an existing graph, per-node updates of an
// executable. Sources: cuda.h 13.0's documentation of each call (CUDA_CONDITIONAL_NODE_PARAMS
// for what a body may hold); [unsure] where it does not say what the driver answers.
#include "helpers.hpp"

namespace conformance {
namespace {

#define REQUIRE_GRAPH_PROGRAMS()                                                           \
  do {                                                                                     \
    REQUIRE_DRIVER_LOADED();                                                               \
    if (!api().cuGraphAddNode || !api().cuGraphConditionalHandleCreate ||                  \
        !api().cuStreamBeginCaptureToGraph || !api().cuGraphExecNodeSetParams ||           \
        !api().cuGraphNodeSetEnabled || !api().cuGraphExecChildGraphNodeSetParams)         \
      CUSTREAM_SKIP("no graph programs: the driver lacks CUDA 12.3's graph entry points"); \
  } while (false)

// gp_add(int* data, int amount): data[0] += amount; gp_countdown(u64 handle, int* counter): a
// no-op on a GPU (the emulator's CPU twin counts down and sets the handle).
constexpr const char* kProgramPtx = R"(
.version 7.0
.target sm_70
.address_size 64

.visible .entry gp_add(
  .param .u64 data,
  .param .u32 amount
)
{
  .reg .b32 %r<4>;
  .reg .b64 %rd<3>;
  ld.param.u64 %rd1, [data];
  ld.param.u32 %r1, [amount];
  cvta.to.global.u64 %rd2, %rd1;
  ld.global.u32 %r2, [%rd2];
  add.s32 %r3, %r2, %r1;
  st.global.u32 [%rd2], %r3;
  ret;
}

.visible .entry gp_countdown(
  .param .u64 handle,
  .param .u64 counter
)
{
  ret;
}

.visible .entry custream_set_condition(
  .param .u64 handle,
  .param .u64 value
)
{
  ret;
}
)";

void cpu_gp_add(const custream_emu_kernel_launch* l) {
  int* data = nullptr;
  int amount = 0;
  std::memcpy(&data, l->params[0], sizeof data);
  std::memcpy(&amount, l->params[1], sizeof amount);
  *data += amount;
}

// The module of kProgramPtx in the current context, with gp_add's CPU twin on the emulator.
class ProgramModule {
 public:
  ProgramModule() {
    CU_OK(api().cuModuleLoadData(&module_, kProgramPtx));
    CU_OK(api().cuModuleGetFunction(&add_, module_, "gp_add"));
    if (driver().emulated) registrar()("gp_add", cpu_gp_add, nullptr, nullptr, 0);
  }
  ~ProgramModule() {
    if (driver().emulated) registrar()("gp_add", nullptr, nullptr, nullptr, 0);
    api().cuModuleUnload(module_);
  }
  ProgramModule(const ProgramModule&) = delete;
  ProgramModule& operator=(const ProgramModule&) = delete;
  CUfunction add() const { return add_; }
  CUfunction function(const char* name) const {
    CUfunction f = nullptr;
    CU_OK(api().cuModuleGetFunction(&f, module_, name));
    return f;
  }
  static decltype(&custream_emu_register_kernel) registrar() {
    auto r = emu_control<decltype(&custream_emu_register_kernel)>("custream_emu_register_kernel");
    REQUIRE(r != nullptr);
    return r;
  }

 private:
  CUmodule module_ = nullptr;
  CUfunction add_ = nullptr;
};

struct GraphHandle {
  CUgraph g = nullptr;
  GraphHandle() { CU_OK(api().cuGraphCreate(&g, 0)); }
  ~GraphHandle() {
    if (g) api().cuGraphDestroy(g);
  }
  GraphHandle(const GraphHandle&) = delete;
  GraphHandle& operator=(const GraphHandle&) = delete;
};

struct ExecHandle {
  CUgraphExec e = nullptr;
  explicit ExecHandle(CUgraph g) { e = instantiate(g); }
  ~ExecHandle() {
    if (e) api().cuGraphExecDestroy(e);
  }
  ExecHandle(const ExecHandle&) = delete;
  ExecHandle& operator=(const ExecHandle&) = delete;
};

CUresult try_add(CUgraphNode* out, CUgraph g, std::vector<CUgraphNode> deps, CUgraphNodeParams* p) {
  return api().cuGraphAddNode(out, g, deps.empty() ? nullptr : deps.data(), nullptr, deps.size(),
                              p);
}

CUgraphNode add(CUgraph g, std::vector<CUgraphNode> deps, CUgraphNodeParams p) {
  CUgraphNode n = nullptr;
  CU_OK(try_add(&n, g, std::move(deps), &p));
  return n;
}

CUgraphNodeParams memset_params(CUdeviceptr dst, unsigned value, size_t count, CUcontext ctx) {
  CUgraphNodeParams p{};
  p.type = CU_GRAPH_NODE_TYPE_MEMSET;
  p.memset.dst = dst;
  p.memset.value = value;
  p.memset.elementSize = 4;
  p.memset.width = count;
  p.memset.height = 1;
  p.memset.ctx = ctx;
  return p;
}

CUgraphNodeParams memcpy_params(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUcontext ctx) {
  CUgraphNodeParams p{};
  p.type = CU_GRAPH_NODE_TYPE_MEMCPY;
  p.memcpy.copyCtx = ctx;
  CUDA_MEMCPY3D& c = p.memcpy.copyParams;
  c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  c.srcDevice = src;
  c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  c.dstDevice = dst;
  c.WidthInBytes = bytes;
  c.Height = 1;
  c.Depth = 1;
  return p;
}

CUgraphNodeParams host_params(std::function<void()>* f) {
  CUgraphNodeParams p{};
  p.type = CU_GRAPH_NODE_TYPE_HOST;
  p.host.fn = call_function;
  p.host.userData = f;
  return p;
}

// A kernel node of f with arguments `args` (the node copies them).
CUgraphNodeParams kernel_params(CUfunction f, void** args) {
  CUgraphNodeParams p{};
  p.type = CU_GRAPH_NODE_TYPE_KERNEL;
  p.kernel.func = f;
  p.kernel.gridDimX = p.kernel.gridDimY = p.kernel.gridDimZ = 1;
  p.kernel.blockDimX = p.kernel.blockDimY = p.kernel.blockDimZ = 1;
  p.kernel.kernelParams = args;
  return p;
}

std::vector<int> read_ints(CUdeviceptr p, size_t n, CUstream s) {
  std::vector<int> v(n, -1);
  CU_OK(api().cuMemcpyDtoHAsync(v.data(), p, n * sizeof(int), s));
  CU_OK(api().cuStreamSynchronize(s));
  return v;
}

void launch_and_wait(CUgraphExec e, CUstream s) {
  CU_OK(api().cuGraphLaunch(e, s));
  CU_OK(api().cuStreamSynchronize(s));
}

CUgraphConditionalHandle make_handle(CUgraph g, CUcontext ctx, unsigned value,
                                     unsigned flags = CU_GRAPH_COND_ASSIGN_DEFAULT) {
  CUgraphConditionalHandle h = 0;
  CU_OK(api().cuGraphConditionalHandleCreate(&h, g, ctx, value, flags));
  return h;
}

// Adds a conditional node and answers its bodies.
std::vector<CUgraph> add_conditional(CUgraph g, std::vector<CUgraphNode> deps,
                                     CUgraphConditionalHandle h, CUgraphConditionalNodeType type,
                                     unsigned size, CUcontext ctx, CUgraphNode* node = nullptr) {
  CUgraphNodeParams p{};
  p.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
  p.conditional.handle = h;
  p.conditional.type = type;
  p.conditional.size = size;
  p.conditional.ctx = ctx;
  CUgraphNode n = nullptr;
  CU_OK(try_add(&n, g, std::move(deps), &p));
  if (node) *node = n;
  REQUIRE(p.conditional.phGraph_out != nullptr);
  return std::vector<CUgraph>(p.conditional.phGraph_out, p.conditional.phGraph_out + size);
}

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
  ExecHandle e(g.g);
  launch_and_wait(e.e, s.s);
  CHECK(read_ints(b.p, 4, s.s) == std::vector<int>{12, 7, 7, 7});
  CHECK(log.get() == std::vector<int>{1, 2});
  launch_and_wait(e.e, s.s);  // the memcpy resets b[0]: the same result
  CHECK(read_ints(b.p, 4, s.s) == std::vector<int>{12, 7, 7, 7});
  CHECK(log.get() == std::vector<int>{1, 2, 1, 2});
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

// One memset node in `body` writing value into p[0].
void body_writes(CUgraph body, CUdeviceptr p, unsigned value, CUcontext ctx) {
  add(body, {}, memset_params(p, value, 1, ctx));
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

TEST_CASE("a conditional body refuses host, event and memory nodes", "[conformance][unsure]") {
  REQUIRE_GRAPH_PROGRAMS();
  PrimaryScope scope;
  GraphHandle g;
  EventHandle ev;
  auto h = make_handle(g.g, scope.ctx(), 0);
  auto body = add_conditional(g.g, {}, h, CU_GRAPH_COND_TYPE_IF, 1, scope.ctx())[0];
  std::function<void()> nothing = [] {};
  CUgraphNodeParams host = host_params(&nothing);
  CUgraphNode n = nullptr;
  CU_CHECK_EQ(try_add(&n, body, {}, &host), CUDA_ERROR_NOT_SUPPORTED);
  CUgraphNodeParams record{};
  record.type = CU_GRAPH_NODE_TYPE_EVENT_RECORD;
  record.eventRecord.event = ev.e;
  CU_CHECK_EQ(try_add(&n, body, {}, &record), CUDA_ERROR_NOT_SUPPORTED);
  CUgraphNodeParams wait{};
  wait.type = CU_GRAPH_NODE_TYPE_WAIT_EVENT;
  wait.eventWait.event = ev.e;
  CU_CHECK_EQ(try_add(&n, body, {}, &wait), CUDA_ERROR_NOT_SUPPORTED);
  CUgraphNodeParams alloc{};
  alloc.type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
  alloc.alloc.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  alloc.alloc.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  alloc.alloc.bytesize = 256;
  CU_CHECK_EQ(try_add(&n, body, {}, &alloc), CUDA_ERROR_NOT_SUPPORTED);
  CHECK(node_count(body) == 0);
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

TEST_CASE("capturing a host function into a conditional body is refused", "[conformance][unsure]") {
  REQUIRE_GRAPH_PROGRAMS();
  PrimaryScope scope;
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  GraphHandle g;
  auto h = make_handle(g.g, scope.ctx(), 0);
  CUgraph body = add_conditional(g.g, {}, h, CU_GRAPH_COND_TYPE_IF, 1, scope.ctx())[0];
  CU_OK(api().cuStreamBeginCaptureToGraph(s.s, body, nullptr, nullptr, 0,
                                          CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  std::function<void()> nothing = [] {};
  CU_CHECK_EQ(launch(s.s, &nothing), CUDA_ERROR_NOT_SUPPORTED);
  CUgraph ended = nullptr;
  CU_CHECK_EQ(api().cuStreamEndCapture(s.s, &ended), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  CHECK(node_count(body) == 0);
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
  CU_EQ(api().cuGraphExecChildGraphNodeSetParams(e.e, sub, other.g), CUDA_ERROR_INVALID_VALUE);
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

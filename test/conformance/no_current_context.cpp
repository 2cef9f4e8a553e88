// Driver calls on kernel nodes made with no context, or another one, current on the calling
// thread. Driver 580 (an H100) crashes with SIGSEGV in the kernel-node adds and exec updates
// with none current, whatever context the node's parameters name (and answers launches and
// whole updates; with another context current, adds and updates succeed), so each probe runs in a
// child process that loads the driver itself (this process never
// does) and sends back the call's result; the parent reports a crash as a crash. Its own
// program (driver-context-probes), tags as the rest of the suite (test/conformance/README.md).
// On a GPU: CUSTREAM_LIBCUDA unset, `build/test/driver-context-probes`.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "graph_programs.hpp"

namespace conformance {
namespace {

constexpr const char* kNoopPtx = R"(
.version 7.0
.target sm_70
.address_size 64

.visible .entry probe_noop(.param .u64 data)
{
  ret;
}
)";

// What a probe child answered: the probed call's result, or how it died.
struct Outcome {
  bool crashed = false;
  int signal = 0;
  bool emulated = false;
  bool skipped = false;  // no usable driver in the child
  CUresult result = CUDA_SUCCESS;

  std::string text() const {
    if (crashed) return "killed by signal " + std::to_string(signal);
    if (skipped) return "no driver";
    switch (result) {
      case CUDA_SUCCESS:
        return "CUDA_SUCCESS";
      case CUDA_ERROR_INVALID_VALUE:
        return "CUDA_ERROR_INVALID_VALUE";
      case CUDA_ERROR_INVALID_CONTEXT:
        return "CUDA_ERROR_INVALID_CONTEXT";
      case CUDA_ERROR_INVALID_HANDLE:
        return "CUDA_ERROR_INVALID_HANDLE";
      default:
        return "CUresult " + std::to_string(static_cast<int>(result));
    }
  }
};

// A probe's setup failed in the child (reported as this result).
constexpr CUresult kSetupFailed = static_cast<CUresult>(9999);

// Runs `probe` in a child process (the driver loaded there, SIGSEGV left to kill it) and
// returns what it answered.
Outcome in_child(const std::function<CUresult()>& probe) {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  std::fflush(nullptr);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    signal(SIGSEGV, SIG_DFL);
    signal(SIGABRT, SIG_DFL);
    int answer[3] = {driver().error.empty() ? 0 : 1, driver().emulated ? 1 : 0, 0};
    if (answer[0] == 0) answer[2] = static_cast<int>(probe());
    if (write(fds[1], answer, sizeof answer) != static_cast<ssize_t>(sizeof answer)) _exit(2);
    _exit(0);
  }
  close(fds[1]);
  Outcome o;
  int answer[3] = {0, 0, 0};
  const bool answered = read(fds[0], answer, sizeof answer) == static_cast<ssize_t>(sizeof answer);
  close(fds[0]);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  if (WIFSIGNALED(status)) {
    o.crashed = true;
    o.signal = WTERMSIG(status);
  } else {
    REQUIRE(answered);
    o.skipped = answer[0] != 0;
    o.emulated = answer[1] != 0;
    o.result = static_cast<CUresult>(answer[2]);
  }
  return o;
}

// What the probes share, made with the primary context of device 0 current: a module with a
// kernel of one pointer parameter, a word of device memory, a stream.
struct Fixture {
  CUcontext ctx = nullptr;
  CUmodule module = nullptr;
  CUfunction noop = nullptr;
  CUdeviceptr word = 0;
  CUstream stream = nullptr;
  void* args[2] = {&word, nullptr};
  bool ok = false;

  Fixture() {
    CUdevice dev = 0;
    ok = api().cuDeviceGet(&dev, 0) == CUDA_SUCCESS &&
         api().cuDevicePrimaryCtxRetain(&ctx, dev) == CUDA_SUCCESS &&
         api().cuCtxSetCurrent(ctx) == CUDA_SUCCESS &&
         api().cuModuleLoadData(&module, kNoopPtx) == CUDA_SUCCESS &&
         api().cuModuleGetFunction(&noop, module, "probe_noop") == CUDA_SUCCESS &&
         api().cuMemAlloc(&word, 4) == CUDA_SUCCESS &&
         api().cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS;
  }
  CUgraphNodeParams kernel() {
    CUgraphNodeParams p = kernel_params(noop, args);  // graph_programs.hpp
    p.kernel.ctx = ctx;
    return p;
  }
  // The same kernel as an executable kernel node's update.
  CUDA_KERNEL_NODE_PARAMS kernel_update() {
    const CUgraphNodeParams k = kernel();
    CUDA_KERNEL_NODE_PARAMS p{};
    p.func = k.kernel.func;
    p.gridDimX = p.gridDimY = p.gridDimZ = 1;
    p.blockDimX = p.blockDimY = p.blockDimZ = 1;
    p.kernelParams = args;
    p.ctx = ctx;
    return p;
  }
  // A new graph with one kernel node (`*node`), or null (also when the fixture failed).
  CUgraph kernel_graph(CUgraphNode* node) {
    CUgraph g = nullptr;
    CUgraphNodeParams p = kernel();
    if (!ok || api().cuGraphCreate(&g, 0) != CUDA_SUCCESS ||
        api().cuGraphAddNode(node, g, nullptr, nullptr, 0, &p) != CUDA_SUCCESS)
      return nullptr;
    return g;
  }
  // An executable of `g`, or null (also for a null `g`).
  CUgraphExec instantiate(CUgraph g) {
    CUgraphExec e = nullptr;
    CUDA_GRAPH_INSTANTIATE_PARAMS ip{};
    if (g == nullptr || api().cuGraphInstantiateWithParams(&e, g, &ip) != CUDA_SUCCESS) {
      return nullptr;
    }
    return e;
  }
  // An executable of a new one-kernel graph (its node `*node`), or null.
  CUgraphExec kernel_exec(CUgraphNode* node) { return instantiate(kernel_graph(node)); }
  // The context the probed call runs with: none, or the node's.
  void make_current(bool own) const { api().cuCtxSetCurrent(own ? ctx : nullptr); }
};

// cuGraphAddNode of a kernel node to the body of an IF node.
CUresult add_to_body(bool own) {
  Fixture f;
  CUgraph g = nullptr;
  CUgraphConditionalHandle h = 0;
  if (!f.ok || api().cuGraphCreate(&g, 0) != CUDA_SUCCESS ||
      api().cuGraphConditionalHandleCreate(&h, g, f.ctx, 1, CU_GRAPH_COND_ASSIGN_DEFAULT) !=
          CUDA_SUCCESS)
    return kSetupFailed;
  CUgraphNodeParams c{};
  c.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
  c.conditional.handle = h;
  c.conditional.type = CU_GRAPH_COND_TYPE_IF;
  c.conditional.size = 1;
  c.conditional.ctx = f.ctx;
  CUgraphNode n = nullptr;
  if (api().cuGraphAddNode(&n, g, nullptr, nullptr, 0, &c) != CUDA_SUCCESS) return kSetupFailed;
  CUgraphNodeParams k = f.kernel();
  f.make_current(own);
  return api().cuGraphAddNode(&n, c.conditional.phGraph_out[0], nullptr, nullptr, 0, &k);
}

// cuGraphExecKernelNodeSetParams of an executable's kernel node.
CUresult exec_kernel_update(bool own) {
  Fixture f;
  CUgraphNode n = nullptr;
  CUgraphExec e = f.kernel_exec(&n);
  if (e == nullptr) return kSetupFailed;
  const CUDA_KERNEL_NODE_PARAMS p = f.kernel_update();
  f.make_current(own);
  return api().cuGraphExecKernelNodeSetParams(e, n, &p);
}

// What `probe` answered with no current context and with the node's context current, each in
// a child process, both printed; false when a child had no usable driver. The call with the
// node's context current must succeed.
bool ask_both(const char* what, const std::function<CUresult(bool)>& probe, Outcome* none) {
  *none = in_child([&] { return probe(false); });
  const Outcome own = in_child([&] { return probe(true); });
  WARN(what << ": no current context -> " << none->text() << "; its context current -> "
            << own.text());
  if (none->skipped || own.skipped) return false;
  REQUIRE_FALSE(own.crashed);
  CHECK(own.result == CUDA_SUCCESS);
  CHECK(own.emulated == none->emulated);
  return true;
}

// The measured pair: no current context crashes a real driver 580 (the emulator answers
// CUDA_ERROR_INVALID_CONTEXT instead); the node's context current succeeds.
void expect_needs_current(const char* what, CUresult (*probe)(bool)) {
  Outcome none;
  if (!ask_both(what, probe, &none)) CUSTREAM_SKIP("no usable driver");
  if (none.crashed) {
    CHECK(none.signal == SIGSEGV);  // so on an H100, driver 580
  } else {
    CHECK(none.emulated);  // a real driver that answers instead of crashing: a new fact
    CHECK(none.result == CUDA_ERROR_INVALID_CONTEXT);
  }
}

// A call the driver answers with no current context (a crash here says custream's caller
// needs a context made current).
void expect_works_without_current(const char* what, const std::function<CUresult(bool)>& probe) {
  Outcome none;
  if (!ask_both(what, probe, &none)) CUSTREAM_SKIP("no usable driver");
  CHECK_FALSE(none.crashed);
  CHECK(none.result == CUDA_SUCCESS);
}

TEST_CASE("a kernel node added to a conditional body needs a current context", "[conformance]") {
  expect_needs_current("cuGraphAddNode (kernel) into an IF body", add_to_body);
}

CUresult root_add(bool own) {
  Fixture f;
  CUgraph g = nullptr;
  if (!f.ok || api().cuGraphCreate(&g, 0) != CUDA_SUCCESS) return kSetupFailed;
  CUgraphNodeParams k = f.kernel();
  CUgraphNode n = nullptr;
  f.make_current(own);
  return api().cuGraphAddNode(&n, g, nullptr, nullptr, 0, &k);
}

TEST_CASE("a kernel node added to a root graph needs a current context", "[conformance]") {
  expect_needs_current("cuGraphAddNode (kernel) into a root graph", root_add);
}

TEST_CASE("cuGraphExecKernelNodeSetParams needs a current context", "[conformance]") {
  expect_needs_current("cuGraphExecKernelNodeSetParams", exec_kernel_update);
}

// Calls on a kernel graph that a real driver 580 answers with no current context (an H100
// printed CUDA_SUCCESS for each): custream makes them without making a context current
// (Graph::launch, update, set_child, set_enabled), so a crash here says it must.
CUresult launch(bool own) {
  Fixture f;
  CUgraphNode n = nullptr;
  CUgraphExec e = f.kernel_exec(&n);
  if (e == nullptr) return kSetupFailed;
  f.make_current(own);
  const CUresult r = api().cuGraphLaunch(e, f.stream);
  f.make_current(true);
  api().cuStreamSynchronize(f.stream);
  return r;
}

CUresult whole_update(bool own) {
  Fixture f;
  CUgraphNode n = nullptr, m = nullptr;
  CUgraphExec e = f.kernel_exec(&n);
  CUgraph newer = f.kernel_graph(&m);
  if (e == nullptr || newer == nullptr) return kSetupFailed;
  CUgraphExecUpdateResultInfo info{};
  f.make_current(own);
  return api().cuGraphExecUpdate(e, newer, &info);
}

CUresult set_child(bool own) {
  Fixture f;
  CUgraphNode n = nullptr, m = nullptr;
  CUgraph child = f.kernel_graph(&n);
  CUgraph other = f.kernel_graph(&m);
  CUgraph g = nullptr;
  if (child == nullptr || other == nullptr || api().cuGraphCreate(&g, 0) != CUDA_SUCCESS)
    return kSetupFailed;
  CUgraphNodeParams c{};
  c.type = CU_GRAPH_NODE_TYPE_GRAPH;
  c.graph.graph = child;
  CUgraphNode node = nullptr;
  if (api().cuGraphAddNode(&node, g, nullptr, nullptr, 0, &c) != CUDA_SUCCESS) return kSetupFailed;
  CUgraphExec e = f.instantiate(g);
  if (e == nullptr) return kSetupFailed;
  f.make_current(own);
  return api().cuGraphExecChildGraphNodeSetParams(e, node, other);
}

CUresult set_enabled(bool own) {
  Fixture f;
  CUgraphNode n = nullptr;
  CUgraphExec e = f.kernel_exec(&n);
  if (e == nullptr) return kSetupFailed;
  f.make_current(own);
  return api().cuGraphNodeSetEnabled(e, n, 0);
}

// A kernel node added to a root graph, and an executable's kernel node updated, with another
// context of the device current (a created one): the node's context comes from its parameters.
// On an H100 (driver 580) a raw probe with a kernel that writes its argument saw both succeed
// and the node then write the new value; here, the calls succeed and the graph launches.
// custream still makes the node's context current for these calls.
CUresult with_other_current(bool update) {
  Fixture f;
  CUgraphNode n = nullptr;
  CUgraph g = nullptr;
  CUgraphExec e = update ? f.kernel_exec(&n) : nullptr;
  if (!f.ok || (update && e == nullptr) || (!update && api().cuGraphCreate(&g, 0) != CUDA_SUCCESS))
    return kSetupFailed;
  CUcontext other = nullptr;
  if (api().cuCtxCreate(&other, 0, 0) != CUDA_SUCCESS) return kSetupFailed;  // now current
  CUresult r = CUDA_SUCCESS;
  if (update) {
    const CUDA_KERNEL_NODE_PARAMS p = f.kernel_update();
    r = api().cuGraphExecKernelNodeSetParams(e, n, &p);
  } else {
    CUgraphNodeParams k = f.kernel();
    r = api().cuGraphAddNode(&n, g, nullptr, nullptr, 0, &k);
  }
  f.make_current(true);
  if (r != CUDA_SUCCESS) return r;
  if (!update) e = f.instantiate(g);
  if (e == nullptr || api().cuGraphLaunch(e, f.stream) != CUDA_SUCCESS ||
      api().cuStreamSynchronize(f.stream) != CUDA_SUCCESS)
    return kSetupFailed;
  return CUDA_SUCCESS;
}

TEST_CASE("kernel-node adds and updates work with another context current", "[conformance]") {
  for (const bool update : {false, true}) {
    const char* what = update ? "cuGraphExecKernelNodeSetParams" : "cuGraphAddNode (kernel)";
    INFO(what);
    const Outcome o = in_child([update] { return with_other_current(update); });
    WARN(what << ": another context current -> " << o.text());
    if (o.skipped) CUSTREAM_SKIP("no usable driver");
    CHECK_FALSE(o.crashed);
    CHECK(o.result == CUDA_SUCCESS);
  }
}

TEST_CASE("kernel-graph launch and updates work with no current context", "[conformance]") {
  const std::pair<const char*, CUresult (*)(bool)> probes[] = {
      {"cuGraphLaunch of a kernel graph", launch},
      {"cuGraphExecUpdate of a kernel graph", whole_update},
      {"cuGraphExecChildGraphNodeSetParams (kernel children)", set_child},
      {"cuGraphNodeSetEnabled (kernel node)", set_enabled}};
  for (const auto& [what, probe] : probes) {
    INFO(what);
    expect_works_without_current(what, probe);
  }
}

// Which context is current while a probed node is added.
enum class Current { none, own, other };

// cuGraphAddNode of a node of another kind, its context in the parameters where it has one,
// with `current` current; then, with the node's context current, the graph instantiated and
// launched: CUDA_ERROR_INVALID_VALUE when the node did not do its work (the memset writes 7 to
// the word, the memcpy copies 9 into it).
CUresult other_add(Current current, CUgraphNodeType type) {
  Fixture f;
  CUgraph g = nullptr;
  CUdeviceptr from = 0;
  if (!f.ok || api().cuGraphCreate(&g, 0) != CUDA_SUCCESS ||
      api().cuMemAlloc(&from, 4) != CUDA_SUCCESS ||
      api().cuMemsetD32Async(from, 9, 1, f.stream) != CUDA_SUCCESS ||
      api().cuMemsetD32Async(f.word, 0, 1, f.stream) != CUDA_SUCCESS ||
      api().cuStreamSynchronize(f.stream) != CUDA_SUCCESS)
    return kSetupFailed;
  CUgraphNodeParams p{};
  p.type = type;
  if (type == CU_GRAPH_NODE_TYPE_MEMSET) {
    p.memset.dst = f.word;
    p.memset.value = 7;
    p.memset.elementSize = 4;
    p.memset.width = 1;
    p.memset.height = 1;
    p.memset.ctx = f.ctx;
  } else if (type == CU_GRAPH_NODE_TYPE_MEMCPY) {
    p.memcpy.copyCtx = f.ctx;
    p.memcpy.copyParams.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    p.memcpy.copyParams.srcDevice = from;
    p.memcpy.copyParams.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    p.memcpy.copyParams.dstDevice = f.word;
    p.memcpy.copyParams.WidthInBytes = 4;
    p.memcpy.copyParams.Height = 1;
    p.memcpy.copyParams.Depth = 1;
  }
  CUcontext other = nullptr;
  if (current == Current::other) {
    if (api().cuCtxCreate(&other, 0, 0) != CUDA_SUCCESS) return kSetupFailed;
  } else {
    f.make_current(current == Current::own);
  }
  CUgraphNode n = nullptr;
  const CUresult r = api().cuGraphAddNode(&n, g, nullptr, nullptr, 0, &p);
  f.make_current(true);
  if (r != CUDA_SUCCESS) return r;
  CUgraphExec e = f.instantiate(g);
  int word = -1;
  if (e == nullptr || api().cuGraphLaunch(e, f.stream) != CUDA_SUCCESS ||
      api().cuMemcpyDtoHAsync(&word, f.word, 4, f.stream) != CUDA_SUCCESS ||
      api().cuStreamSynchronize(f.stream) != CUDA_SUCCESS)
    return kSetupFailed;
  const int expected = type == CU_GRAPH_NODE_TYPE_MEMSET   ? 7
                       : type == CU_GRAPH_NODE_TYPE_MEMCPY ? 9
                                                           : 0;
  return word == expected ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

// Measured on an H100: custream's builder adds these to a root graph without making its
// context current (lib/graph_builder/builder.cpp, adds_without_current), whatever is current.
TEST_CASE("memset, memcpy and empty node adds work with no or another context current",
          "[conformance]") {
  const std::pair<const char*, CUgraphNodeType> kinds[] = {
      {"cuGraphAddNode (memset)", CU_GRAPH_NODE_TYPE_MEMSET},
      {"cuGraphAddNode (memcpy)", CU_GRAPH_NODE_TYPE_MEMCPY},
      {"cuGraphAddNode (empty)", CU_GRAPH_NODE_TYPE_EMPTY}};
  for (const auto& [what, type] : kinds) {
    INFO(what);
    expect_works_without_current(what, [type = type](bool own) {
      return other_add(own ? Current::own : Current::none, type);
    });
    const Outcome other = in_child([type = type] { return other_add(Current::other, type); });
    WARN(what << ": another context current -> " << other.text());
    if (other.skipped) continue;
    CHECK_FALSE(other.crashed);
    CHECK(other.result == CUDA_SUCCESS);
  }
}

}  // namespace
}  // namespace conformance

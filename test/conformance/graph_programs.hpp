// Driver conformance: the fixtures of graph_programs.cpp and graph_program_updates.cpp (graphs
// as programs): a PTX module with the emulator's CPU twins, node parameters, graph handles.
#pragma once

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

inline void cpu_gp_add(const custream_emu_kernel_launch* l) {
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

inline CUresult try_add(CUgraphNode* out, CUgraph g, std::vector<CUgraphNode> deps,
                        CUgraphNodeParams* p) {
  return api().cuGraphAddNode(out, g, deps.empty() ? nullptr : deps.data(), nullptr, deps.size(),
                              p);
}

inline CUgraphNode add(CUgraph g, std::vector<CUgraphNode> deps, CUgraphNodeParams p) {
  CUgraphNode n = nullptr;
  CU_OK(try_add(&n, g, std::move(deps), &p));
  return n;
}

inline CUgraphNodeParams memset_params(CUdeviceptr dst, unsigned value, size_t count,
                                       CUcontext ctx) {
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

inline CUgraphNodeParams memcpy_params(CUdeviceptr dst, CUdeviceptr src, size_t bytes,
                                       CUcontext ctx) {
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

inline CUgraphNodeParams host_params(std::function<void()>* f) {
  CUgraphNodeParams p{};
  p.type = CU_GRAPH_NODE_TYPE_HOST;
  p.host.fn = call_function;
  p.host.userData = f;
  return p;
}

// A kernel node of f with arguments `args` (the node copies them).
inline CUgraphNodeParams kernel_params(CUfunction f, void** args) {
  CUgraphNodeParams p{};
  p.type = CU_GRAPH_NODE_TYPE_KERNEL;
  p.kernel.func = f;
  p.kernel.gridDimX = p.kernel.gridDimY = p.kernel.gridDimZ = 1;
  p.kernel.blockDimX = p.kernel.blockDimY = p.kernel.blockDimZ = 1;
  p.kernel.kernelParams = args;
  return p;
}

inline std::vector<int> read_ints(CUdeviceptr p, size_t n, CUstream s) {
  std::vector<int> v(n, -1);
  CU_OK(api().cuMemcpyDtoHAsync(v.data(), p, n * sizeof(int), s));
  CU_OK(api().cuStreamSynchronize(s));
  return v;
}

inline void launch_and_wait(CUgraphExec e, CUstream s) {
  CU_OK(api().cuGraphLaunch(e, s));
  CU_OK(api().cuStreamSynchronize(s));
}

inline CUgraphConditionalHandle make_handle(CUgraph g, CUcontext ctx, unsigned value,
                                            unsigned flags = CU_GRAPH_COND_ASSIGN_DEFAULT) {
  CUgraphConditionalHandle h = 0;
  CU_OK(api().cuGraphConditionalHandleCreate(&h, g, ctx, value, flags));
  return h;
}

// Adds a conditional node and answers its bodies.
inline std::vector<CUgraph> add_conditional(CUgraph g, std::vector<CUgraphNode> deps,
                                            CUgraphConditionalHandle h,
                                            CUgraphConditionalNodeType type, unsigned size,
                                            CUcontext ctx, CUgraphNode* node = nullptr) {
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

// One memset node in `body` writing value into p[0].
inline void body_writes(CUgraph body, CUdeviceptr p, unsigned value, CUcontext ctx) {
  add(body, {}, memset_params(p, value, 1, ctx));
}

}  // namespace
}  // namespace conformance

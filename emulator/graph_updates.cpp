// Per-node updates of an executable graph (cuGraphExec*SetParams, cuGraphNodeSetEnabled): each
// replaces the executable's core by a copy with the node changed, so a launch already made
// keeps the parameters it was made with (invariants 7 and 14).
#include "emu.hpp"

namespace emu {
namespace {

GraphExec* as_exec(CUgraphExec e) {
  return valid(state().execs, e) ? reinterpret_cast<GraphExec*>(e) : nullptr;
}

// The executable and the place of node hn in it (mu held): CUDA_ERROR_INVALID_VALUE when hn is
// no node of the graph the executable was instantiated from.
CUresult locate(CUgraphExec h, CUgraphNode hn, GraphExec** e, const std::vector<size_t>** path) {
  *e = as_exec(h);
  if (!*e) return CUDA_ERROR_INVALID_VALUE;
  if (!valid(state().nodes, hn)) return CUDA_ERROR_INVALID_VALUE;
  auto it = (*e)->paths.find(reinterpret_cast<const Node*>(hn));
  if (it == (*e)->paths.end()) return CUDA_ERROR_INVALID_VALUE;
  *path = &it->second;
  return CUDA_SUCCESS;
}

const Work& current(const GraphExec& e, const std::vector<size_t>& path) {
  const ExecCore* c = e.core.get();
  for (size_t k = 0; k + 1 < path.size(); k += 2) c = c->works[path[k]].bodies[path[k + 1]].get();
  return c->works[path.back()];
}

// Copies the cores on the path (launches made hold the old ones) and answers the node's Work.
Work* writable(GraphExec* e, const std::vector<size_t>& path) {
  auto top = std::make_shared<ExecCore>(*e->core);
  e->core = top;
  ExecCore* c = top.get();
  for (size_t k = 0; k + 1 < path.size(); k += 2) {
    Work& w = c->works[path[k]];
    auto body = std::make_shared<ExecCore>(*w.bodies[path[k + 1]]);
    c = body.get();
    w.bodies[path[k + 1]] = std::move(body);
  }
  return &c->works[path.back()];
}

// Replaces the node's Work by w (mu held), keeping what is the executable's: enabled state.
void replace(GraphExec* e, const std::vector<size_t>& path, Work w) {
  Work* at = writable(e, path);
  w.enabled = at->enabled;
  *at = std::move(w);
}

CUcontext kernel_ctx(const Work& w) {
  CUDA_KERNEL_NODE_PARAMS_v2 p{};
  if (w.kernel) kernel_node_params(*w.kernel, &p);
  return p.ctx;
}

// The new parameters of a node of kind `type` (mu held): cuda.h's rules of
// cuGraphExecNodeSetParams (a kernel stays in its context; memory nodes unsupported).
CUresult set_node(CUgraphExec h, CUgraphNode hn, const CUgraphNodeParams& p) {
  GraphExec* e = nullptr;
  const std::vector<size_t>* path = nullptr;
  if (CUresult r = locate(h, hn, &e, &path)) return r;
  const Work& old = current(*e, *path);
  if (old.type != p.type) return CUDA_ERROR_INVALID_VALUE;
  if (p.type == CU_GRAPH_NODE_TYPE_GRAPH) {
    if (!valid(state().graphs, p.graph.graph)) return CUDA_ERROR_INVALID_VALUE;
    std::shared_ptr<ExecCore> body;
    if (CUresult r =
            exec_child_core(*old.bodies[0], *reinterpret_cast<Graph*>(p.graph.graph), &body))
      return r;
    writable(e, *path)->bodies[0] = std::move(body);
    return CUDA_SUCCESS;
  }
  Work w;
  if (CUresult r = work_from_params(p, &w)) return r;
  if (w.type == CU_GRAPH_NODE_TYPE_KERNEL && kernel_ctx(w) != kernel_ctx(old))
    return CUDA_ERROR_INVALID_VALUE;  // cuda.h: the owning context cannot change
  replace(e, *path, std::move(w));
  return CUDA_SUCCESS;
}

CUresult graph_exec_node_set_params(CUgraphExec h, CUgraphNode n, CUgraphNodeParams* p) {
  EMU_ENTER("cuGraphExecNodeSetParams");
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(state().mu);
  return set_node(h, n, *p);
}

CUresult exec_kernel(CUgraphExec h, CUgraphNode n, const CUDA_KERNEL_NODE_PARAMS_v3& k) {
  CUgraphNodeParams p{};
  p.type = CU_GRAPH_NODE_TYPE_KERNEL;
  p.kernel = k;
  std::lock_guard<std::mutex> lk(state().mu);
  return set_node(h, n, p);
}

CUresult graph_exec_kernel_node_set_params(CUgraphExec h, CUgraphNode n,
                                           const CUDA_KERNEL_NODE_PARAMS_v2* q) {
  EMU_ENTER("cuGraphExecKernelNodeSetParams");
  if (!q) return CUDA_ERROR_INVALID_VALUE;
  if (!current_context()) return kNoCurrentContext;
  CUDA_KERNEL_NODE_PARAMS_v3 k{};
  k.func = q->func;
  k.gridDimX = q->gridDimX, k.gridDimY = q->gridDimY, k.gridDimZ = q->gridDimZ;
  k.blockDimX = q->blockDimX, k.blockDimY = q->blockDimY, k.blockDimZ = q->blockDimZ;
  k.sharedMemBytes = q->sharedMemBytes;
  k.kernelParams = q->kernelParams;
  k.extra = q->extra;
  k.kern = q->kern;
  k.ctx = q->ctx;
  return exec_kernel(h, n, k);
}

CUresult graph_exec_kernel_node_set_params_v1(CUgraphExec h, CUgraphNode n,
                                              const CUDA_KERNEL_NODE_PARAMS_v1* q) {
  EMU_ENTER("cuGraphExecKernelNodeSetParams");
  if (!q) return CUDA_ERROR_INVALID_VALUE;
  if (!current_context()) return kNoCurrentContext;
  CUDA_KERNEL_NODE_PARAMS_v3 k{};
  k.func = q->func;
  k.gridDimX = q->gridDimX, k.gridDimY = q->gridDimY, k.gridDimZ = q->gridDimZ;
  k.blockDimX = q->blockDimX, k.blockDimY = q->blockDimY, k.blockDimZ = q->blockDimZ;
  k.sharedMemBytes = q->sharedMemBytes;
  k.kernelParams = q->kernelParams;
  k.extra = q->extra;
  return exec_kernel(h, n, k);
}

CUresult graph_exec_memset_node_set_params(CUgraphExec h, CUgraphNode n,
                                           const CUDA_MEMSET_NODE_PARAMS_v1* q, CUcontext) {
  EMU_ENTER("cuGraphExecMemsetNodeSetParams");
  if (!q) return CUDA_ERROR_INVALID_VALUE;
  CUgraphNodeParams p{};
  p.type = CU_GRAPH_NODE_TYPE_MEMSET;
  p.memset.dst = q->dst;
  p.memset.pitch = q->pitch;
  p.memset.value = q->value;
  p.memset.elementSize = q->elementSize;
  p.memset.width = q->width;
  p.memset.height = q->height;
  std::lock_guard<std::mutex> lk(state().mu);
  return set_node(h, n, p);
}

CUresult graph_exec_memcpy_node_set_params(CUgraphExec h, CUgraphNode n, const CUDA_MEMCPY3D_v2* q,
                                           CUcontext) {
  EMU_ENTER("cuGraphExecMemcpyNodeSetParams");
  if (!q) return CUDA_ERROR_INVALID_VALUE;
  CUgraphNodeParams p{};
  p.type = CU_GRAPH_NODE_TYPE_MEMCPY;
  p.memcpy.copyParams = *q;
  std::lock_guard<std::mutex> lk(state().mu);
  return set_node(h, n, p);
}

CUresult graph_exec_host_node_set_params(CUgraphExec h, CUgraphNode n,
                                         const CUDA_HOST_NODE_PARAMS_v1* q) {
  EMU_ENTER("cuGraphExecHostNodeSetParams");
  if (!q) return CUDA_ERROR_INVALID_VALUE;
  CUgraphNodeParams p{};
  p.type = CU_GRAPH_NODE_TYPE_HOST;
  p.host.fn = q->fn;
  p.host.userData = q->userData;
  std::lock_guard<std::mutex> lk(state().mu);
  return set_node(h, n, p);
}

CUresult graph_exec_child_graph_node_set_params(CUgraphExec h, CUgraphNode n, CUgraph child) {
  EMU_ENTER("cuGraphExecChildGraphNodeSetParams");
  CUgraphNodeParams p{};
  p.type = CU_GRAPH_NODE_TYPE_GRAPH;
  p.graph.graph = child;
  std::lock_guard<std::mutex> lk(state().mu);
  return set_node(h, n, p);
}

// cuda.h: kernel, memset and memcpy nodes only.
bool can_disable(CUgraphNodeType t) {
  return t == CU_GRAPH_NODE_TYPE_KERNEL || t == CU_GRAPH_NODE_TYPE_MEMSET ||
         t == CU_GRAPH_NODE_TYPE_MEMCPY;
}

CUresult graph_node_set_enabled(CUgraphExec h, CUgraphNode n, unsigned int enabled) {
  EMU_ENTER("cuGraphNodeSetEnabled");
  std::lock_guard<std::mutex> lk(state().mu);
  GraphExec* e = nullptr;
  const std::vector<size_t>* path = nullptr;
  if (CUresult r = locate(h, n, &e, &path)) return r;
  if (!can_disable(current(*e, *path).type)) return CUDA_ERROR_INVALID_VALUE;
  writable(e, *path)->enabled = enabled != 0;
  return CUDA_SUCCESS;
}

CUresult graph_node_get_enabled(CUgraphExec h, CUgraphNode n, unsigned int* enabled) {
  EMU_ENTER("cuGraphNodeGetEnabled");
  if (!enabled) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(state().mu);
  GraphExec* e = nullptr;
  const std::vector<size_t>* path = nullptr;
  if (CUresult r = locate(h, n, &e, &path)) return r;
  const Work& w = current(*e, *path);
  if (!can_disable(w.type)) return CUDA_ERROR_INVALID_VALUE;
  *enabled = w.enabled ? 1 : 0;
  return CUDA_SUCCESS;
}

}  // namespace

void register_node_update_entries(std::vector<Entry>& out) {
  out.insert(
      out.end(),
      {
          EMU_ENTRY(cuGraphExecNodeSetParams, 12020, graph_exec_node_set_params),
          EMU_ENTRY(cuGraphExecKernelNodeSetParams, 10010, graph_exec_kernel_node_set_params_v1),
          EMU_ENTRY(cuGraphExecKernelNodeSetParams, 12000, graph_exec_kernel_node_set_params),
          EMU_ENTRY(cuGraphExecMemsetNodeSetParams, 10020, graph_exec_memset_node_set_params),
          EMU_ENTRY(cuGraphExecMemcpyNodeSetParams, 10020, graph_exec_memcpy_node_set_params),
          EMU_ENTRY(cuGraphExecHostNodeSetParams, 10020, graph_exec_host_node_set_params),
          EMU_ENTRY(cuGraphExecChildGraphNodeSetParams, 11010,
                    graph_exec_child_graph_node_set_params),
          EMU_ENTRY(cuGraphNodeSetEnabled, 11060, graph_node_set_enabled),
          EMU_ENTRY(cuGraphNodeGetEnabled, 11060, graph_node_get_enabled),
      });
}

}  // namespace emu

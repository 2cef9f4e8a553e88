// Graphs: nodes, instantiation, launch, upload, executable update, DOT output.
#include <algorithm>
#include <cstdio>
#include <string>

#include "emu.hpp"

namespace emu {
namespace {

Graph* as_graph(CUgraph g) {
  return valid(state().graphs, g) ? reinterpret_cast<Graph*>(g) : nullptr;
}
Node* as_node(CUgraphNode n) {
  return valid(state().nodes, n) ? reinterpret_cast<Node*>(n) : nullptr;
}
GraphExec* as_exec(CUgraphExec e) {
  return valid(state().execs, e) ? reinterpret_cast<GraphExec*>(e) : nullptr;
}

CUresult graph_create(CUgraph* ph, unsigned int flags) {
  EMU_ENTER("cuGraphCreate");
  if (!ph || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  *ph = reinterpret_cast<CUgraph>(new_graph());
  s.live.fetch_add(1);
  return CUDA_SUCCESS;
}

CUresult graph_destroy(CUgraph h) {
  EMU_ENTER("cuGraphDestroy");
  State& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  Graph* g = as_graph(h);
  if (!g) return CUDA_ERROR_INVALID_VALUE;
  if (g->owned_by_capture) return CUDA_ERROR_INVALID_VALUE;
  destroy_graph(g);
  s.live.fetch_sub(1);
  return CUDA_SUCCESS;
}

CUresult graph_get_nodes(CUgraph h, CUgraphNode* nodes, size_t* num) {
  EMU_ENTER("cuGraphGetNodes");
  if (!num) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(state().mu);
  Graph* g = as_graph(h);
  if (!g) return CUDA_ERROR_INVALID_VALUE;
  if (nodes) {
    for (size_t i = 0; i < *num; ++i)
      nodes[i] = i < g->nodes.size() ? reinterpret_cast<CUgraphNode>(g->nodes[i].get()) : nullptr;
  }
  *num = g->nodes.size();
  return CUDA_SUCCESS;
}

// Validates the dependency list of a new node of g.
CUresult check_deps(Graph* g, const CUgraphNode* deps, size_t n, std::vector<Node*>* out) {
  if (n && !deps) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < n; ++i) {
    Node* d = as_node(deps[i]);
    if (!d || d->graph != g) return CUDA_ERROR_INVALID_VALUE;
    if (std::find(out->begin(), out->end(), d) != out->end()) return CUDA_ERROR_INVALID_VALUE;
    out->push_back(d);
  }
  return CUDA_SUCCESS;
}

CUresult add(CUgraphNode* ph, CUgraph h, const CUgraphNode* deps, size_t n, Work w) {
  if (!ph) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(state().mu);
  Graph* g = as_graph(h);
  if (!g) return CUDA_ERROR_INVALID_VALUE;
  std::vector<Node*> d;
  if (CUresult r = check_deps(g, deps, n, &d)) return r;
  *ph = reinterpret_cast<CUgraphNode>(add_node(g, std::move(w), d));
  return CUDA_SUCCESS;
}

CUresult graph_add_host_node(CUgraphNode* ph, CUgraph g, const CUgraphNode* deps, size_t n,
                             const CUDA_HOST_NODE_PARAMS* p) {
  EMU_ENTER("cuGraphAddHostNode");
  if (!p || !p->fn) return CUDA_ERROR_INVALID_VALUE;
  Work w;
  w.type = CU_GRAPH_NODE_TYPE_HOST;
  w.fn = p->fn;
  w.arg = p->userData;
  return add(ph, g, deps, n, std::move(w));
}

CUresult graph_add_empty_node(CUgraphNode* ph, CUgraph g, const CUgraphNode* deps, size_t n) {
  EMU_ENTER("cuGraphAddEmptyNode");
  return add(ph, g, deps, n, Work{});
}

CUresult graph_add_memset_node(CUgraphNode* ph, CUgraph g, const CUgraphNode* deps, size_t n,
                               const CUDA_MEMSET_NODE_PARAMS* p, CUcontext) {
  EMU_ENTER("cuGraphAddMemsetNode");
  if (!p || !p->dst) return CUDA_ERROR_INVALID_VALUE;
  if (p->elementSize != 1 && p->elementSize != 2 && p->elementSize != 4)
    return CUDA_ERROR_INVALID_VALUE;
  if (p->height > 1 && p->pitch < p->width * p->elementSize) return CUDA_ERROR_INVALID_VALUE;
  Work w;
  w.type = CU_GRAPH_NODE_TYPE_MEMSET;
  w.dst = p->dst;
  w.value = p->value;
  w.elem_size = p->elementSize;
  w.width = p->width;
  w.height = p->height ? p->height : 1;
  w.pitch = p->height > 1 ? p->pitch : p->width * p->elementSize;
  return add(ph, g, deps, n, std::move(w));
}

CUresult add_event_node(CUgraphNode* ph, CUgraph g, const CUgraphNode* deps, size_t n, CUevent e,
                        CUgraphNodeType type) {
  Work w;
  w.type = type;
  {
    std::lock_guard<std::mutex> lk(state().mu);
    if (!valid(state().events, e)) return CUDA_ERROR_INVALID_VALUE;
    w.event = reinterpret_cast<Event*>(e)->state;
  }
  return add(ph, g, deps, n, std::move(w));
}

CUresult graph_add_event_record_node(CUgraphNode* ph, CUgraph g, const CUgraphNode* deps, size_t n,
                                     CUevent e) {
  EMU_ENTER("cuGraphAddEventRecordNode");
  return add_event_node(ph, g, deps, n, e, CU_GRAPH_NODE_TYPE_EVENT_RECORD);
}

CUresult graph_add_event_wait_node(CUgraphNode* ph, CUgraph g, const CUgraphNode* deps, size_t n,
                                   CUevent e) {
  EMU_ENTER("cuGraphAddEventWaitNode");
  return add_event_node(ph, g, deps, n, e, CU_GRAPH_NODE_TYPE_WAIT_EVENT);
}

CUresult graph_host_node_get_params(CUgraphNode h, CUDA_HOST_NODE_PARAMS* p) {
  EMU_ENTER("cuGraphHostNodeGetParams");
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(state().mu);
  Node* n = as_node(h);
  if (!n || n->work.type != CU_GRAPH_NODE_TYPE_HOST) return CUDA_ERROR_INVALID_VALUE;
  p->fn = n->work.fn;
  p->userData = n->work.arg;
  return CUDA_SUCCESS;
}

CUresult graph_host_node_set_params(CUgraphNode h, const CUDA_HOST_NODE_PARAMS* p) {
  EMU_ENTER("cuGraphHostNodeSetParams");
  if (!p || !p->fn) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(state().mu);
  Node* n = as_node(h);
  if (!n || n->work.type != CU_GRAPH_NODE_TYPE_HOST) return CUDA_ERROR_INVALID_VALUE;
  n->work.fn = p->fn;
  n->work.arg = p->userData;
  return CUDA_SUCCESS;
}

// A kernel node's launch, as captured: custream asks this of every kernel node of a graph it
// instantiates, so it is a lookup and a copy of what the launch recorded.
CUresult kernel_node_get_params(CUgraphNode h, CUDA_KERNEL_NODE_PARAMS_v2* p) {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(state().mu);
  Node* n = as_node(h);
  if (!n || n->work.type != CU_GRAPH_NODE_TYPE_KERNEL || !n->work.kernel)
    return CUDA_ERROR_INVALID_VALUE;
  kernel_node_params(*n->work.kernel, p);
  return CUDA_SUCCESS;
}

CUresult graph_kernel_node_get_params(CUgraphNode h, CUDA_KERNEL_NODE_PARAMS_v2* p) {
  EMU_ENTER("cuGraphKernelNodeGetParams");
  return kernel_node_get_params(h, p);
}

// The CUDA 10.0 ABI: the same without the kernel and context fields.
CUresult graph_kernel_node_get_params_v1(CUgraphNode h, CUDA_KERNEL_NODE_PARAMS_v1* p) {
  EMU_ENTER("cuGraphKernelNodeGetParams");
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  CUDA_KERNEL_NODE_PARAMS_v2 v2{};
  if (CUresult r = kernel_node_get_params(h, &v2)) return r;
  p->func = v2.func;
  p->gridDimX = v2.gridDimX, p->gridDimY = v2.gridDimY, p->gridDimZ = v2.gridDimZ;
  p->blockDimX = v2.blockDimX, p->blockDimY = v2.blockDimY, p->blockDimZ = v2.blockDimZ;
  p->sharedMemBytes = v2.sharedMemBytes;
  p->kernelParams = v2.kernelParams;
  p->extra = v2.extra;
  return CUDA_SUCCESS;
}

CUresult graph_node_get_type(CUgraphNode h, CUgraphNodeType* type) {
  EMU_ENTER("cuGraphNodeGetType");
  if (!type) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(state().mu);
  Node* n = as_node(h);
  if (!n) return CUDA_ERROR_INVALID_VALUE;
  *type = n->work.type;
  return CUDA_SUCCESS;
}

const char* type_name(CUgraphNodeType t) {
  switch (t) {
    case CU_GRAPH_NODE_TYPE_HOST:
      return "HOST";
    case CU_GRAPH_NODE_TYPE_MEMSET:
      return "MEMSET";
    case CU_GRAPH_NODE_TYPE_MEMCPY:
      return "MEMCPY";
    case CU_GRAPH_NODE_TYPE_EMPTY:
      return "EMPTY";
    case CU_GRAPH_NODE_TYPE_KERNEL:
      return "KERNEL";
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
      return "EVENT_RECORD";
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
      return "WAIT_EVENT";
    case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP:
      return "BATCH_MEM_OP";
    default:
      return "UNKNOWN";
  }
}

CUresult graph_debug_dot_print(CUgraph h, const char* path, unsigned int flags) {
  EMU_ENTER("cuGraphDebugDotPrint");
  if (!path) return CUDA_ERROR_INVALID_VALUE;
  std::string out;
  {
    std::lock_guard<std::mutex> lk(state().mu);
    Graph* g = as_graph(h);
    if (!g) return CUDA_ERROR_INVALID_VALUE;
    const bool verbose = flags & CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE;
    char buf[512];
    out +=
        "digraph dot {\n\tsubgraph cluster_0 {\n\t\tlabel=\"graph_0\" graph[style=\"dashed\"];\n";
    for (const auto& n : g->nodes) {
      const Work& w = n->work;
      std::string label = std::string(type_name(w.type)) + "\\nnode " + std::to_string(n->index);
      if (verbose) {
        switch (w.type) {
          case CU_GRAPH_NODE_TYPE_HOST:
            std::snprintf(buf, sizeof buf, "\\nfn %p\\nuserData %p",
                          reinterpret_cast<void*>(w.fn ? w.fn : nullptr), w.arg);
            label += buf;
            break;
          case CU_GRAPH_NODE_TYPE_MEMSET:
            std::snprintf(buf, sizeof buf,
                          "\\ndst 0x%llx\\nvalue %u\\nelementSize %u\\nwidth %zu\\nheight %zu",
                          static_cast<unsigned long long>(w.dst), w.value, w.elem_size, w.width,
                          w.height);
            label += buf;
            break;
          case CU_GRAPH_NODE_TYPE_MEMCPY:
            std::snprintf(buf, sizeof buf, "\\ndst 0x%llx\\nsrc 0x%llx\\nbytes %zu",
                          static_cast<unsigned long long>(w.dst),
                          static_cast<unsigned long long>(w.src), w.bytes);
            label += buf;
            break;
          case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP:
            std::snprintf(buf, sizeof buf, "\\noperation %d\\naddress 0x%llx\\nvalue %llu",
                          static_cast<int>(w.memop), static_cast<unsigned long long>(w.dst),
                          static_cast<unsigned long long>(w.memop_value));
            label += buf;
            break;
          default:
            break;
        }
        std::snprintf(buf, sizeof buf, "\\nhandle %p", static_cast<void*>(n.get()));
        label += buf;
      }
      out += "\t\t\"graph_0_node_" + std::to_string(n->index) + "\" [label=\"" + label + "\"];\n";
    }
    for (const auto& n : g->nodes)
      for (const Node* d : n->deps)
        out += "\t\t\"graph_0_node_" + std::to_string(d->index) + "\" -> \"graph_0_node_" +
               std::to_string(n->index) + "\";\n";
    out += "\t}\n}\n";
  }
  std::FILE* f = std::fopen(path, "w");
  if (!f) return CUDA_ERROR_OPERATING_SYSTEM;
  const bool ok = std::fwrite(out.data(), 1, out.size(), f) == out.size();
  if (std::fclose(f) != 0 || !ok) return CUDA_ERROR_OPERATING_SYSTEM;
  return CUDA_SUCCESS;
}

std::shared_ptr<ExecCore> make_core(const Graph& g) {
  auto core = std::make_shared<ExecCore>();
  for (const auto& n : g.nodes) {
    core->works.push_back(n->work);
    std::vector<size_t> d;
    for (const Node* dep : n->deps) d.push_back(dep->index);
    core->deps.push_back(std::move(d));
  }
  core->refs = std::make_shared<RefSet>();
  for (const auto& [obj, count] : g.refs->refs) {
    user_object_add(obj, count);
    core->refs->refs[obj] = count;
  }
  return core;
}

CUresult instantiate(CUgraphExec* ph, CUgraph h, unsigned long long flags, CUstream upload,
                     CUgraphInstantiateResult* result) {
  if (result) *result = CUDA_GRAPH_INSTANTIATE_ERROR;
  if (!ph) return CUDA_ERROR_INVALID_VALUE;
  const unsigned long long known =
      CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD |
      CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY;
  if (flags & ~known) return CUDA_ERROR_INVALID_VALUE;
  if ((flags & CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH) &&
      (flags & CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH))
    return CUDA_ERROR_INVALID_VALUE;
  if (!current_context()) return CUDA_ERROR_INVALID_CONTEXT;
  State& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  Context* ctx = nullptr;
  if (CUresult r = usable_current_context(&ctx)) return r;
  Graph* g = as_graph(h);
  if (!g) return CUDA_ERROR_INVALID_VALUE;
  if (flags & CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH) {
    for (const auto& n : g->nodes) {
      const auto t = n->work.type;
      if (t != CU_GRAPH_NODE_TYPE_MEMSET && t != CU_GRAPH_NODE_TYPE_MEMCPY &&
          t != CU_GRAPH_NODE_TYPE_EMPTY && t != CU_GRAPH_NODE_TYPE_KERNEL) {
        if (result) *result = CUDA_GRAPH_INSTANTIATE_NODE_OPERATION_NOT_SUPPORTED;
        return CUDA_ERROR_INVALID_VALUE;
      }
    }
  }
  Stream* up = nullptr;
  if (flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD) {
    if (CUresult r = resolve_stream(upload, &up)) return r;
    if (up->kind == Stream::kLegacy && legacy_conflict(up->ctx))
      return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
  }
  auto* e = new GraphExec;
  e->core = make_core(*g);
  e->ctx = ctx;
  s.execs.insert(e);
  s.live.fetch_add(1);
  if (up && !up->capture) push_op(up, Op{});  // the upload: ordered, nothing to copy
  *ph = reinterpret_cast<CUgraphExec>(e);
  if (result) *result = CUDA_GRAPH_INSTANTIATE_SUCCESS;
  return CUDA_SUCCESS;
}

CUresult graph_instantiate_with_flags(CUgraphExec* ph, CUgraph g, unsigned long long flags) {
  EMU_ENTER("cuGraphInstantiateWithFlags");
  if (flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD) return CUDA_ERROR_INVALID_VALUE;
  return instantiate(ph, g, flags, nullptr, nullptr);
}

CUresult graph_instantiate_with_params(CUgraphExec* ph, CUgraph g,
                                       CUDA_GRAPH_INSTANTIATE_PARAMS* p) {
  EMU_ENTER("cuGraphInstantiateWithParams");
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  p->hErrNode_out = nullptr;
  return instantiate(ph, g, p->flags, p->hUploadStream, &p->result_out);
}

CUresult graph_exec_destroy(CUgraphExec h) {
  EMU_ENTER("cuGraphExecDestroy");
  State& s = state();
  std::unique_lock<std::mutex> lk(s.mu);
  GraphExec* e = as_exec(h);
  if (!e) return CUDA_ERROR_INVALID_VALUE;
  s.execs.erase(e);
  s.live.fetch_sub(1);
  std::shared_ptr<ExecCore> core = std::move(e->core);
  delete e;
  lk.unlock();
  core.reset();  // in-flight launches hold their own reference (invariant 7)
  return CUDA_SUCCESS;
}

CUresult graph_upload(CUgraphExec h, CUstream hs) {
  EMU_ENTER("cuGraphUpload");
  State& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  if (!as_exec(h)) return CUDA_ERROR_INVALID_VALUE;
  Stream* st = nullptr;
  if (CUresult r = resolve_stream(hs, &st)) return r;
  if (st->capture)
    return st->capture->invalidated ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_SUCCESS;
  if (st->kind == Stream::kLegacy && legacy_conflict(st->ctx))
    return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
  push_op(st, Op{});
  return CUDA_SUCCESS;
}

struct Step {
  SignalPtr record;  // event-record node: completes this signal
  SignalPtr wait;    // event-wait node: waits for this signal
};

void run_launch(const std::shared_ptr<ExecCore>& core, const std::vector<Step>& steps) {
  State& s = state();
  // Works are stored in creation order, which is a topological order of the dependencies.
  for (size_t i = 0; i < core->works.size(); ++i) {
    const Work& w = core->works[i];
    const Step& st = steps[i];
    if (st.wait) {
      std::unique_lock<std::mutex> lk(s.mu);
      s.cv.wait(lk, [&] { return st.wait->done; });
    }
    if (w.type == CU_GRAPH_NODE_TYPE_HOST) {
      run_host_work(w);
    } else {
      execute_data_work(w);
    }
    if (st.record) {
      const auto when = Clock::now();
      std::lock_guard<std::mutex> lk(s.mu);
      st.record->when = when;
      st.record->done = true;
      s.cv.notify_all();
    }
  }
}

CUresult graph_launch(CUgraphExec h, CUstream hs) {
  EMU_ENTER("cuGraphLaunch");
  State& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  GraphExec* e = as_exec(h);
  if (!e) return CUDA_ERROR_INVALID_VALUE;
  Stream* st = nullptr;
  if (CUresult r = resolve_stream(hs, &st)) return r;
  if (st->capture) {
    if (st->capture->invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    invalidate(st->capture.get());  // as the driver (measured on the H200, driver 580)
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  if (st->kind == Stream::kLegacy && legacy_conflict(st->ctx))
    return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
  std::shared_ptr<ExecCore> core = e->core;
  // A kernel of a library unloaded since: refused (the H200 may crash: invariant 11).
  for (const Work& w : core->works)
    if (w.kernel && kernel_code_unloaded(*w.kernel)) return CUDA_ERROR_INVALID_HANDLE;
  std::vector<Step> steps(core->works.size());
  for (size_t i = 0; i < steps.size(); ++i) {
    const Work& w = core->works[i];
    if (w.type == CU_GRAPH_NODE_TYPE_EVENT_RECORD) {
      steps[i].record = std::make_shared<Signal>();
      w.event->sig = steps[i].record;
      w.event->recorded = true;
      w.event->capture.reset();
      w.event->capture_nodes.clear();
    } else if (w.type == CU_GRAPH_NODE_TYPE_WAIT_EVENT && w.event->recorded) {
      steps[i].wait = w.event->sig;
    }
  }
  Op op;
  op.run = [core, steps = std::move(steps)] { run_launch(core, steps); };
  push_op(st, std::move(op));
  return CUDA_SUCCESS;
}

CUresult exec_update(CUgraphExec h, CUgraph hg, CUgraphExecUpdateResultInfo* info) {
  if (!info) return CUDA_ERROR_INVALID_VALUE;
  info->result = CU_GRAPH_EXEC_UPDATE_ERROR;
  info->errorNode = nullptr;
  info->errorFromNode = nullptr;
  std::shared_ptr<ExecCore> old;
  {
    std::lock_guard<std::mutex> lk(state().mu);
    GraphExec* e = as_exec(h);
    Graph* g = as_graph(hg);
    if (!e || !g) return CUDA_ERROR_INVALID_VALUE;
    const ExecCore& c = *e->core;
    if (c.works.size() != g->nodes.size()) {
      info->result = CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
      return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
    }
    for (size_t i = 0; i < c.works.size(); ++i) {
      const Node& n = *g->nodes[i];
      if (n.work.type != c.works[i].type) {
        info->result = CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED;
        info->errorNode = reinterpret_cast<CUgraphNode>(g->nodes[i].get());
        return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
      }
      std::vector<size_t> d;
      for (const Node* dep : n.deps) d.push_back(dep->index);
      std::vector<size_t> a = c.deps[i];
      std::sort(a.begin(), a.end());
      std::sort(d.begin(), d.end());
      if (a != d) {
        info->result = CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
        info->errorNode = reinterpret_cast<CUgraphNode>(g->nodes[i].get());
        return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
      }
    }
    // The executable takes the new parameters and a copy of the new graph's user-object
    // references; launches in flight keep the old ones (invariant 7).
    old = std::move(e->core);
    e->core = make_core(*g);
  }
  old.reset();
  info->result = CU_GRAPH_EXEC_UPDATE_SUCCESS;
  return CUDA_SUCCESS;
}

CUresult graph_exec_update(CUgraphExec h, CUgraph g, CUgraphExecUpdateResultInfo* info) {
  EMU_ENTER("cuGraphExecUpdate");
  return exec_update(h, g, info);
}

CUresult graph_exec_update_v1(CUgraphExec h, CUgraph g, CUgraphNode* err,
                              CUgraphExecUpdateResult* result) {
  EMU_ENTER("cuGraphExecUpdate");
  CUgraphExecUpdateResultInfo info{};
  CUresult r = exec_update(h, g, &info);
  if (err) *err = info.errorNode;
  if (result) *result = info.result;
  return r;
}

}  // namespace

Graph* new_graph() {
  auto* g = new Graph;
  state().graphs.insert(g);
  return g;
}

Node* add_node(Graph* g, Work w, const std::vector<Node*>& deps) {
  auto n = std::make_unique<Node>();
  n->graph = g;
  n->work = std::move(w);
  n->deps = deps;
  n->index = g->nodes.size();
  Node* raw = n.get();
  g->nodes.push_back(std::move(n));
  state().nodes.insert(raw);
  return raw;
}

void destroy_graph(Graph* g) {
  if (!g) return;
  State& s = state();
  for (const auto& n : g->nodes) s.nodes.erase(n.get());
  s.graphs.erase(g);
  delete g;  // releases the graph's user-object references
}

void register_graph_entries(std::vector<Entry>& out) {
  out.insert(out.end(),
             {
                 EMU_ENTRY(cuGraphCreate, 10000, graph_create),
                 EMU_ENTRY(cuGraphDestroy, 10000, graph_destroy),
                 EMU_ENTRY(cuGraphGetNodes, 10000, graph_get_nodes),
                 EMU_ENTRY(cuGraphAddHostNode, 10000, graph_add_host_node),
                 EMU_ENTRY(cuGraphAddEmptyNode, 10000, graph_add_empty_node),
                 EMU_ENTRY(cuGraphAddMemsetNode, 10000, graph_add_memset_node),
                 EMU_ENTRY(cuGraphAddEventRecordNode, 11010, graph_add_event_record_node),
                 EMU_ENTRY(cuGraphAddEventWaitNode, 11010, graph_add_event_wait_node),
                 EMU_ENTRY(cuGraphNodeGetType, 10000, graph_node_get_type),
                 EMU_ENTRY(cuGraphHostNodeGetParams, 10000, graph_host_node_get_params),
                 EMU_ENTRY(cuGraphHostNodeSetParams, 10000, graph_host_node_set_params),
                 EMU_ENTRY(cuGraphKernelNodeGetParams, 10000, graph_kernel_node_get_params_v1),
                 EMU_ENTRY(cuGraphKernelNodeGetParams, 12000, graph_kernel_node_get_params),
                 EMU_ENTRY(cuGraphDebugDotPrint, 11030, graph_debug_dot_print),
                 EMU_ENTRY(cuGraphInstantiateWithFlags, 11040, graph_instantiate_with_flags),
                 EMU_ENTRY(cuGraphInstantiateWithParams, 12000, graph_instantiate_with_params),
                 EMU_ENTRY(cuGraphExecDestroy, 10000, graph_exec_destroy),
                 EMU_ENTRY(cuGraphUpload, 11010, graph_upload),
                 EMU_ENTRY(cuGraphLaunch, 10000, graph_launch),
                 EMU_ENTRY(cuGraphExecUpdate, 10020, graph_exec_update_v1),
                 EMU_ENTRY(cuGraphExecUpdate, 12000, graph_exec_update),
             });
}

}  // namespace emu

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
  if (in_driver_callback()) return CUDA_ERROR_NOT_PERMITTED;  // as the driver
  State& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  Graph* g = as_graph(h);
  if (!g) return CUDA_ERROR_INVALID_VALUE;
  // A capture's graph before cuStreamEndCapture, a child graph or body a node owns.
  if (g->owned_by_capture || g->owner) return CUDA_ERROR_INVALID_VALUE;
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

// Launch attributes of a kernel node (what a launch's cuLaunchKernelEx attributes would
// say). The emulator runs blocks in order on one thread: it checks the node and the
// attribute and keeps nothing (priorities, clusters and domains change no result here).
CUresult graph_kernel_node_set_attribute(CUgraphNode h, CUkernelNodeAttrID attr,
                                         const CUkernelNodeAttrValue_v1* value) {
  EMU_ENTER("cuGraphKernelNodeSetAttribute");
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(state().mu);
  Node* n = as_node(h);
  if (!n || n->work.type != CU_GRAPH_NODE_TYPE_KERNEL) return CUDA_ERROR_INVALID_VALUE;
  switch (attr) {
    case CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW:
    case CU_LAUNCH_ATTRIBUTE_COOPERATIVE:
    case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
    case CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
    case CU_LAUNCH_ATTRIBUTE_PRIORITY:
    case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP:
    case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN:
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
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
    case CU_GRAPH_NODE_TYPE_GRAPH:
      return "GRAPH";
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
      return "MEM_ALLOC";
    case CU_GRAPH_NODE_TYPE_MEM_FREE:
      return "MEM_FREE";
    case CU_GRAPH_NODE_TYPE_CONDITIONAL:
      return "CONDITIONAL";
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
          case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
          case CU_GRAPH_NODE_TYPE_MEM_FREE:
            std::snprintf(buf, sizeof buf, "\\ndptr 0x%llx\\nbytesize %zu",
                          static_cast<unsigned long long>(w.dst), w.bytes);
            label += buf;
            break;
          case CU_GRAPH_NODE_TYPE_CONDITIONAL:
            std::snprintf(buf, sizeof buf, "\\nhandle 0x%llx\\ntype %s\\nsize %u",
                          static_cast<unsigned long long>(w.cond),
                          w.cond_type == CU_GRAPH_COND_TYPE_IF      ? "IF"
                          : w.cond_type == CU_GRAPH_COND_TYPE_WHILE ? "WHILE"
                                                                    : "SWITCH",
                          w.cond_size);
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
  for (const auto& n : g->nodes) {
    s.nodes.erase(n.get());
    for (Graph* b : n->bodies) destroy_graph(b);  // invariant 14
  }
  for (auto it = s.cond_handles.begin(); it != s.cond_handles.end();)
    it = it->second.graph == g ? s.cond_handles.erase(it) : std::next(it);
  // A capture into it (cuStreamBeginCaptureToGraph) loses its graph: invalidated, it adds
  // nothing more and ends with nothing to answer.
  for (const auto& cap : s.captures) {
    if (cap->into_graph && cap->graph == g) {
      invalidate(cap.get());
      cap->graph = nullptr;
    }
  }
  for (const void* e : s.execs) {  // a later graph at this address is another graph
    auto* exec = const_cast<GraphExec*>(static_cast<const GraphExec*>(e));
    if (exec->single_source == g) exec->single_source = nullptr;
  }
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
                 EMU_ENTRY(cuGraphKernelNodeSetAttribute, 11000, graph_kernel_node_set_attribute),
                 EMU_ENTRY(cuGraphDebugDotPrint, 11030, graph_debug_dot_print),
             });
}

}  // namespace emu

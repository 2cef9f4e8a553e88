// Graphs as programs: the generic node calls (cuGraphAddNode, cuGraphNodeSetParams), child
// graphs, memory nodes, conditional handles and nodes and their bodies' rules, dependencies and
// edges (invariant 14).
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "emu.hpp"

namespace emu {
namespace {

Graph* as_graph(CUgraph g) {
  return valid(state().graphs, g) ? reinterpret_cast<Graph*>(g) : nullptr;
}
Node* as_node(CUgraphNode n) {
  return valid(state().nodes, n) ? reinterpret_cast<Node*>(n) : nullptr;
}

// Edge data other than the default (zeroed) is not modeled: refused.
bool default_edges(const CUgraphEdgeData* e, size_t n) {
  for (size_t i = 0; e && i < n; ++i) {
    if (e[i].from_port || e[i].to_port || e[i].type != CU_GRAPH_DEPENDENCY_TYPE_DEFAULT)
      return false;
  }
  return true;
}

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

// The top-level graph g belongs to (through the nodes owning its bodies).
const Graph* root_of(const Graph* g) {
  while (g->owner) g = g->owner->graph;
  return g;
}

// Whether g is `ancestor` or inside one of its nodes' bodies.
bool within(const Graph* g, const Graph* ancestor) {
  for (; g; g = g->owner ? g->owner->graph : nullptr)
    if (g == ancestor) return true;
  return false;
}

template <class F>
void each_node(const Graph& g, F&& f) {
  for (const auto& n : g.nodes) {
    f(*n);
    for (const Graph* b : n->bodies) each_node(*b, f);
  }
}

CUresult event_work(CUevent e, CUgraphNodeType type, Work* w) {
  if (!valid(state().events, e)) return CUDA_ERROR_INVALID_VALUE;
  w->type = type;
  w->event = reinterpret_cast<Event*>(e)->state;
  return CUDA_SUCCESS;
}

// The allocation of a memory allocation node: device memory of a device of the emulator.
CUresult alloc_work(CUDA_MEM_ALLOC_NODE_PARAMS_v2* p, Work* w) {
  const CUmemPoolProps& pp = p->poolProps;
  if (pp.allocType != CU_MEM_ALLOCATION_TYPE_PINNED || pp.handleTypes != CU_MEM_HANDLE_TYPE_NONE ||
      pp.location.type != CU_MEM_LOCATION_TYPE_DEVICE || pp.location.id < 0 ||
      pp.location.id >= state().device_count || p->bytesize == 0)
    return CUDA_ERROR_INVALID_VALUE;
  void* mem = std::calloc(1, p->bytesize);
  if (!mem) return CUDA_ERROR_OUT_OF_MEMORY;
  w->type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
  w->block = std::shared_ptr<void>(mem, std::free);
  w->dst = reinterpret_cast<CUdeviceptr>(mem);
  w->bytes = p->bytesize;
  p->dptr = w->dst;
  return CUDA_SUCCESS;
}

// cuGraphAddMemFreeNode's rules: an address an allocation node of the graph returned, freed
// once (cuda.h: CUDA_ERROR_INVALID_VALUE otherwise).
CUresult free_work(const Graph* g, CUdeviceptr dptr, Work* w) {
  bool allocated = false, freed = false;
  each_node(*root_of(g), [&](const Node& n) {
    if (n.work.type == CU_GRAPH_NODE_TYPE_MEM_ALLOC && n.work.dst == dptr) allocated = true;
    if (n.work.type == CU_GRAPH_NODE_TYPE_MEM_FREE && n.work.dst == dptr) freed = true;
  });
  if (!allocated || freed) return CUDA_ERROR_INVALID_VALUE;
  w->type = CU_GRAPH_NODE_TYPE_MEM_FREE;
  w->dst = dptr;
  return CUDA_SUCCESS;
}

CUresult check_conditional(const Graph* g, const CUDA_CONDITIONAL_NODE_PARAMS& c) {
  auto it = state().cond_handles.find(c.handle);
  if (it == state().cond_handles.end()) return CUDA_ERROR_INVALID_VALUE;
  // cuda.h: a handle of this graph or one the graph is a child of.
  if (!within(g, it->second.graph)) return CUDA_ERROR_INVALID_VALUE;
  if (c.ctx && reinterpret_cast<Context*>(c.ctx) != it->second.ctx) return CUDA_ERROR_INVALID_VALUE;
  switch (c.type) {
    case CU_GRAPH_COND_TYPE_IF:
      return c.size == 1 || c.size == 2 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case CU_GRAPH_COND_TYPE_WHILE:
      return c.size == 1 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case CU_GRAPH_COND_TYPE_SWITCH:
      return c.size >= 1 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

// Adds the node p describes to g after deps (mu held).
CUresult add_generic(CUgraphNode* ph, Graph* g, const std::vector<Node*>& deps,
                     CUgraphNodeParams* p) {
  Work w;
  Graph* child = nullptr;
  switch (p->type) {
    case CU_GRAPH_NODE_TYPE_GRAPH: {
      child = as_graph(p->graph.graph);
      if (!child) return CUDA_ERROR_INVALID_VALUE;
      if (p->graph.ownership != CU_GRAPH_CHILD_GRAPH_OWNERSHIP_CLONE)
        return CUDA_ERROR_NOT_SUPPORTED;  // ownership moves are not emulated
      if (CUresult r = check_child_graph(*child)) return r;
      w.type = CU_GRAPH_NODE_TYPE_GRAPH;
      break;
    }
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
      w.type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;  // allocated once the node is allowed
      break;
    case CU_GRAPH_NODE_TYPE_MEM_FREE:
      if (CUresult r = free_work(g, p->free.dptr, &w)) return r;
      break;
    case CU_GRAPH_NODE_TYPE_CONDITIONAL:
      if (CUresult r = check_conditional(g, p->conditional)) return r;
      w.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
      w.cond = p->conditional.handle;
      w.cond_type = p->conditional.type;
      w.cond_size = p->conditional.size;
      break;
    default:
      if (CUresult r = work_from_params(*p, &w)) return r;
  }
  if (w.type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
    if (CUresult r = alloc_work(&p->alloc, &w)) return r;
  }
  Node* n = add_node(g, std::move(w), deps);
  if (child) {
    n->bodies.push_back(clone_graph(*child, n));
  } else if (n->work.type == CU_GRAPH_NODE_TYPE_CONDITIONAL) {
    for (unsigned i = 0; i < n->work.cond_size; ++i) {
      Graph* body = new_graph();
      body->owner = n;
      n->bodies.push_back(body);
    }
  }
  for (Graph* b : n->bodies) n->body_handles.push_back(reinterpret_cast<CUgraph>(b));
  if (n->work.type == CU_GRAPH_NODE_TYPE_CONDITIONAL)
    p->conditional.phGraph_out = n->body_handles.data();
  *ph = reinterpret_cast<CUgraphNode>(n);
  return CUDA_SUCCESS;
}

CUresult graph_add_node(CUgraphNode* ph, CUgraph h, const CUgraphNode* deps,
                        const CUgraphEdgeData* edges, size_t n, CUgraphNodeParams* p) {
  if (!ph || !p) return CUDA_ERROR_INVALID_VALUE;
  if (!default_edges(edges, n)) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(state().mu);
  Graph* g = as_graph(h);
  if (!g) return CUDA_ERROR_INVALID_VALUE;
  if (p->type == CU_GRAPH_NODE_TYPE_KERNEL && !current_context()) return kNoCurrentContext;
  std::vector<Node*> d;
  if (CUresult r = check_deps(g, deps, n, &d)) return r;
  return add_generic(ph, g, d, p);
}

CUresult graph_add_node_v2(CUgraphNode* ph, CUgraph g, const CUgraphNode* deps,
                           const CUgraphEdgeData* edges, size_t n, CUgraphNodeParams* p) {
  EMU_ENTER("cuGraphAddNode");
  return graph_add_node(ph, g, deps, edges, n, p);
}

CUresult graph_add_node_v1(CUgraphNode* ph, CUgraph g, const CUgraphNode* deps, size_t n,
                           CUgraphNodeParams* p) {
  EMU_ENTER("cuGraphAddNode");
  return graph_add_node(ph, g, deps, nullptr, n, p);
}

CUresult graph_node_set_params(CUgraphNode h, CUgraphNodeParams* p) {
  EMU_ENTER("cuGraphNodeSetParams");
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(state().mu);
  Node* n = as_node(h);
  if (!n || n->work.type != p->type) return CUDA_ERROR_INVALID_VALUE;
  Work w;
  if (CUresult r = work_from_params(*p, &w)) return r;
  n->work = std::move(w);
  return CUDA_SUCCESS;
}

CUresult graph_child_graph_node_get_graph(CUgraphNode h, CUgraph* out) {
  EMU_ENTER("cuGraphChildGraphNodeGetGraph");
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(state().mu);
  Node* n = as_node(h);
  if (!n || n->work.type != CU_GRAPH_NODE_TYPE_GRAPH) return CUDA_ERROR_INVALID_VALUE;
  *out = n->body_handles[0];
  return CUDA_SUCCESS;
}

// cuda.h: with an array, up to *num entries (NULL past the last), *num the count obtained.
CUresult node_get_dependencies(CUgraphNode h, CUgraphNode* deps, CUgraphEdgeData* edges,
                               size_t* num) {
  if (!num) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(state().mu);
  Node* n = as_node(h);
  if (!n) return CUDA_ERROR_INVALID_VALUE;
  if (deps) {
    for (size_t i = 0; i < *num; ++i) {
      deps[i] = i < n->deps.size() ? reinterpret_cast<CUgraphNode>(n->deps[i]) : nullptr;
      if (edges) edges[i] = CUgraphEdgeData{};
    }
    *num = std::min(*num, n->deps.size());
  } else {
    *num = n->deps.size();
  }
  return CUDA_SUCCESS;
}

// Nodes that depend on h, in creation order (the same rules as node_get_dependencies).
CUresult node_get_dependents(CUgraphNode h, CUgraphNode* out, CUgraphEdgeData* edges, size_t* num) {
  if (!num) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(state().mu);
  Node* n = as_node(h);
  if (!n) return CUDA_ERROR_INVALID_VALUE;
  std::vector<Node*> dependents;
  for (const auto& m : n->graph->nodes)
    if (std::find(m->deps.begin(), m->deps.end(), n) != m->deps.end())
      dependents.push_back(m.get());
  if (out) {
    for (size_t i = 0; i < *num; ++i) {
      out[i] = i < dependents.size() ? reinterpret_cast<CUgraphNode>(dependents[i]) : nullptr;
      if (edges) edges[i] = CUgraphEdgeData{};
    }
    *num = std::min(*num, dependents.size());
  } else {
    *num = dependents.size();
  }
  return CUDA_SUCCESS;
}

CUresult graph_node_get_dependent_nodes_v1(CUgraphNode h, CUgraphNode* out, size_t* num) {
  EMU_ENTER("cuGraphNodeGetDependentNodes");
  return node_get_dependents(h, out, nullptr, num);
}

CUresult graph_node_get_dependent_nodes_v2(CUgraphNode h, CUgraphNode* out, CUgraphEdgeData* edges,
                                           size_t* num) {
  EMU_ENTER("cuGraphNodeGetDependentNodes");
  return node_get_dependents(h, out, edges, num);
}

CUresult graph_node_get_dependencies_v1(CUgraphNode h, CUgraphNode* deps, size_t* num) {
  EMU_ENTER("cuGraphNodeGetDependencies");
  return node_get_dependencies(h, deps, nullptr, num);
}

CUresult graph_node_get_dependencies_v2(CUgraphNode h, CUgraphNode* deps, CUgraphEdgeData* edges,
                                        size_t* num) {
  EMU_ENTER("cuGraphNodeGetDependencies");
  return node_get_dependencies(h, deps, edges, num);
}

CUresult get_edges(CUgraph h, CUgraphNode* from, CUgraphNode* to, CUgraphEdgeData* edges,
                   size_t* num) {
  if (!num || (!from) != (!to)) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(state().mu);
  Graph* g = as_graph(h);
  if (!g) return CUDA_ERROR_INVALID_VALUE;
  std::vector<std::pair<Node*, Node*>> all;
  for (const auto& n : g->nodes)
    for (Node* d : n->deps) all.emplace_back(d, n.get());
  if (from) {
    for (size_t i = 0; i < *num; ++i) {
      from[i] = i < all.size() ? reinterpret_cast<CUgraphNode>(all[i].first) : nullptr;
      to[i] = i < all.size() ? reinterpret_cast<CUgraphNode>(all[i].second) : nullptr;
      if (edges) edges[i] = CUgraphEdgeData{};
    }
    *num = std::min(*num, all.size());
  } else {
    *num = all.size();
  }
  return CUDA_SUCCESS;
}

CUresult graph_get_edges_v1(CUgraph g, CUgraphNode* from, CUgraphNode* to, size_t* num) {
  EMU_ENTER("cuGraphGetEdges");
  return get_edges(g, from, to, nullptr, num);
}

CUresult graph_get_edges_v2(CUgraph g, CUgraphNode* from, CUgraphNode* to, CUgraphEdgeData* edges,
                            size_t* num) {
  EMU_ENTER("cuGraphGetEdges");
  return get_edges(g, from, to, edges, num);
}

// cuda.h: both ends in hGraph, an existing dependency refused. A cycle is not refused here: the
// instantiation answers CUDA_GRAPH_INSTANTIATE_INVALID_STRUCTURE (graph_exec.cpp).
CUresult add_dependencies(CUgraph h, const CUgraphNode* from, const CUgraphNode* to,
                          const CUgraphEdgeData* edges, size_t n) {
  if (n && (!from || !to)) return CUDA_ERROR_INVALID_VALUE;
  if (!default_edges(edges, n)) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(state().mu);
  Graph* g = as_graph(h);
  if (!g) return CUDA_ERROR_INVALID_VALUE;
  std::vector<std::pair<Node*, Node*>> add;
  for (size_t i = 0; i < n; ++i) {
    Node* a = as_node(from[i]);
    Node* b = as_node(to[i]);
    if (!a || !b || a->graph != g || b->graph != g || a == b) return CUDA_ERROR_INVALID_VALUE;
    const bool exists = std::find(b->deps.begin(), b->deps.end(), a) != b->deps.end() ||
                        std::find(add.begin(), add.end(), std::make_pair(a, b)) != add.end();
    if (exists) return CUDA_ERROR_INVALID_VALUE;
    add.emplace_back(a, b);
  }
  for (const auto& [a, b] : add) b->deps.push_back(a);
  return CUDA_SUCCESS;
}

CUresult graph_add_dependencies_v1(CUgraph g, const CUgraphNode* from, const CUgraphNode* to,
                                   size_t n) {
  EMU_ENTER("cuGraphAddDependencies");
  return add_dependencies(g, from, to, nullptr, n);
}

CUresult graph_add_dependencies_v2(CUgraph g, const CUgraphNode* from, const CUgraphNode* to,
                                   const CUgraphEdgeData* edges, size_t n) {
  EMU_ENTER("cuGraphAddDependencies");
  return add_dependencies(g, from, to, edges, n);
}

CUresult graph_conditional_handle_create(CUgraphConditionalHandle* out, CUgraph h, CUcontext hctx,
                                         unsigned int default_value, unsigned int flags) {
  EMU_ENTER("cuGraphConditionalHandleCreate");
  if (!out || (flags & ~static_cast<unsigned>(CU_GRAPH_COND_ASSIGN_DEFAULT)))
    return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  Graph* g = as_graph(h);
  if (!g) return CUDA_ERROR_INVALID_VALUE;
  Context* ctx = reinterpret_cast<Context*>(hctx);
  if (!ctx) {
    if (CUresult r = usable_current_context(&ctx)) return r;
  } else if (CUresult r = context_status(ctx)) {
    return r;
  }
  CondHandle c;
  c.graph = g;
  c.ctx = ctx;
  c.default_value = default_value;
  c.flags = flags;
  const CUgraphConditionalHandle id = s.next_id++;
  s.cond_handles[id] = c;
  *out = id;
  return CUDA_SUCCESS;
}

}  // namespace

namespace {
// Whether a body may hold a node of this kind (cuda.h 12.3 to 13.0,
// CUDA_CONDITIONAL_NODE_PARAMS::phGraph_out): kernel, empty, child graph, memset, memcpy,
// conditional.
bool body_may_hold(CUgraphNodeType type) {
  switch (type) {
    case CU_GRAPH_NODE_TYPE_KERNEL:
    case CU_GRAPH_NODE_TYPE_EMPTY:
    case CU_GRAPH_NODE_TYPE_GRAPH:
    case CU_GRAPH_NODE_TYPE_MEMSET:
    case CU_GRAPH_NODE_TYPE_MEMCPY:
    case CU_GRAPH_NODE_TYPE_CONDITIONAL:
      return true;
    default:
      return false;
  }
}
}  // namespace

CUresult check_bodies(const Graph& g) {
  bool refused = false;
  for (const auto& n : g.nodes) {
    if (n->work.type == CU_GRAPH_NODE_TYPE_CONDITIONAL) {  // its bodies, nested ones included
      for (const Graph* b : n->bodies) {
        each_node(*b, [&](const Node& inner) { refused |= !body_may_hold(inner.work.type); });
      }
    } else if (n->work.type == CU_GRAPH_NODE_TYPE_GRAPH) {  // conditional nodes of a child
      refused |= check_bodies(*n->bodies[0]) != CUDA_SUCCESS;
    }
    if (refused) return kBodyNodeRefused;
  }
  return CUDA_SUCCESS;
}

bool one_executable_at_a_time(const Graph& g) {
  bool found = false;
  each_node(g, [&](const Node& n) {
    found |= n.work.type == CU_GRAPH_NODE_TYPE_CONDITIONAL ||
             n.work.type == CU_GRAPH_NODE_TYPE_MEM_ALLOC;
  });
  return found;
}

CUresult memset_work(CUdeviceptr dst, size_t pitch, unsigned value, unsigned elem_size,
                     size_t width, size_t height, Work* w) {
  if (!dst) return CUDA_ERROR_INVALID_VALUE;
  if (elem_size != 1 && elem_size != 2 && elem_size != 4) return CUDA_ERROR_INVALID_VALUE;
  if (height > 1 && pitch < width * elem_size) return CUDA_ERROR_INVALID_VALUE;
  w->type = CU_GRAPH_NODE_TYPE_MEMSET;
  w->dst = dst;
  w->value = value;
  w->elem_size = elem_size;
  w->width = width;
  w->height = height ? height : 1;
  w->pitch = height > 1 ? pitch : width * elem_size;
  return CUDA_SUCCESS;
}

CUresult memcpy_work(const CUDA_MEMCPY3D& c, Work* w) {
  if (c.Height > 1 || c.Depth > 1 || c.srcY || c.srcZ || c.dstY || c.dstZ || c.srcLOD || c.dstLOD)
    return CUDA_ERROR_NOT_SUPPORTED;  // 1-D copies only
  auto address = [](CUmemorytype t, const void* host, CUdeviceptr dev, size_t x, CUdeviceptr* out) {
    switch (t) {
      case CU_MEMORYTYPE_HOST:
        if (!host) return CUDA_ERROR_INVALID_VALUE;
        *out = reinterpret_cast<CUdeviceptr>(host) + x;
        return CUDA_SUCCESS;
      case CU_MEMORYTYPE_DEVICE:
      case CU_MEMORYTYPE_UNIFIED:
        if (!dev) return CUDA_ERROR_INVALID_VALUE;
        *out = dev + x;
        return CUDA_SUCCESS;
      case CU_MEMORYTYPE_ARRAY:
        return CUDA_ERROR_NOT_SUPPORTED;
      default:
        return CUDA_ERROR_INVALID_VALUE;
    }
  };
  Work out;
  out.type = CU_GRAPH_NODE_TYPE_MEMCPY;
  if (CUresult r = address(c.srcMemoryType, c.srcHost, c.srcDevice, c.srcXInBytes, &out.src))
    return r;
  if (CUresult r = address(c.dstMemoryType, c.dstHost, c.dstDevice, c.dstXInBytes, &out.dst))
    return r;
  out.bytes = c.WidthInBytes;
  *w = std::move(out);
  return CUDA_SUCCESS;
}

CUresult work_from_params(const CUgraphNodeParams& p, Work* w) {
  switch (p.type) {
    case CU_GRAPH_NODE_TYPE_KERNEL:
      w->type = CU_GRAPH_NODE_TYPE_KERNEL;
      return kernel_node_launch(p.kernel, &w->kernel);
    case CU_GRAPH_NODE_TYPE_MEMSET: {
      const CUDA_MEMSET_NODE_PARAMS_v2& m = p.memset;
      return memset_work(m.dst, m.pitch, m.value, m.elementSize, m.width, m.height, w);
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY:
      if (p.memcpy.flags || p.memcpy.reserved) return CUDA_ERROR_INVALID_VALUE;
      return memcpy_work(p.memcpy.copyParams, w);
    case CU_GRAPH_NODE_TYPE_HOST:
      if (!p.host.fn) return CUDA_ERROR_INVALID_VALUE;
      w->type = CU_GRAPH_NODE_TYPE_HOST;
      w->fn = p.host.fn;
      w->arg = p.host.userData;
      return CUDA_SUCCESS;
    case CU_GRAPH_NODE_TYPE_EMPTY:
      w->type = CU_GRAPH_NODE_TYPE_EMPTY;
      return CUDA_SUCCESS;
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
      return event_work(p.eventRecord.event, CU_GRAPH_NODE_TYPE_EVENT_RECORD, w);
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
      return event_work(p.eventWait.event, CU_GRAPH_NODE_TYPE_WAIT_EVENT, w);
    case CU_GRAPH_NODE_TYPE_GRAPH:
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
    case CU_GRAPH_NODE_TYPE_MEM_FREE:
    case CU_GRAPH_NODE_TYPE_CONDITIONAL:
      return CUDA_ERROR_NOT_SUPPORTED;  // cuda.h: memory nodes' parameters cannot change
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

Graph* clone_graph(const Graph& g, Node* owner) {
  Graph* c = new_graph();
  c->owner = owner;
  for (const auto& n : g.nodes) {
    Node* m = add_node(c, n->work, {});
    for (const Graph* b : n->bodies) {
      m->bodies.push_back(clone_graph(*b, m));
      m->body_handles.push_back(reinterpret_cast<CUgraph>(m->bodies.back()));
    }
  }
  // Dependencies after every node exists (cuGraphAddDependencies may point backwards).
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (const Node* d : g.nodes[i]->deps) c->nodes[i]->deps.push_back(c->nodes[d->index].get());
  for (const auto& [obj, count] : g.refs->refs) {
    user_object_add(obj, count);
    c->refs->refs[obj] += count;
  }
  return c;
}

namespace {

// 1: allocated and not freed in c (at any depth), 2: freed there, 0: neither.
int allocation_in(const ExecCore& c, CUdeviceptr p) {
  int found = 0;
  for (const Work& w : c.works) {
    if (w.type == CU_GRAPH_NODE_TYPE_MEM_FREE && w.dst == p) return 2;
    if (w.type == CU_GRAPH_NODE_TYPE_MEM_ALLOC && w.dst == p) found = 1;
    for (const auto& b : w.bodies) {
      const int inner = allocation_in(*b, p);
      if (inner == 2) return 2;
      found = std::max(found, inner);
    }
  }
  return found;
}

}  // namespace

bool graph_allocation_freeable(CUdeviceptr p) {
  State& s = state();
  for (const void* h : s.graphs) {
    const auto* g = static_cast<const Graph*>(h);
    if (g->owner) continue;  // its root graph answers
    bool allocated = false, freed = false;
    each_node(*g, [&](const Node& n) {
      if (n.work.type == CU_GRAPH_NODE_TYPE_MEM_ALLOC && n.work.dst == p) allocated = true;
      if (n.work.type == CU_GRAPH_NODE_TYPE_MEM_FREE && n.work.dst == p) freed = true;
    });
    if (allocated) return !freed;
  }
  for (const void* h : s.execs) {
    const auto* e = static_cast<const GraphExec*>(h);
    if (const int found = allocation_in(*e->core, p)) return found == 1;
  }
  return false;
}

CUresult check_child_graph(const Graph& g) {
  CUresult r = CUDA_SUCCESS;
  each_node(g, [&](const Node& n) {
    const auto t = n.work.type;
    if (t == CU_GRAPH_NODE_TYPE_CONDITIONAL || t == CU_GRAPH_NODE_TYPE_MEM_ALLOC ||
        t == CU_GRAPH_NODE_TYPE_MEM_FREE)
      r = CUDA_ERROR_INVALID_VALUE;  // cuda.h: CUDA_CHILD_GRAPH_NODE_PARAMS::graph
  });
  return r;
}

void register_graph_node_entries(std::vector<Entry>& out) {
  out.insert(out.end(),
             {
                 EMU_ENTRY(cuGraphAddNode, 12020, graph_add_node_v1),
                 EMU_ENTRY(cuGraphAddNode, 12030, graph_add_node_v2),
                 EMU_ENTRY(cuGraphNodeSetParams, 12020, graph_node_set_params),
                 EMU_ENTRY(cuGraphChildGraphNodeGetGraph, 10000, graph_child_graph_node_get_graph),
                 EMU_ENTRY(cuGraphNodeGetDependencies, 10000, graph_node_get_dependencies_v1),
                 EMU_ENTRY(cuGraphNodeGetDependencies, 12030, graph_node_get_dependencies_v2),
                 EMU_ENTRY(cuGraphNodeGetDependentNodes, 10000, graph_node_get_dependent_nodes_v1),
                 EMU_ENTRY(cuGraphNodeGetDependentNodes, 12030, graph_node_get_dependent_nodes_v2),
                 EMU_ENTRY(cuGraphGetEdges, 10000, graph_get_edges_v1),
                 EMU_ENTRY(cuGraphGetEdges, 12030, graph_get_edges_v2),
                 EMU_ENTRY(cuGraphAddDependencies, 10000, graph_add_dependencies_v1),
                 EMU_ENTRY(cuGraphAddDependencies, 12030, graph_add_dependencies_v2),
                 EMU_ENTRY(cuGraphConditionalHandleCreate, 12030, graph_conditional_handle_create),
             });
}

}  // namespace emu

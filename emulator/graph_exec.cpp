// Executable graphs: instantiation (child graphs and conditional bodies nested, a topological
// order, conditional handles), launch (conditional evaluation, disabled nodes), upload, the
// whole-graph update and the per-node updates (invariants 7 and 14).
#include <algorithm>
#include <set>

#include "emu.hpp"
#include "emu_control.h"

#define EMU_EXPORT extern "C" __attribute__((visibility("default")))

namespace emu {
namespace {

Graph* as_graph(CUgraph g) {
  return valid(state().graphs, g) ? reinterpret_cast<Graph*>(g) : nullptr;
}
GraphExec* as_exec(CUgraphExec e) {
  return valid(state().execs, e) ? reinterpret_cast<GraphExec*>(e) : nullptr;
}

// What an instantiation collects besides the cores.
struct Build {
  std::map<const Node*, std::vector<size_t>>* paths = nullptr;  // null: not wanted
  std::set<CUgraphConditionalHandle> used;                      // by conditional nodes
  std::set<const Graph*> graphs;                                // g and every body
  RefSet* refs = nullptr;
};

// A topological order of g's nodes (the lowest index first among the ready ones, so creation
// order when it is one); false on a cycle (cuGraphAddDependencies may make one).
bool topological_order(const Graph& g, std::vector<size_t>* order) {
  const size_t n = g.nodes.size();
  std::vector<bool> placed(n, false);
  for (size_t round = 0; round < n; ++round) {
    size_t next = n;
    for (size_t i = 0; i < n && next == n; ++i) {
      if (placed[i]) continue;
      const auto& d = g.nodes[i]->deps;
      if (std::all_of(d.begin(), d.end(), [&](const Node* x) { return placed[x->index]; }))
        next = i;
    }
    if (next == n) return false;
    placed[next] = true;
    order->push_back(next);
  }
  return true;
}

// The executable form of g (nullptr on a cycle, at any depth).
std::shared_ptr<ExecCore> make_core(const Graph& g, const std::vector<size_t>& prefix, Build* b) {
  auto core = std::make_shared<ExecCore>();
  if (!topological_order(g, &core->order)) return nullptr;
  b->graphs.insert(&g);
  for (const auto& [obj, count] : g.refs->refs) {
    user_object_add(obj, count);
    b->refs->refs[obj] += count;
  }
  for (const auto& n : g.nodes) {
    std::vector<size_t> path = prefix;
    path.push_back(n->index);
    if (b->paths) (*b->paths)[n.get()] = path;
    Work w = n->work;
    if (w.type == CU_GRAPH_NODE_TYPE_CONDITIONAL) b->used.insert(w.cond);
    for (size_t i = 0; i < n->bodies.size(); ++i) {
      std::vector<size_t> inner = path;
      inner.push_back(i);
      auto body = make_core(*n->bodies[i], inner, b);
      if (!body) return nullptr;
      w.bodies.push_back(std::move(body));
    }
    core->works.push_back(std::move(w));
    std::vector<size_t> d;
    for (const Node* dep : n->deps) d.push_back(dep->index);
    core->deps.push_back(std::move(d));
  }
  return core;
}

// The values of the handles of the graphs in b (carried over from `old` where `pair` maps a
// handle to the one it replaces).
std::shared_ptr<CondValues> make_conds(
    const Build& b, const CondValues* old = nullptr,
    const std::map<CUgraphConditionalHandle, CUgraphConditionalHandle>* pair = nullptr) {
  auto conds = std::make_shared<CondValues>();
  for (const auto& [id, h] : state().cond_handles) {
    if (!b.graphs.count(h.graph)) continue;
    CondValues::Slot& slot = conds->slots[id];
    slot.default_value = h.default_value;
    slot.assign_default = h.flags & CU_GRAPH_COND_ASSIGN_DEFAULT;
    slot.value.store(h.default_value);
    if (old && pair) {
      auto p = pair->find(id);
      auto o = p == pair->end() ? old->slots.end() : old->slots.find(p->second);
      if (o != old->slots.end()) slot.value.store(o->second.value.load());
    }
  }
  return conds;
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
  if (CUresult r = check_bodies(*g)) return r;
  const bool single = one_executable_at_a_time(*g);
  if (single) {
    for (const void* other : s.execs) {
      if (static_cast<const GraphExec*>(other)->single_source == g) return kSecondExecutable;
    }
  }
  Stream* up = nullptr;
  if (flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD) {
    if (CUresult r = resolve_stream(upload, &up)) return r;
    if (up->kind == Stream::kLegacy && legacy_conflict(up->ctx))
      return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
  }
  auto e = std::make_unique<GraphExec>();
  Build b;
  b.paths = &e->paths;
  auto refs = std::make_shared<RefSet>();
  b.refs = refs.get();
  e->core = make_core(*g, {}, &b);
  if (!e->core) {  // a cycle (cuGraphAddDependencies)
    if (result) *result = CUDA_GRAPH_INSTANTIATE_INVALID_STRUCTURE;
    return CUDA_ERROR_INVALID_VALUE;
  }
  e->core->refs = std::move(refs);
  for (const auto& [id, hd] : s.cond_handles) {
    if (b.graphs.count(hd.graph) && !b.used.count(id)) {
      if (result) *result = CUDA_GRAPH_INSTANTIATE_CONDITIONAL_HANDLE_UNUSED;
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  e->conds = make_conds(b);
  e->ctx = ctx;
  if (single) e->single_source = g;
  GraphExec* raw = e.release();
  s.execs.insert(raw);
  s.live.fetch_add(1);
  if (up && !up->capture) push_op(up, Op{});  // the upload: ordered, nothing to copy
  *ph = reinterpret_cast<CUgraphExec>(raw);
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

// The event nodes of one launch, by node index, child graphs' nested.
struct Steps {
  std::vector<SignalPtr> record;  // event-record node: completes this signal
  std::vector<SignalPtr> wait;    // event-wait node: waits for this signal
  std::map<size_t, Steps> child;
};

// Records the launch's events at cuGraphLaunch time (mu held), in creation order.
void prepare(const ExecCore& c, Steps* st) {
  st->record.resize(c.works.size());
  st->wait.resize(c.works.size());
  for (size_t i = 0; i < c.works.size(); ++i) {
    const Work& w = c.works[i];
    if (w.type == CU_GRAPH_NODE_TYPE_EVENT_RECORD) {
      st->record[i] = std::make_shared<Signal>();
      w.event->sig = st->record[i];
      w.event->recorded = true;
      w.event->capture.reset();
      w.event->capture_nodes.clear();
    } else if (w.type == CU_GRAPH_NODE_TYPE_WAIT_EVENT && w.event->recorded) {
      st->wait[i] = w.event->sig;
    } else if (w.type == CU_GRAPH_NODE_TYPE_GRAPH) {
      prepare(*w.bodies[0], &st->child[i]);
    }
  }
}

thread_local CondValues* t_conds = nullptr;  // the launch running on this worker thread

void run_core(const ExecCore& c, const Steps* st, CondValues* conds);

void run_conditional(const Work& w, CondValues* conds) {
  auto slot = conds->slots.find(w.cond);
  if (slot == conds->slots.end()) return;
  auto value = [&] { return slot->second.value.load(); };
  switch (w.cond_type) {
    case CU_GRAPH_COND_TYPE_IF:
      if (value()) {
        run_core(*w.bodies[0], nullptr, conds);
      } else if (w.bodies.size() == 2) {
        run_core(*w.bodies[1], nullptr, conds);
      }
      break;
    case CU_GRAPH_COND_TYPE_WHILE:  // checked before the first iteration
      while (value()) run_core(*w.bodies[0], nullptr, conds);
      break;
    case CU_GRAPH_COND_TYPE_SWITCH: {
      const unsigned v = value();
      if (v < w.bodies.size()) run_core(*w.bodies[v], nullptr, conds);
      break;
    }
    default:
      break;
  }
}

void run_core(const ExecCore& c, const Steps* st, CondValues* conds) {
  State& s = state();
  for (size_t i : c.order) {
    const Work& w = c.works[i];
    if (st && st->wait[i]) {
      std::unique_lock<std::mutex> lk(s.mu);
      s.cv.wait(lk, [&] { return st->wait[i]->done; });
    }
    if (!w.enabled) {
      // cuGraphNodeSetEnabled: a disabled node is an empty node
    } else if (w.type == CU_GRAPH_NODE_TYPE_HOST) {
      run_host_work(w);
    } else if (w.type == CU_GRAPH_NODE_TYPE_GRAPH) {
      const Steps* inner = nullptr;
      if (st) {
        auto it = st->child.find(i);
        if (it != st->child.end()) inner = &it->second;
      }
      run_core(*w.bodies[0], inner, conds);
    } else if (w.type == CU_GRAPH_NODE_TYPE_CONDITIONAL) {
      run_conditional(w, conds);
    } else if (w.type != CU_GRAPH_NODE_TYPE_MEM_ALLOC && w.type != CU_GRAPH_NODE_TYPE_MEM_FREE) {
      execute_data_work(w);  // memory nodes: the allocation lives with the graph (invariant 14)
    }
    if (st && st->record[i]) {
      const auto when = Clock::now();
      std::lock_guard<std::mutex> lk(s.mu);
      st->record[i]->when = when;
      st->record[i]->done = true;
      s.cv.notify_all();
    }
  }
}

void run_launch(const ExecCore& core, const Steps& steps, CondValues* conds) {
  for (auto& [id, slot] : conds->slots)
    if (slot.assign_default) slot.value.store(slot.default_value);
  CondValues* saved = t_conds;
  t_conds = conds;
  run_core(core, &steps, conds);
  t_conds = saved;
}

bool code_unloaded(const ExecCore& c) {
  for (const Work& w : c.works) {
    if (w.kernel && kernel_code_unloaded(*w.kernel)) return true;
    for (const auto& b : w.bodies)
      if (code_unloaded(*b)) return true;
  }
  return false;
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
  // The launch keeps the parameters of now: later per-node updates replace e->core.
  std::shared_ptr<ExecCore> core = e->core;
  std::shared_ptr<CondValues> conds = e->conds;
  // A kernel of a library or module unloaded since: refused (a GPU may crash: invariant 11).
  if (code_unloaded(*core)) return CUDA_ERROR_INVALID_HANDLE;
  Steps steps;
  prepare(*core, &steps);
  Op op;
  op.run = [core, conds, steps = std::move(steps)] { run_launch(*core, steps, conds.get()); };
  push_op(st, std::move(op));
  return CUDA_SUCCESS;
}

// ---- the whole-graph update ----

CUresult update_failure(CUgraphExecUpdateResultInfo* info, CUgraphExecUpdateResult why,
                        const Node* node, const Node* from = nullptr) {
  info->result = why;
  info->errorNode = reinterpret_cast<CUgraphNode>(const_cast<Node*>(node));
  info->errorFromNode = reinterpret_cast<CUgraphNode>(const_cast<Node*>(from));
  return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
}

CUcontext kernel_context(const Work& w) {
  CUDA_KERNEL_NODE_PARAMS_v2 p{};
  if (w.kernel) kernel_node_params(*w.kernel, &p);
  return p.ctx;
}

// Whether g may replace c (cuda.h, cuGraphExecUpdate): the same topology and kinds, kernels in
// the same context, conditional nodes of the same type and size, the same memory nodes; pairs
// g's conditional handles with c's.
CUresult compare(const ExecCore& c, const Graph& g, CUgraphExecUpdateResultInfo* info,
                 std::map<CUgraphConditionalHandle, CUgraphConditionalHandle>* pair) {
  if (c.works.size() != g.nodes.size())
    return update_failure(info, CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED, nullptr);
  for (size_t i = 0; i < c.works.size(); ++i) {
    const Node& n = *g.nodes[i];
    const Work& old = c.works[i];
    if (n.work.type != old.type)
      return update_failure(info, CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED, &n);
    std::vector<size_t> a = c.deps[i];
    std::sort(a.begin(), a.end());
    if (a.size() != n.deps.size())
      return update_failure(info, CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED, &n);
    for (const Node* d : n.deps)
      if (!std::binary_search(a.begin(), a.end(), d->index))
        return update_failure(info, CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED, &n, d);
    switch (old.type) {
      case CU_GRAPH_NODE_TYPE_KERNEL:
        if (kernel_context(old) != kernel_context(n.work))
          return update_failure(info, CU_GRAPH_EXEC_UPDATE_ERROR_UNSUPPORTED_FUNCTION_CHANGE, &n);
        break;
      case CU_GRAPH_NODE_TYPE_CONDITIONAL:
        if (old.cond_type != n.work.cond_type || old.cond_size != n.work.cond_size)
          return update_failure(info, CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED, &n);
        (*pair)[n.work.cond] = old.cond;
        break;
      case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
      case CU_GRAPH_NODE_TYPE_MEM_FREE:
        if (old.dst != n.work.dst || old.bytes != n.work.bytes)
          return update_failure(info, CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED, &n);
        break;
      default:
        break;
    }
    for (size_t b = 0; b < old.bodies.size(); ++b)
      if (CUresult r = compare(*old.bodies[b], *n.bodies[b], info, pair)) return r;
  }
  return CUDA_SUCCESS;
}

// Keeps the enabled state of the nodes of `from` in `to` (same topology).
void keep_enabled(const ExecCore& from, ExecCore* to) {
  for (size_t i = 0; i < to->works.size(); ++i) {
    Work& w = to->works[i];
    w.enabled = from.works[i].enabled;
    for (size_t b = 0; b < w.bodies.size(); ++b) {
      auto body = std::make_shared<ExecCore>(*w.bodies[b]);
      keep_enabled(*from.works[i].bodies[b], body.get());
      w.bodies[b] = std::move(body);
    }
  }
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
    std::map<CUgraphConditionalHandle, CUgraphConditionalHandle> pair;
    if (CUresult r = compare(*e->core, *g, info, &pair)) return r;
    // The executable takes the new parameters and a copy of the new graph's user-object
    // references; launches in flight keep the old ones (invariant 7).
    Build b;
    auto refs = std::make_shared<RefSet>();
    b.refs = refs.get();
    auto core = make_core(*g, {}, &b);
    if (!core) return update_failure(info, CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED, nullptr);
    core->refs = std::move(refs);
    keep_enabled(*e->core, core.get());
    e->conds = make_conds(b, e->conds.get(), &pair);
    old = std::move(e->core);
    e->core = std::move(core);
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

CUresult exec_child_core(const ExecCore& old, const Graph& g, std::shared_ptr<ExecCore>* out) {
  CUgraphExecUpdateResultInfo info{};
  std::map<CUgraphConditionalHandle, CUgraphConditionalHandle> pair;
  if (compare(old, g, &info, &pair))
    return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;  // so on an H100, driver 580
  Build b;
  RefSet refs;  // a child graph's user objects stay with the executable's graph
  b.refs = &refs;
  auto core = make_core(g, {}, &b);
  if (!core) return CUDA_ERROR_INVALID_VALUE;
  keep_enabled(old, core.get());
  *out = std::move(core);
  return CUDA_SUCCESS;
}

bool set_conditional(CUgraphConditionalHandle h, unsigned value) {
  CondValues* conds = t_conds;
  if (!conds) return false;
  auto it = conds->slots.find(h);
  if (it == conds->slots.end()) return false;
  it->second.value.store(value);
  return true;
}

void register_graph_exec_entries(std::vector<Entry>& out) {
  out.insert(out.end(),
             {
                 EMU_ENTRY(cuGraphInstantiateWithFlags, 11040, graph_instantiate_with_flags),
                 EMU_ENTRY(cuGraphInstantiateWithParams, 12000, graph_instantiate_with_params),
                 EMU_ENTRY(cuGraphExecDestroy, 10000, graph_exec_destroy),
                 EMU_ENTRY(cuGraphUpload, 11010, graph_upload),
                 EMU_ENTRY(cuGraphLaunch, 10000, graph_launch),
                 EMU_ENTRY(cuGraphExecUpdate, 10020, graph_exec_update_v1),
                 EMU_ENTRY(cuGraphExecUpdate, 12000, graph_exec_update),
             });
  register_node_update_entries(out);
}

}  // namespace emu

EMU_EXPORT int custream_emu_set_conditional(CUgraphConditionalHandle handle, unsigned int value) {
  return emu::set_conditional(handle, value) ? 0 : -1;
}

// Per-node updates of a custream::Graph's executable, and the keeper that owns the payloads they
// give and replace. Design: docs/design/graphs.md, "Per-node updates" (invariants U1-U6).
#include <cstdlib>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "context.hpp"
#include "custream/context_scope.hpp"
#include "custream/error.hpp"
#include "custream/graph.hpp"
#include "custream/graph_builder.hpp"
#include "custream/host_function_error.hpp"
#include "driver.hpp"
#include "error.hpp"
#include "graph/nodes.hpp"
#include "graph/owner.hpp"
#include "graph_builder/owner.hpp"
#include "host_function.hpp"
#include "launch.hpp"
#include "support/releaser.hpp"

namespace custream {
namespace detail {
namespace {

// --- The keeper (U2) and the release after a launch (U3) ---

// The keeper's destructor: the executable let go of it and its launches are done. Frees what
// per-node updates gave and replaced. It and free_retired run on the driver's callback thread,
// where the driver refuses CUDA calls, and what they free may make some (a retired child
// builder's graph, its modules and events): the releasing thread frees it (U8,
// support/releaser.hpp).
void CUDA_CB free_kept(void* p) {
  release_later([p] { delete static_cast<Kept*>(p); });
}

// What a launch's host function frees: the keeper's retired payloads and the retired code.
struct RetiredBatch {
  std::vector<PayloadPtr> kept;
  std::vector<PayloadPtr> code;
};

// A batch of retired payloads, freed after the launch it follows (by the host function).
void CUDA_CB free_retired(void* p) {
  release_later([p] { delete static_cast<RetiredBatch*>(p); });
}

}  // namespace

void make_keeper(NodeUpdates& u, CUgraph graph) {
  auto kept = std::make_unique<Kept>();
  CUuserObject object = nullptr;
  if (CUresult r = try_call<&DriverApi::cuUserObjectCreate>(
          &object, static_cast<void*>(kept.get()), &free_kept, 1u,
          static_cast<unsigned>(CU_USER_OBJECT_NO_DESTRUCTOR_SYNC));
      r != CUDA_SUCCESS) {
    fail<&DriverApi::cuUserObjectCreate>(r, graph_subject(graph),
                                         "the keeper of per-node update payloads");
  }
  Kept* owned = kept.release();  // the user object's from here on
  if (CUresult r = try_call<&DriverApi::cuGraphRetainUserObject>(
          graph, object, 1u, static_cast<unsigned>(CU_GRAPH_USER_OBJECT_MOVE));
      r != CUDA_SUCCESS) {
    release_call<&DriverApi::cuUserObjectRelease>("user object", object, object, 1u);
    fail<&DriverApi::cuGraphRetainUserObject>(r, graph_subject(graph),
                                              "the keeper of per-node update payloads");
  }
  u.keeper = object;
  u.kept = owned;
  u.active = true;
}

void drop_keeper_from_graph(NodeUpdates& u, CUgraph graph) noexcept {
  if (u.keeper == nullptr) return;
  // The executable, if instantiated, holds its own reference (U2); without one this frees Kept.
  release_call<&DriverApi::cuGraphReleaseUserObject>("user object", u.keeper, graph, u.keeper, 1u);
}

void before_whole_update(NodeUpdates& u, CUgraph newer) {
  if (u.kept != nullptr) {
    u.kept->retired.reserve(u.kept->retired.size() + u.kept->current.size());
    call<&DriverApi::cuGraphRetainUserObject>(graph_subject(newer), newer, u.keeper, 1u, 0u);
  }
}

void after_whole_update(NodeUpdates& u, CUgraph newer, bool updated) noexcept {
  if (u.kept != nullptr) {
    // The executable took its own reference from `newer` (U4): newer's goes.
    release_call<&DriverApi::cuGraphReleaseUserObject>("user object", u.keeper, newer, u.keeper,
                                                       1u);
  }
  if (!updated) return;
  u.last_kernel = nullptr;  // the update may have given a node another kernel
  u.kernels.clear();
  u.active = u.keeper != nullptr;
  if (u.kept != nullptr && !u.kept->current.empty()) {
    for (auto& [node, payload] : u.kept->current) u.kept->retired.push_back(std::move(payload));
    u.kept->current.clear();
    u.retire_pending.store(true, std::memory_order_relaxed);
  }
}

void release_retired_after(NodeUpdates& u, CUstream stream, bool special) noexcept {
  std::vector<PayloadPtr> none;
  std::vector<PayloadPtr>& kept = u.kept != nullptr ? u.kept->retired : none;
  if (kept.empty() && u.retired_code.empty()) {
    u.retire_pending.store(false, std::memory_order_relaxed);
    return;
  }
  RetiredBatch* batch = nullptr;
  try {
    batch = new RetiredBatch;
  } catch (...) {
    return;  // no memory: the next launch, the keeper or the GraphOwner releases them
  }
  batch->kept.swap(kept);
  batch->code.swap(u.retired_code);
  // Launches of one executable run in order: once this one is done, every earlier one is (U3).
  // With launch()'s special-handle retry (the same context, so the same stream).
  CUresult r = CUDA_ERROR_INVALID_CONTEXT;
  try {
    std::optional<ContextScope> scope;
    r = on_stream<&DriverApi::cuLaunchHostFunc>(special, scope, stream, &free_retired,
                                                static_cast<void*>(batch));
  } catch (...) {  // no context could be made current: they stay retired
  }
  if (r != CUDA_SUCCESS) {  // they stay retired where they were (the next launch, or U2/U9)
    kept.swap(batch->kept);
    u.retired_code.swap(batch->code);
    delete batch;
    return;
  }
  u.retire_pending.store(false, std::memory_order_relaxed);
}

namespace {

// --- Payloads ---

// A host callable set_host gave a node, run by the node (host_functions.md's trampoline rules).
struct HostPayload final : Payload {
  explicit HostPayload(HostTask* t) noexcept : task(t) {}
  ~HostPayload() override { task->destroy(task); }
  HostTask* task;
};

// A child builder's graph set_child gave a node, and what its nodes own (the child's root graph
// holds its host payloads' user objects; the owner holds the root).
struct ChildPayload final : Payload {
  explicit ChildPayload(Shared<BuilderOwner> o) noexcept : owner(std::move(o)) {}
  Shared<BuilderOwner> owner;
};

void CUDA_CB run_node_task(void* p) noexcept {
  auto* task = static_cast<HostTask*>(p);
  try {
    task->invoke(*task, task->stream, CUDA_SUCCESS);
  } catch (...) {
    report_host_function_error(HostFunctionError{task->stream, std::current_exception(), true});
  }
}

// --- Naming nodes and refusing ---

// "kernel node 0x… of graph 0x… (exec 0x…)".
std::string node_text(GraphNode node, CUgraph graph, CUgraphExec exec) {
  return std::string(to_string(node.kind())) + " node " + pointer_text(node.handle()) +
         " of graph " + pointer_text(graph) + " (exec " + pointer_text(exec) + ")";
}

Subject exec_subject(CUgraphExec exec) noexcept { return {Subject::What::executable, exec, -1}; }

[[noreturn, gnu::cold]] void refuse(const char* call, GraphNode node, CUgraph graph,
                                    CUgraphExec exec, const std::string& why,
                                    CUresult r = CUDA_ERROR_INVALID_VALUE) {
  detail::throw_error(
      r, call, node_text(node, graph, exec),
      why +
          " (custream refused the update without calling the driver; the executable "
          "is unchanged)");
}

[[noreturn, gnu::cold]] void refuse_empty_graph(const char* call) {
  detail::throw_error(CUDA_ERROR_INVALID_VALUE, call, "empty custream::Graph",
                      "the Graph holds no executable (default-constructed or moved from)");
}

// The checks every per-node update makes before the driver (U1): a node of this graph's top
// level, of one of `kinds`.
void check_node(const char* call, GraphNode node, CUgraph graph, CUgraphExec exec,
                std::initializer_list<GraphNodeKind> kinds) {
  if (exec == nullptr) refuse_empty_graph(call);
  if (!node) refuse(call, node, graph, exec, "no node (a default-constructed GraphNode)");
  if (node.graph() != graph) {
    refuse(call, node, graph, exec,
           "the node belongs to graph " + pointer_text(node.graph()) +
               ", not to the graph this Graph was instantiated from (another builder's, or a "
               "conditional body's: per-node updates reach the top level only)");
  }
  for (GraphNodeKind k : kinds) {
    if (node.kind() == k) return;
  }
  std::string allowed;
  for (GraphNodeKind k : kinds)
    allowed += (allowed.empty() ? "" : " or ") + std::string(to_string(k));
  refuse(call, node, graph, exec, "this update applies to a " + allowed + " node");
}

// The driver refused: name the node and its reason.
template <auto Field>
[[noreturn, gnu::cold]] void update_failed(CUresult r, GraphNode node, CUgraph graph,
                                           CUgraphExec exec, const std::string& what) {
  fail<Field>(r, exec_subject(exec),
              node_text(node, graph, exec) + ": " + what + "; the executable is unchanged");
}

[[noreturn, gnu::cold]] void refuse_kernel_update(GraphNode node, CUgraph graph, CUgraphExec exec,
                                                  KernelNodeInfo& info, const LaunchConfig& config,
                                                  const std::size_t* sizes, std::size_t count) {
  const char* call = "custream::Graph::update_kernel";
  if (config.shared_bytes > kMaxSharedBytes) {
    refuse(call, node, graph, exec,
           std::to_string(config.shared_bytes) + " bytes of dynamic shared memory exceed the " +
               std::to_string(kMaxSharedBytes) + " the driver can take");
  }
  if (has_attributes(config)) {
    refuse(call, node, graph, exec,
           "the LaunchConfig carries launch attributes (cluster, cooperative, priority, "
           "programmatic, memory synchronization domain): an executable's kernel node update "
           "sets arguments and dimensions only");
  }
  check_argument_sizes(info.params, call, node_text(node, graph, exec), sizes, count);
  std::abort();  // check_argument_sizes refused: unreachable
}

}  // namespace

// --- Whole-graph updates from a builder's graph (U7) ---

PayloadPtr prepare_update_source(GraphOwner& o) {
  if (!o.update_source) return nullptr;                                 // nothing to retire
  o.updates.kept->retired.reserve(o.updates.kept->retired.size() + 1);  // a source has a keeper
  return PayloadPtr(new ChildPayload(Shared<BuilderOwner>()));
}

void set_update_source(GraphOwner& o, const Shared<BuilderOwner>& source,
                       PayloadPtr spare) noexcept {
  // The builder it was instantiated from is held already: no source of its own then.
  const bool own = source.get() == o.builder.get();
  if (o.update_source.get() == (own ? nullptr : source.get())) return;
  if (o.update_source) {  // what launches enqueued before this update may still run (U3)
    static_cast<ChildPayload&>(*spare).owner = std::move(o.update_source);
    o.updates.kept->retired.push_back(std::move(spare));  // reserved: no throw
    o.updates.retire_pending.store(true, std::memory_order_relaxed);
  }
  o.update_source = own ? Shared<BuilderOwner>() : source;
}

void forget_keeper(NodeUpdates& u, bool was_active) noexcept {
  u.keeper = nullptr;
  u.kept = nullptr;  // freed by the keeper's destructor, once its last reference went
  u.active = was_active;
}

}  // namespace detail

using detail::DriverApi;

// --- Kernel nodes (U5) ---

detail::KernelNodeInfo& Graph::kernel_node(GraphNode node) {
  const char* call = "custream::Graph::update_kernel";
  detail::check_node(call, node, graph_, exec_, {GraphNodeKind::kernel});
  detail::NodeUpdates& u = owner_.get()->updates;
  for (auto& info : u.kernels) {
    if (info->node == node.handle()) return *(u.last_kernel = info.get());
  }
  auto info = std::make_unique<detail::KernelNodeInfo>();
  info->node = node.handle();
  // The graph's context current for the queries (as for the update itself).
  ContextScope scope(owner_.get()->context);
  CUDA_KERNEL_NODE_PARAMS p{};
  if (CUresult r = detail::try_call<&DriverApi::cuGraphKernelNodeGetParams>(node.handle(), &p);
      r != CUDA_SUCCESS) {
    detail::update_failed<&DriverApi::cuGraphKernelNodeGetParams>(r, node, graph_, exec_,
                                                                  "its kernel");
  }
  info->func = p.func;
  info->kern = p.kern;
  info->ctx = p.ctx;
  // Its parameters' sizes, asked once (lib/launch.hpp), in the graph's context.
  const auto& api = detail::api();
  std::function<CUresult(std::size_t, std::size_t*, std::size_t*)> ask;
  if (info->func != nullptr && api.cuFuncGetParamInfo != nullptr) {
    ask = [&api, f = info->func](std::size_t i, std::size_t* offset, std::size_t* size) {
      return api.cuFuncGetParamInfo(f, i, offset, size);  // raw: param_sizes_known reads it
    };
  } else if (info->kern != nullptr && api.cuKernelGetParamInfo != nullptr) {
    ask = [&api, k = info->kern](std::size_t i, std::size_t* offset, std::size_t* size) {
      return api.cuKernelGetParamInfo(k, i, offset, size);  // raw: param_sizes_known reads it
    };
  }
  (void)detail::param_sizes_known(info->params, ask, [&](CUresult r, std::size_t i) {
    detail::update_failed<&DriverApi::cuFuncGetParamInfo>(
        r, node, graph_, exec_, "the size of its kernel's parameter " + std::to_string(i));
  });
  u.kernels.reserve(u.kernels.size() + 1);
  u.kernels.push_back(std::move(info));
  u.active = true;  // update() forgets the cache (the kernel may change)
  return *(u.last_kernel = u.kernels.back().get());
}

namespace {

// The driver's parameters of an update of `info`'s node to `config` and `params`.
CUDA_KERNEL_NODE_PARAMS kernel_update_params(const detail::KernelNodeInfo& info,
                                             const LaunchConfig& config, void** params) noexcept {
  CUDA_KERNEL_NODE_PARAMS p;
  p.func = info.func;
  p.gridDimX = config.grid.x, p.gridDimY = config.grid.y, p.gridDimZ = config.grid.z;
  p.blockDimX = config.block.x, p.blockDimY = config.block.y, p.blockDimZ = config.block.z;
  p.sharedMemBytes = static_cast<unsigned>(config.shared_bytes);
  p.kernelParams = params;
  p.extra = nullptr;
  p.kern = info.kern;
  p.ctx = info.ctx;
  return p;
}

[[noreturn, gnu::cold]] void kernel_update_failed(CUresult r, GraphNode node, CUgraph graph,
                                                  CUgraphExec exec, const LaunchConfig& config) {
  detail::update_failed<&DriverApi::cuGraphExecKernelNodeSetParams>(
      r, node, graph, exec,
      "grid " + detail::dims_text(config.grid) + ", block " + detail::dims_text(config.block) +
          ", " + std::to_string(config.shared_bytes) + " bytes of shared memory");
}

}  // namespace

void Graph::update_kernel_checked(GraphNode node, const LaunchConfig& config, void** params,
                                  const std::size_t* sizes, std::size_t count) {
  // The fast path (U5): the node updated last, argument types it accepted before, a plain
  // configuration, and the node's context current: an open ContextScope's, else asked once.
  const detail::KernelNodeInfo* info =
      exec_ != nullptr ? owner_.get()->updates.last_kernel : nullptr;
  if (info != nullptr && info->node == node.handle() && info->accepted == sizes &&
      info->ctx != nullptr && config.shared_bytes <= detail::kMaxSharedBytes &&
      !detail::has_attributes(config)) {
    CUresult asked = CUDA_SUCCESS;
    if (detail::MakeCurrent::is_current(info->ctx, &asked)) {
      const CUDA_KERNEL_NODE_PARAMS p = kernel_update_params(*info, config, params);
      const CUresult r =
          detail::api().cuGraphExecKernelNodeSetParams(exec_, node.handle(), &p);  // raw: hot
      if (r != CUDA_SUCCESS) kernel_update_failed(r, node, graph_, exec_, config);
      return;
    }
  }
  update_kernel_slow(node, config, params, sizes, count);
}

void Graph::update_kernel_slow(GraphNode node, const LaunchConfig& config, void** params,
                               const std::size_t* sizes, std::size_t count) {
  if (exec_ == nullptr) detail::refuse_empty_graph("custream::Graph::update_kernel");
  detail::KernelNodeInfo* info = owner_.get()->updates.last_kernel;
  if (info == nullptr || info->node != node.handle()) info = &kernel_node(node);  // U5
  // The checks of a typed launch (modules.md, libraries.md invariant 6).
  const bool sizes_ok =
      info->params.known.load(std::memory_order_acquire) != detail::ParamSizes::Known::known ||
      detail::arguments_match(info->params, sizes, count);
  if (!sizes_ok || config.shared_bytes > detail::kMaxSharedBytes ||
      detail::has_attributes(config)) {
    detail::refuse_kernel_update(node, graph_, exec_, *info, config, sizes, count);
  }
  const CUDA_KERNEL_NODE_PARAMS p = kernel_update_params(*info, config, params);
  // The node's context current (U5): without a current context driver 580 crashes in
  // cuGraphExecKernelNodeSetParams, whatever p.ctx says.
  const detail::MakeCurrent current(info->ctx != nullptr ? info->ctx : owner_.get()->context);
  const CUresult r =
      detail::api().cuGraphExecKernelNodeSetParams(exec_, node.handle(), &p);  // raw: hot path
  if (r != CUDA_SUCCESS) kernel_update_failed(r, node, graph_, exec_, config);
  // Only sizes known to match are remembered: unknown ones are asked again next time.
  if (info->params.known.load(std::memory_order_acquire) == detail::ParamSizes::Known::known) {
    info->accepted = sizes;
  }
}

// --- Memset and memcpy nodes ---

void Graph::update_memset_raw(GraphNode node, CUdeviceptr dst, unsigned value,
                              unsigned element_size, std::size_t count) {
  detail::check_node("custream::Graph::update_memset", node, graph_, exec_,
                     {GraphNodeKind::memset});
  CUDA_MEMSET_NODE_PARAMS p{};
  p.dst = dst;
  p.pitch = 0;
  p.value = value;
  p.elementSize = element_size;
  p.width = count;
  p.height = 1;
  if (CUresult r = detail::try_call<&DriverApi::cuGraphExecMemsetNodeSetParams>(
          static_cast<CUgraphExec>(exec_), node.handle(), &p, owner_.get()->context);
      r != CUDA_SUCCESS) {
    detail::update_failed<&DriverApi::cuGraphExecMemsetNodeSetParams>(
        r, node, graph_, exec_,
        std::to_string(count) + " element(s) of " + std::to_string(element_size) + " byte(s) at " +
            detail::pointer_text(reinterpret_cast<const void*>(dst)));
  }
}

namespace {
// A 1-D copy of `bytes` as CUDA_MEMCPY3D.
CUDA_MEMCPY3D copy_params(CUmemorytype dst_type, void* dst_host, CUdeviceptr dst,
                          CUmemorytype src_type, const void* src_host, CUdeviceptr src,
                          std::size_t bytes) {
  CUDA_MEMCPY3D p{};
  p.srcMemoryType = src_type;
  p.srcHost = src_host;
  p.srcDevice = src;
  p.dstMemoryType = dst_type;
  p.dstHost = dst_host;
  p.dstDevice = dst;
  p.WidthInBytes = bytes;
  p.Height = 1;
  p.Depth = 1;
  return p;
}
}  // namespace

void Graph::update_memcpy(GraphNode node, CUdeviceptr dst, CUdeviceptr src, std::size_t bytes) {
  detail::check_node("custream::Graph::update_memcpy", node, graph_, exec_,
                     {GraphNodeKind::memcpy});
  const CUDA_MEMCPY3D p =
      copy_params(CU_MEMORYTYPE_DEVICE, nullptr, dst, CU_MEMORYTYPE_DEVICE, nullptr, src, bytes);
  if (CUresult r = detail::try_call<&DriverApi::cuGraphExecMemcpyNodeSetParams>(
          static_cast<CUgraphExec>(exec_), node.handle(), &p, owner_.get()->context);
      r != CUDA_SUCCESS) {
    detail::update_failed<&DriverApi::cuGraphExecMemcpyNodeSetParams>(
        r, node, graph_, exec_, std::to_string(bytes) + " bytes device to device");
  }
}

void Graph::update_copy_to_device(GraphNode node, CUdeviceptr dst, const void* src,
                                  std::size_t bytes) {
  detail::check_node("custream::Graph::update_copy_to_device", node, graph_, exec_,
                     {GraphNodeKind::memcpy});
  const CUDA_MEMCPY3D p =
      copy_params(CU_MEMORYTYPE_DEVICE, nullptr, dst, CU_MEMORYTYPE_HOST, src, 0, bytes);
  if (CUresult r = detail::try_call<&DriverApi::cuGraphExecMemcpyNodeSetParams>(
          static_cast<CUgraphExec>(exec_), node.handle(), &p, owner_.get()->context);
      r != CUDA_SUCCESS) {
    detail::update_failed<&DriverApi::cuGraphExecMemcpyNodeSetParams>(
        r, node, graph_, exec_, std::to_string(bytes) + " bytes host to device");
  }
}

void Graph::update_copy_to_host(GraphNode node, void* dst, CUdeviceptr src, std::size_t bytes) {
  detail::check_node("custream::Graph::update_copy_to_host", node, graph_, exec_,
                     {GraphNodeKind::memcpy});
  const CUDA_MEMCPY3D p =
      copy_params(CU_MEMORYTYPE_HOST, dst, 0, CU_MEMORYTYPE_DEVICE, nullptr, src, bytes);
  if (CUresult r = detail::try_call<&DriverApi::cuGraphExecMemcpyNodeSetParams>(
          static_cast<CUgraphExec>(exec_), node.handle(), &p, owner_.get()->context);
      r != CUDA_SUCCESS) {
    detail::update_failed<&DriverApi::cuGraphExecMemcpyNodeSetParams>(
        r, node, graph_, exec_, std::to_string(bytes) + " bytes device to host");
  }
}

// --- Payloads: host callables and child graphs (U2, U3) ---

namespace {
// Gives `node` of `u` the payload `next` (after the driver accepted it): the one it replaces
// is retired (U3). Room was made by make_room() before the driver call: never throws.
void replace_payload(detail::NodeUpdates& u, CUgraphNode node, detail::PayloadPtr next) noexcept {
  for (auto& [n, payload] : u.kept->current) {
    if (n == node) {
      u.kept->retired.push_back(std::move(payload));
      payload = std::move(next);
      u.retire_pending.store(true, std::memory_order_relaxed);
      return;
    }
  }
  u.kept->current.emplace_back(node, std::move(next));
}

void make_room(detail::NodeUpdates& u) {
  u.kept->current.reserve(u.kept->current.size() + 1);
  u.kept->retired.reserve(u.kept->retired.size() + 1);
}

[[noreturn, gnu::cold]] void refuse_no_keeper(const char* call, GraphNode node, CUgraph graph,
                                              CUgraphExec exec) {
  detail::refuse(call, node, graph, exec,
                 "only a Graph made by a GraphBuilder (or updated from one's Graph) owns the "
                 "payloads a per-node update gives (a captured or adopted Graph has no keeper for "
                 "them; update it from a newer capture instead)",
                 CUDA_ERROR_NOT_SUPPORTED);
}
}  // namespace

void Graph::set_host_task(GraphNode node, detail::HostTask* task) {
  auto next = std::make_unique<detail::HostPayload>(task);  // frees `task` when refused
  const char* call = "custream::Graph::set_host";
  detail::check_node(call, node, graph_, exec_, {GraphNodeKind::host});
  detail::NodeUpdates& u = owner_.get()->updates;
  if (u.kept == nullptr) refuse_no_keeper(call, node, graph_, exec_);
  make_room(u);
  task->captured = true;  // runs on every launch
  const CUDA_HOST_NODE_PARAMS p{&detail::run_node_task, task};
  if (CUresult r = detail::try_call<&DriverApi::cuGraphExecHostNodeSetParams>(
          static_cast<CUgraphExec>(exec_), node.handle(), &p);
      r != CUDA_SUCCESS) {
    detail::update_failed<&DriverApi::cuGraphExecHostNodeSetParams>(r, node, graph_, exec_,
                                                                    "a new callable");
  }
  replace_payload(u, node.handle(), std::move(next));
}

void Graph::set_child(GraphNode node, const GraphBuilder& child) {
  const char* call = "custream::Graph::set_child";
  detail::check_node(call, node, graph_, exec_, {GraphNodeKind::child_graph});
  if (!child) detail::refuse(call, node, graph_, exec_, "the child GraphBuilder holds no graph");
  if (child.is_body()) {
    detail::refuse(call, node, graph_, exec_, "the child is a conditional body's builder");
  }
  detail::NodeUpdates& u = owner_.get()->updates;
  if (u.kept == nullptr) refuse_no_keeper(call, node, graph_, exec_);
  auto next = std::make_unique<detail::ChildPayload>(child.owner_);
  make_room(u);
  if (CUresult r = detail::try_call<&DriverApi::cuGraphExecChildGraphNodeSetParams>(
          static_cast<CUgraphExec>(exec_), node.handle(), child.handle());
      r != CUDA_SUCCESS) {
    detail::update_failed<&DriverApi::cuGraphExecChildGraphNodeSetParams>(
        r, node, graph_, exec_, "the graph " + detail::pointer_text(child.handle()));
  }
  replace_payload(u, node.handle(), std::move(next));
}

// --- Enabling ---

namespace {
constexpr std::initializer_list<GraphNodeKind> kEnableKinds = {
    GraphNodeKind::kernel, GraphNodeKind::memset, GraphNodeKind::memcpy};
}

void Graph::set_enabled(GraphNode node, bool enabled) {
  detail::check_node("custream::Graph::set_enabled", node, graph_, exec_, kEnableKinds);
  if (CUresult r = detail::try_call<&DriverApi::cuGraphNodeSetEnabled>(
          static_cast<CUgraphExec>(exec_), node.handle(), enabled ? 1u : 0u);
      r != CUDA_SUCCESS) {
    detail::update_failed<&DriverApi::cuGraphNodeSetEnabled>(r, node, graph_, exec_,
                                                             enabled ? "enabling" : "disabling");
  }
}

bool Graph::enabled(GraphNode node) const {
  detail::check_node("custream::Graph::enabled", node, graph_, exec_, kEnableKinds);
  unsigned on = 0;
  if (CUresult r = detail::try_call<&DriverApi::cuGraphNodeGetEnabled>(
          static_cast<CUgraphExec>(exec_), node.handle(), &on);
      r != CUDA_SUCCESS) {
    detail::update_failed<&DriverApi::cuGraphNodeGetEnabled>(r, node, graph_, exec_,
                                                             "whether it is enabled");
  }
  return on != 0;
}

// --- Listing ---

namespace {
bool kind_of(CUgraphNodeType type, GraphNodeKind& kind) noexcept {
  switch (type) {
    case CU_GRAPH_NODE_TYPE_KERNEL:
      kind = GraphNodeKind::kernel;
      return true;
    case CU_GRAPH_NODE_TYPE_MEMCPY:
      kind = GraphNodeKind::memcpy;
      return true;
    case CU_GRAPH_NODE_TYPE_MEMSET:
      kind = GraphNodeKind::memset;
      return true;
    case CU_GRAPH_NODE_TYPE_HOST:
      kind = GraphNodeKind::host;
      return true;
    case CU_GRAPH_NODE_TYPE_GRAPH:
      kind = GraphNodeKind::child_graph;
      return true;
    case CU_GRAPH_NODE_TYPE_EMPTY:
      kind = GraphNodeKind::empty;
      return true;
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
      kind = GraphNodeKind::event_wait;
      return true;
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
      kind = GraphNodeKind::event_record;
      return true;
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
      kind = GraphNodeKind::mem_alloc;
      return true;
    case CU_GRAPH_NODE_TYPE_MEM_FREE:
      kind = GraphNodeKind::mem_free;
      return true;
    case CU_GRAPH_NODE_TYPE_CONDITIONAL:
      kind = GraphNodeKind::conditional;
      return true;
    default:
      return false;
  }
}
}  // namespace

std::vector<GraphNode> Graph::nodes() const {
  if (graph_ == nullptr) detail::refuse_empty_graph("custream::Graph::nodes");
  const detail::Subject subject = detail::graph_subject(graph_);
  const std::vector<CUgraphNode> handles = detail::graph_nodes(graph_);  // graph/nodes.hpp
  std::vector<GraphNode> out;
  out.reserve(handles.size());
  for (CUgraphNode h : handles) {
    CUgraphNodeType type{};
    detail::call<&DriverApi::cuGraphNodeGetType>(subject, h, &type);
    GraphNodeKind kind{};
    if (kind_of(type, kind)) out.push_back(GraphNode(h, graph_, kind));
  }
  return out;
}

}  // namespace custream

// GraphBuilder's nodes without payloads of their own: memset, memcpy, empty, event record and
// wait, child graphs, graph memory, and explicit edges. Contract: include/custream/
// graph_builder.hpp; design: docs/design/graphs.md, "Builders" (invariants B3, B4, B6, B8).
#include "graph/nodes.hpp"

#include <algorithm>
#include <string>
#include <unordered_set>
#include <vector>

#include "add.hpp"
#include "conditional.hpp"
#include "custream/error.hpp"
#include "custream/event.hpp"
#include "custream/graph_builder.hpp"
#include "driver.hpp"
#include "error.hpp"
#include "node_params.hpp"
#include "owner.hpp"
#include "refuse.hpp"

namespace custream {

using detail::DriverApi;

GraphNode GraphBuilder::add_memset_node(GraphDependencies after, CUdeviceptr dst, unsigned value,
                                        unsigned element_size, std::size_t count) {
  CUgraphNodeParams p = detail::node_params(CU_GRAPH_NODE_TYPE_MEMSET);
  p.memset.dst = dst;
  p.memset.value = value;
  p.memset.elementSize = element_size;
  p.memset.width = count;
  p.memset.height = 1;
  p.memset.ctx = owner_ ? owner_.get()->context.handle() : nullptr;
  return add_node(after, p, GraphNodeKind::memset, "custream::GraphBuilder::add_memset");
}

GraphNode GraphBuilder::add_copy(GraphDependencies after, const CUDA_MEMCPY3D& copy,
                                 const char* call) {
  if (graph_ != nullptr &&
      ((copy.srcMemoryType == CU_MEMORYTYPE_HOST && copy.srcHost == nullptr) ||
       (copy.dstMemoryType == CU_MEMORYTYPE_HOST && copy.dstHost == nullptr))) {
    detail::refuse_builder(CUDA_ERROR_INVALID_VALUE, call, graph_, "the host memory is null");
  }
  CUgraphNodeParams p = detail::node_params(CU_GRAPH_NODE_TYPE_MEMCPY);
  p.memcpy.copyCtx = owner_ ? owner_.get()->context.handle() : nullptr;
  p.memcpy.copyParams = copy;
  return add_node(after, p, GraphNodeKind::memcpy, call);
}

namespace {
// A 1-D copy of `bytes` (one row, one slice).
CUDA_MEMCPY3D one_row(std::size_t bytes) {
  CUDA_MEMCPY3D c{};
  c.WidthInBytes = bytes;
  c.Height = 1;
  c.Depth = 1;
  return c;
}
}  // namespace

GraphNode GraphBuilder::add_memcpy(GraphDependencies after, CUdeviceptr dst, CUdeviceptr src,
                                   std::size_t bytes) {
  CUDA_MEMCPY3D c = one_row(bytes);
  c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  c.srcDevice = src;
  c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  c.dstDevice = dst;
  return add_copy(after, c, "custream::GraphBuilder::add_memcpy");
}

GraphNode GraphBuilder::add_copy_to_device(GraphDependencies after, CUdeviceptr dst,
                                           const void* src, std::size_t bytes) {
  CUDA_MEMCPY3D c = one_row(bytes);
  c.srcMemoryType = CU_MEMORYTYPE_HOST;
  c.srcHost = src;
  c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  c.dstDevice = dst;
  return add_copy(after, c, "custream::GraphBuilder::add_copy_to_device");
}

GraphNode GraphBuilder::add_copy_to_host(GraphDependencies after, void* dst, CUdeviceptr src,
                                         std::size_t bytes) {
  CUDA_MEMCPY3D c = one_row(bytes);
  c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  c.srcDevice = src;
  c.dstMemoryType = CU_MEMORYTYPE_HOST;
  c.dstHost = dst;
  return add_copy(after, c, "custream::GraphBuilder::add_copy_to_host");
}

GraphNode GraphBuilder::add_empty(GraphDependencies after) {
  CUgraphNodeParams p = detail::node_params(CU_GRAPH_NODE_TYPE_EMPTY);
  return add_node(after, p, GraphNodeKind::empty, "custream::GraphBuilder::add_empty");
}

GraphNode GraphBuilder::add_event_node(GraphDependencies after, const Event& event, bool record) {
  const char* call = record ? "custream::GraphBuilder::add_event_record"
                            : "custream::GraphBuilder::add_event_wait";
  check_add(after, call);
  detail::check_body_accepts(*owner_.get(), graph_,  // conditional.hpp
                             record ? GraphNodeKind::event_record : GraphNodeKind::event_wait);
  if (event.handle() == nullptr) {
    detail::refuse_builder(CUDA_ERROR_INVALID_HANDLE, call, graph_,
                           "the Event is empty (default-constructed or moved from)");
  }
  detail::BuilderOwner& owner = *owner_.get();
  const bool known = std::any_of(owner.events.begin(), owner.events.end(),
                                 [&](const Event& e) { return e == event; });
  if (!known) owner.events.reserve(owner.events.size() + 1);  // kept after the node (B3)
  CUgraphNodeParams p{};
  if (record) {
    p.type = CU_GRAPH_NODE_TYPE_EVENT_RECORD;
    p.eventRecord.event = event.handle();
  } else {
    p.type = CU_GRAPH_NODE_TYPE_WAIT_EVENT;
    p.eventWait.event = event.handle();
  }
  const GraphNode node =
      add_node(after, p, record ? GraphNodeKind::event_record : GraphNodeKind::event_wait, call);
  if (!known) owner.events.push_back(event);  // reserved: no throw
  return node;
}

GraphNode GraphBuilder::add_event_record(GraphDependencies after, const Event& event) {
  return add_event_node(after, event, true);
}

GraphNode GraphBuilder::add_event_wait(GraphDependencies after, const Event& event) {
  return add_event_node(after, event, false);
}

GraphNode GraphBuilder::add_child(GraphDependencies after, const GraphBuilder& child) {
  static constexpr const char* call = "custream::GraphBuilder::add_child";
  check_add(after, call);
  if (child.graph_ == nullptr) {
    detail::refuse_builder(CUDA_ERROR_INVALID_VALUE, call, graph_,
                           "the child builder is empty (default-constructed or moved from)");
  }
  detail::BuilderOwner& owner = *owner_.get();
  detail::BuilderOwner& inner = *child.owner_.get();
  if (inner.holds(&owner)) {
    detail::refuse_builder(CUDA_ERROR_INVALID_VALUE, call, graph_,
                           "the child graph " + detail::pointer_text(child.graph_) +
                               " is this builder's own graph, or contains it: a graph cannot "
                               "contain itself");
  }
  if (inner.context != owner.context) {
    detail::refuse_builder(CUDA_ERROR_INVALID_CONTEXT, call, graph_,
                           "the child builder's nodes run in " + inner.context.to_string() +
                               ", this builder's in " + owner.context.to_string() +
                               ": a graph runs in one context");
  }
  detail::check_body_accepts_child(owner, graph_, child.graph_);  // conditional.hpp
  // What the child's nodes own stays as long as this graph and its executables (invariant B4):
  // the root holds the child's host payloads too, and this owner the child's owner.
  owner.children.reserve(owner.children.size() + 1);
  owner.objects.reserve(owner.objects.size() + inner.objects.size());
  for (CUuserObject object : inner.objects) {
    detail::call<&DriverApi::cuGraphRetainUserObject>(detail::graph_subject(owner.root()),
                                                      owner.root(), object, 1u, 0u);
    owner.objects.push_back(object);  // reserved: no throw
  }
  CUgraphNodeParams p = detail::node_params(CU_GRAPH_NODE_TYPE_GRAPH);
  p.graph.graph = child.graph_;
  const GraphNode node = add_node(after, p, GraphNodeKind::child_graph, call);
  owner.children.push_back(child.owner_);  // reserved: no throw
  return node;
}

GraphAllocation GraphBuilder::add_alloc(GraphDependencies after, std::size_t bytes) {
  static constexpr const char* call = "custream::GraphBuilder::add_alloc";
  check_add(after, call);
  detail::BuilderOwner& owner = *owner_.get();
  detail::check_body_accepts(owner, graph_, GraphNodeKind::mem_alloc);  // conditional.hpp
  owner.allocated.reserve(owner.allocated.size() + 1);
  CUgraphNodeParams p = detail::node_params(CU_GRAPH_NODE_TYPE_MEM_ALLOC);
  p.alloc.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.alloc.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.alloc.poolProps.location.id = owner.context.device_id();
  p.alloc.bytesize = bytes;
  const GraphNode node = add_node(after, p, GraphNodeKind::mem_alloc, call);
  owner.allocated.emplace_back(p.alloc.dptr, node.handle());  // reserved (invariant B6)
  return GraphAllocation{node, p.alloc.dptr};
}

namespace {
const std::pair<CUdeviceptr, CUgraphNode>* find_address(
    const std::vector<std::pair<CUdeviceptr, CUgraphNode>>& list, CUdeviceptr address) {
  for (const auto& entry : list) {
    if (entry.first == address) return &entry;
  }
  return nullptr;
}
}  // namespace

GraphNode GraphBuilder::add_free(GraphDependencies after, CUdeviceptr address) {
  static constexpr const char* call = "custream::GraphBuilder::add_free";
  check_add(after, call);
  detail::BuilderOwner& owner = *owner_.get();
  detail::check_body_accepts(owner, graph_, GraphNodeKind::mem_free);  // conditional.hpp
  const std::string what = "address " + detail::pointer_text(reinterpret_cast<void*>(address));
  if (find_address(owner.allocated, address) == nullptr) {
    detail::refuse_builder(CUDA_ERROR_INVALID_VALUE, call, graph_,
                           what +
                               " was not allocated by an add_alloc of this builder: a free "
                               "node frees only its own graph's allocations");
  }
  if (const auto* freed = find_address(owner.freed, address)) {
    detail::refuse_builder(
        CUDA_ERROR_INVALID_VALUE, call, graph_,
        what + " is already freed by " +
            detail::node_text(GraphNode(freed->second, graph_, GraphNodeKind::mem_free)) +
            ": an allocation is freed once");
  }
  owner.freed.reserve(owner.freed.size() + 1);
  CUgraphNodeParams p = detail::node_params(CU_GRAPH_NODE_TYPE_MEM_FREE);
  p.free.dptr = address;
  const GraphNode node = add_node(after, p, GraphNodeKind::mem_free, call);
  owner.freed.emplace_back(address, node.handle());  // reserved
  return node;
}

namespace {
// Whether `node` of `graph` already runs after `ancestor`: a walk up the driver's dependencies
// (depth first; cold path). @throws Error naming the graph.
bool runs_after(CUgraph graph, CUgraphNode node, CUgraphNode ancestor) {
  std::vector<CUgraphNode> stack{node};
  std::unordered_set<CUgraphNode> seen;
  while (!stack.empty()) {
    const CUgraphNode n = stack.back();
    stack.pop_back();
    if (n == ancestor) return true;
    if (!seen.insert(n).second) continue;
    for (CUgraphNode d : detail::node_dependencies(graph, n)) stack.push_back(d);
  }
  return false;
}
}  // namespace

void GraphBuilder::add_dependency(GraphNode from, GraphNode to) {
  static constexpr const char* call = "custream::GraphBuilder::add_dependency";
  check_add({from, to}, call);
  const std::string edge =
      "an edge from " + detail::node_text(from) + " to " + detail::node_text(to);
  if (from == to || runs_after(graph_, from.handle(), to.handle())) {
    detail::throw_error(CUDA_ERROR_INVALID_VALUE, call, "graph " + detail::pointer_text(graph_),
                        edge + " would close a cycle (" + detail::node_text(from) +
                            " already runs after " + detail::node_text(to) +
                            "): a graph has no cycles (custream refused it before adding the "
                            "edge; the builder is unchanged)");
  }
  const CUgraphNode f = from.handle();
  const CUgraphNode t = to.handle();
  if (CUresult r = detail::try_call<&DriverApi::cuGraphAddDependencies>(
          static_cast<CUgraph>(graph_), &f, &t, std::size_t{1});
      r != CUDA_SUCCESS) {
    detail::fail<&DriverApi::cuGraphAddDependencies>(r, detail::graph_subject(graph_),
                                                     edge + "; the builder is unchanged");
  }
}

}  // namespace custream

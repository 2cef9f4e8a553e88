// custream::GraphBuilder: making the graph, the checks every add_… makes before the driver is
// called, the one driver call that adds a node, and instantiation. Contract: include/custream/
// graph_builder.hpp; design: docs/design/graphs.md, "Builders" (invariants B1, B5, B7).
#include <string>
#include <vector>

#include "context.hpp"
#include "custream/context_scope.hpp"
#include "custream/device.hpp"
#include "custream/error.hpp"
#include "custream/graph_builder.hpp"
#include "driver.hpp"
#include "error.hpp"
#include "graph/nodes.hpp"
#include "owner.hpp"
#include "refuse.hpp"

namespace custream {

using detail::DriverApi;

const char* to_string(GraphNodeKind kind) noexcept {
  switch (kind) {
    case GraphNodeKind::empty:
      return "empty";
    case GraphNodeKind::kernel:
      return "kernel";
    case GraphNodeKind::memset:
      return "memset";
    case GraphNodeKind::memcpy:
      return "memcpy";
    case GraphNodeKind::host:
      return "host";
    case GraphNodeKind::event_record:
      return "event record";
    case GraphNodeKind::event_wait:
      return "event wait";
    case GraphNodeKind::child_graph:
      return "child graph";
    case GraphNodeKind::mem_alloc:
      return "memory allocation";
    case GraphNodeKind::mem_free:
      return "memory free";
    case GraphNodeKind::conditional:
      return "conditional";
  }
  return "unknown";
}

namespace detail {

std::string node_text(const GraphNode& node) {
  if (!node) return "an empty GraphNode";
  return "node " + pointer_text(node.handle()) + " (" + to_string(node.kind()) + ")";
}

void refuse_builder(CUresult result, const char* call, CUgraph graph, const std::string& why) {
  detail::throw_error(
      result, call, graph != nullptr ? "graph " + pointer_text(graph) : std::string(),
      why + " (custream refused it without calling the driver; the builder is unchanged)");
}

void refuse_empty_builder(const char* call) {
  detail::throw_error(
      CUDA_ERROR_INVALID_VALUE, call, "empty custream::GraphBuilder",
      "the builder holds no graph (default-constructed or moved from); custream refused "
      "it without calling the driver");
}

}  // namespace detail

GraphBuilder::GraphBuilder(const Context& context) {
  detail::nonempty(context, "custream::GraphBuilder");
  auto* owner = new detail::BuilderOwner;
  detail::Shared<detail::BuilderOwner> shared(owner);
  owner->context = context;
  owner->graphs.reserve(1);
  CUgraph graph = nullptr;
  detail::call<&DriverApi::cuGraphCreate>(detail::context_subject(context.handle()), &graph, 0u);
  owner->graphs.push_back(graph);  // reserved: owned from here on (invariant B1)
  graph_ = graph;
  owner_ = std::move(shared);
}

GraphBuilder GraphBuilder::create() { return GraphBuilder(Device::current().primary_context()); }

GraphBuilder::GraphBuilder(CUgraph graph, detail::Shared<detail::BuilderOwner> owner) noexcept
    : graph_(graph), owner_(std::move(owner)) {}

const Context& GraphBuilder::context() const noexcept {
  static const Context none;
  return owner_ ? owner_.get()->context : none;
}

bool GraphBuilder::is_body() const noexcept {
  return owner_ && static_cast<CUgraph>(graph_) != owner_.get()->root();
}

namespace {

// Why `node`, a dependency of a node of `graph` in builder `owner`, is refused (invariant B5).
[[noreturn, gnu::cold]] void refuse_dependency(const detail::BuilderOwner& owner, CUgraph graph,
                                               const GraphNode& node, const char* call) {
  if (!node) {
    detail::refuse_builder(CUDA_ERROR_INVALID_VALUE, call, graph,
                           "a dependency is an empty GraphNode (default-constructed)");
  }
  const bool root = graph == owner.root();
  std::string why = "dependency " + detail::node_text(node) + " belongs to graph " +
                    detail::pointer_text(node.graph()) + ", ";
  if (owner.owns(node.graph())) {
    why += std::string("another graph of this builder (") +
           (root ? "a conditional body's node as a dependency of a root node"
            : node.graph() == owner.root() ? "a root node as a dependency of a body's node"
                                           : "another body's node") +
           "): a node depends only on nodes of its own graph";
  } else {
    why += "not this builder's: a node depends only on nodes of its own builder's graph";
  }
  detail::refuse_builder(CUDA_ERROR_INVALID_VALUE, call, graph, why);
}

// Whether a node is added without making the builder's context current (B10): memset, empty
// and device-to-device memcpy nodes of the root graph, which driver 580 adds with no context
// current, or another one (test/conformance/no_current_context.cpp).
bool adds_without_current(const CUgraphNodeParams& p, bool root) noexcept {
  if (!root) return false;
  switch (p.type) {
    case CU_GRAPH_NODE_TYPE_MEMSET:
    case CU_GRAPH_NODE_TYPE_EMPTY:
      return true;
    case CU_GRAPH_NODE_TYPE_MEMCPY:
      return p.memcpy.copyParams.srcMemoryType == CU_MEMORYTYPE_DEVICE &&
             p.memcpy.copyParams.dstMemoryType == CU_MEMORYTYPE_DEVICE;
    default:
      return false;
  }
}

}  // namespace

void GraphBuilder::check_add(GraphDependencies after, const char* call) const {
  if (graph_ == nullptr) detail::refuse_empty_builder(call);
  for (const GraphNode& node : after) {
    if (!node || node.graph() != graph_) refuse_dependency(*owner_.get(), graph_, node, call);
  }
}

GraphNode GraphBuilder::add_node(GraphDependencies after, CUgraphNodeParams& params,
                                 GraphNodeKind kind, const char* call) {
  check_add(after, call);
  return add_checked_node(after, params, kind, call);
}

namespace {

// The one cuGraphAddNode of an add, `deps` holding `count` dependencies. @throws Error naming
// the node's kind and `call`.
inline CUgraphNode add_to_driver(CUgraph graph, const CUgraphNode* deps, std::size_t count,
                                 CUgraphNodeParams& params, GraphNodeKind kind, const char* call) {
  CUgraphNode node = nullptr;
  const CUresult r = detail::try_call<&DriverApi::cuGraphAddNode>(
      &node, graph, count == 0 ? nullptr : deps, static_cast<const CUgraphEdgeData*>(nullptr),
      count, &params);
  if (r != CUDA_SUCCESS) {
    detail::fail<&DriverApi::cuGraphAddNode>(
        r, detail::graph_subject(graph),
        std::string("a ") + to_string(kind) + " node (" + call + "); the builder is unchanged");
  }
  return node;
}

// add_to_driver with the builder's context current where the node needs it (invariant B10):
// without a current context, driver 580 crashes adding a kernel node (to a root graph or a
// body), whatever the node's ctx says; root memset, empty and device-to-device memcpy nodes
// are added as they are (measured: test/conformance/no_current_context.cpp).
inline CUgraphNode add_in_context(const detail::BuilderOwner& owner, CUgraph graph,
                                  const CUgraphNode* deps, std::size_t count,
                                  CUgraphNodeParams& params, GraphNodeKind kind, const char* call) {
  if (adds_without_current(params, graph == owner.root())) {
    return add_to_driver(graph, deps, count, params, kind, call);
  }
  const detail::MakeCurrent current(owner.context.handle());
  return add_to_driver(graph, deps, count, params, kind, call);
}

// add_checked_node with more than eight dependencies (their array on the heap).
[[gnu::cold, gnu::noinline]] CUgraphNode add_many(const detail::BuilderOwner& owner, CUgraph graph,
                                                  GraphDependencies after,
                                                  CUgraphNodeParams& params, GraphNodeKind kind,
                                                  const char* call) {
  std::vector<CUgraphNode> deps;
  deps.reserve(after.size());
  for (const GraphNode& node : after) deps.push_back(node.handle());
  return add_in_context(owner, graph, deps.data(), deps.size(), params, kind, call);
}

}  // namespace

GraphNode GraphBuilder::add_checked_node(GraphDependencies after, CUgraphNodeParams& params,
                                         GraphNodeKind kind, const char* call) {
  const detail::BuilderOwner& owner = *owner_.get();
  if (after.size() > 8) {
    return GraphNode(add_many(owner, graph_, after, params, kind, call), graph_, kind);
  }
  // The driver takes an array of CUgraphNode: on the stack up to 8 dependencies (B8).
  CUgraphNode deps[8];
  std::size_t i = 0;
  for (const GraphNode& node : after) deps[i++] = node.handle();
  return GraphNode(add_in_context(owner, graph_, deps, i, params, kind, call), graph_, kind);
}

Graph GraphBuilder::instantiate(InstantiateFlags flags, StreamRef upload_stream) const {
  if (graph_ == nullptr) detail::refuse_empty_builder("custream::GraphBuilder::instantiate");
  if (is_body()) {
    detail::refuse_builder(CUDA_ERROR_INVALID_VALUE, "custream::GraphBuilder::instantiate", graph_,
                           "the builder is a conditional body's: instantiate the root builder");
  }
  return Graph::from_builder(owner_, flags, upload_stream);
}

Graph GraphBuilder::instantiate(InstantiateFlags flags) const {
  return instantiate(flags, StreamRef::null());
}

std::size_t GraphBuilder::node_count() const {
  if (graph_ == nullptr) detail::refuse_empty_builder("custream::GraphBuilder::node_count");
  std::size_t count = 0;
  detail::call<&DriverApi::cuGraphGetNodes>(detail::graph_subject(graph_),
                                            static_cast<CUgraph>(graph_),
                                            static_cast<CUgraphNode*>(nullptr), &count);
  return count;
}

std::string GraphBuilder::dot(bool verbose) const {
  if (graph_ == nullptr) detail::refuse_empty_builder("custream::GraphBuilder::dot");
  std::string text = detail::graph_dot(graph_, verbose, "custream::GraphBuilder::dot");
  // Every node of each graph (root, then bodies) with its kind, in the driver's order (B7).
  std::string legend;
  for (CUgraph g : owner_.get()->graphs) {
    std::size_t index = 0;
    for (CUgraphNode n : detail::graph_nodes(g)) {
      legend += "\t// custream: graph " + detail::pointer_text(g) + " node " +
                std::to_string(index++) + " " + detail::pointer_text(n) + " " +
                to_string(detail::node_kind(detail::node_type(g, n))) + "\n";
    }
  }
  const std::size_t close = text.rfind('}');
  text.insert(close == std::string::npos ? text.size() : close, legend);
  return text;
}

}  // namespace custream

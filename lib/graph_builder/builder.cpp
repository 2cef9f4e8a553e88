// custream::GraphBuilder: making the graph, the refusals of the checks every add_… makes before
// the driver is called (the checks and the one driver call that adds a node: add.hpp), and
// instantiation. Contract: include/custream/
// graph_builder.hpp; design: docs/design/graphs.md, "Builders" (invariants B1, B5, B7).
#include <string>
#include <vector>

#include "add.hpp"
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

namespace detail {

void refuse_dependency(const BuilderOwner& owner, CUgraph graph, const GraphNode& node,
                       const char* call) {
  if (!node) {
    refuse_builder(CUDA_ERROR_INVALID_VALUE, call, graph,
                   "a dependency is an empty GraphNode (default-constructed)");
  }
  const bool root = graph == owner.root();
  std::string why =
      "dependency " + node_text(node) + " belongs to graph " + pointer_text(node.graph()) + ", ";
  if (owner.owns(node.graph())) {
    why += std::string("another graph of this builder (") +
           (root ? "a conditional body's node as a dependency of a root node"
            : node.graph() == owner.root() ? "a root node as a dependency of a body's node"
                                           : "another body's node") +
           "): a node depends only on nodes of its own graph";
  } else {
    why += "not this builder's: a node depends only on nodes of its own builder's graph";
  }
  refuse_builder(CUDA_ERROR_INVALID_VALUE, call, graph, why);
}

CUgraphNode add_many(const BuilderOwner& owner, CUgraph graph, GraphDependencies after,
                     CUgraphNodeParams& params, GraphNodeKind kind, const char* call) {
  std::vector<CUgraphNode> deps;
  deps.reserve(after.size());
  for (const GraphNode& node : after) deps.push_back(node.handle());
  return add_in_context(owner, graph, deps.data(), deps.size(), params, kind, call);
}

}  // namespace detail

void GraphBuilder::check_add(GraphDependencies after, const char* call) const {
  detail::check_dependencies(graph_, owner_.get(), after, call);  // add.hpp
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

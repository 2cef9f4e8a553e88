// Conditional nodes: conditions (cuGraphConditionalHandleCreate), IF, IF/ELSE, WHILE and
// SWITCH nodes (cuGraphAddNode with CU_GRAPH_NODE_TYPE_CONDITIONAL) and their bodies as
// builders. Design: docs/design/graphs.md, "Conditional nodes".
//
// Contract: a body graph belongs to the driver (it lives as long as its conditional node, so as
// long as the root graph); custream registers it (conditional_bodies.cpp) with its root, and a
// body's GraphBuilder shares the root's BuilderOwner, so that the root outlives every builder of
// its bodies. Every refusal is made before the driver is called: a refused add leaves the graph
// as it was.
#include <optional>
#include <vector>

#include "conditional.hpp"
#include "custream/error.hpp"
#include "custream/graph_builder.hpp"
#include "driver.hpp"

namespace custream {

using detail::DriverApi;

namespace {

[[noreturn, gnu::cold]] void refuse_empty_builder(const char* call) {
  throw Error(CUDA_ERROR_INVALID_VALUE, call, "empty custream::GraphBuilder",
              "custream refused it without calling the driver: the GraphBuilder holds no graph "
              "(default-constructed or moved from)");
}

// The dependencies as CUgraphNodes, each of `graph`; refuses a node of another graph.
std::vector<CUgraphNode> dependency_handles(GraphDependencies after, CUgraph graph,
                                            const char* call) {
  std::vector<CUgraphNode> handles;
  handles.reserve(after.size());
  for (const GraphNode& node : after) {
    if (node.graph() != graph) {
      throw Error(CUDA_ERROR_INVALID_VALUE, call, "graph " + detail::pointer_text(graph),
                  "custream refused it without calling the driver: the dependency " +
                      detail::pointer_text(node.handle()) + " is a node of graph " +
                      detail::pointer_text(node.graph()) + ", not of this one");
    }
    handles.push_back(node.handle());
  }
  return handles;
}

// Adds a conditional node of `type` with `size` bodies to `builder`'s graph and registers its
// bodies. Every refusal comes before the driver is called: a refused add leaves the graph as
// it was.
CUgraphNode add_conditional(const GraphBuilder& builder, GraphDependencies after,
                            const ConditionalHandle& condition, CUgraphConditionalNodeType type,
                            unsigned size, const char* call) {
  const CUgraph graph = builder.handle();
  if (graph == nullptr) refuse_empty_builder(call);
  detail::check_condition_of(builder, condition, call, /*same_graph=*/true);
  detail::check_conditional_driver(detail::loaded().version, type, size, call);
  std::vector<CUgraphNode> deps = dependency_handles(after, graph, call);
  CUgraphNodeParams params{};
  params.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
  params.conditional.handle = condition.handle();
  params.conditional.type = type;
  params.conditional.size = size;
  params.conditional.ctx = builder.context().handle();
  CUgraphNode node = nullptr;
  detail::call<&DriverApi::cuGraphAddNode>(detail::graph_subject(graph), &node, graph,
                                           static_cast<const CUgraphNode*>(deps.data()),
                                           static_cast<const CUgraphEdgeData*>(nullptr),
                                           deps.size(), &params);
  const std::optional<detail::BodyInfo> here = detail::find_body(graph);
  detail::BodyInfo info;
  info.root = here ? here->root : graph;
  info.parent = graph;
  info.node = node;
  info.type = type;
  info.size = size;
  info.context = params.conditional.ctx;
  detail::register_bodies(info, params.conditional.phGraph_out);
  return node;
}

}  // namespace

ConditionalHandle GraphBuilder::add_condition(unsigned default_value, bool assign_default) {
  if (!graph_) refuse_empty_builder("custream::GraphBuilder::add_condition");
  CUgraphConditionalHandle handle = 0;
  detail::call<&DriverApi::cuGraphConditionalHandleCreate>(
      detail::graph_subject(graph_), &handle, static_cast<CUgraph>(graph_), context().handle(),
      default_value, assign_default ? static_cast<unsigned>(CU_GRAPH_COND_ASSIGN_DEFAULT) : 0u);
  return ConditionalHandle(handle, graph_, default_value, assign_default);
}

ConditionalNode GraphBuilder::add_if(GraphDependencies after, ConditionalHandle condition) {
  ConditionalNode result;
  result.node_ = GraphNode(add_conditional(*this, after, condition, CU_GRAPH_COND_TYPE_IF, 1,
                                           "custream::GraphBuilder::add_if"),
                           graph_, GraphNodeKind::conditional);
  result.condition_ = condition;
  result.parent_ = *this;
  return result;
}

ConditionalNode GraphBuilder::add_if_else(GraphDependencies after, ConditionalHandle condition) {
  ConditionalNode result;
  result.node_ = GraphNode(add_conditional(*this, after, condition, CU_GRAPH_COND_TYPE_IF, 2,
                                           "custream::GraphBuilder::add_if_else"),
                           graph_, GraphNodeKind::conditional);
  result.condition_ = condition;
  result.parent_ = *this;
  return result;
}

ConditionalNode GraphBuilder::add_while(GraphDependencies after, ConditionalHandle condition) {
  ConditionalNode result;
  result.node_ = GraphNode(add_conditional(*this, after, condition, CU_GRAPH_COND_TYPE_WHILE, 1,
                                           "custream::GraphBuilder::add_while"),
                           graph_, GraphNodeKind::conditional);
  result.condition_ = condition;
  result.parent_ = *this;
  return result;
}

ConditionalNode GraphBuilder::add_switch(GraphDependencies after, ConditionalHandle condition,
                                         unsigned cases) {
  if (cases == 0) {
    throw Error(CUDA_ERROR_INVALID_VALUE, "custream::GraphBuilder::add_switch",
                "graph " + detail::pointer_text(graph_),
                "custream refused it without calling the driver: a SWITCH node needs at least "
                "one case");
  }
  ConditionalNode result;
  result.node_ = GraphNode(add_conditional(*this, after, condition, CU_GRAPH_COND_TYPE_SWITCH, cases,
                                           "custream::GraphBuilder::add_switch"),
                           graph_, GraphNodeKind::conditional);
  result.condition_ = condition;
  result.parent_ = *this;
  return result;
}

std::size_t ConditionalNode::body_count() const noexcept {
  try {
    return node_ ? detail::bodies_of(node_.handle()).size() : 0;
  } catch (...) {  // std::bad_alloc copying the list
    return 0;
  }
}

GraphBuilder ConditionalNode::body(std::size_t index) const {
  static constexpr const char* call = "custream::ConditionalNode::body";
  const std::vector<CUgraph> bodies = node_ ? detail::bodies_of(node_.handle()) : std::vector<CUgraph>();
  if (index >= bodies.size()) {
    throw Error(CUDA_ERROR_INVALID_VALUE, call,
                node_ ? "conditional node " + detail::pointer_text(node_.handle())
                      : std::string("empty custream::ConditionalNode"),
                "custream refused it: the node has " + std::to_string(bodies.size()) +
                    " bodies, there is no body " + std::to_string(index));
  }
  GraphBuilder body;
  body.graph_ = bodies[index];
  body.owner_ = parent_.owner_;  // the root's: it outlives every builder of its bodies
  return body;
}

}  // namespace custream

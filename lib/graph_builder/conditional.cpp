// Conditional nodes: conditions (cuGraphConditionalHandleCreate), IF, IF/ELSE, WHILE and
// SWITCH nodes (cuGraphAddNode with CU_GRAPH_NODE_TYPE_CONDITIONAL) and their bodies as
// builders. Design: docs/design/graphs.md, "Conditional nodes".
//
// Contract: a body graph belongs to the driver (it lives as long as its conditional node, so as
// long as the root graph); custream registers it (conditional_bodies.cpp) with its root, and a
// body's GraphBuilder shares the root's BuilderOwner, so that the root outlives every builder of
// its bodies. Every refusal is made before the driver is called: a refused add leaves the graph
// as it was.
#include "error.hpp"
#include "conditional.hpp"

#include <optional>
#include <vector>

#include "custream/error.hpp"
#include "custream/graph_builder.hpp"
#include "driver.hpp"
#include "node_params.hpp"
#include "add.hpp"
#include "owner.hpp"
#include "refuse.hpp"

namespace custream {

using detail::DriverApi;

namespace {

// The checks of a conditional node of `type` with `size` bodies (all before the driver is
// called: a refused add leaves the graph as it was), then its parameters.
CUgraphNodeParams conditional_params(const GraphBuilder& builder,
                                     const ConditionalHandle& condition,
                                     CUgraphConditionalNodeType type, unsigned size,
                                     const char* call) {
  if (!builder) detail::refuse_empty_builder(call);
  detail::check_condition_of(builder, condition, call, /*same_graph=*/true);
  detail::check_conditional_driver(detail::loaded().version, type, size, call);
  CUgraphNodeParams params = detail::node_params(CU_GRAPH_NODE_TYPE_CONDITIONAL);
  params.conditional.handle = condition.handle();
  params.conditional.type = type;
  params.conditional.size = size;
  params.conditional.ctx = builder.context().handle();
  return params;
}

}  // namespace

ConditionalHandle GraphBuilder::add_condition(unsigned default_value, bool assign_default) {
  if (!graph_) detail::refuse_empty_builder("custream::GraphBuilder::add_condition");
  CUgraphConditionalHandle handle = 0;
  detail::call<&DriverApi::cuGraphConditionalHandleCreate>(
      detail::graph_subject(graph_), &handle, static_cast<CUgraph>(graph_), context().handle(),
      default_value, assign_default ? static_cast<unsigned>(CU_GRAPH_COND_ASSIGN_DEFAULT) : 0u);
  return ConditionalHandle(handle, graph_, default_value, assign_default);
}

ConditionalNode GraphBuilder::add_conditional_node(GraphDependencies after,
                                                   const ConditionalHandle& condition,
                                                   CUgraphConditionalNodeType type, unsigned size,
                                                   const char* call) {
  CUgraphNodeParams params = conditional_params(*this, condition, type, size, call);
  detail::BuilderOwner& owner = *owner_.get();
  owner.graphs.reserve(owner.graphs.size() + size);  // add_body below cannot fail
  ConditionalNode result;
  result.node_ = add_node(after, params, GraphNodeKind::conditional, call);
  const CUgraph* bodies = params.conditional.phGraph_out;  // the driver's, as long as the node
  for (unsigned i = 0; i < size; ++i) owner.add_body(bodies[i]);
  const std::optional<detail::BodyInfo> here = detail::find_body(graph_);
  detail::BodyInfo info;
  info.root = here ? here->root : static_cast<CUgraph>(graph_);
  info.parent = graph_;
  info.node = result.node_.handle();
  info.type = type;
  info.size = size;
  info.context = params.conditional.ctx;
  detail::register_bodies(info, bodies);
  result.condition_ = condition;
  result.parent_ = *this;
  return result;
}

ConditionalNode GraphBuilder::add_if(GraphDependencies after, ConditionalHandle condition) {
  return add_conditional_node(after, condition, CU_GRAPH_COND_TYPE_IF, 1,
                              "custream::GraphBuilder::add_if");
}

ConditionalNode GraphBuilder::add_if_else(GraphDependencies after, ConditionalHandle condition) {
  return add_conditional_node(after, condition, CU_GRAPH_COND_TYPE_IF, 2,
                              "custream::GraphBuilder::add_if_else");
}

ConditionalNode GraphBuilder::add_while(GraphDependencies after, ConditionalHandle condition) {
  return add_conditional_node(after, condition, CU_GRAPH_COND_TYPE_WHILE, 1,
                              "custream::GraphBuilder::add_while");
}

ConditionalNode GraphBuilder::add_switch(GraphDependencies after, ConditionalHandle condition,
                                         unsigned cases) {
  static constexpr const char* call = "custream::GraphBuilder::add_switch";
  if (cases == 0) {
    detail::refuse_builder(CUDA_ERROR_INVALID_VALUE, call, graph_,
                           "a SWITCH node needs at least one case");
  }
  return add_conditional_node(after, condition, CU_GRAPH_COND_TYPE_SWITCH, cases, call);
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
  const std::vector<CUgraph> bodies =
      node_ ? detail::bodies_of(node_.handle()) : std::vector<CUgraph>();
  if (index >= bodies.size()) {
    detail::throw_error(CUDA_ERROR_INVALID_VALUE, call,
                node_ ? "conditional node " + detail::pointer_text(node_.handle())
                      : std::string("empty custream::ConditionalNode"),
                "custream refused it: the node has " + std::to_string(bodies.size()) +
                    " bodies, there is no body " + std::to_string(index));
  }
  // The root's owner: the root outlives every builder of its bodies.
  return GraphBuilder(bodies[index], parent_.owner_);
}

}  // namespace custream

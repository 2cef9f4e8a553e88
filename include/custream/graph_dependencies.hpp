/// @file
/// custream::GraphDependencies: the nodes a new graph node waits for (a borrowed list).
#pragma once

#include <cstddef>
#include <initializer_list>
#include <vector>

#include "custream/graph_node.hpp"

namespace custream {

/// A borrowed list of GraphNodes that a new node depends on: `{}` (none), `{a, b}`, one node
/// (an empty GraphNode converts to none), or a std::vector. It refers to the caller's nodes: use
/// it only as the argument of the add_… call it is made for (a GraphDependencies kept in a
/// variable past its braced list's full expression dangles). Each node must belong to the graph
/// the node is added to; GraphBuilder refuses any other (graph_builder.hpp).
class GraphDependencies {
 public:
  /// No dependencies.
  GraphDependencies() noexcept = default;
  /// The listed nodes.
  GraphDependencies(std::initializer_list<GraphNode> nodes) noexcept : size_(nodes.size()) {
    data_ = nodes.begin();  // the list lives until the end of the add_… call it is passed to
  }
  /// One node.
  GraphDependencies(const GraphNode& node) noexcept : data_(&node), size_(node ? 1 : 0) {}
  /// The vector's nodes.
  GraphDependencies(const std::vector<GraphNode>& nodes) noexcept
      : data_(nodes.data()), size_(nodes.size()) {}

  /// The first node.
  const GraphNode* begin() const noexcept { return data_; }
  /// Past the last node.
  const GraphNode* end() const noexcept { return data_ + size_; }
  /// How many.
  std::size_t size() const noexcept { return size_; }
  /// True for none.
  bool empty() const noexcept { return size_ == 0; }

 private:
  const GraphNode* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace custream

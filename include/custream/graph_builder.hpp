/// @file
/// custream::GraphBuilder: a CUDA graph built node by node — kernels, copies, host callables,
/// events, child graphs, graph memory and conditional nodes — then instantiated as a Graph.
#pragma once

// CONTRACT SKETCH (lead, 2026-12-07): the names below are the agreed interface between the
// helpers building the builder (core kinds), conditional nodes and per-node updates. The
// builder's owner fleshes out the docs and may add overloads; renames go through the lead.

#include "custream/detail/cuda.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "custream/conditional_handle.hpp"
#include "custream/context.hpp"
#include "custream/detail/shared.hpp"
#include "custream/graph.hpp"
#include "custream/graph_dependencies.hpp"
#include "custream/graph_node.hpp"
#include "custream/instantiate_flags.hpp"
#include "custream/launch_config.hpp"
#include "custream/stream_ref.hpp"

namespace custream {

class Event;
class Kernel;
class LibraryKernel;
class ConditionalNode;

namespace detail {
/// The graph a builder (and its bodies) build, and what its nodes own (host callables,
/// libraries, child builders). Shared by the builder, its bodies and the Graphs made from it.
struct BuilderOwner;
}  // namespace detail

/// A graph memory allocation made by GraphBuilder::add_alloc.
struct GraphAllocation {
  GraphNode node;           ///< the allocation node
  CUdeviceptr address = 0;  ///< fixed for the graph's life
};

/// Builds a CUgraph node by node. Every add_… returns a GraphNode that later nodes of the
/// same graph may depend on. instantiate() makes a Graph (launch, upload, update, DOT and every
/// lifetime rule of Graph apply). What nodes own — host callables, the libraries of library
/// kernels — lives as long as the builder's graph and every Graph made from it, and every
/// launch of those. Copies share one graph. A builder of a conditional body (ConditionalNode::
/// body) builds into that body; it keeps the whole graph alive.
class GraphBuilder {
 public:
  /// No graph.
  GraphBuilder() noexcept = default;
  /// An empty graph whose nodes run in `context` (its device).
  /// @throws Error on a driver failure.
  explicit GraphBuilder(const Context& context);
  /// An empty graph for the current device's primary context.
  static GraphBuilder create();

  template <typename... Args>
  GraphNode add_kernel(GraphDependencies after, const Kernel& kernel, const LaunchConfig& config,
                       const Args&... args);
  template <typename... Args>
  GraphNode add_kernel(GraphDependencies after, const LibraryKernel& kernel,
                       const LaunchConfig& config, const Args&... args);
  /// `count` elements of `value` (1, 2 or 4 bytes: std::uint8_t, std::uint16_t, std::uint32_t).
  template <typename T>
  GraphNode add_memset(GraphDependencies after, CUdeviceptr dst, T value, std::size_t count);
  GraphNode add_memcpy(GraphDependencies after, CUdeviceptr dst, CUdeviceptr src,
                       std::size_t bytes);
  GraphNode add_copy_to_device(GraphDependencies after, CUdeviceptr dst, const void* src,
                               std::size_t bytes);
  GraphNode add_copy_to_host(GraphDependencies after, void* dst, CUdeviceptr src,
                             std::size_t bytes);
  template <typename F>
  GraphNode add_host(GraphDependencies after, F&& callable);
  GraphNode add_event_record(GraphDependencies after, const Event& event);
  GraphNode add_event_wait(GraphDependencies after, const Event& event);
  GraphNode add_child(GraphDependencies after, const GraphBuilder& child);
  GraphNode add_empty(GraphDependencies after);
  GraphAllocation add_alloc(GraphDependencies after, std::size_t bytes);
  GraphNode add_free(GraphDependencies after, CUdeviceptr address);
  /// An edge from `from` to `to` (both of this graph); refuses a cycle.
  void add_dependency(GraphNode from, GraphNode to);

  /// A conditional handle of this graph (cuGraphConditionalHandleCreate).
  ConditionalHandle add_condition(unsigned default_value = 0, bool assign_default = true);
  ConditionalNode add_if(GraphDependencies after, ConditionalHandle condition);
  ConditionalNode add_if_else(GraphDependencies after, ConditionalHandle condition);
  ConditionalNode add_while(GraphDependencies after, ConditionalHandle condition);
  ConditionalNode add_switch(GraphDependencies after, ConditionalHandle condition,
                             unsigned cases);
  /// A kernel node shipped with custream that sets `condition` to the 32-bit value at `value`
  /// (device memory) when it runs: drives a condition from the device without device-runtime
  /// code of the user's.
  GraphNode add_set_condition(GraphDependencies after, ConditionalHandle condition,
                              CUdeviceptr value);

  Graph instantiate(InstantiateFlags flags, StreamRef upload_stream) const;
  Graph instantiate(InstantiateFlags flags = InstantiateFlags::upload) const;

  CUgraph handle() const noexcept { return graph_; }
  const Context& context() const noexcept;
  bool is_body() const noexcept;
  std::size_t node_count() const;
  std::string dot(bool verbose = false) const;
  explicit operator bool() const noexcept { return graph_ != nullptr; }

 private:
  friend class ConditionalNode;
  friend class GraphCaptureScope;
  friend class Graph;
  detail::MovedFrom<CUgraph> graph_;
  detail::Shared<detail::BuilderOwner> owner_;
};

/// A conditional node and its bodies.
class ConditionalNode {
 public:
  ConditionalNode() noexcept = default;
  GraphNode node() const noexcept { return node_; }
  ConditionalHandle condition() const noexcept { return condition_; }
  std::size_t body_count() const noexcept;
  /// A builder of body `index` (IF: 0; IF/ELSE: 0 then, 1 else; SWITCH: the case; WHILE: 0).
  GraphBuilder body(std::size_t index = 0) const;

 private:
  friend class GraphBuilder;
  GraphNode node_;
  ConditionalHandle condition_;
  GraphBuilder parent_;
};

}  // namespace custream

/// @file
/// custream::GraphBuilder: a CUDA graph built node by node — kernels, copies, host callables,
/// events, child graphs, graph memory and conditional nodes — then instantiated as a Graph.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "custream/conditional_handle.hpp"
#include "custream/context.hpp"
#include "custream/detail/cuda.hpp"
#include "custream/detail/host_task.hpp"
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
/// libraries, child builders, events). Shared by the builder, its bodies and the Graphs made
/// from it (lib/graph_builder/owner.hpp).
struct BuilderOwner;
}  // namespace detail

/// A graph memory allocation made by GraphBuilder::add_alloc.
struct GraphAllocation {
  GraphNode node;           ///< the allocation node
  CUdeviceptr address = 0;  ///< fixed for the graph's life (the same at every launch)
};

/// Builds a CUgraph node by node (every node through one cuGraphAddNode, CUDA 12.3+).
///
/// @code
/// custream::GraphBuilder b(context);
/// auto fill = b.add_memset({}, buffer.get(), std::uint32_t{7}, n);
/// auto step = b.add_kernel(fill, kernel, custream::LaunchConfig{{blocks}, {256}}, buffer.get(),
/// n); b.add_host(step, [counter] { ++*counter; }); custream::Graph g = b.instantiate();
/// g.launch(stream);
/// @endcode
///
/// Every add_… returns a GraphNode that later nodes of the same graph may depend on (`after`).
/// instantiate() makes a Graph (launch, upload, update, DOT and every lifetime rule of Graph
/// apply). What nodes own — host callables, the libraries of library kernels, child builders'
/// graphs, events — lives as long as the builder's graph, every Graph made from it, and every
/// launch of those. Copies share one graph. A builder of a conditional body
/// (ConditionalNode::body) builds into that body; it keeps the whole graph alive.
///
/// Every add_… checks its input before the driver is called and refuses bad input with an
/// Error naming the call, the node and the rule, leaving the builder unchanged: an empty
/// GraphNode as a dependency, a node of another builder, a node of another graph of this
/// builder (a body's node as a dependency of the root, or the other way round), a cycle, a
/// free of an address this graph did not allocate or already freed, a Kernel of a module loaded
/// in another context than the builder's, an empty builder. Not thread-safe for one graph:
/// add to a builder (and its bodies) from one thread at a time.
class GraphBuilder {
 public:
  /// No graph: only assignment, destruction and the accessors may be used.
  GraphBuilder() noexcept = default;
  /// An empty graph whose nodes run in `context` (its device) (cuGraphCreate).
  /// @throws Error (CUDA_ERROR_INVALID_CONTEXT) for an empty Context; Error on a driver failure.
  explicit GraphBuilder(const Context& context);
  /// An empty graph for the current device's primary context.
  /// @throws as GraphBuilder(const Context&).
  static GraphBuilder create();

  /// A kernel node of a module's kernel: `config`'s dimensions, shared memory and attributes,
  /// `args` as its parameters (copied into the node: the values of this call run at every
  /// launch). The arguments are checked against the kernel's parameters as Kernel::launch
  /// checks them (once per kernel, then a comparison of sizes); the attributes as LaunchConfig
  /// says, except programmatic serialization and programmatic events, which a graph expresses
  /// as edges: refused. The module stays loaded while the graph lives. The builder's context
  /// is made current for the add (the driver crashes adding a kernel node with none): one
  /// cuCtxGetCurrent when it is already, none inside a ContextScope of it; nothing is left
  /// current.
  /// @throws Error naming the kernel and the rule (CUDA_ERROR_INVALID_VALUE for arguments,
  /// CUDA_ERROR_INVALID_CONTEXT for a module loaded in another context than the builder's)
  /// before the driver is called; Error naming cuGraphAddNode on a driver failure.
  template <typename... Args>
  GraphNode add_kernel(GraphDependencies after, const Kernel& kernel, const LaunchConfig& config,
                       const Args&... args) {
    return add_typed_kernel(after, kernel, config, args...);
  }
  /// A kernel node of a library's kernel (its function in the builder's context). Checked as
  /// add_kernel(…, const Kernel&, …); the library stays loaded while the graph, a Graph made
  /// from it, or a launch of one lives, also after every Library handle is dropped.
  /// @throws as add_kernel(…, const Kernel&, …).
  template <typename... Args>
  GraphNode add_kernel(GraphDependencies after, const LibraryKernel& kernel,
                       const LaunchConfig& config, const Args&... args) {
    return add_typed_kernel(after, kernel, config, args...);
  }
  /// A memset node: `count` elements of `value` at `dst` (device memory); T is 1, 2 or 4 bytes
  /// (std::uint8_t, std::uint16_t, std::uint32_t, or another integer of that size).
  /// @throws Error on bad input (before the driver) or a driver failure.
  template <typename T>
  GraphNode add_memset(GraphDependencies after, CUdeviceptr dst, T value, std::size_t count) {
    static_assert(std::is_integral_v<T> && (sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4),
                  "a memset node sets 1-, 2- or 4-byte integers");
    return add_memset_node(after, dst,
                           static_cast<unsigned>(static_cast<std::make_unsigned_t<T>>(value)),
                           static_cast<unsigned>(sizeof(T)), count);
  }
  /// A memcpy node copying `bytes` from `src` to `dst`, both device memory.
  /// @throws Error on bad input (before the driver) or a driver failure.
  GraphNode add_memcpy(GraphDependencies after, CUdeviceptr dst, CUdeviceptr src,
                       std::size_t bytes);
  /// A memcpy node copying `bytes` of host memory at `src` to `dst`. `src` may be pageable or
  /// pinned (the driver accepts both in graph memcpy nodes); it is read at every launch, so it
  /// must stay valid while the graph may run.
  /// @throws Error on bad input (a null `src`: before the driver) or a driver failure.
  GraphNode add_copy_to_device(GraphDependencies after, CUdeviceptr dst, const void* src,
                               std::size_t bytes);
  /// A memcpy node copying `bytes` from `src` to host memory at `dst` (pageable or pinned;
  /// written at every launch).
  /// @throws Error on bad input (a null `dst`: before the driver) or a driver failure.
  GraphNode add_copy_to_host(GraphDependencies after, void* dst, CUdeviceptr src,
                             std::size_t bytes);
  /// A host node running `callable` (any movable `void()` callable; moved into the graph, which
  /// owns it through a driver user object as a captured host function's payload is owned:
  /// destroyed exactly once, when the builder, every Graph made from it and every launch of
  /// those are gone). An exception it throws goes to the host-function error handler
  /// (set_host_function_error_handler) as a captured host function's does.
  /// @throws Error on bad input (before the driver; the callable is then destroyed) or a driver
  /// failure (the callable is destroyed with the graph); std::bad_alloc.
  template <typename F, typename = detail::enable_if_host_function<F>>
  GraphNode add_host(GraphDependencies after, F&& callable) {
    check_add(after, "custream::GraphBuilder::add_host");
    return add_host_task(after,
                         new detail::HostFunctionTask<std::decay_t<F>>(std::forward<F>(callable)));
  }
  /// An event record node: records `event` when it runs. The builder keeps a copy of `event`
  /// (the CUevent lives as long as the builder and every Graph made from it).
  /// @throws Error (CUDA_ERROR_INVALID_HANDLE) for an empty Event, before the driver; Error on a
  /// driver failure.
  GraphNode add_event_record(GraphDependencies after, const Event& event);
  /// An event wait node: later nodes wait for `event`'s recorded work. Kept as in
  /// add_event_record. @throws as add_event_record.
  GraphNode add_event_wait(GraphDependencies after, const Event& event);
  /// A child graph node: the driver copies `child`'s graph as it is now (later additions to
  /// `child` are not seen). What the child's nodes own (host callables, libraries, events)
  /// stays alive as long as this graph: this builder holds the child's.
  /// @throws Error for an empty `child`, `child` being this builder's own graph, or a child
  /// of another context, before the driver; Error on a driver failure.
  GraphNode add_child(GraphDependencies after, const GraphBuilder& child);
  /// An empty node: a join point (no work).
  /// @throws Error on bad input (before the driver) or a driver failure.
  GraphNode add_empty(GraphDependencies after);
  /// A graph memory allocation node of `bytes` on the builder's device: its address is fixed
  /// when the node is added and stays the same at every launch. Nodes after it may use it;
  /// add_free frees it (or, without one, the memory stays allocated after a launch until freed
  /// with cuMemFreeAsync, or instantiate with InstantiateFlags::auto_free_on_launch).
  /// @throws Error on bad input (before the driver) or a driver failure.
  GraphAllocation add_alloc(GraphDependencies after, std::size_t bytes);
  /// A graph memory free node of `address`, which an add_alloc of this builder returned.
  /// @throws Error (CUDA_ERROR_INVALID_VALUE, custream refusing before the driver) for an address
  /// this builder's graph did not allocate, or one it already frees; Error on a driver failure.
  GraphNode add_free(GraphDependencies after, CUdeviceptr address);
  /// An edge from `from` to `to` (both nodes of this builder's graph): `to` runs after `from`
  /// (cuGraphAddDependencies).
  /// @throws Error (CUDA_ERROR_INVALID_VALUE, before the edge is added) naming both nodes for an
  /// empty node, a node of another graph, or an edge that would close a cycle (`to` already
  /// runs before `from`, or they are the same node; the driver's edges are walked to tell);
  /// Error on a driver failure.
  void add_dependency(GraphNode from, GraphNode to);

  /// A conditional handle of this graph (cuGraphConditionalHandleCreate).
  ConditionalHandle add_condition(unsigned default_value = 0, bool assign_default = true);
  /// An IF node over `condition`.
  ConditionalNode add_if(GraphDependencies after, ConditionalHandle condition);
  /// An IF/ELSE node over `condition`.
  ConditionalNode add_if_else(GraphDependencies after, ConditionalHandle condition);
  /// A WHILE node over `condition`.
  ConditionalNode add_while(GraphDependencies after, ConditionalHandle condition);
  /// A SWITCH node over `condition` with `cases` bodies.
  ConditionalNode add_switch(GraphDependencies after, ConditionalHandle condition, unsigned cases);
  /// A kernel node shipped with custream that sets `condition` to the 32-bit value at `value`
  /// (device memory) when it runs: drives a condition from the device without device-runtime
  /// code of the user's.
  GraphNode add_set_condition(GraphDependencies after, ConditionalHandle condition,
                              CUdeviceptr value);

  /// Instantiates the builder's graph as a Graph (Graph::adopt's rules; the graph is not
  /// copied: the Graph holds this builder's graph, and everything its nodes own, until it and
  /// its copies are gone). With InstantiateFlags::upload the executable is uploaded on
  /// `upload_stream`. Instantiation happens in the builder's context. Later additions to the
  /// builder do not change a Graph made before them.
  /// @throws Error for an empty builder or a body (instantiate the root), before the driver;
  /// GraphInstantiateError naming the result and node; Error on another driver failure.
  Graph instantiate(InstantiateFlags flags, StreamRef upload_stream) const;
  /// instantiate() uploading, when `flags` say so, on the null stream of the builder's context.
  /// @throws as instantiate(flags, upload_stream).
  Graph instantiate(InstantiateFlags flags = InstantiateFlags::upload) const;

  /// The CUgraph nodes are added to (the root, or a body); null when empty.
  CUgraph handle() const noexcept { return graph_; }
  /// The context its nodes run in (an empty Context for an empty builder).
  const Context& context() const noexcept;
  /// True for a builder of a conditional body.
  bool is_body() const noexcept;
  /// The number of nodes of this builder's graph (the root's or the body's own; a child
  /// graph or a conditional node counts as one) (cuGraphGetNodes).
  /// @throws Error for an empty builder; Error on a driver failure.
  std::size_t node_count() const;
  /// The graph in Graphviz DOT (cuGraphDebugDotPrint, driver >= 11.3), followed by a
  /// `// custream: graph G node I <handle> <kind>` comment line for every node of the root
  /// graph and of each conditional body (kinds as to_string(GraphNodeKind) writes them, in the
  /// driver's order); `verbose` adds every node's parameters.
  /// @throws Error for an empty builder; Error on a driver or file failure.
  std::string dot(bool verbose = false) const;
  /// False for no graph.
  explicit operator bool() const noexcept { return graph_ != nullptr; }

 private:
  friend class ConditionalNode;
  friend class GraphCaptureScope;
  friend class Graph;
  /// A builder of `graph` (the root or a body) of `owner`.
  GraphBuilder(CUgraph graph, detail::Shared<detail::BuilderOwner> owner) noexcept;
  /// Refuses (before the driver) an empty builder, or a dependency that is empty or of another
  /// graph, naming `call`. @throws Error.
  void check_add(GraphDependencies after, const char* call) const;
  /// Adds a node of `params` after `after` (checked) and returns it; inline, defined where
  /// the library adds nodes. @throws Error naming `call` on a driver failure.
  inline GraphNode add_node(GraphDependencies after, CUgraphNodeParams& params, GraphNodeKind kind,
                            const char* call);
  /// add_node() for dependencies check_add() has accepted (the kernel paths check them first).
  inline GraphNode add_checked_node(GraphDependencies after, CUgraphNodeParams& params,
                                    GraphNodeKind kind, const char* call);
  GraphNode add_kernel_node(GraphDependencies after, const Kernel& kernel,
                            const LaunchConfig& config, void** params, const std::size_t* sizes,
                            std::size_t count);
  GraphNode add_kernel_node(GraphDependencies after, const LibraryKernel& kernel,
                            const LaunchConfig& config, void** params, const std::size_t* sizes,
                            std::size_t count);
  GraphNode add_memset_node(GraphDependencies after, CUdeviceptr dst, unsigned value,
                            unsigned element_size, std::size_t count);
  /// The typed add_kernel of either kind of kernel: the argument array and sizes, then
  /// add_kernel_node.
  template <typename K, typename... Args>
  GraphNode add_typed_kernel(GraphDependencies after, const K& kernel, const LaunchConfig& config,
                             const Args&... args) {
    static_assert((std::is_trivially_copyable_v<Args> && ...),
                  "kernel arguments are copied bytewise: they must be trivially copyable");
    void* params[sizeof...(Args) + 1] = {const_cast<void*>(static_cast<const void*>(&args))...,
                                         nullptr};
    static constexpr std::size_t sizes[sizeof...(Args) + 1] = {sizeof(Args)..., 0};
    return add_kernel_node(after, kernel, config, params, sizes, sizeof...(Args));
  }
  /// Owns `task` (checked dependencies): gives it to the graph, then adds its node.
  GraphNode add_host_task(GraphDependencies after, detail::HostTask* task);
  GraphNode add_event_node(GraphDependencies after, const Event& event, bool record);
  GraphNode add_copy(GraphDependencies after, const CUDA_MEMCPY3D& copy, const char* call);
  /// Adds a conditional node of `type` with `size` bodies and registers its bodies
  /// (lib/graph_builder/conditional.cpp). @throws Error naming `call`.
  ConditionalNode add_conditional_node(GraphDependencies after, const ConditionalHandle& condition,
                                       CUgraphConditionalNodeType type, unsigned size,
                                       const char* call);

  detail::MovedFrom<CUgraph> graph_;
  detail::Shared<detail::BuilderOwner> owner_;
};

/// A conditional node and its bodies.
class ConditionalNode {
 public:
  /// An empty ConditionalNode (no node, no bodies); body() on it throws.
  ConditionalNode() noexcept = default;
  /// The conditional node itself, to depend on or to list (GraphNodeKind::conditional).
  GraphNode node() const noexcept { return node_; }
  /// The condition the node tests.
  ConditionalHandle condition() const noexcept { return condition_; }
  /// How many bodies the node has (IF, WHILE: 1; IF/ELSE: 2; SWITCH: its cases); 0 when empty.
  std::size_t body_count() const noexcept;
  /// A builder of body `index` (IF: 0; IF/ELSE: 0 then, 1 else; SWITCH: the case; WHILE: 0).
  /// @throws Error CUDA_ERROR_INVALID_VALUE for an empty node or an index past the bodies.
  GraphBuilder body(std::size_t index = 0) const;

 private:
  friend class GraphBuilder;
  GraphNode node_;
  ConditionalHandle condition_;
  GraphBuilder parent_;
};

}  // namespace custream

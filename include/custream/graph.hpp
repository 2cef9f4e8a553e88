/// @file
/// custream::Graph: a CUDA graph and its executable, as a value handle.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "custream/context.hpp"
#include "custream/detail/cuda.hpp"
#include "custream/detail/host_task.hpp"
#include "custream/detail/shared.hpp"
#include "custream/graph_node.hpp"
#include "custream/instantiate_flags.hpp"
#include "custream/launch_config.hpp"
#include "custream/stream_ref.hpp"

namespace custream {

class GraphBuilder;

namespace detail {
/// Shared ownership of a graph and its executable.
struct GraphOwner;
/// What a GraphBuilder's graph owns (lib/graph_builder/owner.hpp).
struct BuilderOwner;
/// The state of one kernel node's per-node updates (lib/graph/node_updates.hpp).
struct KernelNodeInfo;
}  // namespace detail

/// A CUDA graph (CUgraph) together with its instantiated executable (CUgraphExec).
///
/// Copies share both; the last copy destroys them (cuGraphExecDestroy, then cuGraphDestroy
/// for a graph it owns). Destroying a Graph while a launch of it still runs is safe: the
/// driver finishes the launch, and host-function payloads captured with
/// Stream::launch_host_func live until the graph and every executable of it are gone.
///
/// Made by Stream::end_capture(), or from a CUgraph with adopt() or wrap(). Instantiation
/// uploads the executable by default (InstantiateFlags::upload), so the first launch costs
/// what a repeat launch costs.
class Graph {
 public:
  /// An empty Graph: no graph, no executable. Only destruction, assignment and the
  /// accessors may be used.
  Graph() noexcept = default;

  /// Instantiates `graph` and takes ownership of it (it is destroyed with the last copy,
  /// also when instantiation fails). With InstantiateFlags::upload the executable is
  /// uploaded on `upload_stream`; instantiation happens in that stream's context (for a
  /// special handle: the current context, or the current device's primary context).
  /// @throws GraphInstantiateError when instantiation fails (naming the instantiate result
  /// and node); Error on another driver failure.
  static Graph adopt(CUgraph graph, InstantiateFlags flags, StreamRef upload_stream);
  /// adopt() uploading on the current stream of the current device.
  static Graph adopt(CUgraph graph, InstantiateFlags flags = InstantiateFlags::upload);
  /// Instantiates `graph` without owning it: the caller keeps it alive at least as long as
  /// this Graph and its copies, and destroys it. Otherwise as adopt().
  /// @throws as adopt().
  static Graph wrap(CUgraph graph, InstantiateFlags flags, StreamRef upload_stream);
  /// wrap() uploading on the current stream of the current device.
  static Graph wrap(CUgraph graph, InstantiateFlags flags = InstantiateFlags::upload);

  /// Another reference to the same graph and executable.
  Graph(const Graph& other) noexcept = default;
  /// Takes over `other`'s reference; `other` becomes empty.
  Graph(Graph&& other) noexcept = default;
  /// Refers to `other`'s graph and executable instead (dropping this reference).
  Graph& operator=(const Graph& other) noexcept = default;
  /// Takes over `other`'s reference (dropping this one); `other` becomes empty.
  Graph& operator=(Graph&& other) noexcept = default;
  /// Drops this reference; the last one destroys the executable and the graph (never
  /// throws; safe while a launch runs).
  ~Graph() = default;

  /// The CUgraph (null for an empty Graph).
  CUgraph graph() const noexcept { return graph_; }
  /// The CUgraphExec (null for an empty Graph).
  CUgraphExec exec() const noexcept { return exec_; }
  /// False for an empty Graph.
  explicit operator bool() const noexcept { return exec_ != nullptr; }
  /// The flags it was instantiated with.
  InstantiateFlags flags() const noexcept { return flags_; }

  /// Launches the executable on the current stream of the current device.
  /// @throws Error on a driver failure (or for an empty Graph).
  void launch() const;
  /// Launches the executable on `stream` (cuGraphLaunch: one driver call, no context
  /// switch). @throws Error naming the graph and stream on a driver failure.
  void launch(StreamRef stream) const;
  /// Launches the executable on `stream` inside an NVTX range named `range` (NvtxRange), so
  /// that Nsight Systems shows the launch, and the GPU work it enqueues, under that name. An
  /// empty `range` sends nothing. launch(StreamRef) stays one driver call with no NVTX check.
  /// @throws as launch(StreamRef); std::bad_alloc.
  void launch(StreamRef stream, std::string_view range) const;
  /// Uploads the executable on the current stream of the current device (cuGraphUpload).
  /// @throws Error on a driver failure.
  void upload() const;
  /// Uploads the executable on `stream` (cuGraphUpload). @throws Error on a driver failure.
  void upload(StreamRef stream) const;

  /// Gives the executable the parameters of `newer`, a graph of the same topology (e.g. a
  /// later capture of the same work), with cuGraphExecUpdate. The executable then holds its
  /// own references to `newer`'s host-function payloads, so `newer` may be dropped at once;
  /// the payloads of an earlier update it replaces are destroyed once the launches enqueued
  /// before this update (also raw cuGraphLaunch calls on exec()) have finished. The graph this
  /// Graph was instantiated from, and its payloads, stay as long as this Graph. A per-step
  /// update loop therefore holds one step's payloads, not its history (prefer
  /// update_from_capture(), which does not instantiate). On a Graph given payloads by per-node
  /// updates (set_host, set_child), those are released as replaced ones are (graphs.md, U4):
  /// every node now runs `newer`'s parameters. When `newer` was made by a GraphBuilder, this
  /// Graph holds that builder (its modules, events, child graphs, graph memory), since the
  /// executable now runs them; the builder of an earlier such update is released once the
  /// launches enqueued before this one have finished (a captured or adopted Graph gets the
  /// keeper that takes care of it with its first such update). Likewise this Graph holds the
  /// libraries and modules of `newer`'s own graph (not what `newer` was updated to since)
  /// besides those of its own graph; those of an earlier update's graph are released once the
  /// launches enqueued before this update have finished (after the next launch() finishes, or
  /// with this Graph): a loop that loads new code every step holds its first step's code, the
  /// last step's, and until the next launch finishes the one before. Not thread-safe for one
  /// Graph: serialize update(), launch() and upload() of the same Graph (different Graphs may
  /// be updated concurrently).
  /// @throws GraphUpdateError naming the reason and the failing node (the executable is
  /// unchanged); Error on another failure.
  void update(const Graph& newer);
  /// Ends the capture `stream` began (as custream::end_capture) and updates this executable
  /// from the captured graph, without instantiating it: the loop "capture this step's work,
  /// update, launch" at the cost of cuStreamEndCapture + cuGraphExecUpdate. The captured
  /// graph is destroyed afterwards (the executable holds what it needs of it), also when the
  /// update fails. Same rules as update(const Graph&).
  /// @throws Error as custream::end_capture (then the stream has left capture mode, except
  /// for CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD: a global or thread-local capture ended from
  /// another thread); Error naming the failing driver call when preparing the captured graph
  /// fails; GraphUpdateError naming the reason and node. In every case the executable is
  /// unchanged and the captured graph and its payloads are freed.
  void update_from_capture(StreamRef stream);

  /// @name Per-node updates
  /// Each changes one node of the executable (not the graph it was instantiated from) for the
  /// launches enqueued after it; a launch enqueued before it runs as it was enqueued. `node` is
  /// a node of this Graph's graph: made by the GraphBuilder this Graph was instantiated from,
  /// or listed by nodes(). Not thread-safe for one Graph (serialize with launch() and update()).
  /// Every refusal leaves the executable as it was and throws Error naming the node (its kind
  /// and handle) and the reason: custream's own rule (the driver not called: a node of another
  /// graph, of a conditional body, of the wrong kind, an empty Graph), or the driver's result.
  /// docs/design/graphs.md, "Per-node updates".
  /// @{

  /// Gives kernel node `node` new arguments and launch dimensions (grid, block, dynamic shared
  /// memory of `config`; cuGraphExecKernelNodeSetParams, CUDA 12.0), the kernel unchanged. The
  /// arguments are checked as a typed launch checks them (their count and sizes against the
  /// kernel's parameters, asked of the driver once per node, CUDA 12.4). Launch attributes
  /// (cluster, cooperative, priority, …) are a node's, not an update's: a `config` carrying one
  /// is refused. Repeated updates of one node with the same argument types check the sizes
  /// once (later ones compare the node and the argument types, and check the configuration);
  /// the node's context is made current for the call (one cuCtxGetCurrent when it is already:
  /// driver 580 crashes there without a current context; none inside a ContextScope of that
  /// context, which a loop of updates can open) and nothing is left current.
  /// @throws Error (CUDA_ERROR_INVALID_VALUE) naming the node and the argument when they do
  /// not match, or the rule refused; Error naming the node on a driver failure.
  template <typename... Args>
  void update_kernel(GraphNode node, const LaunchConfig& config, const Args&... args) {
    static_assert((std::is_trivially_copyable_v<Args> && ...),
                  "kernel arguments are copied bytewise: they must be trivially copyable");
    void* params[sizeof...(Args) + 1] = {const_cast<void*>(static_cast<const void*>(&args))...,
                                         nullptr};
    static constexpr std::size_t sizes[sizeof...(Args) + 1] = {sizeof(Args)..., 0};
    update_kernel_checked(node, config, params, sizes, sizeof...(Args));
  }
  /// Gives memset node `node` a new destination, value and count of `T` elements (1, 2 or 4
  /// bytes: std::uint8_t, std::uint16_t, std::uint32_t; cuGraphExecMemsetNodeSetParams). The
  /// driver requires the same context as the node's, and a 1-D memset.
  /// @throws Error as update_kernel().
  template <typename T>
  void update_memset(GraphNode node, CUdeviceptr dst, T value, std::size_t count) {
    static_assert(std::is_integral_v<T> && (sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4),
                  "a memset writes 1-, 2- or 4-byte integers");
    update_memset_raw(node, dst, static_cast<unsigned>(static_cast<std::make_unsigned_t<T>>(value)),
                      sizeof(T), count);
  }
  /// Gives memcpy node `node` a new device-to-device copy (cuGraphExecMemcpyNodeSetParams).
  /// The driver requires memory of the same contexts as the node's, 1-D, non-empty.
  /// @throws Error as update_kernel().
  void update_memcpy(GraphNode node, CUdeviceptr dst, CUdeviceptr src, std::size_t bytes);
  /// Gives memcpy node `node` a new host-to-device copy (the form of
  /// GraphBuilder::add_copy_to_device). `src` must stay valid while a launch can run it.
  /// @throws Error as update_kernel().
  void update_copy_to_device(GraphNode node, CUdeviceptr dst, const void* src, std::size_t bytes);
  /// Gives memcpy node `node` a new device-to-host copy (the form of
  /// GraphBuilder::add_copy_to_host). `dst` must stay valid while a launch can run it.
  /// @throws Error as update_kernel().
  void update_copy_to_host(GraphNode node, void* dst, CUdeviceptr src, std::size_t bytes);

  /// Replaces host node `node`'s callable with `callable` (moved or copied into a payload the
  /// executable owns; cuGraphExecHostNodeSetParams). The new payload lives while a launch can
  /// run it; the replaced one (an earlier set_host's) is destroyed exactly once, after every
  /// launch enqueued before this call has finished: after the next launch() of this Graph
  /// finishes, or once the executable is gone and its launches have finished (a raw
  /// cuGraphLaunch on exec() is covered by the latter only). Only for a Graph made by a
  /// GraphBuilder, or updated from one's Graph (a captured or adopted Graph is refused until
  /// then: it has no keeper for payloads).
  /// The callable runs on the driver's thread: it must not call CUDA; an exception it throws
  /// goes to the host-function error handler. Its destructor may run on a driver thread.
  /// @throws Error as update_kernel() (then `callable`'s copy is destroyed, the old one kept);
  /// std::bad_alloc.
  template <typename F, typename = detail::enable_if_host_function<F>>
  void set_host(GraphNode node, F&& callable) {
    set_host_task(node, new detail::HostFunctionTask<std::decay_t<F>>(std::forward<F>(callable)));
  }
  /// Replaces child-graph node `node`'s graph with `child`'s (cuGraphExecChildGraphNodeSetParams:
  /// the same topology, node insertion order and kinds as the child it replaces). The executable
  /// holds `child`'s graph and payloads while a launch can run them; the child they replace (an
  /// earlier set_child's) is released as set_host's payload. Only for a Graph set_host takes.
  /// @throws Error as update_kernel().
  void set_child(GraphNode node, const GraphBuilder& child);

  /// Enables or disables kernel, memset or memcpy node `node` for later launches
  /// (cuGraphNodeSetEnabled, CUDA 11.6): a disabled node does nothing, its dependencies kept.
  /// @throws Error as update_kernel() (another kind is refused before the driver).
  void set_enabled(GraphNode node, bool enabled);
  /// Whether kernel, memset or memcpy node `node` is enabled (cuGraphNodeGetEnabled).
  /// @throws Error as set_enabled().
  bool enabled(GraphNode node) const;
  /// The nodes of the graph, each with its kind (cuGraphGetNodes, cuGraphNodeGetType), in the
  /// driver's order: for per-node updates of a captured or adopted Graph. Nodes of kinds custream
  /// does not name (external semaphores, batch memory operations) are left out.
  /// @throws Error on a driver failure.
  std::vector<GraphNode> nodes() const;
  /// @}

  /// The graph in Graphviz DOT (cuGraphDebugDotPrint, driver >= 11.3); `verbose` adds every
  /// node's parameters. @throws Error on a driver or file failure.
  std::string dot(bool verbose = false) const;
  /// The number of nodes in the graph (cuGraphGetNodes). @throws Error on a driver failure.
  std::size_t node_count() const;

  /// Same executable.
  friend bool operator==(const Graph& a, const Graph& b) noexcept { return a.exec_ == b.exec_; }
  /// Different executables.
  friend bool operator!=(const Graph& a, const Graph& b) noexcept { return !(a == b); }

 private:
  friend class Stream;
  friend Graph end_capture(StreamRef stream, InstantiateFlags flags);
  friend class GraphBuilder;
  /// Instantiates `graph` (owned or not); the libraries and modules launched since capture
  /// epoch `code_since` are held as long as it lives (docs/design/libraries.md, invariant 5;
  /// modules.md, invariant 7).
  /// With `keeper`, the executable gets a keeper (a Graph made by a GraphBuilder: per-node
  /// updates that give it payloads, set_host and set_child, need one; graphs.md, U2).
  static Graph make(CUgraph graph, bool owned, InstantiateFlags flags, StreamRef stream,
                    std::uint64_t code_since, bool keeper = false);
  /// make() for the graph of a capture custream ended.
  static Graph from_capture(CUgraph graph, InstantiateFlags flags, StreamRef stream,
                            std::uint64_t code_since);
  /// make() for the root graph of `builder` (not owned: `builder` destroys it), which the
  /// Graph holds, with its libraries, as long as it lives (graphs.md, "Builders").
  static Graph from_builder(const detail::Shared<detail::BuilderOwner>& builder,
                            InstantiateFlags flags, StreamRef stream);
  /// Keeps `context` (the owned context of the stream it was captured on) alive as long as
  /// the executable.
  void keep_context(const Context& context);
  [[gnu::cold]] void launch_failed(CUresult result, StreamRef stream) const;
  /// update_kernel() after the template: the cached node, the checks, the node's context
  /// current (a raw cuCtxGetCurrent when it is, nothing inside a ContextScope of it), the one
  /// update call; the node updated last with argument types it accepted before skips the
  /// checks already made.
  void update_kernel_checked(GraphNode node, const LaunchConfig& config, void** params,
                             const std::size_t* sizes, std::size_t count);
  /// update_kernel_checked() for what its fast path does not take: another node, other argument
  /// types, a configuration to check, another context current.
  [[gnu::noinline]] void update_kernel_slow(GraphNode node, const LaunchConfig& config,
                                            void** params, const std::size_t* sizes,
                                            std::size_t count);
  /// The kernel node state of `node` when it is not the cached one (checks the node). @throws.
  [[gnu::cold]] detail::KernelNodeInfo& kernel_node(GraphNode node);
  /// update_memset() for `element_size`-byte elements.
  void update_memset_raw(GraphNode node, CUdeviceptr dst, unsigned value, unsigned element_size,
                         std::size_t count);
  /// set_host() after the template; owns `task` (freed when refused).
  void set_host_task(GraphNode node, detail::HostTask* task);

  detail::MovedFrom<CUgraph> graph_;
  detail::MovedFrom<CUgraphExec> exec_;
  InstantiateFlags flags_ = InstantiateFlags::none;
  detail::Shared<detail::GraphOwner> owner_;
};

}  // namespace custream

/// @file
/// custream::Graph: a CUDA graph and its executable, as a value handle.
#pragma once

#include "custream/detail/cuda.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "custream/context.hpp"
#include "custream/detail/shared.hpp"
#include "custream/instantiate_flags.hpp"
#include "custream/stream_ref.hpp"

namespace custream {

class GraphBuilder;

namespace detail {
/// Shared ownership of a graph and its executable.
struct GraphOwner;
/// What a GraphBuilder's graph owns (lib/graph_builder/owner.hpp).
struct BuilderOwner;
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
  /// update_from_capture(), which does not instantiate). Not thread-safe for one Graph:
  /// serialize update(), launch() and upload() of the same Graph (different Graphs may be
  /// updated concurrently).
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
  /// Instantiates `graph` (owned or not); the libraries launched since capture epoch
  /// `libraries_since` are held as long as it lives (docs/design/libraries.md, invariant 5).
  static Graph make(CUgraph graph, bool owned, InstantiateFlags flags, StreamRef stream,
                    std::uint64_t libraries_since);
  /// make() for the graph of a capture custream ended.
  static Graph from_capture(CUgraph graph, InstantiateFlags flags, StreamRef stream,
                            std::uint64_t libraries_since);
  /// make() for the root graph of `builder` (not owned: `builder` destroys it), which the
  /// Graph holds, with its libraries, as long as it lives (graphs.md, "Builders").
  static Graph from_builder(const detail::Shared<detail::BuilderOwner>& builder,
                            InstantiateFlags flags, StreamRef stream);
  /// Keeps `context` (the owned context of the stream it was captured on) alive as long as
  /// the executable.
  void keep_context(const Context& context);
  [[gnu::cold]] void launch_failed(CUresult result, StreamRef stream) const;

  detail::MovedFrom<CUgraph> graph_;
  detail::MovedFrom<CUgraphExec> exec_;
  InstantiateFlags flags_ = InstantiateFlags::none;
  detail::Shared<detail::GraphOwner> owner_;
};

}  // namespace custream

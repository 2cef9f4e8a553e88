// custream::Graph: a CUgraph and its CUgraphExec as a shared value handle (SPEC §4).
//
// Design note — invariants:
//  1. A Graph is {graph, exec, flags, owner}; copies share the owner. The last release
//     destroys the executable, then the graph when owned (adopted or from end_capture),
//     then drops the graphs kept by update() (invariant 4). Neither destroy waits for a
//     launch: the driver finishes a running launch, and host-function payloads owned by the
//     graph's user objects live until the graph and every executable are gone (SPEC §1, §5).
//  2. An adopted CUgraph is owned from the moment adopt() is called: it is destroyed also
//     when instantiation fails.
//  3. Instantiation runs in the upload stream's context (or, for a special handle, the
//     current context, else the current device's primary one), set and restored with
//     ContextScope; it uploads by default, so the first launch costs a repeat launch.
//     launch() and upload() issue exactly one driver call and switch no context (unless a
//     special handle has no current context: then once more with one).
//  4. After a successful update() the executable may run host nodes whose payloads belong
//     to the newer graph: the owner keeps that graph (its GraphSource, which holds nothing
//     but the CUgraph, whose user objects own the payloads) alive as long as itself. Not the
//     newer Graph: `a.update(b); b.update(a)` would then keep both forever.
//  5. Destruction never throws; the driver is never unloaded, and CUDA_ERROR_DEINITIALIZED
//     at exit is ignored.
//  6. Before instantiating a graph, host nodes that run the run-once trampoline (a host
//     function captured by a capture another thread began) become graph-owned
//     (lib/host_function.cpp, invariant 9).
#include "custream/graph.hpp"

#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <vector>

#include "context.hpp"
#include "custream/context_scope.hpp"
#include "custream/current_stream.hpp"
#include "custream/error.hpp"
#include "custream/graph_instantiate_error.hpp"
#include "custream/graph_update_error.hpp"
#include "driver.hpp"
#include "host_function.hpp"

namespace custream {
namespace detail {

// A CUgraph, shared by the Graph made from it and by every executable updated from it
// (invariant 4). It refers to nothing else, so sharing it can make no cycle.
struct GraphSource {
  CUgraph graph = nullptr;
  bool owned = false;  // adopted or from end_capture: destroyed with the last reference
  GraphSource(CUgraph g, bool o) noexcept : graph(g), owned(o) {}
  GraphSource(const GraphSource&) = delete;
  GraphSource& operator=(const GraphSource&) = delete;
  ~GraphSource() {
    const Loaded* l = g_loaded.load(std::memory_order_acquire);
    if (owned && l != nullptr) {  // invariant 5
      report_release_failure(l->api.cuGraphDestroy(graph), "cuGraphDestroy", "graph", graph);
    }
  }
};

struct GraphOwner {
  std::atomic<long> refs{1};
  CUgraphExec exec = nullptr;
  std::shared_ptr<GraphSource> source;  // the graph this executable was instantiated from
  std::mutex mutex;                     // guards kept
  std::vector<std::shared_ptr<GraphSource>> kept;  // graphs of later updates (invariant 4)
};

void retain(GraphOwner* owner) noexcept {
  if (owner != nullptr) owner->refs.fetch_add(1, std::memory_order_relaxed);
}

void release(GraphOwner* owner) noexcept {
  if (owner == nullptr || owner->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  if (const Loaded* l = g_loaded.load(std::memory_order_acquire)) {  // invariants 1, 5
    if (owner->exec != nullptr) {
      report_release_failure(l->api.cuGraphExecDestroy(owner->exec), "cuGraphExecDestroy",
                             "executable graph", owner->exec);
    }
  }
  delete owner;  // then the graphs: its own and those of updates, once nothing else has them
}

}  // namespace detail

namespace {

const char* instantiate_result_name(CUgraphInstantiateResult r) {
  switch (r) {
    case CUDA_GRAPH_INSTANTIATE_SUCCESS:
      return "CUDA_GRAPH_INSTANTIATE_SUCCESS";
    case CUDA_GRAPH_INSTANTIATE_ERROR:
      return "CUDA_GRAPH_INSTANTIATE_ERROR";
    case CUDA_GRAPH_INSTANTIATE_INVALID_STRUCTURE:
      return "CUDA_GRAPH_INSTANTIATE_INVALID_STRUCTURE (e.g. a cycle)";
    case CUDA_GRAPH_INSTANTIATE_NODE_OPERATION_NOT_SUPPORTED:
      return "CUDA_GRAPH_INSTANTIATE_NODE_OPERATION_NOT_SUPPORTED (an operation device launch "
             "does not support)";
    case CUDA_GRAPH_INSTANTIATE_MULTIPLE_CTXS_NOT_SUPPORTED:
      return "CUDA_GRAPH_INSTANTIATE_MULTIPLE_CTXS_NOT_SUPPORTED (nodes of several contexts)";
    case CUDA_GRAPH_INSTANTIATE_CONDITIONAL_HANDLE_UNUSED:
      return "CUDA_GRAPH_INSTANTIATE_CONDITIONAL_HANDLE_UNUSED";
  }
  return "an unknown CUgraphInstantiateResult";
}

const char* update_result_name(CUgraphExecUpdateResult r) {
  switch (r) {
    case CU_GRAPH_EXEC_UPDATE_SUCCESS:
      return "CU_GRAPH_EXEC_UPDATE_SUCCESS";
    case CU_GRAPH_EXEC_UPDATE_ERROR:
      return "CU_GRAPH_EXEC_UPDATE_ERROR";
    case CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED:
      return "CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED (nodes or edges differ)";
    case CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED:
      return "CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED";
    case CU_GRAPH_EXEC_UPDATE_ERROR_FUNCTION_CHANGED:
      return "CU_GRAPH_EXEC_UPDATE_ERROR_FUNCTION_CHANGED";
    case CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED:
      return "CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED";
    case CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED:
      return "CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED";
    case CU_GRAPH_EXEC_UPDATE_ERROR_UNSUPPORTED_FUNCTION_CHANGE:
      return "CU_GRAPH_EXEC_UPDATE_ERROR_UNSUPPORTED_FUNCTION_CHANGE";
    case CU_GRAPH_EXEC_UPDATE_ERROR_ATTRIBUTES_CHANGED:
      return "CU_GRAPH_EXEC_UPDATE_ERROR_ATTRIBUTES_CHANGED";
  }
  return "an unknown CUgraphExecUpdateResult";
}

const char* node_type_name(CUgraphNodeType t) {
  switch (t) {
    case CU_GRAPH_NODE_TYPE_KERNEL:
      return "kernel";
    case CU_GRAPH_NODE_TYPE_MEMCPY:
      return "memcpy";
    case CU_GRAPH_NODE_TYPE_MEMSET:
      return "memset";
    case CU_GRAPH_NODE_TYPE_HOST:
      return "host";
    case CU_GRAPH_NODE_TYPE_GRAPH:
      return "child graph";
    case CU_GRAPH_NODE_TYPE_EMPTY:
      return "empty";
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
      return "event wait";
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
      return "event record";
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
      return "memory allocation";
    case CU_GRAPH_NODE_TYPE_MEM_FREE:
      return "memory free";
    default:
      return "other";
  }
}

// "node 0x… (memset)", or "no particular node".
std::string node_text(CUgraphNode node) {
  if (node == nullptr) return "no particular node";
  std::string text = "node " + detail::pointer_text(node);
  CUgraphNodeType type{};
  if (detail::api().cuGraphNodeGetType(node, &type) == CUDA_SUCCESS) {
    text += std::string(" (") + node_type_name(type) + ")";
  }
  return text;
}

std::string flags_text(InstantiateFlags flags) {
  static constexpr std::pair<InstantiateFlags, const char*> names[] = {
      {InstantiateFlags::auto_free_on_launch, "auto_free_on_launch"},
      {InstantiateFlags::upload, "upload"},
      {InstantiateFlags::device_launch, "device_launch"},
      {InstantiateFlags::use_node_priority, "use_node_priority"},
  };
  std::string text;
  for (const auto& [flag, name] : names) {
    if ((flags & flag) != InstantiateFlags::none)
      text += (text.empty() ? "" : "|") + std::string(name);
  }
  return text.empty() ? "none" : text;
}

[[noreturn, gnu::cold]] void fail_on(CUresult r, const char* call, const std::string& graph,
                                     const Stream& s) {
  detail::throw_error(
      r, call, graph + " on " + s.to_string(),
      r == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED || r == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT
          ? "not allowed while the stream (or the legacy stream it depends on) "
            "captures; the driver has now invalidated that capture"
          : "");
}

[[noreturn, gnu::cold]] void refuse_empty(const char* call) {
  throw Error(CUDA_ERROR_INVALID_VALUE, call, "empty custream::Graph",
              "the Graph holds no executable (default-constructed or moved from)");
}

// Runs `call`; for a special handle with no current context, once more with the current
// device's primary context current (invariant 3).
template <typename Call>
CUresult with_context(const Stream& s, Call call) {
  std::optional<ContextScope> scope;
  return detail::retry_on_current_device(call(), s.is_special(), scope, call);
}

// This thread's current stream of the current device.
Stream current() { return current_stream(); }

}  // namespace

Graph Graph::make(CUgraph graph, bool owned, InstantiateFlags flags, const Stream& stream) {
  if (graph == nullptr) {
    throw Error(CUDA_ERROR_INVALID_VALUE, "custream::Graph", {}, "the CUgraph is null");
  }
  Graph g;
  try {
    auto source = std::make_shared<detail::GraphSource>(graph, owned);
    g.owner_ = new detail::GraphOwner;
    g.owner_->source = std::move(source);  // from here on g destroys the graph, also on failure
  } catch (...) {
    if (owned) {  // invariant 2
      detail::report_release_failure(detail::api().cuGraphDestroy(graph), "cuGraphDestroy", "graph",
                                     graph);
    }
    throw;
  }
  g.graph_ = graph;
  g.flags_ = flags;
  detail::own_run_once_nodes(graph, owned);  // before anything can run it (invariant 6)

  const detail::Loaded& l = detail::loaded();
  CUcontext context = stream.context();  // invariant 3
  if (context == nullptr) {
    detail::check(l.api.cuCtxGetCurrent(&context), "cuCtxGetCurrent");
    if (context == nullptr) context = detail::current_primary_context();
  }
  ContextScope scope(context);
  CUDA_GRAPH_INSTANTIATE_PARAMS params{};
  params.flags = static_cast<cuuint64_t>(flags);
  params.hUploadStream =
      (flags & InstantiateFlags::upload) != InstantiateFlags::none ? stream.handle() : nullptr;
  CUgraphExec exec = nullptr;
  const CUresult r = l.api.cuGraphInstantiateWithParams(&exec, graph, &params);
  if (r != CUDA_SUCCESS || params.result_out != CUDA_GRAPH_INSTANTIATE_SUCCESS) {
    if (r == CUDA_SUCCESS && exec != nullptr) {
      detail::report_release_failure(l.api.cuGraphExecDestroy(exec), "cuGraphExecDestroy",
                                     "executable graph", exec);
    }
    const bool uploading = (flags & InstantiateFlags::upload) != InstantiateFlags::none;
    throw GraphInstantiateError(
        r == CUDA_SUCCESS ? CUDA_ERROR_UNKNOWN : r, params.result_out, params.hErrNode_out,
        "graph " + detail::pointer_text(graph),
        std::string("instantiate result ") + instantiate_result_name(params.result_out) + ", " +
            node_text(params.hErrNode_out) + "; flags " + flags_text(flags) +
            (uploading ? ", upload on " + stream.to_string() : std::string()));
  }
  g.exec_ = g.owner_->exec = exec;
  return g;
}

Graph Graph::adopt(CUgraph graph, InstantiateFlags flags, const Stream& upload_stream) {
  return make(graph, true, flags, upload_stream);
}

Graph Graph::adopt(CUgraph graph, InstantiateFlags flags) {
  Stream stream;
  try {
    stream = current();
  } catch (...) {  // owned from the call on (invariant 2)
    const detail::Loaded* l = detail::g_loaded.load(std::memory_order_acquire);
    if (graph != nullptr && l != nullptr) {
      detail::report_release_failure(l->api.cuGraphDestroy(graph), "cuGraphDestroy", "graph",
                                     graph);
    }
    throw;
  }
  return make(graph, true, flags, stream);
}

Graph Graph::wrap(CUgraph graph, InstantiateFlags flags, const Stream& upload_stream) {
  return make(graph, false, flags, upload_stream);
}

Graph Graph::wrap(CUgraph graph, InstantiateFlags flags) {
  return make(graph, false, flags, current());
}

Graph::Graph(const Graph& other) noexcept
    : graph_(other.graph_), exec_(other.exec_), flags_(other.flags_), owner_(other.owner_) {
  detail::retain(owner_);
}

Graph::Graph(Graph&& other) noexcept
    : graph_(other.graph_), exec_(other.exec_), flags_(other.flags_), owner_(other.owner_) {
  other.owner_ = nullptr;
  other.graph_ = nullptr;
  other.exec_ = nullptr;
}

Graph& Graph::operator=(const Graph& other) noexcept {
  if (this != &other) {
    detail::retain(other.owner_);
    detail::release(owner_);
    graph_ = other.graph_;
    exec_ = other.exec_;
    flags_ = other.flags_;
    owner_ = other.owner_;
  }
  return *this;
}

Graph& Graph::operator=(Graph&& other) noexcept {
  if (this != &other) {
    detail::release(owner_);
    graph_ = other.graph_;
    exec_ = other.exec_;
    flags_ = other.flags_;
    owner_ = other.owner_;
    other.owner_ = nullptr;
    other.graph_ = nullptr;
    other.exec_ = nullptr;
  }
  return *this;
}

std::string Graph::describe() const {
  return "graph " + detail::pointer_text(graph_) + " (exec " + detail::pointer_text(exec_) + ")";
}

void Graph::launch() const { launch(current()); }

void Graph::launch(const Stream& stream) const {
  if (exec_ == nullptr) refuse_empty("cuGraphLaunch");
  const CUresult r = detail::api().cuGraphLaunch(exec_, stream.handle());
  if (r != CUDA_SUCCESS) launch_failed(r, stream);
}

void Graph::launch_failed(CUresult r, const Stream& stream) const {
  if (r == CUDA_ERROR_INVALID_CONTEXT && stream.is_special()) {  // invariant 3
    const detail::DriverApi& api = detail::api();
    r = with_context(stream, [&] { return api.cuGraphLaunch(exec_, stream.handle()); });
    if (r == CUDA_SUCCESS) return;
  }
  fail_on(r, "cuGraphLaunch", describe(), stream);
}

void Graph::upload() const { upload(current()); }

void Graph::upload(const Stream& stream) const {
  if (exec_ == nullptr) refuse_empty("cuGraphUpload");
  const detail::DriverApi& api = detail::api();
  const CUgraphExec e = exec_;
  const CUstream h = stream.handle();
  if (CUresult r = with_context(stream, [&] { return api.cuGraphUpload(e, h); });
      r != CUDA_SUCCESS) {
    fail_on(r, "cuGraphUpload", describe(), stream);
  }
}

void Graph::update(const Graph& newer) {
  if (exec_ == nullptr || newer.graph_ == nullptr) refuse_empty("cuGraphExecUpdate");
  CUgraphExecUpdateResultInfo info{};
  const CUresult r = detail::api().cuGraphExecUpdate(exec_, newer.graph_, &info);
  if (r != CUDA_SUCCESS) {
    std::string why =
        std::string("reason ") + update_result_name(info.result) + ", " + node_text(info.errorNode);
    if (info.errorFromNode != nullptr) why += ", edge from " + node_text(info.errorFromNode);
    throw GraphUpdateError(r, info,
                           describe() + " from graph " + detail::pointer_text(newer.graph_),
                           why + "; the executable is unchanged");
  }
  if (newer.owner_->source != owner_->source) {  // invariant 4
    std::lock_guard<std::mutex> lock(owner_->mutex);
    owner_->kept.push_back(newer.owner_->source);
  }
}

std::string Graph::dot(bool verbose) const {
  if (graph_ == nullptr) refuse_empty("cuGraphDebugDotPrint");
  auto print = detail::require(detail::api().cuGraphDebugDotPrint, "cuGraphDebugDotPrint");
  const char* tmp = std::getenv("TMPDIR");
  std::string path =
      std::string(tmp != nullptr && tmp[0] != '\0' ? tmp : "/tmp") + "/custream-graph-XXXXXX";
  const int fd = mkstemp(path.data());
  if (fd < 0) {
    throw Error(CUDA_ERROR_OPERATING_SYSTEM, "custream::Graph::dot", describe(),
                "cannot create a temporary file in " + path);
  }
  ::close(fd);
  struct Unlink {
    const std::string& path;
    ~Unlink() { ::unlink(path.c_str()); }
  } unlink_at_exit{path};
  if (CUresult r = print(graph_, path.c_str(), verbose ? CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE : 0);
      r != CUDA_SUCCESS) {
    detail::throw_error(r, "cuGraphDebugDotPrint", describe());
  }
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::size_t Graph::node_count() const {
  if (graph_ == nullptr) refuse_empty("cuGraphGetNodes");
  std::size_t count = 0;
  if (CUresult r = detail::api().cuGraphGetNodes(graph_, nullptr, &count); r != CUDA_SUCCESS) {
    detail::throw_error(r, "cuGraphGetNodes", describe());
  }
  return count;
}

}  // namespace custream

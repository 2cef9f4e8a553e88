// custream::Graph: a CUgraph and its CUgraphExec as a shared value handle. Design:
// docs/design/graphs.md.
#include "custream/graph.hpp"

#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <optional>
#include <sstream>

#include "capture.hpp"
#include "context.hpp"
#include "custream/context_scope.hpp"
#include "custream/current_stream.hpp"
#include "custream/error.hpp"
#include "custream/graph_instantiate_error.hpp"
#include "custream/graph_update_error.hpp"
#include "custream/nvtx_range.hpp"
#include "driver.hpp"
#include "error.hpp"
#include "graph/owner.hpp"
#include "graph_builder/conditional.hpp"
#include "graph_builder/owner.hpp"
#include "host_function.hpp"
#include "library.hpp"
#include "shared.hpp"

namespace custream {
namespace detail {

// The executable first, then the graph when owned (invariants 1, 5). The struct is in
// graph/owner.hpp (node_updates.cpp reads it too).
GraphOwner::~GraphOwner() {
  if (exec != nullptr) release_call<&DriverApi::cuGraphExecDestroy>("executable graph", exec, exec);
  if (owned) release_call<&DriverApi::cuGraphDestroy>("graph", graph, graph);
}
template struct Refs<GraphOwner>;

}  // namespace detail

using detail::DriverApi;

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
  if (detail::try_call<&DriverApi::cuGraphNodeGetType>(node, &type) == CUDA_SUCCESS) {
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

// "graph 0x… (exec 0x…)".
std::string graph_text(CUgraph graph, CUgraphExec exec) {
  return "graph " + detail::pointer_text(graph) + " (exec " + detail::pointer_text(exec) + ")";
}

[[noreturn, gnu::cold]] void refuse_empty(const char* call) {
  detail::throw_error(CUDA_ERROR_INVALID_VALUE, call, "empty custream::Graph",
                      "the Graph holds no executable (default-constructed or moved from)");
}

// Launch or upload (`Field`) of `exec` on `s`, with the special-handle retry (invariant 3):
// exactly one more call, only when the first failed for want of a current context.
template <auto Field>
void on_stream(CUgraphExec exec, StreamRef s, CUresult first, CUgraph graph) {
  std::optional<ContextScope> scope;
  CUresult r = first;
  if (detail::retry_special(r, s.is_special(), scope))
    r = detail::try_call<Field>(exec, s.handle());
  if (r != CUDA_SUCCESS) {
    detail::throw_stream_error(r, detail::EntryInfo<Field>::name, s, graph_text(graph, exec));
  }
}

[[noreturn, gnu::cold]] void throw_update_error(CUresult r, const CUgraphExecUpdateResultInfo& info,
                                                CUgraph graph, CUgraphExec exec, CUgraph newer) {
  std::string why =
      std::string("reason ") + update_result_name(info.result) + ", " + node_text(info.errorNode);
  if (info.errorFromNode != nullptr) why += ", edge from " + node_text(info.errorFromNode);
  throw GraphUpdateError(r, info,
                         graph_text(graph, exec) + " from graph " + detail::pointer_text(newer),
                         why + "; the executable is unchanged");
}

// One driver call. Nothing of `newer` is kept: the executable now holds its own references to
// newer's user objects, and the driver frees the replaced ones once earlier launches are done
// (invariant 4).
inline void update_exec(CUgraph graph, CUgraphExec exec, CUgraph newer) {
  CUgraphExecUpdateResultInfo info{};
  const CUresult r = detail::api().cuGraphExecUpdate(exec, newer, &info);  // raw: hot path
  if (r != CUDA_SUCCESS) throw_update_error(r, info, graph, exec, newer);
}

// update_exec() of a Graph with per-node update state (a keeper, cached kernel nodes): out of
// line, so that update() of any other Graph pays one branch (graphs.md, U4).
[[gnu::cold, gnu::noinline]] void update_exec_with_nodes(detail::GraphOwner& o, CUgraph newer) {
  detail::before_whole_update(o.updates, newer);
  struct After {
    detail::NodeUpdates& u;
    CUgraph newer;
    bool updated = false;
    ~After() { detail::after_whole_update(u, newer, updated); }
  } after{o.updates, newer};
  update_exec(o.graph, o.exec, newer);
  after.updated = true;
}

// update() from a builder's graph: the executable runs what that builder owns from now on, so
// the Graph holds it, and retires the source it replaces (graphs.md, U7). A Graph without a
// keeper (captured, adopted) gets one here: `newer` carries it into the executable (U4).
[[gnu::cold, gnu::noinline]] void update_from_builder(
    detail::GraphOwner& o, const detail::Shared<detail::BuilderOwner>& source, CUgraph newer) {
  detail::NodeUpdates& u = o.updates;
  detail::PayloadPtr spare = detail::prepare_update_source(o);  // may throw: nothing changed
  struct NewKeeper {
    detail::NodeUpdates& u;
    CUgraph newer;
    bool made, was_active, updated = false;
    ~NewKeeper() {
      if (!made) return;
      detail::drop_keeper_from_graph(u, newer);  // the executable's alone, or gone with it
      if (!updated) detail::forget_keeper(u, was_active);
    }
  } keeper{u, newer, u.kept == nullptr, u.active};
  if (keeper.made) detail::make_keeper(u, newer);  // may throw: nothing changed
  update_exec_with_nodes(o, newer);
  keeper.updated = true;
  detail::set_update_source(o, source, std::move(spare));
}

// What a whole-graph update replaced of the code a Graph holds, retired as a payload (U9).
struct RetiredCode final : detail::Payload {
  detail::GraphCode code;
};

// The payload that will hold `o`'s running code once an update replaces it, with room for it in
// the retire list (called before the update, when the new code differs). @throws std::bad_alloc
// (nothing changed).
std::unique_ptr<RetiredCode> prepare_code_swap(detail::GraphOwner& o) {
  auto retired = std::make_unique<RetiredCode>();
  auto& list = o.updates.retired_code;
  if (list.size() == list.capacity()) list.reserve(2 * list.size() + 1);
  return retired;
}

// After a successful update: `o` runs `next` (moved out), and the code it ran before is retired,
// released after the next launch finishes or with `o` (U9). The code of the graph `o` was
// instantiated from stays held for `o`'s life. Never throws (room made by prepare).
void swap_code(detail::GraphOwner& o, detail::GraphCode& next,
               std::unique_ptr<RetiredCode> retired) noexcept {
  o.running.swap(next);  // `next` now holds the replaced code
  if (next.libraries() == 0 && next.modules() == 0) return;
  retired->code.swap(next);
  o.updates.retired_code.push_back(std::move(retired));  // room made: no throw
  o.updates.retire_pending.store(true, std::memory_order_relaxed);
}

// Updates `o`'s executable from `newer`, a builder's graph when `builder` (U7), whose kernels
// may launch `next` (moved out): `o` runs exactly that code from now on, and retires what it
// ran when it differs (U9).
void update_running(detail::GraphOwner& o, CUgraph newer, detail::GraphCode& next,
                    const detail::Shared<detail::BuilderOwner>& builder) {
  std::unique_ptr<RetiredCode> retired;
  if (!o.running.same_as(next)) retired = prepare_code_swap(o);
  if (builder) {
    update_from_builder(o, builder, newer);
  } else if (o.updates.active) {
    update_exec_with_nodes(o, newer);
  } else {
    update_exec(o.graph, o.exec, newer);
  }
  if (retired) swap_code(o, next, std::move(retired));
}

// update() from a Graph `n` whose graph launches other code than `o` runs, or made by a
// builder: `o` runs `n`'s own graph's code (what the update reads), not what `n` runs since.
[[gnu::cold, gnu::noinline]] void update_with_code(detail::GraphOwner& o,
                                                   const detail::GraphOwner& n, CUgraph newer) {
  detail::GraphCode next;
  next.hold(n.code);
  update_running(o, newer, next, n.builder);
}

}  // namespace

Graph Graph::make(CUgraph graph, bool owned, InstantiateFlags flags, StreamRef stream,
                  std::uint64_t code_since, bool keeper) {
  if (graph == nullptr) {
    detail::throw_error(CUDA_ERROR_INVALID_VALUE, "custream::Graph", {}, "the CUgraph is null");
  }
  Graph g;
  try {
    g.owner_ = detail::Shared<detail::GraphOwner>(new detail::GraphOwner);
  } catch (...) {
    if (owned) detail::release_call<&DriverApi::cuGraphDestroy>("graph", graph, graph);  // 2
    throw;
  }
  g.owner_.get()->graph = graph;  // from here on g destroys the graph, also on failure
  g.owner_.get()->owned = owned;
  g.graph_ = graph;
  g.flags_ = flags;
  detail::own_run_once_nodes(graph, owned);     // before anything can run it (invariant 6)
  g.owner_.get()->code.hold_since(code_since);  // libraries.md 5, modules.md 7

  CUcontext context = stream.context();  // invariant 3
  if (context == nullptr) {
    detail::call<&DriverApi::cuCtxGetCurrent>({}, &context);
    if (context == nullptr) context = detail::current_primary_context();
  }
  ContextScope scope(context);
  g.owner_.get()->context = context;
  if (keeper) detail::make_keeper(g.owner_.get()->updates, graph);  // before instantiating (U2)
  CUDA_GRAPH_INSTANTIATE_PARAMS params{};
  params.flags = static_cast<cuuint64_t>(flags);
  params.hUploadStream =
      (flags & InstantiateFlags::upload) != InstantiateFlags::none ? stream.handle() : nullptr;
  CUgraphExec exec = nullptr;
  const CUresult r =
      detail::try_call<&DriverApi::cuGraphInstantiateWithParams>(&exec, graph, &params);
  detail::drop_keeper_from_graph(g.owner_.get()->updates, graph);  // the executable's alone (U2)
  if (r != CUDA_SUCCESS || params.result_out != CUDA_GRAPH_INSTANTIATE_SUCCESS) {
    if (r == CUDA_SUCCESS && exec != nullptr) {
      detail::release_call<&DriverApi::cuGraphExecDestroy>("executable graph", exec, exec);
    }
    const bool uploading = (flags & InstantiateFlags::upload) != InstantiateFlags::none;
    throw GraphInstantiateError(
        r == CUDA_SUCCESS ? CUDA_ERROR_UNKNOWN : r, params.result_out, params.hErrNode_out,
        "graph " + detail::pointer_text(graph),
        std::string("instantiate result ") + instantiate_result_name(params.result_out) + ", " +
            node_text(params.hErrNode_out) + "; flags " + flags_text(flags) +
            (uploading ? ", upload on " + stream.to_string() : std::string()) +
            (r == CUDA_ERROR_INVALID_VALUE   ? detail::body_rule_hint(graph)
             : r == CUDA_ERROR_NOT_SUPPORTED ? detail::one_executable_hint(graph)
                                             : std::string()));
  }
  g.exec_ = g.owner_.get()->exec = exec;
  return g;
}

Graph Graph::from_builder(const detail::Shared<detail::BuilderOwner>& builder,
                          InstantiateFlags flags, StreamRef stream) {
  detail::BuilderOwner& b = *builder.get();
  // Instantiated in the builder's context (a special upload stream means the current one).
  ContextScope scope(b.context);
  Graph g = make(b.root(), false, flags, stream, ~std::uint64_t{0}, true);  // + keeper (U2)
  g.owner_.get()->builder = builder;  // the graph and what its nodes own (invariant B1)
  g.owner_.get()->code.hold(b.code);
  if (b.context.owned()) g.keep_context(b.context);
  return g;
}

void Graph::keep_context(const Context& context) {
  if (owner_) owner_.get()->keep = context;
}

Graph Graph::adopt(CUgraph graph, InstantiateFlags flags, StreamRef upload_stream) {
  return make(graph, true, flags, upload_stream, detail::kAnyCapture);
}

Graph Graph::from_capture(CUgraph graph, InstantiateFlags flags, StreamRef stream,
                          std::uint64_t code_since) {
  return make(graph, true, flags, stream, code_since);
}

Graph Graph::adopt(CUgraph graph, InstantiateFlags flags) {
  Stream stream;
  try {
    stream = current_stream();
  } catch (...) {  // owned from the call on (invariant 2)
    if (graph != nullptr && detail::g_loaded.load(std::memory_order_acquire) != nullptr) {
      detail::release_call<&DriverApi::cuGraphDestroy>("graph", graph, graph);
    }
    throw;
  }
  return make(graph, true, flags, stream, detail::kAnyCapture);
}

Graph Graph::wrap(CUgraph graph, InstantiateFlags flags, StreamRef upload_stream) {
  return make(graph, false, flags, upload_stream, detail::kAnyCapture);
}

Graph Graph::wrap(CUgraph graph, InstantiateFlags flags) {
  return make(graph, false, flags, current_stream(), detail::kAnyCapture);
}

void Graph::launch() const { launch(current_stream()); }

void Graph::launch(StreamRef stream) const {
  if (exec_ == nullptr) refuse_empty(detail::EntryInfo<&DriverApi::cuGraphLaunch>::name);
  const CUresult r = detail::api().cuGraphLaunch(exec_, stream.handle());  // raw: hot path
  if (r != CUDA_SUCCESS) launch_failed(r, stream);
  // Payloads a per-node update replaced: released after this launch (graphs.md, U3).
  detail::NodeUpdates& u = owner_.get()->updates;
  if (u.retire_pending.load(std::memory_order_relaxed)) {
    detail::release_retired_after(u, stream.handle(), stream.is_special());
  }
}

void Graph::launch(StreamRef stream, std::string_view range) const {
  const NvtxRange scope(range);  // ends after the launch, also when it throws
  launch(stream);
}

void Graph::launch_failed(CUresult r, StreamRef stream) const {
  if (r == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) {  // invariant 4
    detail::throw_stream_error(r, detail::EntryInfo<&DriverApi::cuGraphLaunch>::name, stream,
                               graph_text(graph_, exec_) +
                                   "; the driver does not capture graph launches: launch it "
                                   "after end_capture, or capture its work itself");
  }
  on_stream<&DriverApi::cuGraphLaunch>(exec_, stream, r, graph_);
}

void Graph::upload() const { upload(current_stream()); }

void Graph::upload(StreamRef stream) const {
  if (exec_ == nullptr) refuse_empty(detail::EntryInfo<&DriverApi::cuGraphUpload>::name);
  const CUresult r = detail::try_call<&DriverApi::cuGraphUpload>(exec_, stream.handle());
  if (r != CUDA_SUCCESS) on_stream<&DriverApi::cuGraphUpload>(exec_, stream, r, graph_);
}

void Graph::update(const Graph& newer) {
  if (exec_ == nullptr || newer.graph_ == nullptr)
    refuse_empty(detail::EntryInfo<&DriverApi::cuGraphExecUpdate>::name);
  detail::GraphOwner& o = *owner_.get();
  if (newer.owner_) {  // other code (invariant 5, U9) or a builder's graph (U7): cold
    const detail::GraphOwner& n = *newer.owner_.get();
    if (n.builder || !o.running.same_as(n.code)) return update_with_code(o, n, newer.graph_);
  }
  if (o.updates.active) return update_exec_with_nodes(o, newer.graph_);  // per-node U4
  update_exec(graph_, exec_, newer.graph_);
}

void Graph::update_from_capture(StreamRef stream) {
  if (exec_ == nullptr) refuse_empty(detail::EntryInfo<&DriverApi::cuGraphExecUpdate>::name);
  const detail::CapturedGraph ended = detail::end_capture_graph(stream);
  struct Captured {  // destroyed after the update, also on failure (invariant 4)
    CUgraph graph;
    ~Captured() { detail::release_call<&DriverApi::cuGraphDestroy>("graph", graph, graph); }
  } captured{ended.graph};
  detail::own_run_once_nodes(captured.graph, true);  // invariant 6
  detail::GraphCode next;  // what the captured graph may launch (libraries.md 5, modules.md 7)
  next.hold_since(ended.code_since);
  update_running(*owner_.get(), captured.graph, next, {});
}

std::string detail::graph_dot(CUgraph graph, bool verbose, const char* who) {
  detail::entry<&DriverApi::cuGraphDebugDotPrint>(detail::api());  // an older driver: say so
  const char* tmp = std::getenv("TMPDIR");
  std::string path =
      std::string(tmp != nullptr && tmp[0] != '\0' ? tmp : "/tmp") + "/custream-graph-XXXXXX";
  const int fd = mkstemp(path.data());
  if (fd < 0) {
    detail::throw_error(CUDA_ERROR_OPERATING_SYSTEM, who, "graph " + detail::pointer_text(graph),
                        "cannot create a temporary file in " + path);
  }
  ::close(fd);
  struct Unlink {
    const std::string& path;
    ~Unlink() { ::unlink(path.c_str()); }
  } unlink_at_exit{path};
  detail::call<&DriverApi::cuGraphDebugDotPrint>(
      detail::graph_subject(graph), graph, path.c_str(),
      static_cast<unsigned>(verbose ? CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE : 0));
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string Graph::dot(bool verbose) const {
  if (graph_ == nullptr) refuse_empty(detail::EntryInfo<&DriverApi::cuGraphDebugDotPrint>::name);
  return detail::graph_dot(graph_, verbose, "custream::Graph::dot");
}

std::size_t Graph::node_count() const {
  if (graph_ == nullptr) refuse_empty(detail::EntryInfo<&DriverApi::cuGraphGetNodes>::name);
  std::size_t count = 0;
  detail::call<&DriverApi::cuGraphGetNodes>(detail::graph_subject(graph_),
                                            static_cast<CUgraph>(graph_),
                                            static_cast<CUgraphNode*>(nullptr), &count);
  return count;
}

}  // namespace custream

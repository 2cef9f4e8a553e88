// Host functions and callbacks, with payload lifetimes that survive capture and replay.
// Design: docs/design/host_functions.md (invariants 1-10).
#include "host_function.hpp"

#include <atomic>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "context.hpp"
#include "custream/context_scope.hpp"
#include "custream/error.hpp"
#include "custream/host_function.hpp"
#include "custream/host_function_error_handler.hpp"
#include "driver.hpp"
#include "graph/nodes.hpp"
#include "graph_builder/conditional.hpp"
#include "handler_slot.hpp"
#include "support/task_ptr.hpp"

namespace custream {

using detail::DriverApi;
namespace {

// --- The error handler (invariant 6) ---

using HandlerSlot = detail::HandlerSlot<HostFunctionErrorHandler>;

void report(const HostFunctionError& error) noexcept {
  HandlerSlot::instance().report(&default_host_function_error_handler, error);
}

}  // namespace

void detail::report_host_function_error(const HostFunctionError& error) noexcept { report(error); }

namespace detail {
// A host task released unrun (TaskPtr): its destroy, which frees it.
inline void release_task(HostTask* task) noexcept { task->destroy(task); }
}  // namespace detail

namespace {

// --- Trampolines: run on the driver's host-function thread (invariant 5) ---

using HostTaskPtr = detail::TaskPtr<detail::HostTask>;

void run(detail::HostTask& task, CUresult status) noexcept {
  try {
    task.invoke(task, task.stream, status);
  } catch (...) {
    report(HostFunctionError{task.stream, std::current_exception(), task.captured});
  }
}

void CUDA_CB callback_once(CUstream, CUresult status, void* p) {
  auto* task = static_cast<detail::HostTask*>(p);
  run(*task, status);
  task->destroy(task);
}

// The user object's destructor: frees the payload, never calls the driver.
void CUDA_CB destroy_task(void* p) {
  auto* task = static_cast<detail::HostTask*>(p);
  task->destroy(task);
}

// --- Enqueueing ---

[[noreturn, gnu::cold]] void refuse_invalidated(const char* call, StreamRef s) {
  detail::throw_stream_error(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, call, s,
                             "custream refused it without calling the driver: the stream's "
                             "capture was invalidated earlier; end_capture() ends it");
}

enum class TaskKind { host_function, callback };

using detail::Attached;
using detail::give_to_graph;

// Attaches `task` to `graph` and enqueues it as a host node (invariant 3).
void launch_captured(StreamRef s, HostTaskPtr task, CUgraph graph) {
  task->captured = true;
  detail::HostTask* raw = task.get();
  const Attached attached = give_to_graph(graph, raw, true);
  if (attached.object_made) (void)task.release();  // the user object's from here on
  if (attached.result != CUDA_SUCCESS) {
    detail::throw_stream_error(attached.result, attached.call, s,
                               "the host function was not enqueued; it is destroyed");
  }
  const CUresult r = detail::try_call<&DriverApi::cuLaunchHostFunc>(
      s.handle(), &detail::run_host_task_replayable, raw);
  if (r != CUDA_SUCCESS) {
    detail::throw_stream_error(r, detail::EntryInfo<&DriverApi::cuLaunchHostFunc>::name, s,
                               "the host function was not captured; the capture graph owns it "
                               "and destroys it with itself");
  }
}

// Completes a capture-state query of `s` (invariant 2) whose cuStreamIsCapturing gave
// `first` and `status`: for a special handle with no current context, makes the current
// device's primary context current in `scope` (kept for the enqueueing call that follows)
// and asks again; while capturing, cuStreamGetCaptureInfo for the graph. Throws on failure.
CUstreamCaptureStatus finish_capture_state(StreamRef s, std::optional<ContextScope>& scope,
                                           CUgraph* graph, CUresult first,
                                           CUstreamCaptureStatus status) {
  CUresult r = first;
  if (detail::retry_special(r, s.is_special(), scope)) {
    r = detail::try_call<&DriverApi::cuStreamIsCapturing>(s.handle(), &status);
  }
  if (r != CUDA_SUCCESS) {
    detail::throw_stream_error(r, detail::EntryInfo<&DriverApi::cuStreamIsCapturing>::name, s);
  }
  if (status == CU_STREAM_CAPTURE_STATUS_NONE) return status;
  r = detail::try_call<&DriverApi::cuStreamGetCaptureInfo>(s.handle(), &status, nullptr, graph,
                                                           nullptr, nullptr);
  if (r != CUDA_SUCCESS) {
    detail::throw_stream_error(r, detail::EntryInfo<&DriverApi::cuStreamGetCaptureInfo>::name, s);
  }
  return status;
}

// The capture state of `s`: cuStreamIsCapturing first, the cheapest capture-safe query,
// then finish_capture_state.
CUstreamCaptureStatus capture_state(const DriverApi& api, StreamRef s,
                                    std::optional<ContextScope>& scope, CUgraph* graph) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  const CUresult r = api.cuStreamIsCapturing(s.handle(), &status);  // raw: hot path
  return finish_capture_state(s, scope, graph, r, status);
}

// Enqueues `task` on `s` in capture state `status` (graph: the capture graph while
// capturing), invariant 1.
void enqueue_in_state(const DriverApi& api, StreamRef s, HostTaskPtr task, TaskKind kind,
                      CUstreamCaptureStatus status, CUgraph graph) {
  const char* call = kind == TaskKind::host_function
                         ? detail::EntryInfo<&DriverApi::cuLaunchHostFunc>::name
                         : detail::EntryInfo<&DriverApi::cuStreamAddCallback>::name;
  if (status == CU_STREAM_CAPTURE_STATUS_NONE) {
    const CUstream h = s.handle();
    const CUresult r =
        kind == TaskKind::host_function
            ? api.cuLaunchHostFunc(h, &detail::run_host_task_once, task.get())  // raw: hot path
            : api.cuStreamAddCallback(h, &callback_once, task.get(), 0);        // raw: hot path
    if (r != CUDA_SUCCESS) detail::throw_stream_error(r, call, s);
    (void)task.release();  // the trampoline frees it after running it
  } else if (status == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
    detail::check_capture_accepts_host(graph, s, call);  // a conditional body: no host node
    launch_captured(s, std::move(task), graph);
  } else {
    refuse_invalidated(call, s);
  }
}

// Enqueues `task` on `s` (invariants 1, 10).
void enqueue(StreamRef s, HostTaskPtr task, TaskKind kind) {
  const DriverApi& api = detail::api();
  std::lock_guard<std::mutex> lock(detail::capture_transitions());
  std::optional<ContextScope> scope;
  CUgraph graph = nullptr;
  const CUstreamCaptureStatus status = capture_state(api, s, scope, &graph);
  enqueue_in_state(api, s, std::move(task), kind, status, graph);
}

}  // namespace

// --- Run-once nodes in graphs (invariant 9) and capture transitions (invariant 10) ---

namespace detail {
std::mutex& capture_transitions() {
  static std::mutex* mutex = new std::mutex;  // leaked: no static destructor
  return *mutex;
}
}  // namespace detail

namespace {

// The host nodes of `graph` that run the run-once trampoline, with their payloads.
struct RunOnceNode {
  CUgraphNode node;
  detail::HostTask* task;
};

std::vector<RunOnceNode> find_run_once_nodes(CUgraph graph) {
  const detail::Subject subject = detail::graph_subject(graph);
  std::vector<RunOnceNode> found;
  for (CUgraphNode node : detail::graph_nodes(graph)) {  // graph/nodes.hpp
    CUgraphNodeType type{};
    detail::call<&DriverApi::cuGraphNodeGetType>(subject, node, &type);
    if (type != CU_GRAPH_NODE_TYPE_HOST) continue;
    CUDA_HOST_NODE_PARAMS params{};
    detail::call<&DriverApi::cuGraphHostNodeGetParams>(subject, node, &params);
    if (params.fn == &detail::run_host_task_once) {
      found.push_back({node, static_cast<detail::HostTask*>(params.userData)});
    }
  }
  return found;
}

[[noreturn, gnu::cold]] void fail_on_graph(CUresult r, const char* call, CUgraph graph) {
  detail::throw_call_error(r, call, detail::graph_subject(graph),
                           "while making a host function captured by a racing capture "
                           "graph-owned");
}

// Moves `n`'s payload to a user object of `graph` and points the node at the replayable
// trampoline. On failure with `owned` the payload is freed (or owned by the graph, which is
// destroyed without running); otherwise it stays the run-once node's.
void own_node(CUgraph graph, const RunOnceNode& n, bool owned) {
  const Attached attached = give_to_graph(graph, n.task, owned);
  if (attached.result != CUDA_SUCCESS) {
    if (owned && !attached.object_made) n.task->destroy(n.task);  // the graph never runs
    fail_on_graph(attached.result, attached.call, graph);
  }
  n.task->captured = true;
  const CUDA_HOST_NODE_PARAMS params{&detail::run_host_task_replayable, n.task};
  if (CUresult r = detail::try_call<&DriverApi::cuGraphHostNodeSetParams>(n.node, &params);
      r != CUDA_SUCCESS) {
    fail_on_graph(r, detail::EntryInfo<&DriverApi::cuGraphHostNodeSetParams>::name, graph);
  }
}

}  // namespace

namespace detail {

void own_run_once_nodes(CUgraph graph, bool owned) {
  const std::vector<RunOnceNode> found = find_run_once_nodes(graph);
  std::size_t moved = 0;
  try {
    for (; moved < found.size(); ++moved) own_node(graph, found[moved], owned);
  } catch (...) {
    // The graph is destroyed without running: free what no user object owns yet.
    if (owned) {
      for (std::size_t i = moved + 1; i < found.size(); ++i) found[i].task->destroy(found[i].task);
    }
    throw;
  }
}

void free_run_once_nodes(CUgraph graph) noexcept {
  try {
    for (const RunOnceNode& n : find_run_once_nodes(graph)) {
      n.task->destroy(n.task);
    }
  } catch (const Error& e) {  // a failed query: leave them (a leak, never a dangling node)
    report_release_failure(e.result(), e.call().c_str(), "graph (its run-once host nodes)", graph);
  } catch (...) {
    report_release_failure(CUDA_ERROR_OUT_OF_MEMORY, "custream::Graph", "graph", graph);
  }
}

void CUDA_CB run_host_task_replayable(void* p) { run(*static_cast<HostTask*>(p), CUDA_SUCCESS); }

Attached give_to_graph(CUgraph graph, HostTask* task, bool release_object) {
  using Create = EntryInfo<&DriverApi::cuUserObjectCreate>;
  using Retain = EntryInfo<&DriverApi::cuGraphRetainUserObject>;
  CUuserObject object = nullptr;
  if (CUresult r = try_call<&DriverApi::cuUserObjectCreate>(
          &object, static_cast<void*>(task), &destroy_task, 1u,
          static_cast<unsigned>(CU_USER_OBJECT_NO_DESTRUCTOR_SYNC));
      r != CUDA_SUCCESS) {
    return {r, Create::name, false, nullptr};
  }
  if (CUresult r = try_call<&DriverApi::cuGraphRetainUserObject>(
          graph, object, 1u, static_cast<unsigned>(CU_GRAPH_USER_OBJECT_MOVE));
      r != CUDA_SUCCESS) {
    if (release_object) {  // runs the destructor (on a driver thread)
      release_call<&DriverApi::cuUserObjectRelease>("user object", object, object, 1u);
    }
    return {r, Retain::name, true, nullptr};
  }
  return {CUDA_SUCCESS, nullptr, true, object};
}

void CUDA_CB run_host_task_once(void* p) {
  auto* task = static_cast<HostTask*>(p);
  run(*task, CUDA_SUCCESS);
  task->destroy(task);
}

}  // namespace detail

namespace detail {

void enqueue_host_task(StreamRef s, HostTask* raw) {
  enqueue(s, HostTaskPtr(raw), TaskKind::host_function);
}

void host_task_not_launched(StreamRef s, HostTask* raw, CUresult capturing,
                            CUstreamCaptureStatus status, CUresult launched) {
  HostTaskPtr task(raw);
  // The launch failed after a successful check: a special handle had a current context then
  // (else the check would have failed first), so there is nothing to retry.
  if (capturing == CUDA_SUCCESS && status == CU_STREAM_CAPTURE_STATUS_NONE) {
    throw_stream_error(launched, detail::EntryInfo<&DriverApi::cuLaunchHostFunc>::name, s);
  }
  const DriverApi& api = detail::api();
  std::lock_guard<std::mutex> lock(capture_transitions());  // invariant 10
  std::optional<ContextScope> scope;
  CUgraph graph = nullptr;
  status = finish_capture_state(s, scope, &graph, capturing, status);
  enqueue_in_state(api, s, std::move(task), TaskKind::host_function, status, graph);
}

void add_callback_task(StreamRef s, HostTask* raw) {
  HostTaskPtr task(raw);
  task->stream = s;
  enqueue(s, std::move(task), TaskKind::callback);
}

}  // namespace detail

void add_callback(StreamRef s, CUstreamCallback fn, void* arg) {
  if (fn == nullptr) {
    detail::throw_stream_error(CUDA_ERROR_INVALID_VALUE,
                               detail::EntryInfo<&DriverApi::cuStreamAddCallback>::name, s,
                               "the callback is null");
  }
  const DriverApi& api = detail::api();
  std::lock_guard<std::mutex> lock(detail::capture_transitions());  // invariant 10
  std::optional<ContextScope> scope;
  CUgraph graph = nullptr;
  const CUstreamCaptureStatus status = capture_state(api, s, scope, &graph);
  if (status == CU_STREAM_CAPTURE_STATUS_NONE) {
    if (CUresult r = api.cuStreamAddCallback(s.handle(), fn, arg, 0);  // raw: hot path
        r != CUDA_SUCCESS) {
      detail::throw_stream_error(r, detail::EntryInfo<&DriverApi::cuStreamAddCallback>::name, s);
    }
  } else if (status == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
    // Captured as a host node around the driver's own callback (invariant 4).
    auto call = [fn, arg](StreamRef cs, CUresult result) { fn(cs.handle(), result, arg); };
    HostTaskPtr task(new detail::StreamCallbackTask<decltype(call)>(call));
    task->stream = s;
    launch_captured(s, std::move(task), graph);
  } else {
    refuse_invalidated(detail::EntryInfo<&DriverApi::cuStreamAddCallback>::name, s);
  }
}

// --- HostFunctionError and the handler ---

namespace {
// "threw: <what()>" for `exception`, or what stands in for it.
std::string describe_exception(const std::exception_ptr& exception) {
  if (!exception) return "failed with no exception recorded";
  try {
    std::rethrow_exception(exception);
  } catch (const std::exception& e) {
    return std::string("threw: ") + e.what();
  } catch (...) {
    return "threw an exception not derived from std::exception";
  }
}
}  // namespace

std::string HostFunctionError::message() const {
  const char* const what = completion ? "a completion callback registered on "
                           : captured ? "a captured host function (graph replay) enqueued on "
                                      : "a host function enqueued on ";
  return std::string(what) + stream.to_string() + " " + describe_exception(exception);
}

HostFunctionErrorHandler set_host_function_error_handler(HostFunctionErrorHandler handler) {
  return HandlerSlot::instance().exchange(std::move(handler));
}

void default_host_function_error_handler(const HostFunctionError& error) noexcept {
  try {
    const std::string text = "custream: " + error.message() + "\n";
    std::fputs(text.c_str(), stderr);
  } catch (...) {
    std::fputs("custream: a host function threw (no memory to describe it)\n", stderr);
  }
}

}  // namespace custream

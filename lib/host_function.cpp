// Host functions and callbacks, with payload lifetimes that survive capture and replay
// (SPEC §5).
//
// Design note — invariants:
//  1. A callable is moved into a detail::HostTask on the heap before any driver call. From
//     the moment Stream::launch_host_task / add_callback_task receives it, exactly one party
//     owns it: the enqueueing call (until a committing driver call succeeds), the run-once
//     trampoline (not capturing: it runs the callable once, then frees it), or a CUDA user
//     object held by the capture graph (capturing: freed by the user-object destructor once
//     the graph and every executable made from it are gone). The one exception is a
//     callable that is nothing but its bytes (detail::fits_in_pointer: trivially copyable and
//     destructible, no padding, pointer-sized, const- and noexcept-callable): on a stream
//     that is not a special handle, Stream::launch_host_func passes those bytes as the
//     userData of detail::run_in_pointer. Nothing is owned, so nothing needs a capture check
//     (a captured node keeps its own copy); each run re-creates the callable from the bytes.
//  2. One capture check per heap enqueue, cuStreamIsCapturing (capture-safe, and the
//     cheapest capture-safe query in an enqueue loop on the H200: +84/+103 ns there against
//     +130/+122 ns for cuStreamGetCaptureInfo, same runs), and only while capturing
//     cuStreamGetCaptureInfo for the capture graph; both see captures begun by any code
//     (also a stream joined into another stream's capture through an event: same graph).
//     Not capturing, the check and cuLaunchHostFunc are inline in Stream::launch_host_task;
//     every other case comes here (enqueue_host_task, host_task_not_launched), resuming
//     from what the inline path saw; a retry under another context checks again, and the
//     run-once trampoline is never launched without a check that said "not capturing".
//  3. Capturing, every fallible step (cuUserObjectCreate, cuGraphRetainUserObject with
//     CU_GRAPH_USER_OBJECT_MOVE) precedes cuLaunchHostFunc, and nothing fallible follows it.
//     When cuLaunchHostFunc fails, the graph already owns the payload and frees it with
//     itself: nothing leaks, nothing dangles (no node refers to it).
//  4. cuStreamAddCallback is never called on a capturing stream (the driver would refuse it
//     and invalidate the capture): a callback is captured as a host node instead, with
//     status CUDA_SUCCESS on every replay. An invalidated capture is refused before the
//     driver is called.
//  5. Trampolines catch every exception a callable throws and hand it to the handler; they
//     and the user-object destructor never call the driver (a task's view of its stream owns
//     nothing, so destroying it cannot destroy the stream).
//  6. The handler lives in a detail::HandlerSlot (lib/handler_slot.hpp): leaked, so no static
//     destructor runs before a late host function reports, and installing one is thread-safe.
//  7. Tasks of up to HostTask::kPooledBytes are recycled (lib/host_task_pool.cpp) in
//     batches of at most kPoolBatch (64) blocks. An allocating thread pops its own list
//     (inline, no atomic); when that is empty it pops one whole batch from a shared lock-free
//     stack of batches, under a mutex (one popper at a time: no ABA problem; once per batch,
//     and O(1)), else carves a new slab. A freeing thread (the driver's, mostly) adds the
//     block to its own partial batch (no atomic) and pushes that batch with one CAS (release;
//     never blocks) when it is full. So no thread holds more than kPoolBatch - 1 blocks to
//     allocate plus kPoolBatch - 1 freed ones (an idle worker that enqueued once keeps
//     < 8 KiB, not the pool), no step walks a list, and when a thread ends it gives both
//     back as batches, walking only its own list (< kPoolBatch blocks, to count it). A thread
//     that allocates or frees after that (a late thread_local destructor) gets a plain block
//     that joins the pool when freed, and frees a block as a batch of one. Blocks are never
//     returned to the OS: a slab's blocks scatter over batches and threads, and giving one
//     back would need every free to count per slab (an atomic on the driver's thread) or a
//     sweep of every list. The pool stays at the most tasks ever in flight at once, rounded
//     up to batches, plus < 2 × kPoolBatch per thread that allocates or frees tasks; its
//     slabs come from mappings of its own, not from malloc, so they never pin free malloc
//     memory between them (H200, a 200k-block pool: malloc'd slabs kept 12 MiB more resident
//     after malloc_trim than the pool's own 24 MiB; mapped ones, nothing more). Under
//     AddressSanitizer (decided where the library is built) nothing is pooled: plain aligned
//     new/delete, so ASan's quarantine reports a use after free instead of a recycled block
//     hiding it. detail::pool_stats() reports what is held where.
//  8. Blocks are cache-line aligned and a whole number of lines long (carved from slabs of
//     one batch), so no two blocks share a line. Popping a block prefetches the next one
//     for writing: the driver's thread wrote it last (it ran that task and freed it), and
//     the enqueueing thread would otherwise stall on that line at its next pop; a refill
//     touches only the batch's first block, which it returns. Measured on the H200 (1,001
//     interleaved rounds, twice): a pool like this one plus the capture check and
//     cuLaunchHostFunc cost +46/+49 ns over the check and the launch alone without the
//     prefetch, +0.5/+0.3 ns with it.
//  9. The capture check and cuLaunchHostFunc cannot be one atomic step: another thread may
//     begin a capture of the stream between them, and the run-once trampoline with its
//     payload then becomes a node of that capture graph (the first replay would free the
//     payload, the second run freed memory). So custream repairs the graph before anything
//     can run it: every graph custream instantiates (end_capture, Graph::adopt, Graph::wrap)
//     first has each host node running detail::run_host_task_once moved to a user object of
//     that graph and pointed at the replayable trampoline (own_run_once_nodes); a capture
//     custream discards (CaptureScope) frees those payloads (free_run_once_nodes). This costs
//     one cuGraphNodeGetType per node at instantiation and nothing per enqueue. What remains:
//     a capture that is both ended and instantiated by code other than custream runs such a
//     payload once and then freed memory; a capture the driver discards (a failed end) leaks
//     it.
// 10. The other order of that race: the check sees a capture, and before the payload is given
//     to the capture graph and launched, the capture ends (the launch would then run a
//     payload the ended graph owns and frees) or a new one begins (a node of one graph owning
//     a payload held by another). So every cold-path enqueue holds one process-wide mutex
//     (detail::capture_transitions) from its capture query to its launch, and custream's
//     begin_capture / end_capture hold it around the driver's begin and end: custream's own
//     capture transitions cannot fall inside an enqueue. The hot path (not capturing) takes no
//     lock. Captures begun or ended by other code are not ordered by it (docs/guide.md).
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
#include "custream/host_function_error_handler.hpp"
#include "custream/stream.hpp"
#include "driver.hpp"
#include "handler_slot.hpp"

namespace custream {
namespace detail {

Stream stream_view(const HostTask& task) noexcept {
  Stream s;
  s.handle_ = task.stream;
  s.context_ = task.context;
  s.device_ = task.device;
  s.kind_ = static_cast<Stream::Kind>(task.kind);
  s.non_blocking_ = task.non_blocking;
  return s;  // owner_ stays null: the view never destroys the stream (invariant 5)
}

}  // namespace detail

namespace {

// --- The error handler (invariant 6) ---

using HandlerSlot = detail::HandlerSlot<HostFunctionErrorHandler>;

void report(const HostFunctionError& error) noexcept {
  HandlerSlot::instance().report(&default_host_function_error_handler, error);
}

// --- Trampolines: run on the driver's host-function thread (invariant 5) ---

struct TaskDeleter {
  void operator()(detail::HostTask* task) const noexcept { task->destroy(task); }
};
using TaskPtr = std::unique_ptr<detail::HostTask, TaskDeleter>;

void run(detail::HostTask& task, CUresult status) noexcept {
  const Stream view = detail::stream_view(task);
  try {
    task.invoke(task, view, status);
  } catch (...) {
    report(HostFunctionError{view, std::current_exception(), task.captured});
  }
}

void CUDA_CB callback_once(CUstream, CUresult status, void* p) {
  auto* task = static_cast<detail::HostTask*>(p);
  run(*task, status);
  task->destroy(task);
}

void CUDA_CB run_captured(void* p) { run(*static_cast<detail::HostTask*>(p), CUDA_SUCCESS); }

// The user object's destructor: frees the payload, never calls the driver.
void CUDA_CB destroy_task(void* p) {
  auto* task = static_cast<detail::HostTask*>(p);
  task->destroy(task);
}

// --- Enqueueing ---

[[noreturn, gnu::cold]] void fail(CUresult result, const char* call, const Stream& s,
                                  std::string detail = {}) {
  detail::throw_error(result, call, s.to_string(), std::move(detail));
}

[[noreturn, gnu::cold]] void refuse_invalidated(const char* call, const Stream& s) {
  throw Error(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, call, s.to_string(),
              "custream refused it without calling the driver: the stream's capture was "
              "invalidated earlier; end_capture() ends it");
}

enum class TaskKind { host_function, callback };

// Attaches `task` to `graph` and enqueues it as a host node (invariant 3).
void launch_captured(const detail::DriverApi& api, const Stream& s, TaskPtr task, CUgraph graph) {
  task->captured = true;
  CUuserObject object = nullptr;
  if (CUresult r = api.cuUserObjectCreate(&object, task.get(), &destroy_task, 1,
                                          CU_USER_OBJECT_NO_DESTRUCTOR_SYNC);
      r != CUDA_SUCCESS) {
    fail(r, "cuUserObjectCreate", s, "the host function was not enqueued; it is destroyed");
  }
  detail::HostTask* raw = task.release();  // owned by the user object from here on
  if (CUresult r = api.cuGraphRetainUserObject(graph, object, 1, CU_GRAPH_USER_OBJECT_MOVE);
      r != CUDA_SUCCESS) {
    // Still ours: dropping the reference runs the destructor (on a driver thread).
    detail::report_release_failure(api.cuUserObjectRelease(object, 1), "cuUserObjectRelease",
                                   "user object", object);
    fail(r, "cuGraphRetainUserObject", s, "the host function was not enqueued; it is destroyed");
  }
  if (CUresult r = api.cuLaunchHostFunc(s.handle(), &run_captured, raw); r != CUDA_SUCCESS) {
    fail(r, "cuLaunchHostFunc", s,
         "the host function was not captured; the capture graph owns it and destroys it "
         "with itself");
  }
}

// Completes a capture-state query of `s` (invariant 2) whose cuStreamIsCapturing gave
// `first` and `status`: for a special handle with no current context, makes the current
// device's primary context current in `scope` (kept for the enqueueing call that follows)
// and asks again; while capturing, cuStreamGetCaptureInfo for the graph. Throws on failure.
CUstreamCaptureStatus finish_capture_state(const detail::DriverApi& api, const Stream& s,
                                           std::optional<ContextScope>& scope, CUgraph* graph,
                                           CUresult first, CUstreamCaptureStatus status) {
  auto is_capturing = [&] { return api.cuStreamIsCapturing(s.handle(), &status); };
  CUresult r = detail::retry_on_current_device(first, s.is_special(), scope, is_capturing);
  if (r != CUDA_SUCCESS) fail(r, "cuStreamIsCapturing", s);
  if (status == CU_STREAM_CAPTURE_STATUS_NONE) return status;
  r = api.cuStreamGetCaptureInfo(s.handle(), &status, nullptr, graph, nullptr, nullptr);
  if (r != CUDA_SUCCESS) fail(r, "cuStreamGetCaptureInfo", s);
  return status;
}

// The capture state of `s`: cuStreamIsCapturing first, the cheapest capture-safe query,
// then finish_capture_state.
CUstreamCaptureStatus capture_state(const detail::DriverApi& api, const Stream& s,
                                    std::optional<ContextScope>& scope, CUgraph* graph) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  const CUresult r = api.cuStreamIsCapturing(s.handle(), &status);
  return finish_capture_state(api, s, scope, graph, r, status);
}

// Enqueues `task` on `s` in capture state `status` (graph: the capture graph while
// capturing), invariant 1.
void enqueue_in_state(const detail::DriverApi& api, const Stream& s, TaskPtr task, TaskKind kind,
                      CUstreamCaptureStatus status, CUgraph graph) {
  const char* call = kind == TaskKind::host_function ? "cuLaunchHostFunc" : "cuStreamAddCallback";
  if (status == CU_STREAM_CAPTURE_STATUS_NONE) {
    const CUstream h = s.handle();
    const CUresult r = kind == TaskKind::host_function
                           ? api.cuLaunchHostFunc(h, &detail::run_host_task_once, task.get())
                           : api.cuStreamAddCallback(h, &callback_once, task.get(), 0);
    if (r != CUDA_SUCCESS) fail(r, call, s);
    (void)task.release();  // the trampoline frees it after running it
  } else if (status == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
    launch_captured(api, s, std::move(task), graph);
  } else {
    refuse_invalidated(call, s);
  }
}

// Enqueues `task` on `s` (invariants 1, 10).
void enqueue(const Stream& s, TaskPtr task, TaskKind kind) {
  const detail::DriverApi& api = detail::api();
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

std::vector<RunOnceNode> find_run_once_nodes(const detail::DriverApi& api, CUgraph graph) {
  std::size_t count = 0;
  detail::check(api.cuGraphGetNodes(graph, nullptr, &count), "cuGraphGetNodes");
  std::vector<RunOnceNode> found;
  if (count == 0) return found;
  std::vector<CUgraphNode> nodes(count);
  detail::check(api.cuGraphGetNodes(graph, nodes.data(), &count), "cuGraphGetNodes");
  nodes.resize(count);
  for (CUgraphNode node : nodes) {
    CUgraphNodeType type{};
    detail::check(api.cuGraphNodeGetType(node, &type), "cuGraphNodeGetType");
    if (type != CU_GRAPH_NODE_TYPE_HOST) continue;
    CUDA_HOST_NODE_PARAMS params{};
    detail::check(api.cuGraphHostNodeGetParams(node, &params), "cuGraphHostNodeGetParams");
    if (params.fn == &detail::run_host_task_once) {
      found.push_back({node, static_cast<detail::HostTask*>(params.userData)});
    }
  }
  return found;
}

[[noreturn, gnu::cold]] void fail_on_graph(CUresult r, const char* call, CUgraph graph) {
  detail::throw_error(r, call, "graph " + detail::pointer_text(graph),
                      "while making a host function captured by a racing capture "
                      "graph-owned");
}

// Moves `n`'s payload to a user object of `graph` and points the node at the replayable
// trampoline. On failure with `owned` the payload is freed (or owned by the graph, which is
// destroyed without running); otherwise it stays the run-once node's.
void own_node(const detail::DriverApi& api, CUgraph graph, const RunOnceNode& n, bool owned) {
  CUuserObject object = nullptr;
  if (CUresult r = api.cuUserObjectCreate(&object, n.task, &destroy_task, 1,
                                          CU_USER_OBJECT_NO_DESTRUCTOR_SYNC);
      r != CUDA_SUCCESS) {
    if (owned) n.task->destroy(n.task);  // the graph never runs
    fail_on_graph(r, "cuUserObjectCreate", graph);
  }
  if (CUresult r = api.cuGraphRetainUserObject(graph, object, 1, CU_GRAPH_USER_OBJECT_MOVE);
      r != CUDA_SUCCESS) {
    // Owned: the graph never runs, so the payload may go with the object. Not owned: its
    // node could still run the payload once; keep the object (a leak, not a dangling node).
    if (owned) {
      detail::report_release_failure(api.cuUserObjectRelease(object, 1), "cuUserObjectRelease",
                                     "user object", object);
    }
    fail_on_graph(r, "cuGraphRetainUserObject", graph);
  }
  n.task->captured = true;
  const CUDA_HOST_NODE_PARAMS params{&run_captured, n.task};
  if (CUresult r = api.cuGraphHostNodeSetParams(n.node, &params); r != CUDA_SUCCESS) {
    fail_on_graph(r, "cuGraphHostNodeSetParams", graph);
  }
}

}  // namespace

namespace detail {

void own_run_once_nodes(CUgraph graph, bool owned) {
  const DriverApi& api = detail::api();
  const std::vector<RunOnceNode> found = find_run_once_nodes(api, graph);
  std::size_t moved = 0;
  try {
    for (; moved < found.size(); ++moved) own_node(api, graph, found[moved], owned);
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
    for (const RunOnceNode& n : find_run_once_nodes(detail::api(), graph)) {
      n.task->destroy(n.task);
    }
  } catch (const Error& e) {  // a failed query: leave them (a leak, never a dangling node)
    report_release_failure(e.result(), e.call().c_str(), "graph (its run-once host nodes)", graph);
  } catch (...) {
    report_release_failure(CUDA_ERROR_OUT_OF_MEMORY, "custream::Graph", "graph", graph);
  }
}

void CUDA_CB run_host_task_once(void* p) {
  auto* task = static_cast<HostTask*>(p);
  run(*task, CUDA_SUCCESS);
  task->destroy(task);
}

}  // namespace detail

void Stream::enqueue_host_task(detail::HostTask* raw) const {
  enqueue(*this, TaskPtr(raw), TaskKind::host_function);
}

void Stream::host_task_not_launched(detail::HostTask* raw, CUresult capturing,
                                    CUstreamCaptureStatus status, CUresult launched) const {
  TaskPtr task(raw);
  // The launch failed after a successful check: a special handle had a current context then
  // (else the check would have failed first), so there is nothing to retry.
  if (capturing == CUDA_SUCCESS && status == CU_STREAM_CAPTURE_STATUS_NONE) {
    fail(launched, "cuLaunchHostFunc");
  }
  const detail::DriverApi& api = detail::api();
  std::lock_guard<std::mutex> lock(detail::capture_transitions());  // invariant 10
  std::optional<ContextScope> scope;
  CUgraph graph = nullptr;
  status = finish_capture_state(api, *this, scope, &graph, capturing, status);
  enqueue_in_state(api, *this, std::move(task), TaskKind::host_function, status, graph);
}

void Stream::add_callback_task(detail::HostTask* raw) const {
  TaskPtr task(raw);
  describe(*task);
  enqueue(*this, std::move(task), TaskKind::callback);
}

void Stream::host_func_failed(CUresult first, CUhostFn fn, void* arg) const {
  std::optional<ContextScope> scope;
  const CUresult r = detail::retry_on_current_device(
      first, is_special(), scope, [&] { return detail::api().cuLaunchHostFunc(handle_, fn, arg); });
  if (r != CUDA_SUCCESS) fail(r, "cuLaunchHostFunc");
}

void Stream::add_callback(CUstreamCallback fn, void* arg) const {
  if (fn == nullptr) {
    throw Error(CUDA_ERROR_INVALID_VALUE, "cuStreamAddCallback", to_string(),
                "the callback is null");
  }
  const detail::DriverApi& api = detail::api();
  std::lock_guard<std::mutex> lock(detail::capture_transitions());  // invariant 10
  std::optional<ContextScope> scope;
  CUgraph graph = nullptr;
  const CUstreamCaptureStatus status = capture_state(api, *this, scope, &graph);
  if (status == CU_STREAM_CAPTURE_STATUS_NONE) {
    if (CUresult r = api.cuStreamAddCallback(handle_, fn, arg, 0); r != CUDA_SUCCESS) {
      fail(r, "cuStreamAddCallback");
    }
  } else if (status == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
    // Captured as a host node around the driver's own callback (invariant 4).
    auto call = [fn, arg](const Stream& s, CUresult result) { fn(s.handle(), result, arg); };
    TaskPtr task(new detail::StreamCallbackTask<decltype(call)>(call));
    describe(*task);
    launch_captured(api, *this, std::move(task), graph);
  } else {
    refuse_invalidated("cuStreamAddCallback", *this);
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
  return std::string(captured ? "a captured host function (graph replay) enqueued on "
                              : "a host function enqueued on ") +
         stream.to_string() + " " + describe_exception(exception);
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

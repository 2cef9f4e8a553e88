// Internal header of the CPU emulation of the CUDA driver (libcuda.so.1 stand-in).
//
// Design note — invariants (see README.md for the user-facing description):
//  1. One process-wide mutex, State::mu, guards every emulator object. It is never held while
//     user code runs (host functions, callbacks, user-object destructors) nor while a worker
//     copies memory. User objects have their own lock (uo_mu); the order is mu -> uo_mu.
//  2. Every handle handed out (stream, event, graph, node, exec, user object) is a pointer to
//     an emulator object registered in a live set; a handle not in that set answers
//     CUDA_ERROR_INVALID_HANDLE instead of being dereferenced.
//  3. A stream is a FIFO of Ops executed by a detached worker thread that exists only while
//     the FIFO is non-empty. Every Op completes a Signal; cross-stream ordering (events,
//     legacy-stream implicit synchronisation) is expressed as Signals an Op waits for.
//  4. Host functions and callbacks of every stream run on one shared, process-lifetime
//     callback thread; the stream's worker waits for them, so they stay in stream order.
//  5. The State singleton, primary contexts and the callback thread are leaked on purpose:
//     nothing is torn down at process exit, so no static destructor can join a blocked thread.
//  6. While a stream captures, work becomes graph Nodes appended after the stream's capture
//     frontier instead of Ops; nothing is executed.
//  7. An executable graph copies the graph's Works and holds its own user-object references
//     (a RefSet); a launch holds shared ownership of both, so destroying the graph or the
//     executable while a launch is in flight is safe and the last owner releases.
//  8. Contexts other than the primary ones (cuCtxCreate's, and the CUcontext of each green
//     context) and green contexts are never freed: State::contexts / green_contexts (guarded
//     by State::ctx_mu, which is taken after mu or alone, never before mu) hold every one ever
//     made, so a stale handle answers CUDA_ERROR_CONTEXT_IS_DESTROYED and LeakSanitizer sees
//     them reachable. Context::destroyed is written with mu and ctx_mu both held, so either
//     lock suffices to read it. A stream of a destroyed context stays registered and answers
//     CUDA_ERROR_CONTEXT_IS_DESTROYED (resolve_stream, cuStreamDestroy).
//  9. A green context's streams belong to its converted Context (kind kGreen), which shares
//     the primary context's events and modules (resource_owner()); cuStreamGetCtx_v2 maps it
//     back to the primary context. Context::waits (cuCtxWaitEvent) are dependencies push_op
//     adds to every later Op of the context's streams (a green context's also those of its
//     primary context).
// 10. A CUlibrary is a Library registered in State::libraries (counted as a live object, like a
//     module); its CUkernels are Kernel objects registered in State::kernels (module.hpp).
//     Loading reads the image once and needs no context. A library is loaded into a context
//     lazily (cuKernelGetFunction, cuLibraryGetModule, cuLibraryGetGlobal, a launch of a
//     CUkernel): that makes a Module (in State::modules, not counted: Module::library set) for
//     resource_owner(ctx), so a green context shares its primary context's, with the library's
//     .global variables allocated for that context. cuLibraryUnload unregisters every handle at
//     once (a stale one answers CUDA_ERROR_INVALID_HANDLE), then waits for the work submitted
//     so far in the contexts it was loaded in before freeing the variables; a destroyed created
//     context forgets its Module (release_context_modules).
// 11. Launches never point at a Function, Module, Kernel or Library: a KernelLaunch copies the
//     name, arguments and CPU implementation, so unloading while a launch is in flight, or while
//     a graph holds the launch, is safe. A launch holds a weak reference to the liveness token
//     of its code (its library's, or its module's): cuGraphLaunch of an executable that holds
//     such a launch after the library or module was unloaded answers CUDA_ERROR_INVALID_HANDLE
//     (the H200 may crash; the H100 crashed in cuGraphLaunch for an unloaded module's kernel).
//     It keeps the handles of the function launched, of its library's kernel and of the
//     stream's context as values for cuGraphKernelNodeGetParams to hand back (stale after an
//     unload, as a driver's are), never dereferenced.
// 12. Device memory is host memory and a device pointer is its host address. cuMemHostAlloc's
//     memory (State::host_allocations) is mapped: its device pointer is the same address, as on
//     the H200 with unified addressing, so every memory function (memset, memcpy, kernels,
//     stream memory operations) reaches it through either pointer. A stream memory operation
//     (memops.cpp) is a Work of type BATCH_MEM_OP: a write is a release store made when the
//     stream's worker reaches it, so a thread that acquire-loads the word also sees what the
//     stream did before; a wait re-reads the word on the worker (acquire loads, no lock held)
//     until its condition holds: it holds back that stream and whatever waits for it, never
//     the emulator.
// 13. A device fault (the sticky error, custream_emu_set_sticky_error, which a kernel's CPU
//     implementation may set at its place in stream order) kills the work not yet started:
//     a worker that reaches an Op while the error is set completes it without running it
//     (Op::abandon instead: a cuStreamAddCallback callback gets the error; host functions,
//     kernels, copies, memory operations and event records never run), and the synchronizing
//     calls that waited answer the error. A destroyed stream's pending work runs on (unless
//     abandoned) and stays covered by its context's waits (Context::retired): cuMemFree and
//     cuMemFreeHost wait for every stream of every context, destroyed ones' included, so no
//     queued work touches freed memory.
// 14. Graphs as programs (graph_nodes.cpp, graph_exec.cpp, graph_updates.cpp): a child graph
//     node owns a clone of its child, a conditional node its bodies (Node::bodies, Graph::owner;
//     destroyed with the node's graph, never counted as live). Conditional handles belong to a
//     graph (State::cond_handles) and go with it. An executable's ExecCore nests the bodies'
//     cores in Work::bodies and runs every level in a topological order; its conditional
//     values (CondValues, atomics) are per executable and found by a kernel's CPU twin through
//     the thread-local launch of its worker. Per-node updates never write a core a launch may
//     hold: they copy the cores on the node's path (GraphExec::paths) and swap them in under mu.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_set>
#include <vector>

namespace emu {

using Clock = std::chrono::steady_clock;

constexpr int kDriverVersion = 13000;
constexpr int kGreatestPriority = -5;
constexpr int kLeastPriority = 0;

struct Context;
struct GreenCtx;
struct Stream;
struct Graph;
struct Node;
struct Capture;
struct UserObject;
struct KernelLaunch;
struct ExecCore;

/// Completion of one Op (or one graph node of a launch).
struct Signal {
  bool done = false;
  Clock::time_point when{};
};
using SignalPtr = std::shared_ptr<Signal>;

/// Shared state of an event (shared by an event and its IPC-opened twins).
struct EventState {
  unsigned flags = 0;
  bool recorded = false;
  SignalPtr sig;  // completion of the latest record
  // Set while the latest record happened in a capture.
  std::weak_ptr<Capture> capture;
  std::vector<Node*> capture_nodes;
};

struct Event {
  std::shared_ptr<EventState> state;
  Context* ctx = nullptr;
};

/// A unit of work: what an Op executes and what a graph Node holds.
struct Work {
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  // host
  CUhostFn fn = nullptr;
  void* arg = nullptr;
  // callback (cuStreamAddCallback): type HOST with cb set
  CUstreamCallback cb = nullptr;
  CUstream cb_stream = nullptr;
  // memset: element size 1/2/4, width elements per row, height rows, pitch bytes
  CUdeviceptr dst = 0;
  unsigned value = 0;
  unsigned elem_size = 1;
  size_t width = 0;
  size_t height = 1;
  size_t pitch = 0;
  // memcpy (linear)
  CUdeviceptr src = 0;
  size_t bytes = 0;
  // memory free (cuMemFreeAsync) as a non-graph op
  bool free_memory = false;
  // event record / wait
  std::shared_ptr<EventState> event;
  // kernel: the launch (arguments copied at launch; the CPU implementation registered then)
  std::shared_ptr<const KernelLaunch> kernel;
  // stream memory operation (type BATCH_MEM_OP, memops.cpp): cuStreamWriteValue32/64 or
  // cuStreamWaitValue32/64 on the word at dst
  CUstreamBatchMemOpType memop = CU_STREAM_MEM_OP_WRITE_VALUE_32;
  cuuint64_t memop_value = 0;
  unsigned memop_flags = 0;  // the wait's condition (CUstreamWaitValue_flags)
  // conditional node (invariant 14): its handle, type and number of bodies
  CUgraphConditionalHandle cond = 0;
  CUgraphConditionalNodeType cond_type = CU_GRAPH_COND_TYPE_IF;
  unsigned cond_size = 0;
  // memory allocation node: the allocation (dst, bytes), made when the node is added and
  // shared by the graph's node and its executables, so its address never changes
  std::shared_ptr<void> block;
  // In an executable only: the bodies (a child graph node's graph, a conditional node's
  // graphs), made at instantiation, and whether the node is enabled (cuGraphNodeSetEnabled).
  std::vector<std::shared_ptr<const ExecCore>> bodies;
  bool enabled = true;
};

/// Runs a kernel launch: its registered CPU implementation, or nothing (module.cpp).
void run_kernel(const KernelLaunch& k);
/// True when the launch's library or module has been unloaded since.
bool kernel_code_unloaded(const KernelLaunch& k);
/// What cuGraphKernelNodeGetParams answers for a kernel node holding launch k: the launch's
/// configuration, handles, and its copies of the arguments (owned by the launch, so valid while
/// a graph holds it).
void kernel_node_params(const KernelLaunch& k, CUDA_KERNEL_NODE_PARAMS_v2* out);
/// Executes the data part of a Work (memset, memcpy, kernel, memory operation, free) on the
/// calling thread, without State::mu (a wait-value operation may block until another thread
/// writes the word).
void execute_data_work(const Work& w);
/// Runs a stream memory operation (memops.cpp): a release store of the value, or a wait that
/// re-reads the word (acquire loads) until the condition holds.
void run_mem_op(const Work& w);
/// Runs a host Work on the shared callback thread and returns when it has run; a callback gets
/// `status`. Must be called without State::mu held.
void run_host_work(const Work& w, CUresult status = CUDA_SUCCESS);

struct Op {
  std::vector<SignalPtr> deps;
  std::function<void()> run;  // runs without mu held
  /// Runs instead of `run` when the Op is reached after a device fault (invariant 13): a
  /// cuStreamAddCallback callback is called with the error; nothing else runs.
  std::function<void(CUresult)> abandon;
  SignalPtr done;
};

struct Stream {
  enum Kind { kCreated, kLegacy, kPerThread };
  Kind kind = kCreated;
  Context* ctx = nullptr;
  unsigned flags = 0;
  int priority = 0;
  unsigned long long id = 0;
  std::deque<Op> queue;
  bool worker_running = false;
  bool destroyed = false;
  SignalPtr tail;  // completion of the last enqueued op
  // capture
  std::shared_ptr<Capture> capture;
  std::vector<Node*> frontier;
  std::vector<CUgraphEdgeData> frontier_edges;

  bool blocking() const { return kind != kLegacy && !(flags & CU_STREAM_NON_BLOCKING); }
};

struct Context {
  /// kPrimary: a device's primary context; kCreated: cuCtxCreate; kGreen: the CUcontext of a
  /// green context (cuCtxFromGreenCtx). Fixed at creation.
  enum Kind { kPrimary, kCreated, kGreen };
  Kind kind = kPrimary;
  int device = 0;
  int refcount = 0;
  unsigned flags = 0;
  unsigned long long id = 0;  // kGreen: also the green context's id (cuGreenCtxGetId)
  Stream* legacy = nullptr;
  std::vector<Stream*> streams;  // created streams (not destroyed) + per-thread streams
  GreenCtx* green = nullptr;     // kGreen: the green context it converts
  std::vector<Context*> greens;  // kPrimary: the kGreen contexts of its live green contexts
  /// cuCtxWaitEvent / cuGreenCtxWaitEvent: signals every later Op on the context's streams
  /// waits for (done ones are pruned by push_op).
  std::vector<SignalPtr> waits;
  /// Completions of the last Ops of its destroyed streams, queued when they were destroyed
  /// (invariant 13): cuCtxSynchronize and the frees wait for them too (done ones are pruned).
  std::vector<SignalPtr> retired;
  bool destroyed = false;  // invariant 8: written with mu and ctx_mu held
};

/// A green context: its SM count and its converted context (destroyed with it).
struct GreenCtx {
  int device = 0;
  unsigned sm_count = 0;
  Context* ctx = nullptr;
};

/// A resource descriptor (cuDevResourceGenerateDesc). The driver has no call to destroy one:
/// they live as long as the process (State::resource_descs).
struct ResourceDesc {
  int device = -1;  // -1: resources of no known device
  unsigned sm_count = 0;
};

struct Capture {
  unsigned long long id = 0;
  Graph* graph = nullptr;
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
  bool invalidated = false;
  Stream* origin = nullptr;
  std::set<Stream*> streams;
  std::thread::id thread;
  Context* ctx = nullptr;
  bool into_graph = false;  // cuStreamBeginCaptureToGraph: the graph is the user's
};

struct Node {
  Graph* graph = nullptr;
  Work work;
  std::vector<Node*> deps;
  size_t index = 0;
  /// A child graph node's embedded clone, a conditional node's bodies: owned by the node,
  /// destroyed with it (invariant 14).
  std::vector<Graph*> bodies;
  std::vector<CUgraph> body_handles;  // the same, as CUDA_CONDITIONAL_NODE_PARAMS::phGraph_out
};

/// User-object references owned by a graph or an executable.
struct RefSet {
  std::map<UserObject*, unsigned> refs;
  RefSet() = default;
  RefSet(const RefSet&) = delete;
  RefSet& operator=(const RefSet&) = delete;
  ~RefSet();  // releases every reference
};

struct Graph {
  std::vector<std::unique_ptr<Node>> nodes;
  std::shared_ptr<RefSet> refs = std::make_shared<RefSet>();
  bool owned_by_capture = false;  // not yet handed to the user
  Node* owner = nullptr;          // a body or embedded child graph: the node that owns it
};

/// A conditional handle (cuGraphConditionalHandleCreate): it belongs to a graph and goes with
/// it (State::cond_handles).
struct CondHandle {
  Graph* graph = nullptr;
  Context* ctx = nullptr;
  unsigned default_value = 0;
  unsigned flags = 0;
};

/// The values of the conditional handles of one executable (invariant 14): set at the start
/// of each launch to the default with CU_GRAPH_COND_ASSIGN_DEFAULT, else kept from the last.
struct CondValues {
  struct Slot {
    std::atomic<unsigned> value{0};
    unsigned default_value = 0;
    bool assign_default = false;
  };
  std::map<CUgraphConditionalHandle, Slot> slots;
};

/// What an executable runs: works[i] is the work of the graph's node i (creation order),
/// deps[i] their dependencies (node indices), order a topological order of the indices.
struct ExecCore {
  std::vector<Work> works;
  std::vector<std::vector<size_t>> deps;
  std::vector<size_t> order;
  std::shared_ptr<RefSet> refs;
};

struct GraphExec {
  std::shared_ptr<ExecCore> core;  // replaced, never written, once a launch may hold it
  /// The graph instantiated, while it lives and holds a conditional or allocation node (one
  /// executable of it at a time, kSecondExecutable); null otherwise (cleared by destroy_graph).
  const Graph* single_source = nullptr;
  Context* ctx = nullptr;
  /// Where each node of the instantiated graph (its bodies' included) is in core: node index,
  /// then body index and node index for each level of nesting (per-node updates).
  std::map<const Node*, std::vector<size_t>> paths;
  std::shared_ptr<CondValues> conds;
};

struct UserObject {
  void* ptr = nullptr;
  CUhostFn destroy = nullptr;
  unsigned refcount = 0;  // guarded by State::uo_mu
};

struct State {
  std::mutex mu;
  std::condition_variable cv;  // any Signal completed, any queue changed
  std::vector<Context*> primary;
  /// Every context made by cuCtxCreate and every converted green context, destroyed or not;
  /// every green context and resource descriptor ever made (invariant 8: guarded by ctx_mu,
  /// never freed).
  std::unordered_set<const void*> contexts, green_contexts, resource_descs;
  std::mutex ctx_mu;
  int device_count = 2;
  std::atomic<bool> initialized{false};
  std::unordered_set<const void*> streams, events, graphs, nodes, execs, modules;
  std::unordered_set<const void*> libraries, kernels;  // invariant 10
  std::map<CUdeviceptr, size_t> allocations;
  /// cuMemHostAlloc's allocations: host address -> size (invariant 12).
  std::map<std::uintptr_t, size_t> host_allocations;
  std::map<unsigned long long, std::weak_ptr<EventState>> ipc_events;
  std::set<std::shared_ptr<Capture>> captures;  // active or invalidated, not yet ended
  std::map<CUgraphConditionalHandle, CondHandle> cond_handles;  // invariant 14
  unsigned long long next_id = 1;
  // user objects
  std::mutex uo_mu;
  std::unordered_set<const void*> user_objects;
  // live handle count for leak tests
  std::atomic<long> live{0};
  // callback thread: jobs run in FIFO order; `done` is set under mu when a job has run
  struct CallbackJob {
    std::function<void()> fn;
    bool* done = nullptr;
  };
  std::deque<CallbackJob> callbacks;
  std::condition_variable callback_cv;
  bool callback_thread_started = false;
  bool callback_busy = false;
  int workers_running = 0;
};

/// The process-lifetime, never-destroyed emulator state.
State& state();

// ---- helpers shared between files (all require State::mu held unless noted) ----
/// The calling thread's current context or nullptr (no lock needed).
Context* current_context();
/// Context of a device ordinal or nullptr.
Context* context_of_device(int dev);
/// The device's CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT (no lock needed).
unsigned device_sm_count(int dev);
/// CUDA_SUCCESS for a live context of the emulator, CUDA_ERROR_CONTEXT_IS_DESTROYED for a
/// destroyed one, CUDA_ERROR_INVALID_CONTEXT otherwise (NULL included). Takes ctx_mu: callable
/// with or without mu held.
CUresult context_status(Context* ctx);
/// The calling thread's current context when it can be used (mu held): CUDA_ERROR_INVALID_CONTEXT
/// without one, CUDA_ERROR_CONTEXT_IS_DESTROYED when it was destroyed.
CUresult usable_current_context(Context** out);
/// The context whose events and modules ctx uses: the primary context for a green context's.
Context* resource_owner(Context* ctx);
/// ctx, and for a primary context its live green contexts' (mu held): the contexts whose work
/// cuCtxSynchronize, cuCtxRecordEvent and cuCtxWaitEvent on ctx cover.
std::vector<Context*> covered_contexts(Context* ctx);
/// Waits (releasing the lock) until the work enqueued so far on ctx's streams (the destroyed
/// ones' included) has completed.
void context_wait(std::unique_lock<std::mutex>& lk, Context* ctx);
/// Waits (releasing the lock) until the work enqueued so far on every stream of every context
/// (destroyed streams' included) has completed: what a free waits for (invariant 13).
void wait_all_contexts(std::unique_lock<std::mutex>& lk);
/// Keeps a destroyed stream's last Op in its context's Context::retired while it is pending.
void retire_stream(Stream* st);
/// Creates a stream of ctx (mu not held): cuStreamCreate*, cuGreenCtxStreamCreate.
CUresult create_stream_in(Context* ctx, CUstream* ph, unsigned flags, int priority);
/// Takes a stream out of its capture as destroying it does: the capture is discarded when the
/// stream is its origin, else invalidated (mu held).
void leave_capture(Stream* s);
/// Unloads the modules loaded in ctx (a destroyed created context; mu held).
void release_context_modules(Context* ctx);
/// Resolves a stream handle (0, 1, 2 or created) for the calling thread.
CUresult resolve_stream(CUstream h, Stream** out);
/// Appends work to a stream (as an Op, or as a graph node while capturing).
CUresult enqueue(Stream* s, Work w, std::function<void()> run = {}, SignalPtr* done_out = nullptr);
/// Pushes an Op onto a stream's queue with the implicit-synchronisation dependencies.
void push_op(Stream* s, Op op);
/// Signals an Op on a stream would wait for besides stream order (legacy semantics).
std::vector<SignalPtr> implicit_deps(Stream* s);
/// True when stream work up to now has completed (queue empty or tail done, plus legacy deps).
bool stream_idle(Stream* s);
/// Waits (releasing the lock) until stream work enqueued so far has completed.
void stream_wait(std::unique_lock<std::mutex>& lk, Stream* s);
/// True when a blocking stream of ctx captures and using the legacy stream is refused. The
/// refused use invalidates that capture unless `invalidates` is false (cuStreamIsCapturing:
/// "the blocking stream capture is not invalidated").
bool legacy_conflict(Context* ctx, bool invalidates = true);
/// The calling thread's capture mode (cuThreadExchangeStreamCaptureMode; no lock needed).
CUstreamCaptureMode thread_capture_mode();
/// Marks a capture invalidated.
void invalidate(Capture* c);
/// Whether a capture-unsafe call by this thread is refused now (invalidating the captures that
/// forbid it). Call with state().mu held.
bool refused_by_capture();
/// Ends capture for every stream of c; c leaves State::captures.
void end_capture_streams(const std::shared_ptr<Capture>& c);
/// Ends capture `c` on all its streams and destroys its graph (releasing the user objects
/// the graph holds), as the driver does when the origin stream is destroyed mid-capture or
/// a global capture is ended from the wrong thread. Caller holds State::mu.
void discard_capture(const std::shared_ptr<Capture>& c);
/// Adds a node to a graph; index assigned; registered as a live node handle.
Node* add_node(Graph* g, Work w, const std::vector<Node*>& deps);
/// Destroys a graph object (nodes unregistered, references released).
void destroy_graph(Graph* g);
/// Graph creation helper (registered, not counted as live until handed to the user).
Graph* new_graph();
/// What instantiating a graph answers when a conditional body (at any depth, child graphs
/// included) holds a node of a kind a body may not hold: host, event record and wait, memory
/// allocation and free. The driver accepts such nodes when they are added or captured.
constexpr CUresult kBodyNodeRefused = CUDA_ERROR_INVALID_VALUE;  // so on an H100, driver 580
/// kBodyNodeRefused when a conditional body of g, at any depth, holds a node of a kind a body
/// may not hold; else CUDA_SUCCESS (graph_nodes.cpp). The instantiation's result_out stays
/// CUDA_GRAPH_INSTANTIATE_ERROR: what the driver reports there is not measured.
CUresult check_bodies(const Graph& g);
/// What the emulator answers where driver 580 crashes (SIGSEGV, measured on an H100) for want
/// of a current context, whatever context the parameters name: cuGraphAddNode of a kernel node
/// (to a root graph or a conditional body), and cuGraphExecKernelNodeSetParams. An error instead of
/// a crash, so that a test sees a caller that forgot to make the context current.
constexpr CUresult kNoCurrentContext = CUDA_ERROR_INVALID_CONTEXT;
/// What instantiating a graph answers while another executable of it lives, when the graph (at
/// any depth) holds a conditional node (IF or WHILE) or a memory allocation node (so on an H100,
/// driver 580, with and without upload).
constexpr CUresult kSecondExecutable = CUDA_ERROR_NOT_SUPPORTED;
/// Whether g (bodies and child graphs included) holds a conditional or memory allocation node
/// (graph_nodes.cpp).
bool one_executable_at_a_time(const Graph& g);
/// Sets a conditional handle of the executable running on this thread (a kernel's CPU
/// implementation calls it, through custream_emu_set_conditional); false when no launch
/// running on this thread has that handle (graph_exec.cpp).
bool set_conditional(CUgraphConditionalHandle h, unsigned value);
/// The Work a node's parameters describe (graph_nodes.cpp; mu held): kernel, memset, memcpy,
/// host, empty, event record and wait nodes; CUDA_ERROR_NOT_SUPPORTED for other kinds.
CUresult work_from_params(const CUgraphNodeParams& p, Work* w);
/// A memset Work (mu held): element size 1, 2 or 4, pitch at least a row when height > 1.
CUresult memset_work(CUdeviceptr dst, size_t pitch, unsigned value, unsigned elem_size,
                     size_t width, size_t height, Work* w);
/// A memcpy Work from a CUDA_MEMCPY3D: 1-D copies between host, device and unified memory;
/// arrays and 2-D / 3-D copies CUDA_ERROR_NOT_SUPPORTED.
CUresult memcpy_work(const CUDA_MEMCPY3D& c, Work* w);
/// Whether p is the address of a memory-allocation node of a live graph or executable that no
/// free node of its graph frees (graph_nodes.cpp; mu held): cuMemFree and cuMemFreeAsync may
/// free it (cuda.h, cuGraphAddMemAllocNode), a no-op here since its memory lives with the
/// graph and its executables (invariant 14).
bool graph_allocation_freeable(CUdeviceptr p);
/// A deep copy of g (its child graphs' and bodies' included) owned by `owner` (mu held).
Graph* clone_graph(const Graph& g, Node* owner);
/// Whether g may be embedded as a child graph (no conditional, allocation or free node, at
/// any depth): CUDA_ERROR_INVALID_VALUE otherwise (mu held).
CUresult check_child_graph(const Graph& g);
/// The executable form of child graph g replacing `old` (cuGraphExecChildGraphNodeSetParams):
/// CUDA_ERROR_INVALID_VALUE unless the topology matches (graph_exec.cpp; mu held).
CUresult exec_child_core(const ExecCore& old, const Graph& g, std::shared_ptr<ExecCore>* out);
/// The launch a kernel node's parameters describe (module.cpp; mu held).
CUresult kernel_node_launch(const CUDA_KERNEL_NODE_PARAMS_v3& p,
                            std::shared_ptr<const KernelLaunch>* out);
/// Fault injection: CUDA_SUCCESS or the injected failure for this entry point.
CUresult check_fault(const char* name) noexcept;
/// The sticky error (custream_emu_set_sticky_error), or CUDA_SUCCESS (no lock needed).
CUresult sticky_error() noexcept;
/// Calls f on a new detached thread (user-object destructors).
void run_detached(std::function<void()> f);
/// Counts a user-object destructor that ran (for emu_control.h).
void note_destructor_run();
/// True while this thread runs a host function or a user-object destructor for the emulator:
/// the driver refuses CUDA calls made there (cuGraphDestroy answers CUDA_ERROR_NOT_PERMITTED,
/// measured on an H100, driver 580), and so does the emulator's cuGraphDestroy.
bool in_driver_callback();
/// Marks this thread as running such a callback while it lives.
class CallbackScope {
 public:
  CallbackScope() noexcept;
  ~CallbackScope();
  CallbackScope(const CallbackScope&) = delete;
  CallbackScope& operator=(const CallbackScope&) = delete;

 private:
  bool outer_;
};
bool valid(const std::unordered_set<const void*>& set, const void* p);
/// Retains/releases user-object references (takes uo_mu).
void user_object_add(UserObject* o, unsigned n);
void user_object_sub(UserObject* o, unsigned n);

/// Accounts a cuMemAllocAsync allocation to device dev's default pool (mempool.cpp; mu held).
void pool_allocated(int dev, CUdeviceptr p, size_t bytes);
/// Returns an allocation's bytes to its pool, if it came from one (mu held).
void pool_freed(CUdeviceptr p);

/// One versioned driver entry point served by cuGetProcAddress.
struct Entry {
  const char* name;
  int version;
  void* fn;
};
// Per-family registration, called once by the proc-address table.
void register_context_entries(std::vector<Entry>& out);
void register_stream_entries(std::vector<Entry>& out);
void register_event_entries(std::vector<Entry>& out);
void register_memory_entries(std::vector<Entry>& out);
void register_memop_entries(std::vector<Entry>& out);
void register_capture_entries(std::vector<Entry>& out);
void register_graph_entries(std::vector<Entry>& out);
void register_graph_node_entries(std::vector<Entry>& out);
void register_graph_exec_entries(std::vector<Entry>& out);
void register_node_update_entries(std::vector<Entry>& out);
void register_user_object_entries(std::vector<Entry>& out);
void register_module_entries(std::vector<Entry>& out);
void register_library_entries(std::vector<Entry>& out);
void register_green_entries(std::vector<Entry>& out);
void register_mempool_entries(std::vector<Entry>& out);
/// The implementation of entry point `name` at ABI `version` (the greatest registered version
/// <= version), or nullptr: what cuGetProcAddress serves, for the exported symbols.
void* entry_point(const char* name, int version);
/// Whether the emulator serves an entry point of that name (at any version).
bool known_entry(const char* name);

}  // namespace emu

/// An Entry for `fn`, which must have exactly the type PFN_<name>_v<version> (compile-checked).
#define EMU_ENTRY(name, version, fn)                                                      \
  ::emu::Entry {                                                                          \
#name, version, reinterpret_cast < void*>(static_cast <PFN_##name##_v##version>(&fn)) \
  }

/// Entry-point prologue: fault injection, sticky errors and cuInit check.
#define EMU_ENTER(name)                                                    \
  do {                                                                     \
    if (CUresult emu_fault_ = ::emu::check_fault(name)) return emu_fault_; \
    if (!::emu::state().initialized.load(std::memory_order_acquire))       \
      return CUDA_ERROR_NOT_INITIALIZED;                                   \
  } while (false)

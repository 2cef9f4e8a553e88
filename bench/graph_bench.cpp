// Benchmarks for host functions, graphs and kernels (docs/performance.md): custream against the
// raw driver call, interleaved in one process on the same handles. Enqueueing cases run in
// batches of <= 256 with an untimed synchronize between batches. Run on the GPU:
//   ./build/tools/custream bench [--csv FILE] [--filter TEXT]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bench_cases.hpp"
#include "custream/custream.hpp"
#include "custream/graph.hpp"
#include "custream/graph_builder.hpp"
#include "custream/kernel.hpp"
#include "custream/module.hpp"
#include "custream/testing.hpp"
#include "gate.hpp"
#include "trivial_ptx.hpp"

namespace custream_bench {

void check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) {
    throw custream::Error(r, what, "custream bench (raw driver variant)");
  }
}

namespace {

std::atomic<long> g_host_runs{0};

void count_run(void* counter) {
  static_cast<std::atomic<long>*>(counter)->fetch_add(1, std::memory_order_relaxed);
}

/// What the cases share; allocated once and never freed (no driver call at exit).
struct State {
  custream::Device device{0};
  custream::Stream stream{device, custream::StreamFlags::non_blocking};
  custream::DeviceBuffer buffer{4, device};
  custream::Graph small_graph;  // one memset node: works on the emulator too
  custream::Graph other_graph;  // the same with another value (for updates)
  custream::Kernel noop;        // empty when the driver cannot load modules
  KeptGraphs kept;              // the 1,000-kernel graphs
};

}  // namespace

void KeptGraphs::drop() {
  const auto& api = custream::testing::driver();
  graphs.clear();
  for (auto& [g, e] : raw_graphs) {
    api.cuGraphExecDestroy(e);
    api.cuGraphDestroy(g);
  }
  raw_graphs.clear();
}

void set_capture_bodies(Case& c, const custream::Stream& stream, CUfunction f, KeptGraphs& kept,
                        std::function<custream::Graph()> capture) {
  const auto& api = custream::testing::driver();
  c.raw = [&api, s = stream.handle(), f, &kept](int n) {
    for (int i = 0; i < n; ++i) {
      auto ge = raw_capture(s, f, true);
      check(api.cuGraphLaunch(ge.second, s), "cuGraphLaunch");
      check(api.cuStreamSynchronize(s), "cuStreamSynchronize");
      kept.raw_graphs.push_back(ge);
    }
  };
  c.ours = [&stream, &kept, capture = std::move(capture)](int n) {
    for (int i = 0; i < n; ++i) {
      custream::Graph g = capture();
      g.launch(stream);
      stream.synchronize();
      kept.graphs.push_back(std::move(g));
    }
  };
  c.between = [&kept] { kept.drop(); };
}

std::pair<CUgraph, CUgraphExec> raw_capture(CUstream s, CUfunction f, bool upload) {
  const auto& api = custream::testing::driver();
  check(api.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED), "cuStreamBeginCapture");
  for (int k = 0; k < kGraphKernels; ++k) {
    void* params[1] = {nullptr};
    check(api.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, params, nullptr), "cuLaunchKernel");
  }
  CUgraph g = nullptr;
  check(api.cuStreamEndCapture(s, &g), "cuStreamEndCapture");
  CUDA_GRAPH_INSTANTIATE_PARAMS p{};
  p.flags = upload ? CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD : 0;
  p.hUploadStream = s;
  CUgraphExec e = nullptr;
  check(api.cuGraphInstantiateWithParams(&e, g, &p), "cuGraphInstantiateWithParams");
  return {g, e};
}

namespace {

custream::Graph ours_capture(const State& st) {
  st.stream.begin_capture();
  for (int k = 0; k < kGraphKernels; ++k) st.noop.launch(st.stream, 1, 1, 0);
  return st.stream.end_capture();
}

double ns_since(Clock::time_point start) {
  return std::chrono::duration<double, std::nano>(Clock::now() - start).count();
}

/// First launch vs repeat launch (each + synchronize), medians over 11 fresh graphs.
std::string first_vs_repeat(State& st) {
  const auto& api = custream::testing::driver();
  const CUstream s = st.stream.handle();
  const CUfunction f = st.noop.handle();
  std::vector<double> ours_first, ours_repeat, raw_first, raw_repeat, raw_first_no_upload;
  for (int rep = 0; rep < 11; ++rep) {
    {
      custream::Graph g = ours_capture(st);
      auto t = Clock::now();
      g.launch(st.stream);
      st.stream.synchronize();
      ours_first.push_back(ns_since(t));
      t = Clock::now();
      g.launch(st.stream);
      st.stream.synchronize();
      ours_repeat.push_back(ns_since(t));
    }
    for (bool upload : {true, false}) {
      auto [g, e] = raw_capture(s, f, upload);
      auto t = Clock::now();
      check(api.cuGraphLaunch(e, s), "cuGraphLaunch");
      check(api.cuStreamSynchronize(s), "cuStreamSynchronize");
      (upload ? raw_first : raw_first_no_upload).push_back(ns_since(t));
      if (upload) {
        t = Clock::now();
        check(api.cuGraphLaunch(e, s), "cuGraphLaunch");
        check(api.cuStreamSynchronize(s), "cuStreamSynchronize");
        raw_repeat.push_back(ns_since(t));
      }
      api.cuGraphExecDestroy(e);
      api.cuGraphDestroy(g);
    }
  }
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "launch + synchronize, medians of 11 graphs: custream first %.1f us, repeat "
                "%.1f us; raw with upload first %.1f us, repeat %.1f us; raw without upload "
                "first %.1f us",
                median(ours_first) / 1e3, median(ours_repeat) / 1e3, median(raw_first) / 1e3,
                median(raw_repeat) / 1e3, median(raw_first_no_upload) / 1e3);
  return buf;
}

/// The state of the graph cases, made by the first of them that runs (not when they are declared
/// or listed): device 0 current, a stream, a buffer and a one-node graph.
State& state() {
  static State* const st = [] {
    custream::Device(0).make_current();
    auto* s = new State;
    // A one-node graph (a 4-byte memset) for the launch case; the emulator can run it.
    s->stream.begin_capture();
    s->stream.memset32(s->buffer.get(), 7, 1);
    s->small_graph = s->stream.end_capture();
    s->stream.begin_capture();
    s->stream.memset32(s->buffer.get(), 8, 1);
    s->other_graph = s->stream.end_capture();
    return s;
  }();
  return *st;
}

/// Loads the empty kernel once: "" when it is loaded, else why the driver cannot load modules.
const std::string& load_kernel() {
  static const std::string why = [] {
    try {
      state().noop = custream::Module::from_ptx(kTrivialPtx, 0).kernel("noop");
      return std::string();
    } catch (const custream::Error& e) {
      if (e.result() != CUDA_ERROR_NOT_SUPPORTED) throw;
      return "the driver cannot load modules (" + e.name() + "): needs a real GPU";
    }
  }();
  return why;
}

std::function<void()> synchronize(CUstream s) {
  return [s] { check(custream::testing::driver().cuStreamSynchronize(s), "cuStreamSynchronize"); };
}

void raw_host_func(int n) {
  const auto& api = custream::testing::driver();
  const CUstream s = state().stream.handle();
  for (int i = 0; i < n; ++i) api.cuLaunchHostFunc(s, count_run, &g_host_runs);
}

// The capture check payload lifetimes require before every enqueue (a stream may be capturing
// because of code that is not custream's; docs/design/host_functions.md, invariant 2), done raw.
void raw_checked_host_func(int n) {
  const auto& api = custream::testing::driver();
  const CUstream s = state().stream.handle();
  for (int i = 0; i < n; ++i) {
    CUstreamCaptureStatus status{};
    api.cuStreamIsCapturing(s, &status);
    api.cuLaunchHostFunc(s, count_run, &g_host_runs);
  }
}

// The target's "callable (one small allocation)": it may throw, so it goes to the heap (a
// noexcept one this small would travel in userData).
void callable_host_func(int n) {
  State& st = state();
  std::atomic<long>* counter = &g_host_runs;
  for (int i = 0; i < n; ++i) {
    st.stream.launch_host_func([counter] { counter->fetch_add(1, std::memory_order_relaxed); });
  }
}

// The idiomatic raw way to run a callable with state: a `new` payload the callback deletes, with
// the capture check that makes it safe (captured, the payload would need a user object).
struct RawPayload {
  std::atomic<long>* counter;
};

void CUDA_CB run_and_delete(void* p) {
  auto* payload = static_cast<RawPayload*>(p);
  payload->counter->fetch_add(1, std::memory_order_relaxed);
  delete payload;
}

void idiomatic_host_func(int n) {
  const auto& api = custream::testing::driver();
  const CUstream s = state().stream.handle();
  for (int i = 0; i < n; ++i) {
    CUstreamCaptureStatus status{};
    api.cuStreamIsCapturing(s, &status);
    auto* payload = new RawPayload{&g_host_runs};
    if (api.cuLaunchHostFunc(s, run_and_delete, payload) != CUDA_SUCCESS) delete payload;
  }
}

/// The small noexcept callable of the host-function rows: bumps a counter.
struct Bump {
  std::atomic<long>* counter;
  void operator()() const noexcept { counter->fetch_add(1, std::memory_order_relaxed); }
};

/// Declares a host-function case: 256 enqueues a batch, at least 61 rounds (more until the A/A'
/// resolution is reached), the stream parked while a batch is timed.
Case host_func_case(const char* name, Target target, Body raw, Body ours, const char* label) {
  Case c{name, {}, {}, target, 256, 61, {}, label};
  c.prepare = [raw = std::move(raw), ours = std::move(ours)](Case& run_as) {
    run_as.raw = raw;
    run_as.ours = ours;
    time_parked(run_as, state().stream.handle());
  };
  return c;
}

}  // namespace

// --- Per-node updates (docs/design/graphs.md, "Per-node updates") ---

namespace {

/// What the per-node update cases share (never freed): set_value nodes of builder graphs.
struct NodeUpdateState {
  custream::Kernel set_value;
  custream::DeviceBuffer out{4, custream::Device(0)};
  custream::Graph one;  // one kernel node
  custream::GraphNode one_node;
  custream::Graph big;  // 1,000 kernel nodes
  custream::GraphBuilder big_builder;
  custream::Graph big_other;  // the same topology, other arguments (whole-graph updates)
  custream::GraphNode big_node;
};

/// A graph of `nodes` set_value nodes in a chain, writing `value`; `first` gets the first node.
custream::GraphBuilder set_value_chain(NodeUpdateState& st, int nodes, unsigned value,
                                       custream::GraphNode* first) {
  custream::GraphBuilder b = custream::GraphBuilder::create();
  custream::GraphNode last;
  for (int i = 0; i < nodes; ++i) {
    last = b.add_kernel(last, st.set_value, custream::LaunchConfig{{1}, {1}}, st.out.get(), value);
    if (i == 0 && first != nullptr) *first = last;
  }
  return b;
}

NodeUpdateState& node_update_state() {
  static NodeUpdateState* const st = [] {
    state();  // device 0 current
    auto* s = new NodeUpdateState;
    s->set_value = custream::Module::from_ptx(kTrivialPtx, 0).kernel("set_value");
    s->one = set_value_chain(*s, 1, 1, &s->one_node).instantiate();
    s->big_builder = set_value_chain(*s, kGraphKernels, 1, &s->big_node);
    s->big = s->big_builder.instantiate();
    s->big_other = set_value_chain(*s, kGraphKernels, 2, nullptr).instantiate();
    return s;
  }();
  return *st;
}

// The raw side of the kernel-update rows: one cuGraphExecKernelNodeSetParams an update, with
// the parameters custream passes; `ask` adds the cuCtxGetCurrent that a caller not sure of its
// thread's current context makes (the driver crashes in the call without one).
Body raw_kernel_updates(NodeUpdateState& st, bool ask) {
  const auto& api = custream::testing::driver();
  CUDA_KERNEL_NODE_PARAMS base{};
  check(api.cuGraphKernelNodeGetParams(st.one_node.handle(), &base), "cuGraphKernelNodeGetParams");
  return [&api, exec = st.one.exec(), node = st.one_node.handle(), base, out = st.out.get(),
          ask](int n) {
    for (int i = 0; i < n; ++i) {
      unsigned value = static_cast<unsigned>(i);
      void* params[2] = {const_cast<CUdeviceptr*>(&out), &value};
      CUDA_KERNEL_NODE_PARAMS p = base;
      p.gridDimX = p.gridDimY = p.gridDimZ = 1;
      p.blockDimX = p.blockDimY = p.blockDimZ = 1;
      p.sharedMemBytes = 0;
      p.kernelParams = params;
      p.extra = nullptr;
      if (ask) {
        CUcontext current = nullptr;
        if (api.cuCtxGetCurrent(&current) != CUDA_SUCCESS || current == nullptr) std::abort();
      }
      api.cuGraphExecKernelNodeSetParams(exec, node, &p);
    }
  };
}

void custream_kernel_updates(int n) {
  NodeUpdateState& st = node_update_state();
  const custream::LaunchConfig config{{1}, {1}};
  for (int i = 0; i < n; ++i) {
    st.one.update_kernel(st.one_node, config, st.out.get(), static_cast<unsigned>(i));
  }
}

void add_node_update_cases(std::vector<Case>& cases) {
  // One kernel node's arguments: the same CUDA_KERNEL_NODE_PARAMS the raw side fills each time;
  // custream adds its checks (the node's kernel's parameter sizes, one cached pointer). Inside a
  // ContextScope of the node's context custream trusts that context to be current (the raw
  // side's assumption); the next row is the same without the scope.
  Case kernel_update{"graph per-node kernel update (in a ContextScope)",
                     {},
                     {},
                     {},
                     256,
                     21,
                     {},
                     "cuGraphExecKernelNodeSetParams"};
  kernel_update.needs_kernels = true;
  kernel_update.prepare = [](Case& c) {
    c.skip = load_kernel();
    if (!c.skip.empty()) return;
    NodeUpdateState& st = node_update_state();
    c.raw = raw_kernel_updates(st, false);
    c.ours = [context = st.big_builder.context()](int n) {  // the builders' context
      const custream::ContextScope scope(context);          // inside the timed batch
      custream_kernel_updates(n);
    };
  };
  cases.push_back(std::move(kernel_update));

  // Outside a scope, custream asks the driver which context is current before each update:
  // against the raw call with the same question.
  Case unscoped{"graph per-node kernel update (no scope) vs raw + cuCtxGetCurrent",
                {},
                {},
                {},
                256,
                21,
                {},
                "cuCtxGetCurrent, cuGraphExecKernelNodeSetParams"};
  unscoped.needs_kernels = true;
  unscoped.prepare = [](Case& c) {
    c.skip = load_kernel();
    if (!c.skip.empty()) return;
    c.raw = raw_kernel_updates(node_update_state(), true);
    c.ours = custream_kernel_updates;
  };
  cases.push_back(std::move(unscoped));

  // A report row: one node of a 1,000-node graph updated (custream) against the whole graph
  // updated from another of the same topology (raw side: custream's update(), one
  // cuGraphExecUpdate); the note adds re-instantiating the graph.
  Case big{"1,000-node graph: per-node update vs whole-graph update",
           {},
           {},
           {Target::Kind::ratio, 0, 1.0},
           16,
           21,
           {},
           "whole-graph update (cuGraphExecUpdate)"};
  big.needs_kernels = true;
  big.prepare = [](Case& c) {
    c.skip = load_kernel();
    if (!c.skip.empty()) return;
    node_update_state();
    c.raw = [](int n) {
      NodeUpdateState& st = node_update_state();
      for (int i = 0; i < n; ++i) st.big.update(st.big_other);
    };
    c.ours = [](int n) {
      NodeUpdateState& st = node_update_state();
      const custream::LaunchConfig config{{1}, {1}};
      for (int i = 0; i < n; ++i) {
        st.big.update_kernel(st.big_node, config, st.out.get(), static_cast<unsigned>(i));
      }
    };
    c.note = [](const Case&) {
      NodeUpdateState& st = node_update_state();
      std::vector<double> times;
      for (int rep = 0; rep < 11; ++rep) {
        const auto start = Clock::now();
        custream::Graph g = st.big_builder.instantiate();
        times.push_back(ns_since(start));
      }
      std::sort(times.begin(), times.end());
      return "re-instantiation (instantiate + upload): " + std::to_string(times[5] / 1000.0) +
             " us median of 11";
    };
  };
  cases.push_back(std::move(big));
}

}  // namespace

void add_graph_cases(std::vector<Case>& cases) {
  // A host function costs ~2-3 us to enqueue and its cost moves with what the driver's
  // host-function thread and the GPU are doing: these rows take the most rounds.
  // Identical code: custream's inline path is the one raw call.
  cases.push_back(host_func_case(
      "launch_host_func (raw function)", {}, raw_host_func,
      [](int n) {
        State& st = state();
        for (int i = 0; i < n; ++i) st.stream.launch_host_func(count_run, &g_host_runs);
      },
      "cuLaunchHostFunc"));

  // A heap callable against the raw calls custream has to make for it: the capture check
  // (docs/design/host_functions.md, invariant 2) and the launch.
  cases.push_back(host_func_case("launch_host_func (callable)", {Target::Kind::raw_plus_abs, 30, 0},
                                 raw_checked_host_func, callable_host_func,
                                 "cuStreamIsCapturing + cuLaunchHostFunc"));

  // The way users compare against: custream's overhead over a bare cuLaunchHostFunc is at most
  // a third of the idiomatic raw way's (new + delete in the callback, same capture check),
  // with the driver's thread running the callbacks (and freeing the payloads) meanwhile.
  cases.push_back(host_func_case("launch_host_func (callable) vs idiomatic raw",
                                 {Target::Kind::reference_overhead, 0, 1.0 / 3}, raw_host_func,
                                 callable_host_func, "cuLaunchHostFunc"));
  cases.back().reference_label =
      "cuStreamIsCapturing + new payload + cuLaunchHostFunc (deleted in the callback)";
  cases.back().prepare = [](Case& run_as) {
    run_as.raw = raw_host_func;
    run_as.ours = callable_host_func;
    run_as.reference = idiomatic_host_func;
    // Not parked: the idiomatic way's payload is freed by the driver's thread while the next
    // ones are allocated, and that cross-thread traffic is part of what is compared.
    run_as.between = synchronize(state().stream.handle());
  };

  // A pointer-sized noexcept callable: no allocation, no capture check (host_function.hpp).
  // The raw side passes the driver what custream passes, the trampoline and the callable's
  // bytes (what raw code that enqueues a callable writes), so the two sides differ only in
  // custream's inline wrapper (docs/performance.md, "Does the method resolve 1 %?").
  cases.push_back(host_func_case(
      "launch_host_func (small noexcept callable)", {},
      [](int n) {
        const auto& api = custream::testing::driver();
        const CUstream s = state().stream.handle();
        const CUhostFn fn = &custream::detail::run_in_pointer<Bump>;
        void* const arg = custream::detail::to_pointer<Bump>(Bump{&g_host_runs});
        for (int i = 0; i < n; ++i) api.cuLaunchHostFunc(s, fn, arg);
      },
      [](int n) {
        State& st = state();
        const Bump bump{&g_host_runs};
        for (int i = 0; i < n; ++i) st.stream.launch_host_func(bump);
      },
      "cuLaunchHostFunc (custream's trampoline)"));

  Case small{"graph launch (1-node graph)", {}, {}, {}, 256, 61, {}, "cuGraphLaunch"};
  small.prepare = [](Case& c) {
    const auto& api = custream::testing::driver();
    State& st = state();
    c.raw = [&api, s = st.stream.handle(), exec = st.small_graph.exec()](int n) {
      for (int i = 0; i < n; ++i) api.cuGraphLaunch(exec, s);
    };
    c.ours = [](int n) {
      State& st = state();
      for (int i = 0; i < n; ++i) st.small_graph.launch(st.stream);
    };
    time_parked(c, st.stream.handle());
  };
  cases.push_back(std::move(small));

  // An update from a graph of the same topology (no user objects: what update() adds). Its
  // target is custream's own: the call into the library and its checks.
  Case update{"graph update (1-node graph)",
              {},
              {},
              {Target::Kind::raw_plus_abs, 5, 0},
              256,
              21,
              {},
              "cuGraphExecUpdate"};
  update.prepare = [](Case& c) {
    const auto& api = custream::testing::driver();
    State& st = state();
    c.raw = [&api, exec = st.small_graph.exec(), g = st.other_graph.graph()](int n) {
      for (int i = 0; i < n; ++i) {
        CUgraphExecUpdateResultInfo info{};
        api.cuGraphExecUpdate(exec, g, &info);
      }
    };
    c.ours = [](int n) {
      State& st = state();
      for (int i = 0; i < n; ++i) st.small_graph.update(st.other_graph);
    };
  };
  cases.push_back(std::move(update));

  // Kernels: only where the driver loads modules (not on the CPU emulator).
  Case kernel{"kernel launch (empty kernel, 1x1)", {}, {}, {}, 256, 61, {}, "cuLaunchKernel"};
  kernel.needs_kernels = true;
  kernel.prepare = [](Case& c) {
    State& st = state();
    c.skip = load_kernel();
    if (!c.skip.empty()) return;
    const auto& api = custream::testing::driver();
    c.raw = [&api, s = st.stream.handle(), f = st.noop.handle()](int n) {
      for (int i = 0; i < n; ++i) {
        void* params[1] = {nullptr};
        api.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, params, nullptr);
      }
    };
    c.ours = [](int n) {
      State& st = state();
      for (int i = 0; i < n; ++i) st.noop.launch(st.stream, 1, 1, 0);
    };
    time_parked(c, st.stream.handle());
  };
  cases.push_back(std::move(kernel));

  Case graph{"capture + instantiate + launch (1,000 kernels)",
             {},
             {},
             {Target::Kind::ratio, 0, 1.02},
             2,
             21,
             {},
             "capture, instantiate+upload, launch, sync"};
  graph.needs_kernels = true;
  graph.prepare = [](Case& c) {
    State& st = state();
    c.skip = load_kernel();
    if (!c.skip.empty()) return;
    set_capture_bodies(c, st.stream, st.noop.handle(), st.kept,
                       [] { return ours_capture(state()); });
    c.note = [](const Case&) { return first_vs_repeat(state()); };
  };
  cases.push_back(std::move(graph));

  add_node_update_cases(cases);  // per-node updates: their own block above
}

namespace {

// 1,000 nodes in a chain, each after the previous, then the graph destroyed: through the raw
// cuGraphAddNode (the same parameters custream passes) and through GraphBuilder. `ask` adds the
// cuCtxGetCurrent a caller not sure of its thread's current context makes before a kernel node
// (the driver crashes adding one without).
void raw_chain(const CUgraphNodeParams& params, int graphs, bool ask = false) {
  const auto& api = custream::testing::driver();
  for (int i = 0; i < graphs; ++i) {
    CUgraph g = nullptr;
    check(api.cuGraphCreate(&g, 0), "cuGraphCreate");
    CUgraphNode prev = nullptr;
    for (int k = 0; k < kGraphKernels; ++k) {
      CUgraphNodeParams p = params;  // the driver may write to it
      CUgraphNode node = nullptr;
      if (ask) {
        CUcontext current = nullptr;
        if (api.cuCtxGetCurrent(&current) != CUDA_SUCCESS || current == nullptr) std::abort();
      }
      check(api.cuGraphAddNode(&node, g, prev != nullptr ? &prev : nullptr, nullptr,
                               prev != nullptr ? 1 : 0, &p),
            "cuGraphAddNode");
      prev = node;
    }
    check(api.cuGraphDestroy(g), "cuGraphDestroy");
  }
}

template <typename Add>
void builder_chain(int graphs, Add add) {
  const custream::Context context = state().device.primary_context();
  for (int i = 0; i < graphs; ++i) {
    custream::GraphBuilder b(context);
    custream::GraphNode prev;
    for (int k = 0; k < kGraphKernels; ++k) prev = add(b, prev);
  }
}

}  // namespace

void add_graph_builder_cases(std::vector<Case>& cases) {
  // The add path: one cuGraphAddNode a node, the argument check once per kernel (as launches).
  // Inside a ContextScope of the builder's context custream trusts that context to be current
  // (the raw side's assumption); the next row is the same without the scope.
  for (const bool scoped : {true, false}) {
    Case kernels{scoped ? "graph builder: 1,000 kernel nodes (in a ContextScope)"
                        : "graph builder: 1,000 kernel nodes (no scope) vs raw + cuCtxGetCurrent",
                 {},
                 {},
                 {Target::Kind::ratio, 0, 1.02},
                 4,
                 21,
                 {},
                 scoped ? "cuGraphCreate, 1,000 cuGraphAddNode (kernel), cuGraphDestroy"
                        : "cuGraphCreate, 1,000 cuCtxGetCurrent + cuGraphAddNode (kernel), "
                          "cuGraphDestroy"};
    kernels.needs_kernels = true;
    kernels.prepare = [scoped](Case& c) {
      c.skip = load_kernel();
      if (!c.skip.empty()) return;
      if (custream::testing::driver().cuGraphAddNode == nullptr) {
        c.skip = "the driver has no cuGraphAddNode (CUDA 12.3)";
        return;
      }
      static void* no_args[1] = {nullptr};
      CUgraphNodeParams p{};
      p.type = CU_GRAPH_NODE_TYPE_KERNEL;
      p.kernel.func = state().noop.handle();
      p.kernel.gridDimX = p.kernel.gridDimY = p.kernel.gridDimZ = 1;
      p.kernel.blockDimX = p.kernel.blockDimY = p.kernel.blockDimZ = 1;
      p.kernel.kernelParams = no_args;
      p.kernel.ctx = state().device.primary_context().handle();
      c.raw = [p, scoped](int n) { raw_chain(p, n, !scoped); };
      c.ours = [scoped](int n) {
        const custream::LaunchConfig config{{1}, {1}};
        std::optional<custream::ContextScope> scope;
        if (scoped) scope.emplace(state().device.primary_context());  // inside the timed batch
        builder_chain(n, [&](custream::GraphBuilder& b, const custream::GraphNode& prev) {
          return b.add_kernel(prev, state().noop, config);
        });
      };
    };
    cases.push_back(std::move(kernels));
  }

  // The same with memset nodes: runs on the CPU emulator too.
  Case memsets{"graph builder: 1,000 memset nodes",
               {},
               {},
               {Target::Kind::ratio, 0, 1.02},
               4,
               21,
               {},
               "cuGraphCreate, 1,000 cuGraphAddNode (memset), cuGraphDestroy"};
  memsets.prepare = [](Case& c) {
    if (custream::testing::driver().cuGraphAddNode == nullptr) {
      c.skip = "the driver has no cuGraphAddNode (CUDA 12.3)";
      return;
    }
    CUgraphNodeParams p{};
    p.type = CU_GRAPH_NODE_TYPE_MEMSET;
    p.memset.dst = state().buffer.get();
    p.memset.value = 1;
    p.memset.elementSize = 4;
    p.memset.width = 1;
    p.memset.height = 1;
    p.memset.ctx = state().device.primary_context().handle();
    c.raw = [p](int n) { raw_chain(p, n); };
    c.ours = [](int n) {
      const CUdeviceptr dst = state().buffer.get();
      builder_chain(n, [dst](custream::GraphBuilder& b, const custream::GraphNode& prev) {
        return b.add_memset(prev, dst, std::uint32_t{1}, 1);
      });
    };
  };
  cases.push_back(std::move(memsets));
}

// The stream parked behind the gate (bench/gate.hpp) while a batch is timed.
void time_parked(Case& c, CUstream stream) {
  c.before = [stream] {  // NOT_READY: the gate's host function did not start within 10 s
    check(park(stream), "parking the stream behind a host function (cuLaunchHostFunc)");
  };
  c.running_between = synchronize(stream);
  c.between = [sync = c.running_between] {  // open the gate and let the batch run
    open_gate();
    sync();
  };
}

}  // namespace custream_bench

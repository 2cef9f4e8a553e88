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

/// The state of the graph cases, made by the first of them that runs (not when they are declared
/// or listed): device 0 current, a stream, a buffer and a one-node graph.
GraphState& graph_state() {
  static GraphState* const st = [] {
    custream::Device(0).make_current();
    auto* s = new GraphState;
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
const std::string& load_noop_kernel() {
  static const std::string why = [] {
    try {
      graph_state().noop = custream::Module::from_ptx(kTrivialPtx, 0).kernel("noop");
      return std::string();
    } catch (const custream::Error& e) {
      if (e.result() != CUDA_ERROR_NOT_SUPPORTED) throw;
      return "the driver cannot load modules (" + e.name() + "): needs a real GPU";
    }
  }();
  return why;
}

namespace {

custream::Graph ours_capture(const GraphState& st) {
  st.stream.begin_capture();
  for (int k = 0; k < kGraphKernels; ++k) st.noop.launch(st.stream, 1, 1, 0);
  return st.stream.end_capture();
}

/// First launch vs repeat launch (each + synchronize), medians over 11 fresh graphs.
std::string first_vs_repeat(GraphState& st) {
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

std::function<void()> synchronize(CUstream s) {
  return [s] { check(custream::testing::driver().cuStreamSynchronize(s), "cuStreamSynchronize"); };
}

void raw_host_func(int n) {
  const auto& api = custream::testing::driver();
  const CUstream s = graph_state().stream.handle();
  for (int i = 0; i < n; ++i) api.cuLaunchHostFunc(s, count_run, &g_host_runs);
}

// The capture check payload lifetimes require before every enqueue (a stream may be capturing
// because of code that is not custream's; docs/design/host_functions.md, invariant 2), done raw.
void raw_checked_host_func(int n) {
  const auto& api = custream::testing::driver();
  const CUstream s = graph_state().stream.handle();
  for (int i = 0; i < n; ++i) {
    CUstreamCaptureStatus status{};
    api.cuStreamIsCapturing(s, &status);
    api.cuLaunchHostFunc(s, count_run, &g_host_runs);
  }
}

// The target's "callable (one small allocation)": it may throw, so it goes to the heap (a
// noexcept one this small would travel in userData).
void callable_host_func(int n) {
  GraphState& st = graph_state();
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
  const CUstream s = graph_state().stream.handle();
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
    time_parked(run_as, graph_state().stream.handle());
  };
  return c;
}

}  // namespace

void add_graph_cases(std::vector<Case>& cases) {
  // A host function costs ~2-3 us to enqueue and its cost moves with what the driver's
  // host-function thread and the GPU are doing: these rows take the most rounds.
  // Identical code: custream's inline path is the one raw call.
  cases.push_back(host_func_case(
      "launch_host_func (raw function)", {}, raw_host_func,
      [](int n) {
        GraphState& st = graph_state();
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
    run_as.between = synchronize(graph_state().stream.handle());
  };

  // A pointer-sized noexcept callable: no allocation, no capture check (host_function.hpp).
  // The raw side passes the driver what custream passes, the trampoline and the callable's
  // bytes (what raw code that enqueues a callable writes), so the two sides differ only in
  // custream's inline wrapper (docs/performance.md, "Does the method resolve 1 %?").
  cases.push_back(host_func_case(
      "launch_host_func (small noexcept callable)", {},
      [](int n) {
        const auto& api = custream::testing::driver();
        const CUstream s = graph_state().stream.handle();
        const CUhostFn fn = &custream::detail::run_in_pointer<Bump>;
        void* const arg = custream::detail::to_pointer<Bump>(Bump{&g_host_runs});
        for (int i = 0; i < n; ++i) api.cuLaunchHostFunc(s, fn, arg);
      },
      [](int n) {
        GraphState& st = graph_state();
        const Bump bump{&g_host_runs};
        for (int i = 0; i < n; ++i) st.stream.launch_host_func(bump);
      },
      "cuLaunchHostFunc (custream's trampoline)"));

  Case small{"graph launch (1-node graph)", {}, {}, {}, 256, 61, {}, "cuGraphLaunch"};
  small.prepare = [](Case& c) {
    const auto& api = custream::testing::driver();
    GraphState& st = graph_state();
    c.raw = [&api, s = st.stream.handle(), exec = st.small_graph.exec()](int n) {
      for (int i = 0; i < n; ++i) api.cuGraphLaunch(exec, s);
    };
    c.ours = [](int n) {
      GraphState& st = graph_state();
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
    GraphState& st = graph_state();
    c.raw = [&api, exec = st.small_graph.exec(), g = st.other_graph.graph()](int n) {
      for (int i = 0; i < n; ++i) {
        CUgraphExecUpdateResultInfo info{};
        api.cuGraphExecUpdate(exec, g, &info);
      }
    };
    c.ours = [](int n) {
      GraphState& st = graph_state();
      for (int i = 0; i < n; ++i) st.small_graph.update(st.other_graph);
    };
  };
  cases.push_back(std::move(update));

  // Kernels: only where the driver loads modules (not on the CPU emulator).
  Case kernel{"kernel launch (empty kernel, 1x1)", {}, {}, {}, 256, 61, {}, "cuLaunchKernel"};
  kernel.needs_kernels = true;
  kernel.prepare = [](Case& c) {
    GraphState& st = graph_state();
    c.skip = load_noop_kernel();
    if (!c.skip.empty()) return;
    const auto& api = custream::testing::driver();
    c.raw = [&api, s = st.stream.handle(), f = st.noop.handle()](int n) {
      for (int i = 0; i < n; ++i) {
        void* params[1] = {nullptr};
        api.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, params, nullptr);
      }
    };
    c.ours = [](int n) {
      GraphState& st = graph_state();
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
    GraphState& st = graph_state();
    c.skip = load_noop_kernel();
    if (!c.skip.empty()) return;
    set_capture_bodies(c, st.stream, st.noop.handle(), st.kept,
                       [] { return ours_capture(graph_state()); });
    c.note = [](const Case&) { return first_vs_repeat(graph_state()); };
  };
  cases.push_back(std::move(graph));

  add_node_update_cases(cases);  // per-node updates: graph_builder_bench.cpp
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

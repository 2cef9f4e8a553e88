// Benchmarks for host functions, graphs and kernels (docs/performance.md): custream against the
// raw driver call, interleaved in one process on the same handles. Enqueueing cases run in
// batches of <= 256 with an untimed synchronize between batches. Run on the GPU:
//   ./build/tools/custream bench [--csv FILE] [--filter TEXT]
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "bench_cases.hpp"
#include "custream/custream.hpp"
#include "custream/graph.hpp"
#include "custream/kernel.hpp"
#include "custream/module.hpp"
#include "custream/testing.hpp"
#include "trivial_ptx.hpp"

namespace custream_bench {
namespace {

void check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) {
    throw custream::Error(r, what, "custream bench (raw driver variant)");
  }
}

std::atomic<long> g_host_runs{0};

void count_run(void* counter) {
  static_cast<std::atomic<long>*>(counter)->fetch_add(1, std::memory_order_relaxed);
}

constexpr int kGraphKernels = 1000;

/// What the cases share; allocated once and never freed (no driver call at exit).
struct State {
  custream::Device device{0};
  custream::Stream stream{device, custream::StreamFlags::non_blocking};
  custream::DeviceBuffer buffer{4, device};
  custream::Graph small_graph;          // one memset node: works on the emulator too
  custream::Kernel noop;                // empty when the driver cannot load modules
  std::vector<custream::Graph> graphs;  // custream 1,000-kernel graphs
  std::vector<std::pair<CUgraph, CUgraphExec>> raw_graphs;  // raw 1,000-kernel graphs

  void drop_graphs() {
    const auto& api = custream::testing::driver();
    graphs.clear();
    for (auto& [g, e] : raw_graphs) {
      api.cuGraphExecDestroy(e);
      api.cuGraphDestroy(g);
    }
    raw_graphs.clear();
  }
};

/// Raw: capture `kGraphKernels` launches of `f`, instantiate with upload, launch, synchronize.
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

/// Declares a host-function case: 256 enqueues a batch, 1,001 pairs, synchronize between
/// batches, an A/A control.
Case host_func_case(const char* name, Target target, Body raw, Body ours, const char* label) {
  Case c{name, {}, {}, target, 256, 1001, {}, label};
  c.control = true;
  c.prepare = [raw = std::move(raw), ours = std::move(ours)](Case& run_as) {
    run_as.raw = raw;
    run_as.ours = ours;
    run_as.between = synchronize(state().stream.handle());
  };
  return c;
}

}  // namespace

void add_graph_cases(std::vector<Case>& cases) {
  // A host function costs ~2-3 us to enqueue and its cost moves with what the driver's
  // host-function thread and the GPU are doing: these rows take 1,001 pairs, and an A/A
  // control (the raw call against itself) shows the method's resolution beside them.
  cases.push_back(host_func_case(
      "launch_host_func (raw function)", {}, raw_host_func,
      [](int n) {
        State& st = state();
        for (int i = 0; i < n; ++i) st.stream.launch_host_func(count_run, &g_host_runs);
      },
      "cuLaunchHostFunc"));

  cases.push_back(host_func_case("launch_host_func (callable)", {Target::Kind::raw_plus_abs, 30, 0},
                                 raw_host_func, callable_host_func, "cuLaunchHostFunc"));
  // What the capture check costs in this loop: raw with it against raw without it, same method.
  cases.back().note_interleaves = 1;
  cases.back().note = [](const Case& run_as) {
    const Case checked{"raw + capture check", raw_host_func, raw_checked_host_func, {}, 256,
                       run_as.pairs,          run_as.between};
    const auto [raw_ns, checked_ns] = interleave(checked, checked.raw, checked.ours);
    char buf[200];
    std::snprintf(buf, sizeof buf,
                  "raw cuStreamIsCapturing + cuLaunchHostFunc (the capture check custream makes "
                  "before every enqueue) against raw cuLaunchHostFunc: %.1f vs %.1f ns (%+.1f ns)",
                  checked_ns, raw_ns, checked_ns - raw_ns);
    return std::string(buf);
  };

  // custream's own part: the callable against the raw calls custream has to make for it.
  cases.push_back(host_func_case("launch_host_func (callable) vs raw + capture check",
                                 {Target::Kind::raw_plus_abs, 30, 0}, raw_checked_host_func,
                                 callable_host_func, "cuStreamIsCapturing + cuLaunchHostFunc"));

  // A pointer-sized noexcept callable: no allocation, no capture check (stream.hpp).
  cases.push_back(host_func_case(
      "launch_host_func (small noexcept callable)", {}, raw_host_func,
      [](int n) {
        State& st = state();
        std::atomic<long>* counter = &g_host_runs;
        for (int i = 0; i < n; ++i) {
          st.stream.launch_host_func(
              [counter]() noexcept { counter->fetch_add(1, std::memory_order_relaxed); });
        }
      },
      "cuLaunchHostFunc"));

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
    c.between = synchronize(st.stream.handle());
  };
  cases.push_back(std::move(small));

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
    c.between = synchronize(st.stream.handle());
  };
  cases.push_back(std::move(kernel));

  Case graph{"capture + instantiate + first launch (1,000 kernels)",
             {},
             {},
             {Target::Kind::ratio, 0, 1.02},
             2,
             25,
             {},
             "capture, instantiate+upload, launch, sync"};
  graph.needs_kernels = true;
  graph.prepare = [](Case& c) {
    State& st = state();
    c.skip = load_kernel();
    if (!c.skip.empty()) return;
    const auto& api = custream::testing::driver();
    c.raw = [&api, s = st.stream.handle(), f = st.noop.handle()](int n) {
      for (int i = 0; i < n; ++i) {
        auto ge = raw_capture(s, f, true);
        check(api.cuGraphLaunch(ge.second, s), "cuGraphLaunch");
        check(api.cuStreamSynchronize(s), "cuStreamSynchronize");
        state().raw_graphs.push_back(ge);
      }
    };
    c.ours = [](int n) {
      State& st = state();
      for (int i = 0; i < n; ++i) {
        custream::Graph g = ours_capture(st);
        g.launch(st.stream);
        st.stream.synchronize();
        st.graphs.push_back(std::move(g));
      }
    };
    c.between = [] { state().drop_graphs(); };
    c.note = [](const Case&) { return first_vs_repeat(state()); };
  };
  cases.push_back(std::move(graph));
}

}  // namespace custream_bench

// Benchmarks for host functions, graphs and kernels (docs/performance.md): custream against the
// raw driver call, interleaved in one process on the same handles. Enqueueing cases run in
// batches of <= 256 with an untimed synchronize between batches. Run on the GPU:
//   ./build/tools/custream bench [--csv FILE] [--filter TEXT]
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
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
  custream::Stream stream{device, true};
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

}  // namespace

void add_graph_cases(std::vector<Case>& cases) {
  const auto& api = custream::testing::driver();
  static State* const st = [] {
    custream::Device(0).make_current();
    auto* state = new State;
    // A one-node graph (a 4-byte memset) for the launch case; the emulator can run it.
    state->stream.begin_capture();
    state->stream.memset32(state->buffer.get(), 7, 1);
    state->small_graph = state->stream.end_capture();
    return state;
  }();
  const CUstream s = st->stream.handle();
  const auto sync = [s, &api] { check(api.cuStreamSynchronize(s), "cuStreamSynchronize"); };

  // A host function costs ~2-3 us to enqueue and its cost moves with what the driver's
  // host-function thread and the GPU are doing: these rows take 1,001 pairs, and an A/A
  // control (the raw call against itself) shows the method's resolution beside them.
  const auto raw_host_func = [&api, s](int n) {
    for (int i = 0; i < n; ++i) api.cuLaunchHostFunc(s, count_run, &g_host_runs);
  };
  cases.push_back({"launch_host_func (raw function)",
                   raw_host_func,
                   [](int n) {
                     for (int i = 0; i < n; ++i)
                       st->stream.launch_host_func(count_run, &g_host_runs);
                   },
                   {},
                   256,
                   1001,
                   sync,
                   "cuLaunchHostFunc"});
  cases.back().control = true;

  // The target's "callable (one small allocation)": it may throw, so it goes to the heap (a
  // noexcept one this small would travel in userData: the row after the next).
  cases.push_back({"launch_host_func (callable)",
                   raw_host_func,
                   [](int n) {
                     std::atomic<long>* counter = &g_host_runs;
                     for (int i = 0; i < n; ++i) {
                       st->stream.launch_host_func(
                           [counter] { counter->fetch_add(1, std::memory_order_relaxed); });
                     }
                   },
                   {Target::Kind::raw_plus_abs, 30, 0},
                   256,
                   1001,
                   sync,
                   "cuLaunchHostFunc"});
  cases.back().control = true;
  // The capture check payload lifetimes require before every enqueue (a stream may be
  // capturing because of code that is not custream's; docs/design/host_functions.md,
  // invariant 2), done raw.
  const auto raw_checked_host_func = [&api, s](int n) {
    for (int i = 0; i < n; ++i) {
      CUstreamCaptureStatus status{};
      api.cuStreamIsCapturing(s, &status);
      api.cuLaunchHostFunc(s, count_run, &g_host_runs);
    }
  };
  // What that check costs in this loop: raw with it against raw without it, same method.
  cases.back().note = [sync, raw_host_func, raw_checked_host_func](const Case& run_as) {
    const Case checked{"raw + capture check", raw_host_func, raw_checked_host_func, {}, 256,
                       run_as.pairs,          sync};
    const auto [raw_ns, checked_ns] = interleave(checked, checked.raw, checked.ours);
    char buf[200];
    std::snprintf(buf, sizeof buf,
                  "raw cuStreamIsCapturing + cuLaunchHostFunc (the capture check custream makes "
                  "before every enqueue) against raw cuLaunchHostFunc: %.1f vs %.1f ns (%+.1f ns)",
                  checked_ns, raw_ns, checked_ns - raw_ns);
    return std::string(buf);
  };
  // custream's own part: the callable against the raw calls custream has to make for it.
  cases.push_back({"launch_host_func (callable) vs raw + capture check",
                   raw_checked_host_func,
                   cases.back().ours,
                   {Target::Kind::raw_plus_abs, 30, 0},
                   256,
                   1001,
                   sync,
                   "cuStreamIsCapturing + cuLaunchHostFunc"});
  cases.back().control = true;
  // A pointer-sized noexcept callable: no allocation, no capture check (stream.hpp).
  cases.push_back({"launch_host_func (small noexcept callable)",
                   raw_host_func,
                   [](int n) {
                     std::atomic<long>* counter = &g_host_runs;
                     for (int i = 0; i < n; ++i) {
                       st->stream.launch_host_func([counter]() noexcept {
                         counter->fetch_add(1, std::memory_order_relaxed);
                       });
                     }
                   },
                   {},
                   256,
                   1001,
                   sync,
                   "cuLaunchHostFunc"});
  cases.back().control = true;

  const CUgraphExec small = st->small_graph.exec();
  cases.push_back({"graph launch (1-node graph)",
                   [&api, s, small](int n) {
                     for (int i = 0; i < n; ++i) api.cuGraphLaunch(small, s);
                   },
                   [](int n) {
                     for (int i = 0; i < n; ++i) st->small_graph.launch(st->stream);
                   },
                   {},
                   256,
                   61,
                   sync,
                   "cuGraphLaunch"});

  // Kernels: only where the driver loads modules (not on the CPU emulator).
  std::string no_kernels;
  if (!st->noop.handle()) {
    try {
      st->noop = custream::Module::from_ptx(kTrivialPtx, 0).kernel("noop");
    } catch (const custream::Error& e) {
      if (e.result() != CUDA_ERROR_NOT_SUPPORTED) throw;
      no_kernels = "the driver cannot load modules (" + e.name() + "): needs a real GPU";
    }
  }
  Case kernel{"kernel launch (empty kernel, 1x1)", {}, {}, {}, 256, 61, sync, "cuLaunchKernel"};
  Case graph{"capture + instantiate + first launch (1,000 kernels)",
             {},
             {},
             {Target::Kind::ratio, 0, 1.02},
             2,
             25,
             [] { st->drop_graphs(); },
             "capture, instantiate+upload, launch, sync"};
  if (!no_kernels.empty()) {
    kernel.skip = graph.skip = no_kernels;
  } else {
    const CUfunction f = st->noop.handle();
    kernel.raw = [&api, s, f](int n) {
      for (int i = 0; i < n; ++i) {
        void* params[1] = {nullptr};
        api.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, params, nullptr);
      }
    };
    kernel.ours = [](int n) {
      for (int i = 0; i < n; ++i) st->noop.launch(st->stream, 1, 1, 0);
    };
    graph.raw = [&api, s, f](int n) {
      for (int i = 0; i < n; ++i) {
        auto ge = raw_capture(s, f, true);
        check(api.cuGraphLaunch(ge.second, s), "cuGraphLaunch");
        check(api.cuStreamSynchronize(s), "cuStreamSynchronize");
        st->raw_graphs.push_back(ge);
      }
    };
    graph.ours = [](int n) {
      for (int i = 0; i < n; ++i) {
        custream::Graph g = ours_capture(*st);
        g.launch(st->stream);
        st->stream.synchronize();
        st->graphs.push_back(std::move(g));
      }
    };
    graph.note = [](const Case&) { return first_vs_repeat(*st); };
  }
  cases.push_back(std::move(kernel));
  cases.push_back(std::move(graph));
}

}  // namespace custream_bench

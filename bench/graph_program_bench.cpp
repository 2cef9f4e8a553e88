// Benchmarks for graphs as programs (docs/performance.md): conditional nodes against the raw
// driver on the same CUgraph, and a loop of 1,000 iterations run on the device (a WHILE node,
// one launch) against host loops of graph launches. Device 0; the cases need a GPU (on the
// CPU emulator kernels are no-ops, so a device loop never ends) and custream's set-condition
// kernel (a libcustream built with nvcc). Run on the GPU:
//   ./build/tools/custream bench --filter "conditional"
//   ./build/tools/custream bench --filter "loop of 1,000"
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_cases.hpp"
#include "custream/custream.hpp"
#include "custream/graph_builder.hpp"
#include "custream/testing.hpp"

namespace custream_bench {
namespace {

constexpr std::uint32_t kLoopIterations = 1000;

// loop_step(u32* counter, u32* flag): *counter -= 1; *flag = (*counter != 0).
constexpr const char* kLoopPtx = R"(
.version 7.0
.target sm_70
.address_size 64

.visible .entry loop_step(.param .u64 counter, .param .u64 flag)
{
  .reg .pred %p;
  .reg .b32 %r<4>;
  .reg .b64 %rd<5>;
  ld.param.u64 %rd1, [counter];
  ld.param.u64 %rd2, [flag];
  cvta.to.global.u64 %rd3, %rd1;
  cvta.to.global.u64 %rd4, %rd2;
  ld.global.u32 %r1, [%rd3];
  sub.s32 %r2, %r1, 1;
  st.global.u32 [%rd3], %r2;
  setp.ne.u32 %p, %r2, 0;
  selp.u32 %r3, 1, 0, %p;
  st.global.u32 [%rd4], %r3;
  ret;
}
)";

/// What the cases share; made by the first case that runs, never freed (no driver call at exit).
struct ProgramState {
  custream::Device device{0};
  custream::Stream stream{device, custream::StreamFlags::non_blocking};
  custream::DeviceBuffer cells{2 * sizeof(std::uint32_t), device};  // counter, flag
  custream::LibraryKernel step;
  custream::GraphBuilder looped;  // memset counter; WHILE { step; set condition from flag }
  custream::Graph looped_graph;   // instantiated from `looped`
  // The same as `looped`, instantiated by the instantiation row alone (on an H100, driver 580,
  // instantiating `looped` again while looped_graph lived failed: CUDA_ERROR_NOT_SUPPORTED).
  custream::GraphBuilder fresh;
  // A launch's worth of conditional nodes that run little: step; IF (default 0) { step };
  // WHILE (default 0) { step }.
  custream::Graph branchy_graph;
  custream::Graph step_graph;  // one step (the host loops' body)
  std::string skip;            // non-empty: why the cases cannot run here

  CUdeviceptr counter() const { return cells.get(); }
  CUdeviceptr flag() const { return cells.get() + sizeof(std::uint32_t); }
};

ProgramState& program_state() {
  static ProgramState* const st = [] {
    custream::Device(0).make_current();
    auto* s = new ProgramState;
    try {
      s->step = custream::Library::from_ptx(kLoopPtx).kernel("loop_step");
      const custream::LaunchConfig one{custream::Dim3(1), custream::Dim3(1)};
      const auto loop = [&] {
        custream::GraphBuilder b = custream::GraphBuilder::create();
        const custream::ConditionalHandle c = b.add_condition(1, true);
        const custream::GraphNode reset = b.add_memset({}, s->counter(), kLoopIterations, 1);
        custream::GraphBuilder body = b.add_while(reset, c).body();
        const custream::GraphNode step = body.add_kernel({}, s->step, one, s->counter(), s->flag());
        body.add_set_condition(step, c, s->flag());
        return b;
      };
      s->looped = loop();
      s->looped_graph = s->looped.instantiate();
      s->fresh = loop();
      custream::GraphBuilder branchy = custream::GraphBuilder::create();
      const custream::GraphNode first =
          branchy.add_kernel({}, s->step, one, s->counter(), s->flag());
      custream::GraphBuilder then = branchy.add_if(first, branchy.add_condition(0, true)).body();
      then.add_kernel({}, s->step, one, s->counter(), s->flag());
      custream::GraphBuilder again =
          branchy.add_while(first, branchy.add_condition(0, true)).body();
      again.add_kernel({}, s->step, one, s->counter(), s->flag());
      s->branchy_graph = branchy.instantiate();
      custream::GraphBuilder single = custream::GraphBuilder::create();
      single.add_kernel({}, s->step, one, s->counter(), s->flag());
      s->step_graph = single.instantiate();
    } catch (const custream::Error& e) {
      if (e.result() != CUDA_ERROR_NOT_SUPPORTED) throw;
      s->skip = e.what();  // an old driver, or no set-condition kernel in this libcustream
    }
    return s;
  }();
  return *st;
}

// A data-dependent host loop: launch one step, copy the condition back, synchronize, decide.
void host_decides(const ProgramState& st) {
  const auto& api = custream::testing::driver();
  const CUstream s = st.stream.handle();
  check(api.cuMemsetD32Async(st.counter(), kLoopIterations, 1, s), "cuMemsetD32Async");
  std::uint32_t flag = 1;
  while (flag != 0) {
    check(api.cuGraphLaunch(st.step_graph.exec(), s), "cuGraphLaunch");
    check(api.cuMemcpyDtoHAsync(&flag, st.flag(), sizeof flag, s), "cuMemcpyDtoHAsync");
    check(api.cuStreamSynchronize(s), "cuStreamSynchronize");
  }
}

// A fixed-count host loop: 1,000 launches of one step, one synchronize.
void host_counts(const ProgramState& st) {
  const auto& api = custream::testing::driver();
  const CUstream s = st.stream.handle();
  check(api.cuMemsetD32Async(st.counter(), kLoopIterations, 1, s), "cuMemsetD32Async");
  for (std::uint32_t i = 0; i < kLoopIterations; ++i) {
    check(api.cuGraphLaunch(st.step_graph.exec(), s), "cuGraphLaunch");
  }
  check(api.cuStreamSynchronize(s), "cuStreamSynchronize");
}

// The device decides: one launch of the WHILE graph, one synchronize.
void device_decides(const ProgramState& st) {
  st.looped_graph.launch(st.stream);
  st.stream.synchronize();
}

std::string per_iteration(const Case& c) {
  (void)c;
  ProgramState& st = program_state();
  std::vector<double> device, decides, counts;
  for (int rep = 0; rep < 11; ++rep) {
    auto t = Clock::now();
    device_decides(st);
    device.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t).count());
    t = Clock::now();
    host_decides(st);
    decides.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t).count());
    t = Clock::now();
    host_counts(st);
    counts.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t).count());
  }
  char buf[400];
  std::snprintf(buf, sizeof buf,
                "us per iteration (medians of 11 loops of %u): device WHILE from one launch "
                "%.3f; data-dependent host loop (launch, copy back, synchronize, decide) %.3f; "
                "fixed-count host loop of graph launches %.3f",
                kLoopIterations, median(device) / kLoopIterations,
                median(decides) / kLoopIterations, median(counts) / kLoopIterations);
  return buf;
}

// Skips `c` with the state's reason, if any; true when it can run.
bool ready(Case& c) {
  c.skip = program_state().skip;
  return c.skip.empty();
}

}  // namespace

void add_graph_program_cases(std::vector<Case>& cases) {
  // Instantiate (with upload) + first launch + synchronize + destroy of the same CUgraph: raw
  // cuGraphInstantiateWithParams on the builder's graph against GraphBuilder::instantiate, one
  // executable of it at a time (the driver refuses a second executable of a graph with a
  // conditional node: conformance, "a graph with a conditional node has one executable at a
  // time").
  Case first{"instantiate + first launch (graph with a WHILE node)",
             {},
             {},
             {Target::Kind::ratio, 0, 1.02},
             4,
             21,
             {},
             "instantiate+upload, launch, sync"};
  first.needs_kernels = true;
  first.prepare = [](Case& c) {
    if (!ready(c)) return;
    ProgramState& st = program_state();
    const auto& api = custream::testing::driver();
    c.raw = [&api, &st](int n) {
      const CUstream s = st.stream.handle();
      for (int i = 0; i < n; ++i) {
        CUDA_GRAPH_INSTANTIATE_PARAMS p{};
        p.flags = CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD;
        p.hUploadStream = s;
        CUgraphExec e = nullptr;
        check(api.cuGraphInstantiateWithParams(&e, st.fresh.handle(), &p),
              "cuGraphInstantiateWithParams");
        check(api.cuGraphLaunch(e, s), "cuGraphLaunch");
        check(api.cuStreamSynchronize(s), "cuStreamSynchronize");
        check(api.cuGraphExecDestroy(e), "cuGraphExecDestroy");
      }
    };
    c.ours = [&st](int n) {
      for (int i = 0; i < n; ++i) {
        const custream::Graph g =
            st.fresh.instantiate(custream::InstantiateFlags::upload, st.stream);
        g.launch(st.stream);
        st.stream.synchronize();
      }
    };
  };
  cases.push_back(std::move(first));

  // A launch of an executable with conditional nodes (an IF and a WHILE whose bodies do not run):
  // custream's inline launch is the raw call. On a running stream, each batch synchronized
  // after its timing. Timed on a parked stream (time_parked) instead, the row never finished on
  // an H100, driver 580 (its estimate: 31 min at --cap 2), although 64 raw launches of such a
  // graph enqueue in ~250 us on a running stream there: why the parked stream stalled is not
  // measured yet.
  Case launch{"graph launch (conditional nodes)", {}, {}, {}, 64, 61, {}, "cuGraphLaunch"};
  launch.needs_kernels = true;
  launch.prepare = [](Case& c) {
    if (!ready(c)) return;
    ProgramState& st = program_state();
    const auto& api = custream::testing::driver();
    c.raw = [&api, &st](int n) {
      for (int i = 0; i < n; ++i) api.cuGraphLaunch(st.branchy_graph.exec(), st.stream.handle());
    };
    c.ours = [&st](int n) {
      for (int i = 0; i < n; ++i) st.branchy_graph.launch(st.stream);
    };
    c.between = [&st] { st.stream.synchronize(); };
  };
  cases.push_back(std::move(launch));

  // A loop of 1,000 iterations (one 1x1 kernel each): the device deciding (a WHILE node, one
  // launch) against the host deciding (launch, copy the condition back, synchronize, decide).
  // The µs per iteration of both and of a fixed-count host loop are in the row's note.
  Case loop{"loop of 1,000 iterations: device WHILE vs host-decided loop",
            {},
            {},
            {Target::Kind::ratio, 0, 1.0},
            1,
            21,
            {},
            "host loop: cuGraphLaunch, cuMemcpyDtoHAsync, cuStreamSynchronize"};
  loop.needs_kernels = true;
  loop.prepare = [](Case& c) {
    if (!ready(c)) return;
    ProgramState& st = program_state();
    c.raw = [&st](int n) {
      for (int i = 0; i < n; ++i) host_decides(st);
    };
    c.ours = [&st](int n) {
      for (int i = 0; i < n; ++i) device_decides(st);
    };
    c.note = per_iteration;
  };
  cases.push_back(std::move(loop));
}

}  // namespace custream_bench

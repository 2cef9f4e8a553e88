// The benchmark case families (bench/*_bench.cpp) and the suite that runs them: one piece of
// code behind `custream bench` (tools/main.cpp).
#pragma once

#include <cuda.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "custream/device_buffer.hpp"
#include "custream/graph.hpp"
#include "custream/kernel.hpp"
#include "custream/stream.hpp"
#include "harness.hpp"

namespace custream_bench {

/// Streams, events, devices, current streams and scopes (docs/performance.md). Device 0.
/// Declares the cases only: no driver call until one is prepared (Case::prepare).
void add_stream_cases(std::vector<Case>& cases);

/// Host functions, graph launch, kernel launch, and capture + instantiate + first launch of a
/// 1,000-kernel graph (docs/performance.md). Device 0. Declares the cases only; the kernel
/// cases are skipped when prepared, with the reason, where the driver cannot load modules (on
/// the CPU emulator the kernel is a no-op).
void add_graph_cases(std::vector<Case>& cases);
/// GraphBuilder's add path: 1,000 kernel (or memset) nodes against the raw cuGraphAddNode loop
/// (bench/graph_builder_bench.cpp).
void add_graph_builder_cases(std::vector<Case>& cases);
/// Per-node updates of an instantiated Graph against the raw driver calls, and one node of a
/// 1,000-node graph against a whole-graph update (bench/graph_builder_bench.cpp).
void add_node_update_cases(std::vector<Case>& cases);

/// Graphs as programs: instantiate + first launch and launch of a graph with conditional nodes
/// against the raw driver on the same CUgraph, and a loop of 1,000 iterations decided on the
/// device (a WHILE node) against host loops (docs/performance.md). Device 0; needs kernels and
/// custream's set-condition kernel (skipped, saying why, without them).
void add_graph_program_cases(std::vector<Case>& cases);

/// Stream operations on streams of a created and a green context (that context current, and
/// the primary one), wrapping a green-context stream, and a stream scope that switches the
/// context (docs/performance.md). Device 0. Declares the cases only; the green rows are
/// skipped, with the reason, where the driver has no green contexts.
void add_context_cases(std::vector<Case>& cases);

/// A launch through a library kernel, a kernel lookup by name, and a library cache hit against
/// the driver load it saves (docs/performance.md). Device 0.
void add_library_cases(std::vector<Case>& cases);

/// Typed copies (DeviceArray and PinnedArray, 4 KiB each way) against the raw copies, and a
/// 256 MiB copy each way at the raw bandwidth (docs/performance.md). Device 0.
void add_memory_cases(std::vector<Case>& cases);

/// Throws custream::Error naming `what` unless `r` is CUDA_SUCCESS (the raw variants' check).
void check(CUresult r, const char* what);

/// The kernels of the 1,000-kernel graph cases.
inline constexpr int kGraphKernels = 1000;

/// Raw: captures kGraphKernels launches of `f` (no arguments, 1x1) on `s` in relaxed mode and
/// instantiates the graph, uploading it on `s` when `upload`. Throws on a driver failure.
std::pair<CUgraph, CUgraphExec> raw_capture(CUstream s, CUfunction f, bool upload);

/// The graphs a capture case made: kept while a batch is timed, destroyed between batches.
struct KeptGraphs {
  std::vector<custream::Graph> graphs;                      // custream's
  std::vector<std::pair<CUgraph, CUgraphExec>> raw_graphs;  // raw
  void drop();
};

/// What the graph cases share (bench/graph_bench.cpp, bench/graph_builder_bench.cpp); made
/// once, by the first case that runs, and never freed (no driver call at exit).
struct GraphState {
  custream::Device device{0};
  custream::Stream stream{device, custream::StreamFlags::non_blocking};
  custream::DeviceBuffer buffer{4, device};
  custream::Graph small_graph;  // one memset node: works on the emulator too
  custream::Graph other_graph;  // the same with another value (for updates)
  custream::Kernel noop;        // empty when the driver cannot load modules
  KeptGraphs kept;              // the 1,000-kernel graphs
};
/// The graph cases' state (not made when the cases are declared or listed): device 0 current.
GraphState& graph_state();
/// Loads GraphState::noop once: "" when it is loaded, else why the driver cannot load modules.
const std::string& load_noop_kernel();

/// Sets `c`'s bodies to capture + instantiate + first launch + synchronize on `stream`: raw
/// captures kGraphKernels launches of `f` (raw_capture, with upload), custream runs `capture`
/// (begin, the launches, end_capture); the graphs go to `kept` and are dropped between batches.
void set_capture_bodies(Case& c, const custream::Stream& stream, CUfunction f, KeptGraphs& kept,
                        std::function<custream::Graph()> capture);

/// Registering a completion (custream::Completions) against the cuEventRecord it makes
/// (docs/performance.md). Device 0.
void add_completion_cases(std::vector<Case>& cases);

/// Times `c`'s batches on `stream` parked: before each batch a host function that spins is
/// enqueued and entered (the driver's host-function thread is in it, the stream cannot run),
/// after it the gate opens and the stream is synchronized (both untimed). So an enqueueing
/// operation is measured without the GPU or the host-function thread draining the stream at
/// the same time (docs/performance.md).
void time_parked(Case& c, CUstream stream);

/// Every case of the suite, in the order it runs them, declared without a driver.
std::vector<Case> all_cases();

/// What `custream bench` was asked for.
struct SuiteOptions {
  std::string csv;     ///< write the numbers here (empty: no CSV)
  std::string filter;  ///< run only cases whose name contains this ("=NAME": that one; empty: all)
  bool quick = false;  ///< smoke run: 3 rounds, 1 warm-up; targets shown but not enforced
  bool list = false;   ///< print the case names and targets, run nothing
  bool wide = false;   ///< the full table (raw driver calls, targets in words)
  /// Exactly this many A B A' rounds for every case (0: each case's minimum, and more until the
  /// A/A' resolution is reached or `cap_s`).
  int rounds = 0;
  double cap_s = 20;  ///< the most seconds of measurement a case adds rounds for
  /// The driver is the CPU emulator: its numbers mean nothing, so each case measures for at
  /// most about 2 s (fewer rounds) unless `rounds` is given or the run is quick.
  bool emulator = false;
};

/// The cases a run with `options` would run (filter applied), declared without a driver.
std::vector<Case> selected_cases(const SuiteOptions& options);

/// `custream bench --list`: the selected cases, their rounds and targets. Needs no driver.
/// Returns the exit status (1 when no case matches the filter).
int list_cases(const SuiteOptions& options);

/// Runs the suite on device 0: a progress line per case with the time left on stderr, then the
/// table on stdout and the CSV (opened before the first case runs). Returns the exit status:
/// 1 when a case could not run (a driver failure) or the CSV cannot be written; otherwise 1
/// when a target is missed, except in a quick run; else 0.
int run_suite(const SuiteOptions& options);

}  // namespace custream_bench

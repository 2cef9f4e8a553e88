// Benchmarks for GraphBuilder's add path and per-node updates of an instantiated Graph
// (docs/performance.md): custream against the raw driver calls, interleaved in one process on
// the same handles, on the graph cases' state (bench/graph_bench.cpp). Run on the GPU:
//   ./build/tools/custream bench --filter "graph builder"
//   ./build/tools/custream bench --filter "per-node"
#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "bench_cases.hpp"
#include "custream/custream.hpp"
#include "custream/testing.hpp"
#include "trivial_ptx.hpp"

namespace custream_bench {

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
    graph_state();  // device 0 current
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

}  // namespace

void add_node_update_cases(std::vector<Case>& cases) {
  // One kernel node's arguments: the same CUDA_KERNEL_NODE_PARAMS the raw side fills each time;
  // custream adds its checks (the node, the argument types, the configuration). Inside a
  // ContextScope of the node's context custream trusts that context to be current (the raw
  // side's assumption); without one it asks the driver which context is current before each
  // update, against the raw call with the same question.
  for (const bool scoped : {true, false}) {
    Case kernel_update{scoped ? "graph per-node kernel update (in a ContextScope)"
                              : "graph per-node kernel update (no scope) vs raw + cuCtxGetCurrent",
                       {},
                       {},
                       {},
                       256,
                       21,
                       {},
                       scoped ? "cuGraphExecKernelNodeSetParams"
                              : "cuCtxGetCurrent, cuGraphExecKernelNodeSetParams"};
    kernel_update.needs_kernels = true;
    kernel_update.prepare = [scoped](Case& c) {
      c.skip = load_noop_kernel();
      if (!c.skip.empty()) return;
      NodeUpdateState& st = node_update_state();
      c.raw = raw_kernel_updates(st, !scoped);
      c.ours = [scoped, context = st.big_builder.context()](int n) {  // the builders' context
        std::optional<custream::ContextScope> scope;
        if (scoped) scope.emplace(context);  // inside the timed batch
        custream_kernel_updates(n);
      };
    };
    cases.push_back(std::move(kernel_update));
  }

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
    c.skip = load_noop_kernel();
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
  const custream::Context context = graph_state().device.primary_context();
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
      c.skip = load_noop_kernel();
      if (!c.skip.empty()) return;
      if (custream::testing::driver().cuGraphAddNode == nullptr) {
        c.skip = "the driver has no cuGraphAddNode (CUDA 12.3)";
        return;
      }
      static void* no_args[1] = {nullptr};
      CUgraphNodeParams p{};
      p.type = CU_GRAPH_NODE_TYPE_KERNEL;
      p.kernel.func = graph_state().noop.handle();
      p.kernel.gridDimX = p.kernel.gridDimY = p.kernel.gridDimZ = 1;
      p.kernel.blockDimX = p.kernel.blockDimY = p.kernel.blockDimZ = 1;
      p.kernel.kernelParams = no_args;
      p.kernel.ctx = graph_state().device.primary_context().handle();
      c.raw = [p, scoped](int n) { raw_chain(p, n, !scoped); };
      c.ours = [scoped](int n) {
        const custream::LaunchConfig config{{1}, {1}};
        std::optional<custream::ContextScope> scope;
        if (scoped)
          scope.emplace(graph_state().device.primary_context());  // inside the timed batch
        builder_chain(n, [&](custream::GraphBuilder& b, const custream::GraphNode& prev) {
          return b.add_kernel(prev, graph_state().noop, config);
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
    p.memset.dst = graph_state().buffer.get();
    p.memset.value = 1;
    p.memset.elementSize = 4;
    p.memset.width = 1;
    p.memset.height = 1;
    p.memset.ctx = graph_state().device.primary_context().handle();
    c.raw = [p](int n) { raw_chain(p, n); };
    c.ours = [](int n) {
      const CUdeviceptr dst = graph_state().buffer.get();
      builder_chain(n, [dst](custream::GraphBuilder& b, const custream::GraphNode& prev) {
        return b.add_memset(prev, dst, std::uint32_t{1}, 1);
      });
    };
  };
  cases.push_back(std::move(memsets));
}

}  // namespace custream_bench

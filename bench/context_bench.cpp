// The context cases of `custream bench` (docs/performance.md, "Contexts"): the stream
// operations on a stream of a created and of a green context, with that context current and
// with the primary context current; wrapping a green-context stream; a stream scope that
// switches the context. Device 0.
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench_cases.hpp"
#include "custream/custream.hpp"
#include "custream/testing.hpp"

namespace custream_bench {
namespace {

std::atomic<long> g_runs{0};
volatile long g_sink = 0;

void CUDA_CB count_run(void* counter) {
  static_cast<std::atomic<long>*>(counter)->fetch_add(1, std::memory_order_relaxed);
}

/// One kind of context with what its cases use: a stream, an event and a 1-node graph of it.
struct Kind {
  custream::Context context;
  custream::Stream stream;
  custream::Event event;
  custream::DeviceBuffer cell;
  custream::Graph graph;  // one memset node, captured on `stream`

  explicit Kind(custream::Context c)
      : context(std::move(c)),
        stream(context, custream::StreamFlags::non_blocking),
        event(context),
        cell(4, stream) {
    stream.begin_capture();
    stream.memset32(cell.get(), 7, 1);
    graph = stream.end_capture();
    stream.synchronize();
  }
};

/// The created and the green context, made by the first case that runs (the green one only
/// where the driver has green contexts); never destroyed (the process ends first).
struct Contexts {
  std::unique_ptr<Kind> created;
  std::unique_ptr<Kind> green;
  std::string no_green;  // why there is no green context
};

Contexts& contexts() {
  static Contexts* c = [] {
    auto* all = new Contexts;
    const custream::Device device(0);
    all->created = std::make_unique<Kind>(custream::Context::create(device));
    try {
      all->green = std::make_unique<Kind>(
          custream::Context::create_green(device.split_sms(1, 1).groups.at(0)));
    } catch (const custream::Error& e) {
      all->no_green = e.what();
    }
    return all;
  }();
  return *c;
}

/// Which kind a case runs on.
enum class Which { created, green };

Kind* kind_of(Which which) {
  Contexts& all = contexts();
  return which == Which::created ? all.created.get() : all.green.get();
}

/// Makes the case's context current (its own, or the primary one) when the case is prepared.
void make_current(const Kind& k, bool own) {
  if (own) {
    k.context.make_current();
  } else {
    custream::Device(0).make_current();
  }
}

using Maker = std::function<void(Case&, Kind&)>;

/// Declares the case "<operation> (<kind> context stream, <own|primary> current)".
void add(std::vector<Case>& cases, const std::string& operation, const char* raw_label, Which which,
         bool own, int rounds, Maker make) {
  const std::string name = operation + " (" + (which == Which::created ? "created" : "green") +
                           "-context stream, " + (own ? "its context" : "primary") + " current)";
  Case c{name, {}, {}, {}, 256, rounds, {}, raw_label};
  c.prepare = [which, own, make = std::move(make)](Case& run_as) {
    Kind* k = kind_of(which);
    if (k == nullptr) {
      run_as.skip = "no green context: " + contexts().no_green;
      return;
    }
    make_current(*k, own);
    make(run_as, *k);
    time_parked(run_as, k->stream.handle());
  };
  cases.push_back(std::move(c));
}

}  // namespace

void add_context_cases(std::vector<Case>& cases) {
  for (const Which which : {Which::created, Which::green}) {
    for (const bool own : {true, false}) {
      add(cases, "record", "cuEventRecord", which, own, 21, [](Case& c, Kind& k) {
        const auto& api = custream::testing::driver();
        c.raw = [&api, s = k.stream.handle(), e = k.event.handle()](int n) {
          for (int i = 0; i < n; ++i) api.cuEventRecord(e, s);
        };
        c.ours = [&k](int n) {
          for (int i = 0; i < n; ++i) k.stream.record(k.event);
        };
      });
      add(cases, "wait_event", "cuStreamWaitEvent", which, own, 21, [](Case& c, Kind& k) {
        const auto& api = custream::testing::driver();
        c.raw = [&api, s = k.stream.handle(), e = k.event.handle()](int n) {
          for (int i = 0; i < n; ++i) api.cuStreamWaitEvent(s, e, 0);
        };
        c.ours = [&k](int n) {
          for (int i = 0; i < n; ++i) k.stream.wait_event(k.event);
        };
      });
      add(cases, "launch_host_func (raw function)", "cuLaunchHostFunc", which, own, 61,
          [](Case& c, Kind& k) {
            const auto& api = custream::testing::driver();
            c.raw = [&api, s = k.stream.handle()](int n) {
              for (int i = 0; i < n; ++i) api.cuLaunchHostFunc(s, count_run, &g_runs);
            };
            c.ours = [&k](int n) {
              for (int i = 0; i < n; ++i) k.stream.launch_host_func(count_run, &g_runs);
            };
          });
      add(cases, "graph launch (1-node graph)", "cuGraphLaunch", which, own, 61,
          [](Case& c, Kind& k) {
            const auto& api = custream::testing::driver();
            c.raw = [&api, s = k.stream.handle(), exec = k.graph.exec()](int n) {
              for (int i = 0; i < n; ++i) api.cuGraphLaunch(exec, s);
            };
            c.ours = [&k](int n) {
              for (int i = 0; i < n; ++i) k.graph.launch(k.stream);
            };
          });
    }
  }

  // Wrapping a green-context stream: the raw calls that find the same three facts (the
  // green context, its CUcontext and the device).
  Case wrap{"wrap foreign stream (green context, infer)",
            {},
            {},
            {Target::Kind::raw_plus_abs, 10, 0},
            256,
            21,
            {},
            "cuStreamGetCtx_v2 + cuCtxGetDevice_v2 + cuCtxFromGreenCtx"};
  wrap.prepare = [](Case& c) {
    Kind* k = kind_of(Which::green);
    if (k == nullptr) {
      c.skip = "no green context: " + contexts().no_green;
      return;
    }
    custream::Device(0).make_current();
    const auto& api = custream::testing::driver();
    c.raw = [&api, s = k->stream.handle()](int n) {
      long sum = 0;
      for (int i = 0; i < n; ++i) {
        CUcontext ctx = nullptr, converted = nullptr;
        CUgreenCtx green = nullptr;
        CUdevice d = 0;
        api.cuStreamGetCtx_v2(s, &ctx, &green);
        api.cuCtxGetDevice_v2(&d, ctx);
        api.cuCtxFromGreenCtx(&converted, green);
        sum += d + (converted != nullptr);
      }
      g_sink = sum;
    };
    c.ours = [s = k->stream.handle()](int n) {
      long sum = 0;
      for (int i = 0; i < n; ++i) sum += custream::ExternalStream(s).device_id();
      g_sink = sum;
    };
  };
  cases.push_back(std::move(wrap));

  // A stream scope into a stream of another context: the scope sets that context and restores
  // the previous one.
  Case scope{"stream scope enter + exit (created-context stream, primary current)",
             {},
             {},
             {Target::Kind::raw_plus_abs, 10, 0},
             256,
             21,
             {},
             "cuCtxSetCurrent x2"};
  scope.prepare = [](Case& c) {
    Kind* k = kind_of(Which::created);
    custream::Device(0).make_current();
    const auto& api = custream::testing::driver();
    c.raw = [&api, to = k->context.handle(),
             back = custream::Device(0).primary_context().handle()](int n) {
      for (int i = 0; i < n; ++i) {
        api.cuCtxSetCurrent(to);
        api.cuCtxSetCurrent(back);
      }
    };
    c.ours = [k](int n) {
      for (int i = 0; i < n; ++i) custream::StreamScope s(k->stream);
    };
  };
  cases.push_back(std::move(scope));
}

}  // namespace custream_bench

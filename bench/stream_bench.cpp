// Benchmarks for streams, events, devices and current streams (docs/performance.md): custream
// against the raw driver call, interleaved in one process on the same handles. Run on the GPU:
//   ./build/tools/custream bench [--csv FILE] [--filter TEXT]
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "bench_cases.hpp"
#include "custream/custream.hpp"
#include "custream/testing.hpp"

namespace custream_bench {
namespace {

volatile long g_sink = 0;  // keeps results alive

custream::Device current_device_0() {
  custream::Device device(0);
  device.make_current();
  return device;
}

/// What the stream cases share: made by the first of them that runs (not when they are
/// declared or listed); the stream and the event are destroyed at exit, the foreign stream
/// never.
struct Shared {
  custream::Device device = current_device_0();
  custream::Stream stream{device, custream::StreamFlags::non_blocking};
  custream::Event event{device};
  CUstream foreign = nullptr;  // created raw: wrapped by the "wrap foreign stream" case

  Shared() {
    check(custream::testing::driver().cuStreamCreate(&foreign, CU_STREAM_NON_BLOCKING),
          "cuStreamCreate");
  }
};

Shared& shared() {
  static Shared sh;
  return sh;
}

/// Declares a case of 256 iterations a batch and at least 21 rounds; `prepare` gets the shared
/// handles.
void add(std::vector<Case>& cases, const char* name, Target target, const char* raw_label,
         std::function<void(Case&, Shared&)> prepare) {
  Case c{name, {}, {}, target, 256, 21, {}, raw_label};
  c.prepare = [prepare = std::move(prepare)](Case& run_as) { prepare(run_as, shared()); };
  cases.push_back(std::move(c));
}

// cuCtxGetCurrent: the raw side of "current device", and the reference of the rows that
// have no raw equivalent.
void ctx_get_current(int n) {
  const auto& api = custream::testing::driver();
  long k = 0;
  for (int i = 0; i < n; ++i) {
    CUcontext c = nullptr;
    api.cuCtxGetCurrent(&c);
    k += c != nullptr;
  }
  g_sink = k;
}

}  // namespace

void add_stream_cases(std::vector<Case>& cases) {
  add(cases, "record (timing disabled)", {}, "cuEventRecord", [](Case& c, Shared& sh) {
    const auto& api = custream::testing::driver();
    c.raw = [&api, s = sh.stream.handle(), e = sh.event.handle()](int n) {
      for (int i = 0; i < n; ++i) api.cuEventRecord(e, s);
    };
    c.ours = [](int n) {
      Shared& sh = shared();
      for (int i = 0; i < n; ++i) sh.stream.record(sh.event);
    };
    time_parked(c, sh.stream.handle());
  });

  add(cases, "wait_event", {}, "cuStreamWaitEvent", [](Case& c, Shared& sh) {
    const auto& api = custream::testing::driver();
    c.raw = [&api, s = sh.stream.handle(), e = sh.event.handle()](int n) {
      for (int i = 0; i < n; ++i) api.cuStreamWaitEvent(s, e, 0);
    };
    c.ours = [](int n) {
      Shared& sh = shared();
      for (int i = 0; i < n; ++i) sh.stream.wait_event(sh.event);
    };
    time_parked(c, sh.stream.handle());
  });

  add(cases, "done (idle stream)", {}, "cuStreamQuery", [](Case& c, Shared& sh) {
    const auto& api = custream::testing::driver();
    c.raw = [&api, s = sh.stream.handle()](int n) {
      long k = 0;
      for (int i = 0; i < n; ++i) k += api.cuStreamQuery(s) == CUDA_SUCCESS;
      g_sink = k;
    };
    c.ours = [](int n) {
      Shared& sh = shared();
      long k = 0;
      for (int i = 0; i < n; ++i) k += sh.stream.done();
      g_sink = k;
    };
  });

  add(cases, "synchronize (idle stream)", {}, "cuStreamSynchronize", [](Case& c, Shared& sh) {
    const auto& api = custream::testing::driver();
    c.raw = [&api, s = sh.stream.handle()](int n) {
      for (int i = 0; i < n; ++i) api.cuStreamSynchronize(s);
    };
    c.ours = [](int n) {
      Shared& sh = shared();
      for (int i = 0; i < n; ++i) sh.stream.synchronize();
    };
  });

  // Wrapping a foreign stream with device inference.
  add(cases, "wrap foreign stream (infer device)", {Target::Kind::raw_plus_abs, 10, 0},
      "cuStreamGetCtx_v2 + cuCtxGetDevice_v2", [](Case& c, Shared& sh) {
        const auto& api = custream::testing::driver();
        const bool has_v2 = api.cuStreamGetCtx_v2 != nullptr && api.cuCtxGetDevice_v2 != nullptr;
        c.raw = [&api, has_v2, foreign = sh.foreign](int n) {
          long k = 0;
          for (int i = 0; i < n; ++i) {
            CUcontext ctx = nullptr;
            CUdevice d = 0;
            if (has_v2) {
              CUgreenCtx g = nullptr;
              api.cuStreamGetCtx_v2(foreign, &ctx, &g);
              api.cuCtxGetDevice_v2(&d, ctx);
            } else {
              api.cuStreamGetCtx(foreign, &ctx);
              api.cuCtxGetDevice(&d);
            }
            k += d;
          }
          g_sink = k;
        };
        c.ours = [](int n) {
          const CUstream foreign = shared().foreign;
          long k = 0;
          for (int i = 0; i < n; ++i) k += custream::ExternalStream(foreign).device_id();
          g_sink = k;
        };
      });

  add(cases, "current device", {Target::Kind::raw_plus_abs, 3, 0}, "cuCtxGetCurrent",
      [](Case& c, Shared&) {
        c.raw = ctx_get_current;
        c.ours = [](int n) {
          long k = 0;
          for (int i = 0; i < n; ++i) k += custream::Device::current().ordinal();
          g_sink = k;
        };
      });

  add(cases, "current stream of an explicit device", {Target::Kind::absolute, 3, 0},
      "cuCtxGetCurrent (reference)", [](Case& c, Shared&) {
        c.raw = ctx_get_current;
        c.ours = [](int n) {
          long k = 0;
          for (int i = 0; i < n; ++i) {
            k += reinterpret_cast<long>(custream::current_stream(0).handle());
          }
          g_sink = k;
        };
      });

  add(cases, "primary context of a device", {Target::Kind::absolute, 3, 0},
      "cuDevicePrimaryCtxRetain + Release", [](Case& c, Shared& sh) {
        const auto& api = custream::testing::driver();
        c.raw = [&api, dev = sh.device.handle()](int n) {
          long k = 0;
          for (int i = 0; i < n; ++i) {
            CUcontext ctx = nullptr;
            api.cuDevicePrimaryCtxRetain(&ctx, dev);
            api.cuDevicePrimaryCtxRelease(dev);
            k += ctx != nullptr;
          }
          g_sink = k;
        };
        c.ours = [](int n) {
          long k = 0;
          for (int i = 0; i < n; ++i) {
            k += custream::Device(0).primary_context().handle() != nullptr;
          }
          g_sink = k;
        };
      });

  add(cases, "stream scope enter + exit", {Target::Kind::absolute, 25, 0},
      "cuCtxGetCurrent (reference)", [](Case& c, Shared&) {
        c.raw = ctx_get_current;
        c.ours = [](int n) {
          Shared& sh = shared();
          for (int i = 0; i < n; ++i) {
            custream::StreamScope scope(sh.stream);
          }
        };
      });
}

}  // namespace custream_bench

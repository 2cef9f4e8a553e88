// Benchmarks for streams, events, devices and current streams (docs/performance.md): custream
// against the raw driver call, interleaved in one process on the same handles. Run on the GPU:
//   ./build/tools/custream bench [--csv FILE] [--filter TEXT]
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench_cases.hpp"
#include "custream/custream.hpp"
#include "custream/testing.hpp"

namespace custream_bench {
namespace {

volatile long g_sink = 0;  // keeps results alive

CUresult check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) {
    std::fprintf(stderr, "%s failed: %s\n", what, custream::result_name(r).c_str());
    std::exit(2);
  }
  return r;
}

}  // namespace

void add_stream_cases(std::vector<Case>& cases) {
  const auto& api = custream::testing::driver();
  custream::Device device(0);
  device.make_current();
  static custream::Stream stream(device, true);
  static custream::Event event(device);
  const CUstream s = stream.handle();
  const CUevent e = event.handle();
  const auto sync = [s, &api] { check(api.cuStreamSynchronize(s), "cuStreamSynchronize"); };

  cases.push_back({"record (timing disabled)",
                   [&api, s, e](int n) {
                     for (int i = 0; i < n; ++i) api.cuEventRecord(e, s);
                   },
                   [](int n) {
                     for (int i = 0; i < n; ++i) stream.record(event);
                   },
                   {},
                   256,
                   25,
                   sync,
                   "cuEventRecord"});
  cases.push_back({"wait_event",
                   [&api, s, e](int n) {
                     for (int i = 0; i < n; ++i) api.cuStreamWaitEvent(s, e, 0);
                   },
                   [](int n) {
                     for (int i = 0; i < n; ++i) stream.wait_event(event);
                   },
                   {},
                   256,
                   25,
                   sync,
                   "cuStreamWaitEvent"});
  cases.push_back({"done (idle stream)",
                   [&api, s](int n) {
                     long k = 0;
                     for (int i = 0; i < n; ++i) k += api.cuStreamQuery(s) == CUDA_SUCCESS;
                     g_sink = k;
                   },
                   [](int n) {
                     long k = 0;
                     for (int i = 0; i < n; ++i) k += stream.done();
                     g_sink = k;
                   },
                   {},
                   256,
                   25,
                   nullptr,
                   "cuStreamQuery"});
  cases.push_back({"synchronize (idle stream)",
                   [&api, s](int n) {
                     for (int i = 0; i < n; ++i) api.cuStreamSynchronize(s);
                   },
                   [](int n) {
                     for (int i = 0; i < n; ++i) stream.synchronize();
                   },
                   {},
                   256,
                   25,
                   nullptr,
                   "cuStreamSynchronize"});

  // Wrapping a foreign stream with device inference.
  static CUstream foreign = [&] {
    CUstream h = nullptr;
    check(api.cuStreamCreate(&h, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    return h;
  }();
  const bool has_v2 = api.cuStreamGetCtx_v2 != nullptr && api.cuCtxGetDevice_v2 != nullptr;
  cases.push_back({"wrap foreign stream (infer device)",
                   [&api, has_v2](int n) {
                     long k = 0;
                     for (int i = 0; i < n; ++i) {
                       CUcontext c = nullptr;
                       CUdevice d = 0;
                       if (has_v2) {
                         CUgreenCtx g = nullptr;
                         api.cuStreamGetCtx_v2(foreign, &c, &g);
                         api.cuCtxGetDevice_v2(&d, c);
                       } else {
                         api.cuStreamGetCtx(foreign, &c);
                         api.cuCtxGetDevice(&d);
                       }
                       k += d;
                     }
                     g_sink = k;
                   },
                   [](int n) {
                     long k = 0;
                     for (int i = 0; i < n; ++i) k += custream::ExternalStream(foreign).device_id();
                     g_sink = k;
                   },
                   {Target::Kind::raw_plus_abs, 10, 0},
                   256,
                   25,
                   nullptr,
                   "cuStreamGetCtx_v2 + cuCtxGetDevice_v2"});

  // cuCtxGetCurrent: the raw side of "current device", and the reference of the rows that
  // have no raw equivalent.
  const Body ctx_get_current = [&api](int n) {
    long k = 0;
    for (int i = 0; i < n; ++i) {
      CUcontext c = nullptr;
      api.cuCtxGetCurrent(&c);
      k += c != nullptr;
    }
    g_sink = k;
  };

  cases.push_back({"current device",
                   ctx_get_current,
                   [](int n) {
                     long k = 0;
                     for (int i = 0; i < n; ++i) k += custream::Device::current().ordinal();
                     g_sink = k;
                   },
                   {Target::Kind::raw_plus_abs, 3, 0},
                   256,
                   25,
                   nullptr,
                   "cuCtxGetCurrent"});

  cases.push_back({"current stream of an explicit device",
                   ctx_get_current,
                   [](int n) {
                     long k = 0;
                     for (int i = 0; i < n; ++i) {
                       k += reinterpret_cast<long>(custream::current_stream(0).handle());
                     }
                     g_sink = k;
                   },
                   {Target::Kind::absolute, 3, 0},
                   256,
                   25,
                   nullptr,
                   "cuCtxGetCurrent (reference)"});

  const CUdevice dev = device.handle();
  cases.push_back({"primary context of a device",
                   [&api, dev](int n) {
                     long k = 0;
                     for (int i = 0; i < n; ++i) {
                       CUcontext c = nullptr;
                       api.cuDevicePrimaryCtxRetain(&c, dev);
                       api.cuDevicePrimaryCtxRelease(dev);
                       k += c != nullptr;
                     }
                     g_sink = k;
                   },
                   [](int n) {
                     long k = 0;
                     for (int i = 0; i < n; ++i) {
                       k += custream::Device(0).primary_context() != nullptr;
                     }
                     g_sink = k;
                   },
                   {Target::Kind::absolute, 3, 0},
                   256,
                   25,
                   nullptr,
                   "cuDevicePrimaryCtxRetain + Release"});

  cases.push_back({"stream scope enter + exit",
                   ctx_get_current,
                   [](int n) {
                     for (int i = 0; i < n; ++i) {
                       custream::StreamScope scope(stream);
                     }
                   },
                   {Target::Kind::absolute, 25, 0},
                   256,
                   25,
                   nullptr,
                   "cuCtxGetCurrent (reference)"});
}

}  // namespace custream_bench

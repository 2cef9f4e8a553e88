// How soon, and at what cost, each way of being told that GPU work is done tells you
// (docs/performance.md, "Completion notifications"). On a GPU (the kernels must run), one
// process, device 0:
//   latency:    a kernel waits for a host "go", stores to host-mapped memory as its last act;
//               a spinning thread timestamps that store (the reference), the notification
//               timestamps itself; latency = notification - reference. Per way: p50, p99, max.
//   stall:      two kernels each stamp %globaltimer into host-mapped memory; the gap between
//               them with nothing, a completion registration, cuEventRecord, or
//               cuLaunchHostFunc between.
//   throughput: 8 threads register on 8 streams; notifications per second, every callback once.
//   idle:       the watcher's CPU share with nothing pending, over 10 s.
//
//   ./build/bench/custream-completion-latency [SAMPLES]   (default 300)
#include <poll.h>
#include <sched.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "custream/custream.hpp"
#include "custream/testing.hpp"

namespace {

using Clock = std::chrono::steady_clock;

const char* const kPtx = R"(
.version 7.0
.target sm_70
.address_size 64

.visible .entry gated_store(.param .u64 go, .param .u64 flag, .param .u32 value)
{
  .reg .pred %p;
  .reg .b32 %r<3>;
  .reg .b64 %rd<3>;
  ld.param.u64 %rd1, [go];
  ld.param.u64 %rd2, [flag];
  ld.param.u32 %r1, [value];
WAIT:
  ld.volatile.global.u32 %r2, [%rd1];
  setp.ne.u32 %p, %r2, %r1;
  @%p bra WAIT;
  st.volatile.global.u32 [%rd2], %r1;
  membar.sys;
  ret;
}

.visible .entry stamp(.param .u64 out)
{
  .reg .b64 %rd<3>;
  ld.param.u64 %rd1, [out];
  mov.u64 %rd2, %globaltimer;
  st.volatile.global.u64 [%rd1], %rd2;
  membar.sys;
  ret;
}
)";

void check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) throw custream::Error(r, what, "custream-completion-latency");
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(p * (v.size() - 1) + 0.5))];
}

double now_ns() {
  return std::chrono::duration<double, std::nano>(Clock::now().time_since_epoch()).count();
}

struct Mapped {
  void* host = nullptr;
  CUdeviceptr device = 0;
  explicit Mapped(std::size_t bytes) {
    const auto& api = custream::testing::driver();
    check(api.cuMemHostAlloc(&host, bytes, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE),
          "cuMemHostAlloc");
    std::memset(host, 0, bytes);
    check(api.cuMemHostGetDevicePointer(&device, host, 0), "cuMemHostGetDevicePointer");
  }
  ~Mapped() { custream::testing::driver().cuMemFreeHost(host); }
};

volatile unsigned* u32(void* p) { return static_cast<volatile unsigned*>(p); }

// One latency sample per call of `notify(done)`: it must arrange for `done(now)` to be called
// when the kernel's work is done. The reference thread spins on the kernel's store before the
// kernel may run. Returns notification - reference, in µs.
std::vector<double> latencies(const custream::Stream& s, const custream::Kernel& gated, int samples,
                              const std::function<void(std::function<void(double)>)>& notify) {
  Mapped go(64), flag(64);
  std::vector<double> out;
  for (int i = 1; i <= samples; ++i) {
    const unsigned value = static_cast<unsigned>(i);
    std::atomic<double> reference{0}, told{0};
    std::atomic<bool> spinning{false};
    gated.launch(s, {1}, {1}, 0, go.device, flag.device, value);
    notify([&](double t) { told.store(t); });
    std::thread spinner([&] {
      spinning.store(true);
      while (*u32(flag.host) != value) {
      }
      reference.store(now_ns());
    });
    while (!spinning.load()) {
    }
    std::this_thread::sleep_for(std::chrono::microseconds(300));  // waiters are waiting
    *u32(go.host) = value;  // the kernel stores the flag and ends
    spinner.join();
    while (told.load() == 0) {
    }
    s.synchronize();
    out.push_back((told.load() - reference.load()) / 1000.0);
  }
  return out;
}

void print_row(const char* way, const std::vector<double>& us) {
  std::printf("  %-44s p50 %7.2f us   p99 %7.2f us   max %8.2f us   (%zu samples)\n", way,
              percentile(us, 0.5), percentile(us, 0.99), percentile(us, 1.0), us.size());
}

}  // namespace

int main(int argc, char** argv) {
  const int samples = argc > 1 ? std::atoi(argv[1]) : 300;
  try {
    const auto& api = custream::testing::driver();
    if (custream::driver_info().library.find("emu") != std::string::npos ||
        api.cuMemHostAlloc == nullptr) {
      std::printf("custream-completion-latency: needs a GPU (the kernels must run); skipped\n");
      return 77;
    }
    custream::Device(0).make_current();
    const custream::Stream s(custream::Device(0), custream::StreamFlags::non_blocking);
    const custream::Module module = custream::Module::from_ptx(kPtx, 0);
    const custream::Kernel gated = module.kernel("gated_store");
    const custream::Kernel stamp = module.kernel("stamp");
    custream::Completions engine;
    custream::Completions polled(custream::CompletionOptions{custream::CompletionDelivery::caller});

    std::printf("latency: a kernel's last store to host-mapped memory -> the notification\n");
    print_row("Completions::when_done (callback)", latencies(s, gated, samples, [&](auto done) {
                engine.when_done(s, [done] { done(now_ns()); });
              }));
    print_row("Completions::future (a thread waiting)",
              latencies(s, gated, samples, [&](auto done) {
                auto f = std::make_shared<std::future<void>>(engine.future(s));
                std::thread([f, done] {
                  f->wait();
                  done(now_ns());
                }).detach();
              }));
    print_row("Completions::future (a thread spinning on wait_for(0))",
              latencies(s, gated, samples, [&](auto done) {
                auto f = std::make_shared<std::future<void>>(engine.future(s));
                std::thread([f, done] {
                  while (f->wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
                  }
                  done(now_ns());
                }).detach();
              }));
    print_row("Completions eventfd (a thread in poll)",
              latencies(s, gated, samples, [&](auto done) {
                polled.when_done(s, [] {});
                std::thread([&polled, done] {
                  pollfd p{polled.eventfd(), POLLIN, 0};
                  ::poll(&p, 1, 10000);
                  done(now_ns());
                  polled.run_ready();
                }).detach();
              }));
    print_row("cuLaunchHostFunc (the driver's thread)",
              latencies(s, gated, samples, [&](auto done) {
                auto* d = new std::function<void(double)>(done);
                check(api.cuLaunchHostFunc(
                          s.handle(),
                          [](void* p) {
                            auto* f = static_cast<std::function<void(double)>*>(p);
                            (*f)(now_ns());
                            delete f;
                          },
                          d),
                      "cuLaunchHostFunc");
              }));
    CUevent raw_event = nullptr;
    check(api.cuEventCreate(&raw_event, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
    print_row("cuEventQuery spinning (raw floor)", latencies(s, gated, samples, [&](auto done) {
                check(api.cuEventRecord(raw_event, s.handle()), "cuEventRecord");
                std::thread([&api, raw_event, done] {
                  while (api.cuEventQuery(raw_event) == CUDA_ERROR_NOT_READY) {
                  }
                  done(now_ns());
                }).detach();
              }));

    std::printf(
        "stall: the gap between two kernels' %%globaltimer stamps, enqueued behind a gate so that "
        "only the GPU's time counts\n");
    Mapped stamps(64), gate_go(64), gate_flag(64);
    unsigned gate_value = 0;
    auto gap = [&](const std::function<void()>& between) {
      std::vector<double> us;
      for (int i = 0; i < samples; ++i) {
        ++gate_value;
        gated.launch(s, {1}, {1}, 0, gate_go.device, gate_flag.device, gate_value);
        stamp.launch(s, {1}, {1}, 0, stamps.device);
        between();
        stamp.launch(s, {1}, {1}, 0, stamps.device + 8);
        *u32(gate_go.host) = gate_value;
        s.synchronize();
        const auto* t = static_cast<volatile unsigned long long*>(stamps.host);
        us.push_back(static_cast<double>(t[1] - t[0]) / 1000.0);
      }
      return us;
    };
    print_row("nothing between", gap([] {}));
    print_row("a completion registration between", gap([&] { engine.when_done(s, [] {}); }));
    print_row("cuEventRecord between",
              gap([&] { check(api.cuEventRecord(raw_event, s.handle()), "cuEventRecord"); }));
    print_row("cuLaunchHostFunc between", gap([&] {
                check(api.cuLaunchHostFunc(
                          s.handle(), [](void*) {}, nullptr),
                      "cuLaunchHostFunc");
              }));
    s.synchronize();

    // Throughput: 8 threads, 8 streams, each callback once.
    constexpr int kThreads = 8;
    const int each = 125000;
    std::vector<std::unique_ptr<custream::Stream>> streams;
    for (int i = 0; i < kThreads; ++i) {
      streams.push_back(std::make_unique<custream::Stream>(custream::Device(0),
                                                           custream::StreamFlags::non_blocking));
    }
    std::atomic<long> ran{0};
    timespec cpu0{}, cpu1{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu0);
    const auto start = Clock::now();
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < each; ++i) engine.when_done(*streams[t], [&ran] { ran++; });
      });
    }
    for (auto& th : threads) th.join();
    while (ran.load() < static_cast<long>(kThreads) * each) {
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu1);
    const double cpu = (cpu1.tv_sec - cpu0.tv_sec) + (cpu1.tv_nsec - cpu0.tv_nsec) / 1e9;
    std::printf(
        "throughput: %d notifications over %d threads and streams in %.3f s: %.0f /s "
        "(every callback once: %s); process CPU %.2f cores\n",
        kThreads * each, kThreads, seconds, kThreads * each / seconds,
        ran.load() == static_cast<long>(kThreads) * each ? "yes" : "NO", cpu / seconds);

    // The same eight threads making the driver calls a registration makes, raw: what the
    // driver allows.
    {
      std::vector<std::vector<CUevent>> events(kThreads, std::vector<CUevent>(1024));
      for (auto& v : events) {
        for (CUevent& e : v) check(api.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
      }
      const auto raw_start = Clock::now();
      std::vector<std::thread> raw_threads;
      for (int t = 0; t < kThreads; ++t) {
        raw_threads.emplace_back([&, t] {
          const CUstream h = streams[t]->handle();
          for (int i = 0; i < each; ++i) {
            CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
            api.cuStreamIsCapturing(h, &status);
            api.cuEventRecord(events[t][i % 1024], h);
          }
        });
      }
      for (auto& th : raw_threads) th.join();
      const double raw_seconds = std::chrono::duration<double>(Clock::now() - raw_start).count();
      std::printf("raw: the same threads making cuStreamIsCapturing + cuEventRecord: %.0f /s\n",
                  kThreads * each / raw_seconds);
      for (auto& v : events) {
        for (CUevent e : v) api.cuEventDestroy(e);
      }
    }

    // Idle: nothing pending for 10 s.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // past the spin budget
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu0);
    std::this_thread::sleep_for(std::chrono::seconds(10));
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu1);
    const double idle = (cpu1.tv_sec - cpu0.tv_sec) + (cpu1.tv_nsec - cpu0.tv_nsec) / 1e9;
    std::printf(
        "idle: the process used %.4f s of CPU over 10 s with nothing pending (%.3f %% of "
        "a core)\n",
        idle, idle / 10 * 100);
    api.cuEventDestroy(raw_event);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "custream-completion-latency: %s\n", e.what());
    return 1;
  }
}

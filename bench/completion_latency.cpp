// How soon, and at what cost, each way of being told that GPU work is done tells you
// (docs/performance.md, "Completion notifications"). On a GPU (the kernels must run), one
// process, device 0:
//   latency:    a kernel waits for a host "go", stores to host-mapped memory as its last act;
//               a spinning thread timestamps that store (the reference), the notification
//               timestamps itself; latency = notification - reference. Per way: p50, p99, max.
//   stall:      two kernels each stamp %globaltimer into host-mapped memory; the gap between
//               them with nothing, a completion registration (each mechanism), cuEventRecord,
//               cuStreamWriteValue64, or cuLaunchHostFunc between.
//   throughput: 8 threads register on 8 streams; notifications per second, every callback once
//               (each mechanism, and the raw calls it makes).
//   wake-up:    a registration on work already done, with the watcher asleep (nothing pending),
//               lingering (CompletionOptions::linger) or spinning (another registration
//               pending): registration -> callback, and the registering call's duration.
//   idle:       the watcher's CPU share with nothing pending, over 10 s.
//   hand-off:   what a registration's parts cost the enqueueing thread, with raw code: the
//               capture check and a record alone; with another thread spinning (nothing
//               shared); pushing onto a stack that thread polls; handing it 128-byte blocks;
//               writing blocks nobody reads (a different one each time, or the same); a ring
//               that thread reads; that thread querying the newest event, or the oldest
//               pending one.
//
//   ./build/bench/custream-completion-latency [SAMPLES [CSV]]   (default 300; CSV: every
//   latency sample as "way,us", for bench/plot_latency.py)
//   ./build/bench/custream-completion-latency --handoff   (throughput and hand-off only: the
//   rows that compare builds of the registration, in seconds)
//   ./build/bench/custream-completion-latency --wake      (the wake-up rows only)
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

std::FILE* g_samples = nullptr;  // the latency samples' CSV, when asked for

void print_row(const char* way, const std::vector<double>& us, bool latency = false) {
  std::printf("  %-52s p50 %7.2f us   p99 %7.2f us   max %8.2f us   (%zu samples)\n", way,
              percentile(us, 0.5), percentile(us, 0.99), percentile(us, 1.0), us.size());
  if (latency && g_samples != nullptr) {
    for (double v : us) std::fprintf(g_samples, "\"%s\",%.3f\n", way, v);
  }
}

custream::CompletionOptions options(custream::CompletionMechanism mechanism,
                                    custream::CompletionDelivery delivery) {
  custream::CompletionOptions o;
  o.mechanism = mechanism;
  o.delivery = delivery;
  return o;
}

// Throughput: `threads` threads register `each` callbacks on a stream of their own; prints
// the rate and whether every callback ran once.
void throughput(const char* label, custream::Completions& engine,
                const std::vector<std::unique_ptr<custream::Stream>>& streams, int each) {
  const int threads_n = static_cast<int>(streams.size());
  std::atomic<long> ran{0};
  timespec cpu0{}, cpu1{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu0);
  const auto start = Clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < threads_n; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < each; ++i) engine.when_done(*streams[t], [&ran] { ran++; });
    });
  }
  for (auto& th : threads) th.join();
  const long total = static_cast<long>(threads_n) * each;
  while (ran.load() < total) {
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu1);
  const double cpu = (cpu1.tv_sec - cpu0.tv_sec) + (cpu1.tv_nsec - cpu0.tv_nsec) / 1e9;
  std::printf(
      "throughput (%s): %ld notifications over %d threads and streams in %.3f s: %.0f /s "
      "(every callback once: %s); process CPU %.2f cores\n",
      label, total, threads_n, seconds, total / seconds, ran.load() == total ? "yes" : "NO",
      cpu / seconds);
}

// The same threads making `calls(stream, thread, i)` raw: what the driver allows.
void raw_throughput(const char* label,
                    const std::vector<std::unique_ptr<custream::Stream>>& streams, int each,
                    const std::function<void(CUstream, int, int)>& calls) {
  const int threads_n = static_cast<int>(streams.size());
  const auto start = Clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < threads_n; ++t) {
    threads.emplace_back([&, t] {
      const CUstream h = streams[t]->handle();
      for (int i = 0; i < each; ++i) calls(h, t, i);
    });
  }
  for (auto& th : threads) th.join();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf("raw: the same threads making %s: %.0f /s\n", label,
              static_cast<double>(threads_n) * each / seconds);
}

// Throughput: 8 threads, 8 streams, each callback once (each mechanism); then the raw calls.
void throughput_rows(custream::Completions& engine, custream::Completions& words) {
  const auto& api = custream::testing::driver();
  constexpr int kThreads = 8;
  const int each = 125000;
  std::vector<std::unique_ptr<custream::Stream>> streams;
  for (int i = 0; i < kThreads; ++i) {
    streams.push_back(std::make_unique<custream::Stream>(custream::Device(0),
                                                         custream::StreamFlags::non_blocking));
  }
  throughput("events", engine, streams, each);
  throughput("written words", words, streams, each / 4);
  std::vector<std::vector<CUevent>> events(kThreads, std::vector<CUevent>(1024));
  for (auto& v : events) {
    for (CUevent& e : v) check(api.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
  }
  raw_throughput("cuStreamIsCapturing + cuEventRecord", streams, each,
                 [&](CUstream h, int t, int i) {
                   CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
                   api.cuStreamIsCapturing(h, &status);
                   api.cuEventRecord(events[static_cast<std::size_t>(t)][i % 1024], h);
                 });
  for (auto& v : events) {
    for (CUevent e : v) api.cuEventDestroy(e);
  }
  Mapped raw_words(kThreads * 1024 * 8);
  raw_throughput("cuStreamIsCapturing + cuStreamWriteValue64", streams, each / 4,
                 [&](CUstream h, int t, int i) {
                   CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
                   api.cuStreamIsCapturing(h, &status);
                   api.cuStreamWriteValue64(h, raw_words.device + 8 * (t * 1024 + i % 1024), 1, 0);
                 });
  for (auto& st : streams) st->synchronize();
}

// The hand-off rows (see the top): ns per registration-like step on a stream held at a
// cuStreamWaitValue32 gate, median of 300 batches of 256.
void handoff(const custream::Stream& stream) {
  const auto& api = custream::testing::driver();
  const CUstream s = stream.handle();
  constexpr int kEvents = 4096, kBatch = 256, kBatches = 300;
  std::vector<CUevent> events(kEvents);
  for (CUevent& e : events) check(api.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
  Mapped gate(64);
  int next = 0;
  // How the stream is held during a batch: 0 a cuStreamWaitValue32 gate, 1 a host function
  // spinning until opened (as `custream bench` parks a stream), 2 not held (records complete
  // as soon as made).
  int gate_kind = 0;
  static std::atomic<bool> host_gate_open{false}, host_gate_entered{false};
  auto measure = [&](const char* label, const std::function<void(int)>& step) {
    std::vector<double> per;
    for (int b = 0; b < kBatches; ++b) {
      if (gate_kind == 0) {
        *u32(gate.host) = 0;
        check(api.cuStreamWaitValue32(s, gate.device, 1, CU_STREAM_WAIT_VALUE_GEQ),
              "cuStreamWaitValue32");
      } else if (gate_kind == 1) {
        host_gate_open = false;
        host_gate_entered = false;
        check(api.cuLaunchHostFunc(
                  s,
                  [](void*) {
                    host_gate_entered = true;
                    while (!host_gate_open.load()) {
                    }
                  },
                  nullptr),
              "cuLaunchHostFunc");
        while (!host_gate_entered.load()) {
        }
      }
      const auto t0 = Clock::now();
      for (int i = 0; i < kBatch; ++i) {
        step(next);
        next = (next + 1) % kEvents;
      }
      const auto t1 = Clock::now();
      *u32(gate.host) = 1;
      host_gate_open = true;
      stream.synchronize();
      per.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / kBatch);
    }
    std::printf("  %-60s p50 %7.1f ns\n", label, percentile(per, 0.5));
  };
  const auto record = [&](int i) {
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    api.cuStreamIsCapturing(s, &status);
    api.cuEventRecord(events[static_cast<std::size_t>(i)], s);
  };
  // Another thread: `poll()` then a 500 ns pause, as the watcher does, until stopped.
  const auto with_thread = [&](const char* label, const std::function<void()>& poll,
                               const std::function<void(int)>& step) {
    std::atomic<bool> stop{false};
    std::thread other([&] {
      while (!stop.load(std::memory_order_relaxed)) {
        poll();
        const auto until = Clock::now() + std::chrono::nanoseconds(500);
        while (Clock::now() < until) {
#if defined(__x86_64__)
          __builtin_ia32_pause();
#endif
        }
      }
    });
    measure(label, step);
    stop = true;
    other.join();
  };
  std::printf(
      "hand-off: the parts of a registration, raw, on the enqueueing thread (another thread "
      "polls every 500 ns)\n");
  measure("cuStreamIsCapturing + cuEventRecord, alone", record);
  {
    alignas(64) static std::atomic<long> counter{0};
    measure("+ a locked add after the record (a line of its own)", [&](int i) {
      record(i);
      counter.fetch_add(1, std::memory_order_relaxed);
    });
    measure("+ a locked add before the capture check", [&](int i) {
      counter.fetch_add(1, std::memory_order_relaxed);
      record(i);
    });
    measure("+ a full fence after the record", [&](int i) {
      record(i);
      std::atomic_thread_fence(std::memory_order_seq_cst);
    });
    custream::Completions engine;
    measure("a custream registration (an empty callback), same loop",
            [&](int) { engine.when_done(stream, [] {}); });
    measure("cuStreamIsCapturing + cuEventRecord, alone, again", record);
    {
      // custream's own code and hand-off, the driver's calls replaced by empty functions in
      // custream's table (restored after).
      auto& table = const_cast<custream::detail::DriverApi&>(api);
      const auto real_capturing = table.cuStreamIsCapturing;
      const auto real_record = table.cuEventRecord;
      const auto register_one = [&](int) { engine.when_done(stream, [] {}); };
      table.cuEventRecord = [](CUevent, CUstream) { return CUDA_SUCCESS; };
      measure("a custream registration, the record an empty function", register_one);
      table.cuStreamIsCapturing = [](CUstream, CUstreamCaptureStatus* status) {
        *status = CU_STREAM_CAPTURE_STATUS_NONE;
        return CUDA_SUCCESS;
      };
      measure("a custream registration, both calls empty functions", register_one);
      table.cuEventRecord = real_record;
      measure("a custream registration, the capture check an empty function", register_one);
      table.cuStreamIsCapturing = real_capturing;
      measure("cuEventRecord alone",
              [&](int i) { api.cuEventRecord(events[static_cast<std::size_t>(i)], s); });
    }
    for (int kind : {1, 2}) {
      gate_kind = kind;
      std::printf(" %s\n", kind == 1 ? "held by a spinning host function:" : "not held:");
      measure("  cuStreamIsCapturing + cuEventRecord, alone", record);
      measure("  a custream registration (an empty callback)",
              [&](int) { engine.when_done(stream, [] {}); });
      for (int back : {0, 4, 16, 64}) {
        std::atomic<int> newest{-1};
        char label[96];
        std::snprintf(label, sizeof label,
                      "  + the other thread querying the event %d before the newest", back);
        std::atomic<bool> stop{false};
        std::thread other([&] {
          while (!stop.load(std::memory_order_relaxed)) {
            const int n = newest.load(std::memory_order_relaxed);
            if (n >= back) api.cuEventQuery(events[static_cast<std::size_t>(n - back)]);
            const auto until = Clock::now() + std::chrono::nanoseconds(500);
            while (Clock::now() < until) {
            }
          }
        });
        measure(label, [&](int i) {
          record(i);
          newest.store(i, std::memory_order_relaxed);
        });
        stop = true;
        other.join();
      }
    }
    gate_kind = 0;
  }
  with_thread(
      "+ another thread spinning, nothing shared", [] {}, record);
  std::atomic<void*> stack{nullptr};
  static char item[64];
  static std::atomic<long> sink_ring{0};
  with_thread(
      "+ a push onto a stack the other thread takes",
      [&] {
        if (stack.load(std::memory_order_relaxed) != nullptr) stack.exchange(nullptr);
      },
      [&](int i) {
        record(i);
        void* head = stack.load(std::memory_order_relaxed);
        while (!stack.compare_exchange_weak(head, item)) {
        }
      });
  std::vector<char*> blocks(kEvents);
  for (char*& b : blocks) b = static_cast<char*>(::operator new(128, std::align_val_t(64)));
  std::atomic<int> published{-1};
  int seen = -1, handed = 0;
  with_thread(
      "+ a 128-byte block handed over (read and written there, reused)",
      [&] {
        for (const int p = published.load(std::memory_order_acquire); seen < p;) {
          char* b = blocks[static_cast<std::size_t>(++seen % 256)];
          b[8] = static_cast<char>(b[0] + b[64]);
        }
      },
      [&](int i) {
        std::memset(blocks[static_cast<std::size_t>(handed % 256)], i, 128);
        record(i);
        published.store(handed++, std::memory_order_release);
      });
  // As the watcher does: the other thread only reads the blocks; written before the record
  // (as a registration fills its task) or after it.
  for (const bool after : {false, true}) {
    published = -1;
    seen = -1;
    handed = 0;
    std::atomic<long> sink{0};
    with_thread(
        after ? "+ a 128-byte block handed over (only read there), filled after the record"
              : "+ a 128-byte block handed over (only read there), filled before the record",
        [&] {
          long sum = 0;
          for (const int p = published.load(std::memory_order_acquire); seen < p;) {
            const char* b = blocks[static_cast<std::size_t>(++seen % 256)];
            sum += b[0] + b[64];
          }
          sink.fetch_add(sum, std::memory_order_relaxed);
        },
        [&](int i) {
          char* b = blocks[static_cast<std::size_t>(handed % 256)];
          if (!after) std::memset(b, i, 128);
          record(i);
          if (after) std::memset(b, i, 128);
          published.store(handed++, std::memory_order_release);
        });
  }
  // What writing a registration's memory costs by itself: 128 bytes to a different block each
  // time (as task blocks are), or to the same block each time, no other thread reading them.
  measure("+ 128 bytes written to one of 256 blocks no other thread reads", [&](int i) {
    std::memset(blocks[static_cast<std::size_t>(handed++ % 256)], i, 128);
    record(i);
  });
  measure("+ 128 bytes written to one block, the same each time", [&](int i) {
    std::memset(blocks[0], i, 128);
    record(i);
  });
  for (char* b : blocks) ::operator delete(b, std::align_val_t(64));
  // The ring's hand-off: an 8-byte slot and a release store of the tail, which the other thread
  // reads every fourth poll (as the watcher takes the ring).
  struct alignas(64) Ring {
    std::atomic<long> tail{0};
    alignas(64) void* slots[1024] = {};
  };
  static Ring ring;
  static long ring_head = 0;
  static int polls = 0;
  with_thread(
      "+ a ring: a slot and a release tail, read there every 4th poll",
      [&] {
        if (++polls % 4 != 0) return;
        long sum = 0;
        for (const long t = ring.tail.load(std::memory_order_acquire); ring_head < t; ++ring_head) {
          sum += reinterpret_cast<std::uintptr_t>(ring.slots[ring_head % 1024]) != 0;
        }
        sink_ring.fetch_add(sum, std::memory_order_relaxed);
      },
      [&](int i) {
        record(i);
        const long t = ring.tail.load(std::memory_order_relaxed);
        ring.slots[t % 1024] = item;
        ring.tail.store(t + 1, std::memory_order_release);
      });
  std::atomic<int> newest{-1};
  with_thread(
      "+ the other thread querying the newest event",
      [&] {
        const int n = newest.load(std::memory_order_relaxed);
        if (n >= 0) api.cuEventQuery(events[static_cast<std::size_t>(n)]);
      },
      [&](int i) {
        record(i);
        newest.store(i, std::memory_order_relaxed);
      });
  std::atomic<int> oldest{-1};
  with_thread(
      "+ the other thread querying the oldest pending event",
      [&] {
        const int n = oldest.load(std::memory_order_relaxed);
        if (n >= 0) api.cuEventQuery(events[static_cast<std::size_t>(n)]);
      },
      [&](int i) {
        if (i % kBatch == 0) oldest.store(i, std::memory_order_relaxed);
        record(i);
      });
  for (CUevent e : events) api.cuEventDestroy(e);
}

// Wake-up: a registration on work that is already done, after nothing was pending for 3 ms (the
// watcher asleep, unless it lingers) or while another registration is pending behind a gate on
// another stream (the watcher spinning). Per way: registration -> callback, and how long the
// registering call took.
void wake_rows(custream::Completions& engine, const char* mechanism, const custream::Stream& s,
               int samples) {
  const auto& api = custream::testing::driver();
  const custream::Stream held(custream::Device(0), custream::StreamFlags::non_blocking);
  Mapped gate(64);
  for (const bool awake : {false, true}) {
    std::vector<double> told_us, call_us;
    for (int i = 0; i < samples; ++i) {
      if (awake) {
        *u32(gate.host) = 0;
        check(api.cuStreamWaitValue32(held.handle(), gate.device, 1, CU_STREAM_WAIT_VALUE_GEQ),
              "cuStreamWaitValue32");
        engine.when_done(held, [] {});
        std::this_thread::sleep_for(std::chrono::microseconds(200));  // it spins on that one
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(3));  // nothing pending: it sleeps
      }
      std::atomic<double> told{0};
      const double t0 = now_ns();
      engine.when_done(s, [&told] { told.store(now_ns()); });
      const double t1 = now_ns();
      while (told.load() == 0) {
      }
      told_us.push_back((told.load() - t0) / 1000.0);
      call_us.push_back((t1 - t0) / 1000.0);
      if (awake) {
        *u32(gate.host) = 1;
        held.synchronize();
      }
      while (engine.pending() != 0) {
      }
    }
    const std::string way =
        std::string(mechanism) + (awake ? ", another pending" : ", nothing pending for 3 ms");
    print_row((way + ": registration -> callback").c_str(), told_us);
    print_row((way + ": the registering call").c_str(), call_us);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const bool handoff_only = argc > 1 && std::strcmp(argv[1], "--handoff") == 0;
  const bool wake_only = argc > 1 && std::strcmp(argv[1], "--wake") == 0;
  const int samples = argc > 1 && !handoff_only && !wake_only ? std::atoi(argv[1]) : 300;
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
    using custream::CompletionDelivery;
    using custream::CompletionMechanism;
    custream::Completions engine(options(CompletionMechanism::event, CompletionDelivery::thread));
    custream::Completions words(
        options(CompletionMechanism::memory_write, CompletionDelivery::thread));
    custream::Completions polled(options(CompletionMechanism::event, CompletionDelivery::caller));
    custream::CompletionOptions lingering_options =
        options(CompletionMechanism::event, CompletionDelivery::thread);
    lingering_options.linger = std::chrono::milliseconds(10);
    custream::Completions lingering(lingering_options);
    if (handoff_only) {
      throughput_rows(engine, words);
      handoff(s);
      return 0;
    }
    if (wake_only) {
      std::printf("wake-up: a registration on finished work\n");
      wake_rows(engine, "events", s, samples);
      wake_rows(words, "written words", s, samples);
      wake_rows(lingering, "events, linger 10 ms", s, samples);
      return 0;
    }
    if (argc > 2 && (g_samples = std::fopen(argv[2], "w")) != nullptr) {
      std::fprintf(g_samples, "way,us\n");
    }

    std::printf("latency: a kernel's last store to host-mapped memory -> the notification\n");
    print_row("Completions::when_done (callback), events",
              latencies(s, gated, samples,
                        [&](auto done) { engine.when_done(s, [done] { done(now_ns()); }); }),
              true);
    print_row("Completions::when_done (callback), written words",
              latencies(s, gated, samples,
                        [&](auto done) { words.when_done(s, [done] { done(now_ns()); }); }),
              true);
    print_row("Completions::future (a thread waiting)",
              latencies(s, gated, samples,
                        [&](auto done) {
                          auto f = std::make_shared<std::future<void>>(engine.future(s));
                          std::thread([f, done] {
                            f->wait();
                            done(now_ns());
                          }).detach();
                        }),
              true);
    print_row(
        "Completions::future (a thread spinning on wait_for(0))",
        latencies(s, gated, samples,
                  [&](auto done) {
                    auto f = std::make_shared<std::future<void>>(engine.future(s));
                    std::thread([f, done] {
                      while (f->wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
                      }
                      done(now_ns());
                    }).detach();
                  }),
        true);
    print_row("Completions eventfd (a thread in poll)",
              latencies(s, gated, samples,
                        [&](auto done) {
                          polled.when_done(s, [] {});
                          std::thread([&polled, done] {
                            pollfd p{polled.eventfd(), POLLIN, 0};
                            ::poll(&p, 1, 10000);
                            done(now_ns());
                            polled.run_ready();
                          }).detach();
                        }),
              true);
    print_row("cuLaunchHostFunc (the driver's thread)",
              latencies(s, gated, samples,
                        [&](auto done) {
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
                        }),
              true);
    CUevent raw_event = nullptr;
    check(api.cuEventCreate(&raw_event, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
    print_row("cuEventQuery spinning (raw floor, events)",
              latencies(s, gated, samples,
                        [&](auto done) {
                          check(api.cuEventRecord(raw_event, s.handle()), "cuEventRecord");
                          std::thread([&api, raw_event, done] {
                            while (api.cuEventQuery(raw_event) == CUDA_ERROR_NOT_READY) {
                            }
                            done(now_ns());
                          }).detach();
                        }),
              true);
    Mapped raw_word(64);
    std::uint64_t raw_value = 0;
    print_row("cuStreamWriteValue64, a load spinning (raw floor, words)",
              latencies(s, gated, samples,
                        [&](auto done) {
                          ++raw_value;
                          check(api.cuStreamWriteValue64(s.handle(), raw_word.device, raw_value, 0),
                                "cuStreamWriteValue64");
                          std::thread([&raw_word, value = raw_value, done] {
                            while (__atomic_load_n(static_cast<std::uint64_t*>(raw_word.host),
                                                   __ATOMIC_ACQUIRE) != value) {
                            }
                            done(now_ns());
                          }).detach();
                        }),
              true);
    if (g_samples != nullptr) std::fclose(g_samples);
    std::printf("wake-up: a registration on finished work\n");
    wake_rows(engine, "events", s, samples);
    wake_rows(words, "written words", s, samples);
    wake_rows(lingering, "events, linger 10 ms", s, samples);

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
    print_row("a completion registration between (events)",
              gap([&] { engine.when_done(s, [] {}); }));
    print_row("a completion registration between (written words)",
              gap([&] { words.when_done(s, [] {}); }));
    print_row("cuEventRecord between",
              gap([&] { check(api.cuEventRecord(raw_event, s.handle()), "cuEventRecord"); }));
    print_row("cuStreamWriteValue64 between", gap([&] {
                check(api.cuStreamWriteValue64(s.handle(), raw_word.device, ++raw_value, 0),
                      "cuStreamWriteValue64");
              }));
    print_row("cuLaunchHostFunc between", gap([&] {
                check(api.cuLaunchHostFunc(
                          s.handle(), [](void*) {}, nullptr),
                      "cuLaunchHostFunc");
              }));
    s.synchronize();

    throughput_rows(engine, words);
    handoff(s);

    // Idle: nothing pending for 10 s.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // past the spin budget
    timespec cpu0{}, cpu1{};
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

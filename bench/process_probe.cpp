// What makes a process "slow" (docs/design/completions.md, "Open: the registration's cost"): on
// one machine the raw capture check and record take ~130 ns in some processes and ~200-250 ns
// in others, whatever the address-space layout or the CPUs chosen. One line per run: a
// dependent integer chain (ns per step: the core's speed), a pointer chase over 64 MiB (memory
// latency), a cache line bounced between two threads (ns per round trip), and the raw
// cuStreamIsCapturing + cuEventRecord on each of 8 streams of device 0 (median ns of batches of
// 256, a distinct event each, a synchronize between batches), then on the first stream the
// capture check alone and the record alone, and the CPU the thread ran on. Run it in several
// processes and compare: a slow process whose every stream is slow points at the process (its
// memory, its cores), one with slow and fast streams at the streams' channels.
//
//   ./build/bench/custream-process-probe      (on the CPU driver emulator: the numbers mean
//                                              nothing, but it runs)
//   ./build/bench/custream-process-probe --phases 10   (slow periods within one process: see
//                                                       phases() below)
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <exception>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "custream/custream.hpp"
#include "custream/testing.hpp"
#include "gate.hpp"

namespace {

using Clock = std::chrono::steady_clock;

volatile std::size_t g_sink = 0;  // keeps the chase from being optimised away

double ns(Clock::duration d) { return std::chrono::duration<double, std::nano>(d).count(); }

// ns per step of a chain of dependent multiply-adds.
double chain_ns() {
  constexpr long kSteps = 20000000;
  volatile unsigned long seed = 1;
  unsigned long x = seed;
  const auto t0 = Clock::now();
  for (long i = 0; i < kSteps; ++i) x = x * 2862933555777941757ul + 3037000493ul;
  const double per = ns(Clock::now() - t0) / kSteps;
  seed = x;
  return per;
}

// ns per load of a random cyclic pointer chase over 64 MiB.
double memory_ns() {
  const std::size_t n = (std::size_t{64} << 20) / sizeof(std::size_t);
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::shuffle(order.begin() + 1, order.end(), std::mt19937_64(42));
  std::vector<std::size_t> next(n);
  for (std::size_t i = 0; i < n; ++i) next[order[i]] = order[(i + 1) % n];
  constexpr int kLoads = 2000000;
  std::size_t p = 0;
  const auto t0 = Clock::now();
  for (int i = 0; i < kLoads; ++i) p = next[p];
  const double per = ns(Clock::now() - t0) / kLoads;
  g_sink = p;
  return per;
}

// ns per round trip of one cache line between this thread and another.
double ping_pong_ns() {
  constexpr int kTrips = 200000;
  alignas(64) std::atomic<int> ball{0};
  std::thread other([&] {
    for (int i = 0; i < kTrips; ++i) {
      while (ball.load(std::memory_order_acquire) != 2 * i + 1) {
      }
      ball.store(2 * i + 2, std::memory_order_release);
    }
  });
  const auto t0 = Clock::now();
  for (int i = 0; i < kTrips; ++i) {
    ball.store(2 * i + 1, std::memory_order_release);
    while (ball.load(std::memory_order_acquire) != 2 * i + 2) {
    }
  }
  const double per = ns(Clock::now() - t0) / kTrips;
  other.join();
  return per;
}

// ns for a fixed piece of branchy, cache-resident work (lookups in a small open-addressing
// table with data-dependent branches): the kind of code a driver call runs, without the driver.
double table_work_ns() {
  static std::vector<std::uint64_t> table = [] {
    std::vector<std::uint64_t> t(4096);
    std::mt19937_64 random(7);
    for (auto& v : t) v = random() | 1;
    return t;
  }();
  const auto t0 = Clock::now();
  std::uint64_t key = 88172645463325252ull, found = 0;
  for (int i = 0; i < 512; ++i) {
    key ^= key << 13;
    key ^= key >> 7;
    key ^= key << 17;
    std::size_t slot = key & (table.size() - 1);
    while ((table[slot] & 7) != (key & 7) && (table[slot] & 0x100) == 0) {
      slot = (slot + 1) & (table.size() - 1);
    }
    found += table[slot] >> 9;
  }
  g_sink = found;
  return ns(Clock::now() - t0);
}

// --phases SECONDS: whether a process's slow periods are the CPU's, and what custream's
// registration adds in each. For SECONDS, back to back: the branchy table work, a short
// dependent chain, then, on a parked stream, 64 raw capture checks + records and 64
// completion registrations (an empty callback; the two in alternating order), the gate opened
// and the stream synchronized after each batch. Per 10 ms window the medians; windows whose raw
// median is 1.3 times the fastest window's or more are "slow". Prints how many windows were
// slow and how often the state changed, and per state the medians of the raw pair, of what a
// registration adds to it, of the table work and of the chain: if the table work grows with the
// raw pair, the CPU itself slowed. Windows are judged against the run's fastest, so a process
// slow throughout shows "0 slow": compare the fastest window's pair with a fast process's.
// Caveats: in the batches where the registrations go first, the watcher queries their events
// during the raw batch; the gate spins on the driver's host-function thread meanwhile.
int phases(double seconds) {
  custream::Device(0).make_current();
  const auto& api = custream::testing::driver();
  const custream::Stream stream(custream::Device(0), custream::StreamFlags::non_blocking);
  custream::Completions engine;
  constexpr int kBatch = 64;
  std::vector<CUevent> events(kBatch);
  for (CUevent& e : events) {
    if (api.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
      std::fprintf(stderr, "custream-process-probe: cuEventCreate failed\n");
      return 1;
    }
  }
  const auto median = [](std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    return v[v.size() / 2];
  };
  const auto raw_batch = [&] {
    const auto t0 = Clock::now();
    for (CUevent e : events) {
      CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
      api.cuStreamIsCapturing(stream.handle(), &status);
      if (status == CU_STREAM_CAPTURE_STATUS_NONE) api.cuEventRecord(e, stream.handle());
    }
    return ns(Clock::now() - t0) / kBatch;
  };
  const auto ours_batch = [&] {
    const auto t0 = Clock::now();
    for (int i = 0; i < kBatch; ++i) engine.when_done(stream, [] {});
    return ns(Clock::now() - t0) / kBatch;
  };
  struct Window {
    double raw, added, work, chain;
  };
  std::vector<Window> windows;
  const auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(seconds));
  bool raw_first = true;
  const auto start = Clock::now();
  do {  // a window at least, of one pass at least
    std::vector<double> raw, added, work, chain;
    const auto window_end = Clock::now() + std::chrono::milliseconds(10);
    do {
      work.push_back(table_work_ns());
      const auto t0 = Clock::now();
      volatile unsigned long seed = 1;
      unsigned long x = seed;
      for (int i = 0; i < 2000; ++i) x = x * 2862933555777941757ul + 3037000493ul;
      seed = x;
      chain.push_back(ns(Clock::now() - t0) / 2000);
      if (const CUresult r = custream_bench::park(stream.handle()); r != CUDA_SUCCESS) {
        std::fprintf(stderr, "custream-process-probe: parking the stream (bench/gate.hpp): %s\n",
                     r == CUDA_ERROR_NOT_READY ? "its host function did not start in 10 s"
                                               : "cuLaunchHostFunc failed");
        return 1;
      }
      double r, o;
      if (raw_first) {
        r = raw_batch();
        o = ours_batch();
      } else {
        o = ours_batch();
        r = raw_batch();
      }
      raw_first = !raw_first;
      custream_bench::open_gate();
      api.cuStreamSynchronize(stream.handle());
      raw.push_back(r);
      added.push_back(o - r);
    } while (Clock::now() < window_end);
    windows.push_back({median(raw), median(added), median(work), median(chain)});
  } while (Clock::now() < end);
  const double window_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count() /
                           static_cast<double>(windows.size());
  double fastest = windows.front().raw;
  for (const Window& w : windows) fastest = std::min(fastest, w.raw);
  std::vector<Window> fast, slow;
  int changes = 0;
  for (std::size_t i = 0; i < windows.size(); ++i) {
    const bool is_slow = windows[i].raw >= 1.3 * fastest;
    if (i > 0 && is_slow != (windows[i - 1].raw >= 1.3 * fastest)) ++changes;
    (is_slow ? slow : fast).push_back(windows[i]);
  }
  std::printf(
      "%zu windows of %.1f ms: %zu slow, %d changes of state; the fastest window: raw %.0f ns",
      windows.size(), window_ms, slow.size(), changes, fastest);
  const auto print = [&](const char* name, const std::vector<Window>& ws) {
    if (ws.empty()) return;
    std::vector<double> raw, added, work, chain;
    for (const Window& w : ws) {
      raw.push_back(w.raw);
      added.push_back(w.added);
      work.push_back(w.work);
      chain.push_back(w.chain);
    }
    std::printf(
        "  %s: raw check + record %.0f ns, a registration %+.0f ns, table work %.0f ns, "
        "chain %.3f ns/step",
        name, median(raw), median(added), median(work), median(chain));
  };
  print("fast", fast);
  print("slow", slow);
  std::printf("\n");
  for (CUevent e : events) api.cuEventDestroy(e);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc > 1) {
      std::size_t used = 0;
      double seconds = 0;
      try {
        if (argc == 3 && std::string(argv[1]) == "--phases") seconds = std::stod(argv[2], &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used == 0 || argv[2][used] != '\0' || !(seconds > 0 && seconds <= 3600)) {
        std::fprintf(stderr, "usage: custream-process-probe [--phases SECONDS (0 < s <= 3600)]\n");
        return 2;
      }
      return phases(seconds);
    }
    const double chain = chain_ns();
    const double memory = memory_ns();
    const double trip = ping_pong_ns();
    custream::Device(0).make_current();
    const auto& api = custream::testing::driver();
    constexpr int kStreams = 8, kBatch = 256, kRounds = 60, kWarm = 10;
    std::vector<custream::Stream> streams;
    for (int i = 0; i < kStreams; ++i) {
      streams.emplace_back(custream::Device(0), custream::StreamFlags::non_blocking);
    }
    std::vector<CUevent> events(1024);
    for (CUevent& e : events) {
      if (api.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
        std::fprintf(stderr, "custream-process-probe: cuEventCreate failed\n");
        return 1;
      }
    }
    std::vector<std::vector<double>> per_stream(kStreams);
    std::size_t k = 0;
    for (int round = 0; round < kRounds; ++round) {  // the streams in turn, round after round
      for (int i = 0; i < kStreams; ++i) {
        const CUstream h = streams[static_cast<std::size_t>(i)].handle();
        const auto t0 = Clock::now();
        for (int j = 0; j < kBatch; ++j) {
          CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
          api.cuStreamIsCapturing(h, &status);
          if (status == CU_STREAM_CAPTURE_STATUS_NONE) api.cuEventRecord(events[k], h);
          k = (k + 1) % events.size();
        }
        const auto t1 = Clock::now();
        api.cuStreamSynchronize(h);
        if (round >= kWarm) per_stream[static_cast<std::size_t>(i)].push_back(ns(t1 - t0) / kBatch);
      }
    }
    // On the first stream: the capture check alone, then the record alone.
    const CUstream first = streams.front().handle();
    std::vector<double> check_only, record_only;
    for (int round = 0; round < kRounds; ++round) {
      auto t0 = Clock::now();
      for (int j = 0; j < kBatch; ++j) {
        CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
        api.cuStreamIsCapturing(first, &status);
      }
      auto t1 = Clock::now();
      if (round >= kWarm) check_only.push_back(ns(t1 - t0) / kBatch);
      t0 = Clock::now();
      for (int j = 0; j < kBatch; ++j) {
        api.cuEventRecord(events[k], first);
        k = (k + 1) % events.size();
      }
      t1 = Clock::now();
      api.cuStreamSynchronize(first);
      if (round >= kWarm) record_only.push_back(ns(t1 - t0) / kBatch);
    }
    const auto median = [](std::vector<double>& v) {
      std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
      return v[v.size() / 2];
    };
    std::printf(
        "cpu %d  chain %.3f ns/step  memory %.1f ns/load  ping-pong %.1f ns  record by stream:",
        sched_getcpu(), chain, memory, trip);
    for (auto& v : per_stream) std::printf(" %.0f", median(v));
    std::printf(" ns  check alone %.0f  record alone %.0f ns\n", median(check_only),
                median(record_only));
    for (CUevent e : events) api.cuEventDestroy(e);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "custream-process-probe: %s\n", e.what());
    return 1;
  }
}

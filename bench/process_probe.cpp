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
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <exception>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "custream/custream.hpp"
#include "custream/testing.hpp"

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

}  // namespace

int main() {
  try {
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

// What extra work costs inside a loop of back-to-back cuLaunchHostFunc calls: the evidence
// behind docs/performance.md "Host functions: the capture check". Each variant enqueues 256
// host functions per batch (then an untimed synchronize); the variants run round-robin, the
// order rotating every round, in one process; each figure is the median of its batch means, and
// the paired column the median of per-round differences against the raw call.
//
//   ./build/bench/custream-host-func-loop [ROUNDS]   (default 301; on a GPU, not the emulator)
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "custream/custream.hpp"
#include "custream/testing.hpp"
#include "harness.hpp"

namespace {

using custream_bench::Clock;
using custream_bench::median;

std::atomic<long> g_runs{0};

void CUDA_CB count_run(void* counter) {
  static_cast<std::atomic<long>*>(counter)->fetch_add(1, std::memory_order_relaxed);
}

// Busy work of about `iterations` × the calibrated time per iteration, opaque to the compiler.
void spin(long iterations) {
  for (long i = 0; i < iterations; ++i) asm volatile("");
}

double spin_ns_per_iteration() {
  constexpr long kIterations = 200'000'000;
  const auto start = Clock::now();
  spin(kIterations);
  return std::chrono::duration<double, std::nano>(Clock::now() - start).count() / kIterations;
}

struct Variant {
  std::string name;
  std::function<void(int)> body;  ///< enqueues n host functions
};

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 301;
  if (rounds < 3) {
    std::fprintf(stderr, "usage: custream-host-func-loop [ROUNDS >= 3]\n");
    return 2;
  }
  custream::Device device(0);
  device.make_current();
  const custream::Stream stream(device, custream::StreamFlags::non_blocking);
  const custream::Stream idle(device, custream::StreamFlags::non_blocking);
  const auto& api = custream::testing::driver();
  const CUstream s = stream.handle();
  const CUstream other = idle.handle();
  std::atomic<long>* counter = &g_runs;

  const double ns_per_iteration = spin_ns_per_iteration();
  const auto spin_for = [ns_per_iteration](double ns) {
    return static_cast<long>(ns / ns_per_iteration);
  };
  const auto launch = [&api, s, counter] { api.cuLaunchHostFunc(s, count_run, counter); };
  // Runs `before` ahead of each raw launch.
  const auto with = [launch](std::function<void()> before) {
    return [launch, before](int n) {
      for (int i = 0; i < n; ++i) {
        before();
        launch();
      }
    };
  };
  std::vector<Variant> variants = {
      {"raw cuLaunchHostFunc", with([] {})},
      {"+ cuStreamIsCapturing", with([&api, s] {
         CUstreamCaptureStatus status{};
         api.cuStreamIsCapturing(s, &status);
       })},
      {"+ cuStreamGetCaptureInfo", with([&api, s] {
         CUstreamCaptureStatus status{};
         api.cuStreamGetCaptureInfo(s, &status, nullptr, nullptr, nullptr, nullptr);
       })},
      {"+ cuStreamIsCapturing (another, idle stream)", with([&api, other] {
         CUstreamCaptureStatus status{};
         api.cuStreamIsCapturing(other, &status);
       })},
      {"+ cuStreamGetCtx", with([&api, s] {
         CUcontext context = nullptr;
         api.cuStreamGetCtx(s, &context);
       })},
      {"+ cuCtxGetCurrent", with([&api] {
         CUcontext context = nullptr;
         api.cuCtxGetCurrent(&context);
       })},
      {"+ 20 ns busy loop", with([n = spin_for(20)] { spin(n); })},
      {"+ 40 ns busy loop", with([n = spin_for(40)] { spin(n); })},
      {"+ 80 ns busy loop", with([n = spin_for(80)] { spin(n); })},
      {"custream launch_host_func(fn, arg)",
       [&stream, counter](int n) {
         for (int i = 0; i < n; ++i) stream.launch_host_func(count_run, counter);
       }},
      {"custream callable (heap)",
       [&stream, counter](int n) {
         for (int i = 0; i < n; ++i) {
           stream.launch_host_func([counter] { counter->fetch_add(1, std::memory_order_relaxed); });
         }
       }},
      {"custream small noexcept callable",
       [&stream, counter](int n) {
         for (int i = 0; i < n; ++i) {
           stream.launch_host_func(
               [counter]() noexcept { counter->fetch_add(1, std::memory_order_relaxed); });
         }
       }},
  };

  const std::size_t k = variants.size();
  const auto batch = [&](std::size_t v) {
    const auto start = Clock::now();
    variants[v].body(256);
    const auto end = Clock::now();
    api.cuStreamSynchronize(s);
    return std::chrono::duration<double, std::nano>(end - start).count() / 256;
  };
  for (int w = 0; w < 3; ++w) {
    for (std::size_t v = 0; v < k; ++v) batch(v);
  }
  std::vector<std::vector<double>> times(k);
  for (int r = 0; r < rounds; ++r) {
    for (std::size_t j = 0; j < k; ++j) {
      const std::size_t shift = static_cast<std::size_t>(r / 2);
      const std::size_t v = r % 2 == 0 ? (j + shift) % k : (k - 1 - j + shift) % k;
      times[v].push_back(batch(v));
    }
  }

  std::printf(
      "custream-host-func-loop: %d rounds of %zu variants, 256 enqueues per batch, busy "
      "loop %.3f ns per iteration\n",
      rounds, k, ns_per_iteration);
  std::printf("%-46s %12s %12s %14s\n", "variant", "median ns", "vs raw", "paired vs raw");
  const double raw = median(times[0]);
  for (std::size_t v = 0; v < k; ++v) {
    std::vector<double> differences;
    for (std::size_t i = 0; i < times[v].size(); ++i) {
      differences.push_back(times[v][i] - times[0][i]);
    }
    const double m = median(times[v]);
    std::printf("%-46s %12.1f %+12.1f %+14.1f\n", variants[v].name.c_str(), m, m - raw,
                median(differences));
  }
  return 0;
}

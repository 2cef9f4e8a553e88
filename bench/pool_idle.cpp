// What idle threads keep of the host-task pool, and what a thread's exit costs
// (lib/host_function.cpp, invariant 7). Two parts, one process per mode:
//
//  1. Idle workers: for each of WORKERS threads, this thread enqueues a burst of BURST host
//     functions (held back by a gate, so all are in flight at once) and waits for them; then
//     the worker enqueues one host function, waits for it and idles. Printed: the process's
//     resident memory (/proc/self/statm) and the pool's counters before and after.
//  2. Thread exit: one burst of EXIT_POOL host functions, then a thread that enqueues one and
//     ends; printed: how long its exit took (from its last statement to join) and how many
//     blocks it walked.
//
//   ./build/bench/custream-pool-idle [pooled|plain] [WORKERS] [BURST] [EXIT_POOL]
//
// `pooled` (default) enqueues callables that take the pool (≤ 128 bytes); `plain` the same
// pattern with callables too large for it (plain new/delete), as a control. Runs on the GPU or
// on the emulator (CUSTREAM_LIBCUDA=build/emulator/libcuda.so.1).
#include <malloc.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <thread>
#include <vector>

#include "custream/custream.hpp"
#include "custream/testing.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double rss_mib() {
  std::ifstream statm("/proc/self/statm");
  long size = 0;
  long resident = 0;
  statm >> size >> resident;
  return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) /
         (1024.0 * 1024.0);
}

void print_stats(const char* when) {
  const auto s = custream::testing::pool_stats();
  std::printf(
      "%-28s rss %7.1f MiB | pool: %zu blocks (%.1f MiB), %zu shared, %zu in partial freed "
      "batches, %zu in this thread's list\n",
      when, rss_mib(), s.blocks, static_cast<double>(s.blocks) * 128.0 / (1024.0 * 1024.0),
      s.shared, s.freeing, s.thread_held);
}

// Enqueues `n` host functions behind a gate (all in flight at once), then waits for them.
void burst(const custream::Stream& s, int n, bool plain) {
  std::atomic<int> runs{0};
  std::atomic<bool> open{false};
  std::atomic<bool>* gate = &open;
  std::atomic<int>* counter = &runs;
  s.launch_host_func([gate]() noexcept {
    while (!gate->load()) std::this_thread::yield();
  });
  if (plain) {
    std::array<char, 200> big{};  // larger than HostTask::kPooledBytes: plain new/delete
    big[0] = 1;
    for (int i = 0; i < n; ++i) s.launch_host_func([counter, big] { counter->fetch_add(big[0]); });
  } else {
    long tag = 1;  // two captures, not noexcept: a pooled task
    for (int i = 0; i < n; ++i) s.launch_host_func([counter, tag] { counter->fetch_add(tag); });
  }
  open = true;
  s.synchronize();
  while (runs.load() != n) std::this_thread::yield();
}

}  // namespace

int main(int argc, char** argv) try {
  const bool plain = argc > 1 && std::strcmp(argv[1], "plain") == 0;
  const int workers = argc > 2 ? std::atoi(argv[2]) : 32;
  const int burst_size = argc > 3 ? std::atoi(argv[3]) : 10000;
  const int exit_pool = argc > 4 ? std::atoi(argv[4]) : 200000;
  if (argc > 1 && !plain && std::strcmp(argv[1], "pooled") != 0) {
    std::fprintf(stderr,
                 "usage: custream-pool-idle [pooled|plain] [WORKERS] [BURST] [EXIT_POOL]\n");
    return 2;
  }
  std::printf("mode %s, %d workers, bursts of %d, kPoolBatch %zu, pooled: %s\n",
              plain ? "plain" : "pooled", workers, burst_size, custream::testing::pool_batch,
              custream::testing::pool_stats().pooled ? "yes" : "no (AddressSanitizer)");
  custream::Device device(0);
  custream::DeviceScope scope(device);
  const custream::Stream s(device, custream::StreamFlags::non_blocking);
  burst(s, 10, plain);  // warm up: driver and stream set up
  print_stats("start");

  // 1. Idle workers.
  std::mutex mutex;
  std::condition_variable cv;
  int ready = 0;
  bool release = false;
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) {
    burst(s, burst_size, plain);
    threads.emplace_back([&] {
      burst(s, 1, plain);
      std::unique_lock<std::mutex> lock(mutex);
      ++ready;
      cv.notify_all();
      cv.wait(lock, [&] { return release; });
    });
    std::unique_lock<std::mutex> lock(mutex);
    cv.wait(lock, [&] { return ready == w + 1; });
  }
  print_stats("workers idle");
  {
    std::lock_guard<std::mutex> lock(mutex);
    release = true;
  }
  cv.notify_all();
  for (auto& t : threads) t.join();
  print_stats("workers ended");

  // 2. Thread exit at a large pool.
  if (exit_pool > 0) {
    burst(s, exit_pool, plain);
    print_stats("after the exit-pool burst");
    const auto before = custream::testing::pool_stats();
    Clock::time_point last{};
    std::thread t([&] {
      burst(s, 1, plain);
      last = Clock::now();
    });
    t.join();
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - last).count();
    const auto after = custream::testing::pool_stats();
    std::printf("thread exit: %.3f ms, %zu blocks walked\n", ms,
                after.exit_returned - before.exit_returned);
  }
  // What of the resident memory is free malloc memory that malloc kept (glibc).
  malloc_trim(0);
  print_stats("after malloc_trim(0)");
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "custream-pool-idle: %s\n", e.what());
  return 1;
}

// The host-task pool: what a thread may hold, what thread exit gives back, and that
// AddressSanitizer sees every task. Runs on the emulator and on the GPU.
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "custream/detail/host_task.hpp"
#include "custream/stream.hpp"
#include "graph_support.hpp"

using custream::Stream;
using custream::detail::kPoolBatch;
using custream::detail::pool_stats;

namespace {

// Enqueues `n` pooled host functions (not noexcept, larger than a pointer) behind a gate, so
// all `n` are in flight at once, then opens it and waits for them.
void burst(const Stream& s, int n) {
  std::atomic<int> runs{0};
  std::atomic<bool> open{false};
  std::atomic<bool>* gate = &open;
  s.launch_host_func([gate]() noexcept {  // the userData path: no block of its own
    while (!gate->load()) std::this_thread::yield();
  });
  const std::string tag = "pooled";
  for (int i = 0; i < n; ++i) s.launch_host_func([&runs, tag] { runs.fetch_add(1); });
  open = true;
  s.synchronize();
  REQUIRE(custream_test::eventually([&] { return runs.load() == n; }));
}

}  // namespace

TEST_CASE("an idle worker that enqueued once holds at most one batch of blocks",
          "[gpu][pool][host_function]") {
  REQUIRE_DRIVER();
  if (!pool_stats().pooled) CUSTREAM_SKIP("nothing is pooled under AddressSanitizer");
  Stream s(true);
  burst(s, 5000);  // the freed blocks are shared now
  const std::size_t before = pool_stats().shared;
  REQUIRE(before >= 5000 - kPoolBatch);

  constexpr int kWorkers = 16;
  std::mutex mutex;
  std::condition_variable cv;
  bool measured_all = false;
  std::vector<std::size_t> held(kWorkers, 0);
  std::atomic<int> measured{0};
  std::vector<std::thread> workers;
  for (int w = 0; w < kWorkers; ++w) {
    workers.emplace_back([&, w] {
      burst(s, 1);  // one host function, then idle
      held[w] = pool_stats().thread_held;
      measured.fetch_add(1);
      std::unique_lock<std::mutex> lock(mutex);
      cv.wait(lock, [&] { return measured_all; });  // idle while the others measure
    });
  }
  REQUIRE(custream_test::eventually([&] { return measured.load() == kWorkers; }));
  std::size_t total = 0;
  for (std::size_t h : held) {
    CHECK(h < kPoolBatch);  // before: each worker took the whole shared list (~5,000)
    total += h;
  }
  CHECK(pool_stats().shared + total >= before);  // the rest stays shared
  {
    std::lock_guard<std::mutex> lock(mutex);
    measured_all = true;
  }
  cv.notify_all();
  for (auto& t : workers) t.join();
}

TEST_CASE("a thread's blocks go back to the pool when it ends", "[gpu][pool][host_function]") {
  REQUIRE_DRIVER();
  if (!pool_stats().pooled) CUSTREAM_SKIP("nothing is pooled under AddressSanitizer");
  Stream s(true);
  burst(s, 1000);
  std::size_t held = 0;
  std::thread([&] {
    burst(s, 1);
    held = pool_stats().thread_held;
  }).join();
  CHECK(held > 0);
  CHECK(held < kPoolBatch);
  // Nothing is lost: a burst as large as before needs no new slab.
  const std::size_t slabs = pool_stats().slabs;
  burst(s, 1000);
  CHECK(pool_stats().slabs == slabs);
}

TEST_CASE("under AddressSanitizer no task comes from the pool", "[gpu][pool][host_function]") {
  REQUIRE_DRIVER();
  Stream s(true);
  const std::size_t slabs = pool_stats().slabs;
  burst(s, 100);
  if (pool_stats().pooled) {
    CHECK(pool_stats().thread_held > 0);
  } else {
    // A recycled block would hide a use after free from ASan (it would read a live task).
    CHECK(pool_stats().slabs == slabs);
    CHECK(pool_stats().slabs == 0);
    CHECK(pool_stats().thread_held == 0);
  }
}

// The block pool of host tasks and completion tasks: what a thread may hold, what thread exit
// gives back, that both families share it, and that AddressSanitizer sees every task. Runs on
// the emulator and on the GPU.
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "custream/capture.hpp"
#include "custream/completions.hpp"
#include "custream/detail/host_task.hpp"
#include "custream/host_function.hpp"
#include "custream/stream.hpp"
#include "graph_support.hpp"

using custream::Stream;
using custream::detail::kPoolBatch;
using custream::detail::pool_stats;

namespace {

// Enqueues `n` pooled host functions (not noexcept, larger than a pointer) behind a gate, so
// all `n` are in flight at once, then opens it and waits for them. Returns whether all ran
// (no Catch assertion inside: workers call it too, and assertions are for the test's thread).
bool burst(const Stream& s, int n) {
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
  return custream_test::eventually([&] { return runs.load() == n; });
}

// Runs `body` on `count` threads at once; returns how many finished without an exception
// and with `body` returning true.
template <typename Body>
int on_threads(int count, Body body) {
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < count; ++t) {
    threads.emplace_back([&, t] {
      try {
        if (body(t)) ok.fetch_add(1);
      } catch (...) {
      }
    });
  }
  for (auto& thread : threads) thread.join();
  return ok.load();
}

// Blocks the pool made that are neither in this thread's list, nor in a freeing thread's
// partial batch, nor shared: held by other threads' lists, or in flight.
long unseen_blocks() {
  const auto stats = pool_stats();
  return static_cast<long>(stats.blocks) - static_cast<long>(stats.thread_held) -
         static_cast<long>(stats.freeing) - static_cast<long>(stats.shared);
}

}  // namespace

TEST_CASE("idle workers that enqueued once each hold at most one batch of blocks",
          "[gpu][pool][host_function]") {
  REQUIRE_DRIVER();
  if (!pool_stats().pooled) CUSTREAM_SKIP("nothing is pooled under AddressSanitizer");
  Stream s(custream::StreamFlags::non_blocking);
  REQUIRE(burst(s, 2000));
  // The freed blocks are shared now, less this thread's list and the freeing thread's batch.
  CHECK(pool_stats().shared >= 2000 - 2 * kPoolBatch);

  // Each worker, after a burst of kBurst from this thread (so that many freed blocks are
  // shared), enqueues one host function, then idles. Before: each took the whole shared
  // list (~kBurst blocks each, and the next burst made new slabs: 32 × 500 blocks held).
  constexpr int kWorkers = 32;
  constexpr int kBurst = 500;
  const long unseen_before = unseen_blocks();
  std::mutex mutex;
  std::condition_variable cv;
  int measured = 0;
  bool release = false;
  std::vector<std::size_t> held(kWorkers, 0);
  std::atomic<int> ran{0};
  std::vector<std::thread> workers;
  for (int w = 0; w < kWorkers; ++w) {
    REQUIRE(burst(s, kBurst));
    workers.emplace_back([&, w] {
      if (burst(s, 1)) ran.fetch_add(1);  // one host function, then idle
      std::unique_lock<std::mutex> lock(mutex);
      held[w] = pool_stats().thread_held;
      ++measured;
      cv.notify_all();
      cv.wait(lock, [&] { return release; });
    });
    std::unique_lock<std::mutex> lock(mutex);
    cv.wait(lock, [&] { return measured == w + 1; });
  }
  CHECK(ran.load() == kWorkers);
  std::size_t total = 0;
  for (std::size_t h : held) {
    CHECK(h < kPoolBatch);
    total += h;
  }
  CHECK(total <= kWorkers * kPoolBatch);
  // Pool-wide: what the idle workers hold is all that is missing (nothing is in flight).
  CHECK(unseen_blocks() - unseen_before == static_cast<long>(total));
  {
    std::lock_guard<std::mutex> lock(mutex);
    release = true;
  }
  cv.notify_all();
  for (auto& t : workers) t.join();
  CHECK(unseen_blocks() == unseen_before);  // the ended workers gave their lists back
}

TEST_CASE("a thread's blocks go back to the pool when it ends, walking only what it held",
          "[gpu][pool][host_function]") {
  REQUIRE_DRIVER();
  if (!pool_stats().pooled) CUSTREAM_SKIP("nothing is pooled under AddressSanitizer");
  Stream s(custream::StreamFlags::non_blocking);
  REQUIRE(burst(s, 3000));  // ~3,000 freed blocks shared
  const auto before = pool_stats();
  const long unseen_before = unseen_blocks();
  std::size_t held = 0;
  std::thread([&] {
    // One host function; again if the batch it took had no block left over (a batch of 1).
    for (int i = 0; i < 100 && held == 0; ++i) {
      if (!burst(s, 1)) return;
      held = pool_stats().thread_held;
    }
  }).join();
  const auto after = pool_stats();
  CHECK(held > 0);
  CHECK(held < kPoolBatch);
  // The ending thread walked and gave back exactly its own list (before: the whole ~3,000
  // blocks it had taken; 4-6 ms per ending thread at a 200k-block pool).
  CHECK(after.exit_handbacks == before.exit_handbacks + 1);
  CHECK(after.exit_returned - before.exit_returned == held);
  CHECK(after.exit_returned - before.exit_returned <= kPoolBatch);
  CHECK(unseen_blocks() == unseen_before);  // nothing lost
}

TEST_CASE("under AddressSanitizer no task comes from the pool", "[gpu][pool][host_function]") {
  REQUIRE_DRIVER();
  Stream s(custream::StreamFlags::non_blocking);
  const std::size_t slabs = pool_stats().slabs;
  REQUIRE(burst(s, 100));
  const auto stats = pool_stats();
  if (stats.pooled) {
    CHECK(stats.slabs > 0);
    CHECK(stats.blocks >= 100);
  } else {
    // A pooled block freed and then used (a run-once payload run twice) would read a
    // recycled task: a wild jump, not a report. Under ASan every task is a plain allocation,
    // so its quarantine reports the use after free; a test cannot free a task twice and pass.
    CHECK(stats.slabs == slabs);
    CHECK(stats.slabs == 0);
    CHECK(stats.blocks == 0);
    CHECK(stats.thread_held == 0);
    CHECK(stats.freeing == 0);
    CHECK(stats.shared == 0);
  }
}

TEST_CASE("blocks are neither lost nor handed out twice while threads enqueue, free and end",
          "[gpu][pool][host_function]") {
  REQUIRE_DRIVER();
  if (!pool_stats().pooled) CUSTREAM_SKIP("nothing is pooled under AddressSanitizer");
  constexpr int kThreads = 8;
  // Constant while this test runs, once nothing is in flight.
  const long unseen_before = unseen_blocks();
  // Each thread: bursts of several sizes on its own stream (refills pop shared batches or
  // carve slabs while the driver's threads free blocks and push whole batches), then it
  // ends and gives its list back.
  const int ok = on_threads(kThreads, [](int t) {
    Stream s(custream::StreamFlags::non_blocking);
    for (int round = 0; round < 6; ++round) {
      if (!burst(s, 37 + 151 * ((round + t) % 4))) return false;
    }
    return pool_stats().thread_held < kPoolBatch;
  });
  CHECK(ok == kThreads);
  // Every block the threads used is back in exactly one place: a block in two lists would be
  // counted twice, a lost one not at all.
  CHECK(unseen_blocks() == unseen_before);
  CHECK(pool_stats().blocks > 0);
}

TEST_CASE("completion tasks and host tasks take their blocks from one pool",
          "[pool][completions]") {
  if (!pool_stats().pooled) CUSTREAM_SKIP("nothing is pooled under AddressSanitizer");
  using custream::detail::HostTask;
  using custream::detail::PoolBlock;
  // On a thread of its own, which holds no blocks yet: the completion family's blocks refill
  // this thread's list (a batch may hold one block: again until one is left over), and the
  // host family's next block is the head of that same list (before, each family had a pool
  // of its own, and the completion blocks left this list empty).
  std::size_t held_after_completion = 0;
  std::size_t held_after_host = 0;
  bool host_took_head = false;
  std::size_t freeing_added = 0;
  std::thread([&] {
    std::vector<void*> completions;
    for (int i = 0; i < 100 && custream::detail::t_pool_free == nullptr; ++i) {
      completions.push_back(custream::detail::allocate_task_block());
    }
    held_after_completion = pool_stats().thread_held;
    PoolBlock* const head = custream::detail::t_pool_free;
    void* const host = HostTask::operator new(HostTask::kPooledBytes);
    host_took_head = head != nullptr && host == head;
    held_after_host = pool_stats().thread_held;
    // Each goes back to this thread's partial batch, whichever family frees it.
    const std::size_t freeing = pool_stats().freeing;
    custream::detail::free_task_block(host);
    HostTask::operator delete(completions.back(), HostTask::kPooledBytes);
    freeing_added = pool_stats().freeing - freeing;
    completions.pop_back();
    for (void* c : completions) custream::detail::free_task_block(c);
  }).join();
  CHECK(held_after_completion > 0);
  CHECK(held_after_completion < kPoolBatch);
  CHECK(host_took_head);
  CHECK(held_after_host + 1 == held_after_completion);
  CHECK(freeing_added == 2);
}

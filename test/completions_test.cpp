// custream::Completions: callbacks, futures and the eventfd after the stream's work, in order,
// never early, each callable run and destroyed once; capture refused; errors delivered; nothing
// lost when an engine or a stream goes. Design: docs/design/completions.md.
#include "custream/completions.hpp"

#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "completions/task_queue.hpp"
#include "completions/watcher_sleeps.hpp"
#include "custream/capture_mode.hpp"
#include "custream/context.hpp"
#include "custream/device.hpp"
#include "custream/device_buffer.hpp"
#include "custream/device_scope.hpp"
#include "custream/graph.hpp"
#include "custream/host_function.hpp"
#include "custream/host_function_error_handler.hpp"
#include "custream/stream.hpp"
#include "custream/testing.hpp"
#include "emu_control.h"
#include "release_support.hpp"
#include "test_support.hpp"

using custream::CompletionDelivery;
using custream::CompletionMechanism;
using custream::CompletionOptions;
using custream::Completions;
using custream::Device;
using custream::Stream;
using custream::StreamFlags;
using custream_test::expect_error;

namespace {

using namespace std::chrono_literals;

// Holds a stream at a host function until opened: work after it is not done before. The
// destructor opens it and waits until the host function has let go of the gate.
class Gate {
 public:
  explicit Gate(const Stream& s) {
    s.launch_host_func([this] {
      std::unique_lock<std::mutex> lock(mutex_);
      entered_ = true;
      changed_.notify_all();
      changed_.wait(lock, [this] { return open_; });
      left_ = true;
      changed_.notify_all();
    });
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [this] { return entered_; });
  }
  ~Gate() {
    std::unique_lock<std::mutex> lock(mutex_);
    open_ = true;
    changed_.notify_all();
    changed_.wait(lock, [this] { return left_; });
  }
  void open() {
    std::lock_guard<std::mutex> lock(mutex_);
    open_ = true;
    changed_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool entered_ = false;
  bool open_ = false;
  bool left_ = false;
};

// Waits up to 10 s for `done`.
template <typename Pred>
bool eventually(Pred done) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(100us);
  }
  return true;
}

// Waits up to `limit` for the child `pid` and returns its wait status; -1 when it ran past
// `limit` (it is killed then): a hang fails, never hangs the suite.
int custream_test_wait_child(pid_t pid, std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    int status = 0;
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r < 0) return -2;
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      (void)::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(10ms);
  }
}

// Counts constructions and destructions of the callables' captures.
struct Tracked {
  static inline std::atomic<long> made{0};
  static inline std::atomic<long> gone{0};
  Tracked() { made.fetch_add(1); }
  Tracked(const Tracked&) { made.fetch_add(1); }
  Tracked(Tracked&&) noexcept { made.fetch_add(1); }
  ~Tracked() { gone.fetch_add(1); }
};

// Options with `mechanism` (and `delivery`).
CompletionOptions with(CompletionMechanism mechanism,
                       CompletionDelivery delivery = CompletionDelivery::thread) {
  CompletionOptions o;
  o.mechanism = mechanism;
  o.delivery = delivery;
  return o;
}

// Both mechanisms, named in the test's output.
CompletionMechanism each_mechanism() {
  const CompletionMechanism m =
      GENERATE(CompletionMechanism::event, CompletionMechanism::memory_write);
  UNSCOPED_INFO("mechanism " << (m == CompletionMechanism::event ? "event" : "memory_write"));
  return m;
}

}  // namespace

TEST_CASE("completions run after the stream's work, in order, on custream's thread",
          "[completions][gpu]") {
  REQUIRE_DRIVER();
  Completions engine(with(each_mechanism()));
  const Stream s(Device(0), StreamFlags::non_blocking);
  std::vector<int> order;
  std::mutex order_mutex;
  std::atomic<int> ran{0};
  std::thread::id ran_on;
  Tracked::made = 0;
  Tracked::gone = 0;
  {
    Gate gate(s);
    for (int i = 0; i < 100; ++i) {
      engine.when_done(s, [i, &order, &order_mutex, &ran, &ran_on, t = Tracked{}] {
        std::lock_guard<std::mutex> lock(order_mutex);
        order.push_back(i);
        ran_on = std::this_thread::get_id();
        ran.fetch_add(1);
      });
    }
    std::this_thread::sleep_for(20ms);
    CHECK(ran.load() == 0);  // never early: the gate holds the stream
    CHECK(engine.pending() == 100);
  }
  REQUIRE(eventually([&] { return ran.load() == 100; }));
  std::vector<int> expected(100);
  for (int i = 0; i < 100; ++i) expected[i] = i;
  CHECK(order == expected);
  CHECK(ran_on != std::this_thread::get_id());
  REQUIRE(eventually([&] { return engine.pending() == 0; }));
  CHECK(Tracked::made.load() == Tracked::gone.load());  // each capture destroyed once

  // An over-aligned callable and a large one (not a task block) run and are destroyed too.
  struct alignas(64) Wide {
    char bytes[64];
  };
  std::atomic<int> odd{0};
  engine.when_done(s,
                   [&odd, w = Wide{}] { odd += 1 + (reinterpret_cast<std::uintptr_t>(&w) % 64); });
  engine.when_done(s, [&odd, big = std::array<char, 512>{}] { odd += 1 + big[0]; });
  CHECK(eventually([&] { return odd.load() == 2; }));

  // A future, and a callback that registers another from inside.
  std::future<void> f = engine.future(s);
  CHECK(f.wait_for(10s) == std::future_status::ready);
  f.get();
  std::atomic<bool> inner{false};
  engine.when_done(s, [&] { engine.when_done(s, [&] { inner = true; }); });
  CHECK(eventually([&] { return inner.load(); }));
}

TEST_CASE("completions delivered to the caller through an eventfd", "[completions][gpu]") {
  REQUIRE_DRIVER();
  Completions engine(with(each_mechanism(), CompletionDelivery::caller));
  REQUIRE(engine.eventfd() >= 0);
  CHECK(Completions().eventfd() == -1);
  const Stream s(Device(0), StreamFlags::non_blocking);
  std::vector<std::thread::id> ran_on;
  std::future<void> f;
  {
    Gate gate(s);
    for (int i = 0; i < 3; ++i) {
      engine.when_done(s, [&] { ran_on.push_back(std::this_thread::get_id()); });
    }
    f = engine.future(s);
    pollfd p{engine.eventfd(), POLLIN, 0};
    CHECK(::poll(&p, 1, 20) == 0);  // nothing ready while the gate holds the stream
    CHECK(engine.run_ready() == 0);
  }
  pollfd p{engine.eventfd(), POLLIN, 0};
  REQUIRE(::poll(&p, 1, 10000) == 1);
  CHECK(f.wait_for(10s) == std::future_status::ready);  // futures need no run_ready
  REQUIRE(eventually([&] {
    engine.run_ready();
    return ran_on.size() == 3;
  }));
  for (const auto& id : ran_on) CHECK(id == std::this_thread::get_id());
  CHECK(eventually([&] { return engine.pending() == 0; }));  // the future's, just after it
  CHECK(::poll(&p, 1, 0) == 0);                              // cleared
}

TEST_CASE("completions refuse a capturing stream, also a foreign capture", "[completions][gpu]") {
  REQUIRE_DRIVER();
  Completions engine;
  const Stream s(Device(0), StreamFlags::non_blocking);
  Tracked::made = 0;
  Tracked::gone = 0;
  const custream::DeviceBuffer buffer(4, Device(0));
  s.begin_capture();
  expect_error([&] { engine.when_done(s, [t = Tracked{}] {}); },
               CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "register after graph.launch(stream)");
  CHECK(Tracked::made.load() == Tracked::gone.load());  // destroyed, not run
  s.memset32(buffer.get(), 0, 1);
  custream::Graph g = s.end_capture();  // the capture stayed valid
  const auto& api = custream::detail::api();
  REQUIRE(api.cuStreamBeginCapture(s.handle(), CU_STREAM_CAPTURE_MODE_RELAXED) == CUDA_SUCCESS);
  expect_error([&] { (void)engine.future(s); }, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "capturing");
  CUgraph raw = nullptr;
  REQUIRE(api.cuStreamEndCapture(s.handle(), &raw) == CUDA_SUCCESS);
  api.cuGraphDestroy(raw);
  g.launch(s);
  CHECK(engine.future(s).wait_for(10s) == std::future_status::ready);
}

TEST_CASE("completion errors: a throwing callback, a failed stream, every device and context",
          "[completions][gpu]") {
  REQUIRE_DRIVER();
  const CompletionMechanism mechanism = each_mechanism();
  Completions engine(with(mechanism));
  std::mutex m;
  std::vector<std::string> reported;
  const auto previous =
      custream::set_host_function_error_handler([&](const custream::HostFunctionError& e) {
        std::lock_guard<std::mutex> lock(m);
        reported.push_back(e.message());
      });
  const Stream s(Device(0), StreamFlags::non_blocking);
  engine.when_done(s, [] { throw std::runtime_error("completion boom"); });
  CHECK(eventually([&] {
    std::lock_guard<std::mutex> lock(m);
    return !reported.empty();
  }));
  {
    std::lock_guard<std::mutex> lock(m);
    CHECK(reported.at(0).find("completion boom") != std::string::npos);
    // Told as what it is: a completion callback, not a host function.
    CHECK(reported.at(0).rfind("a completion callback registered on <", 0) == 0);
    reported.clear();
  }
  if (custream_test::emulated()) {
    // The watcher's query fails: every kind of registration completes with that error.
    auto sticky = custream_test::emu_symbol<decltype(&custream_emu_set_sticky_error)>(
        "custream_emu_set_sticky_error");
    std::atomic<CUresult> seen{CUDA_SUCCESS};
    std::atomic<bool> plain_ran{false};
    Gate gate(s);
    engine.when_done(s, [&](CUresult r) { seen = r; });
    engine.when_done(s, [&] { plain_ran = true; });
    std::future<void> f = engine.future(s);
    // A registration the driver refuses throws and destroys its callable unrun.
    auto fail =
        custream_test::emu_symbol<decltype(&custream_emu_fail_call)>("custream_emu_fail_call");
    Tracked::made = 0;
    Tracked::gone = 0;
    fail(mechanism == CompletionMechanism::event ? "cuEventRecord" : "cuStreamWriteValue64", 1,
         CUDA_ERROR_INVALID_HANDLE);
    expect_error([&] { engine.when_done(s, [t = Tracked{}] { FAIL("ran"); }); },
                 CUDA_ERROR_INVALID_HANDLE, "registering a completion");
    CHECK(Tracked::made.load() == Tracked::gone.load());
    // As after a kernel fault: every call fails, and a stream writes nothing more (the
    // watcher asks the driver once it has waited `spin` without a completion).
    sticky(CUDA_ERROR_LAUNCH_FAILED);
    const bool failed = eventually([&] { return seen.load() != CUDA_SUCCESS; }) &&
                        f.wait_for(10s) == std::future_status::ready;
    sticky(CUDA_SUCCESS);
    REQUIRE(failed);
    CHECK(seen.load() == CUDA_ERROR_LAUNCH_FAILED);
    REQUIRE(f.wait_for(10s) == std::future_status::ready);
    // The watcher lets go of the future's state first: the exception's reference count lives
    // in libstdc++, which ThreadSanitizer does not see, so a release on the watcher while this
    // thread reads the Error would be reported as a race.
    CHECK(eventually([&] { return engine.pending() == 0; }));
    expect_error([&] { f.get(); }, CUDA_ERROR_LAUNCH_FAILED, "the stream's work failed");
    CHECK(eventually([&] {
      std::lock_guard<std::mutex> lock(m);
      return !reported.empty();
    }));
    CHECK_FALSE(plain_ran.load());
    std::lock_guard<std::mutex> lock(m);
    CHECK(reported.at(0).find("CUDA_ERROR_LAUNCH_FAILED") != std::string::npos);
    CHECK(reported.at(0).rfind("a completion callback registered on <", 0) == 0);
  }
  custream::set_host_function_error_handler(previous);

  // Every device, a created context's stream, and the per-thread stream with no context current.
  for (int d = 0; d < Device::count(); ++d) {
    const Stream other(Device(d), StreamFlags::non_blocking);
    CHECK(engine.future(other).wait_for(10s) == std::future_status::ready);
  }
  if (custream::detail::api().cuCtxCreate != nullptr) {
    const custream::Context created = custream::Context::create(Device(0));
    const Stream cs(created, StreamFlags::non_blocking);
    CHECK(engine.future(cs).wait_for(10s) == std::future_status::ready);
  }
  // The per-thread stream with a context current (a special handle with none is refused: see
  // "a special handle with no current context").
  std::thread([&] {
    custream::DeviceScope scope(0);
    CHECK(engine.future(Stream::per_thread()).wait_for(10s) == std::future_status::ready);
  }).join();
}

TEST_CASE("completions: nothing lost or run twice when an engine or a stream goes",
          "[completions][gpu][threads]") {
  REQUIRE_DRIVER();
  Tracked::made = 0;
  Tracked::gone = 0;
  std::atomic<int> ran{0};
  auto s = std::make_unique<Stream>(Device(0), StreamFlags::non_blocking);
  auto gate = std::make_unique<Gate>(*s);
  std::atomic<bool> opened{false};
  std::thread opener([&] {
    std::this_thread::sleep_for(30ms);
    opened = true;
    gate->open();
  });
  const CompletionMechanism mechanism = each_mechanism();
  {
    Completions engine(with(mechanism));
    for (int i = 0; i < 10; ++i) engine.when_done(*s, [&ran, t = Tracked{}] { ran++; });
    s.reset();  // the stream goes with registrations pending: they still run
  }             // the engine goes with registrations pending: its destructor waits, runs them
  CHECK(opened.load());
  opener.join();
  CHECK(ran.load() == 10);
  CHECK(Tracked::made.load() == Tracked::gone.load());

  // Many threads on many streams: every callback exactly once.
  Completions engine(with(mechanism));
  constexpr int kThreads = 8, kEach = 2000;
  std::vector<std::unique_ptr<Stream>> streams;
  for (int i = 0; i < kThreads; ++i) {
    streams.push_back(std::make_unique<Stream>(Device(0), StreamFlags::non_blocking));
  }
  std::vector<std::atomic<int>> hits(kThreads * kEach);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        engine.when_done(*streams[t], [&hits, k = t * kEach + i] { hits[k].fetch_add(1); });
      }
    });
  }
  for (auto& th : threads) th.join();
  REQUIRE(eventually([&] { return engine.pending() == 0; }));
  int once = 0;
  for (auto& h : hits) once += h.load() == 1;
  CHECK(once == kThreads * kEach);
}

TEST_CASE("completion mechanisms make the driver calls they say", "[completions][emu-only]") {
  if (!custream_test::emulated()) CUSTREAM_SKIP("counts the emulator's calls");
  auto count_calls = custream_test::emu_symbol<void (*)(int)>("custream_emu_count_calls");
  auto calls = custream_test::emu_symbol<long (*)(const char*)>("custream_emu_call_count");
  const Stream s(Device(0), StreamFlags::non_blocking);
  for (const CompletionMechanism m : {CompletionMechanism::automatic, CompletionMechanism::event,
                                      CompletionMechanism::memory_write}) {
    CompletionOptions options = with(m);
    // No backing off while the test runs (a slow machine): the written words' watcher asks the
    // driver only when it backs off (for a failed context's error).
    options.spin = std::chrono::seconds(60);
    count_calls(1);
    auto engine_ptr = std::make_unique<Completions>(options);
    Completions& engine = *engine_ptr;
    engine.future(s).get();  // pools filled, the device's support asked, the watcher started
    // The watcher relaxed its own capture mode first (its queries are made behind the
    // application's back).
    CHECK(calls("cuThreadExchangeStreamCaptureMode") == 1);
    count_calls(0);
    count_calls(1);
    for (int i = 0; i < 10; ++i) engine.future(s).get();
    INFO("mechanism " << static_cast<int>(m));
    const bool words = m == CompletionMechanism::memory_write;
    CHECK(calls("cuStreamIsCapturing") == 10);
    CHECK(calls("cuStreamWriteValue64") == (words ? 10 : 0));
    CHECK(calls("cuEventRecord") == (words ? 0 : 10));
    if (words) {
      CHECK(calls("cuEventQuery") == 0);  // watching words makes no driver calls
    } else {
      CHECK(calls("cuEventQuery") >= 10);
    }
    count_calls(0);  // (clears the counts)
    // A green context's stream records one of the device's pooled events with either mechanism
    // (the probe that tells a failed context's error from a word that was never written is a
    // primary-context event), and makes none.
    const custream::Context green =
        custream::Context::create_green(Device(0).split_sms(1, 1).groups.at(0));
    const Stream gs(green, StreamFlags::non_blocking);
    engine.future(gs).get();  // this thread's cache of the device's events ready
    count_calls(1);
    for (int i = 0; i < 10; ++i) engine.future(gs).get();
    CHECK(calls("cuStreamIsCapturing") == 10);
    CHECK(calls("cuEventRecord") == 10);
    CHECK(calls("cuStreamWriteValue64") == 0);
    CHECK(calls("cuEventCreate") == 0);
    count_calls(0);
  }
}

namespace {
// Swaps entries of custream's driver table (the driver's, loaded on the heap) for one test, and
// restores them when it ends, also when a check throws. Made before the engines that call them
// start their watchers, and destroyed after those end.
class TableSwap {
 public:
  TableSwap() : saved_(table()) {}
  ~TableSwap() { table() = saved_; }
  TableSwap(const TableSwap&) = delete;
  TableSwap& operator=(const TableSwap&) = delete;
  static custream::detail::DriverApi& table() {
    return const_cast<custream::detail::DriverApi&>(custream::detail::api());
  }
  const custream::detail::DriverApi& saved() const { return saved_; }

 private:
  custream::detail::DriverApi saved_;
};

// Wrappers of the driver's record and write, put in custream's table for one test: on the
// thread that sets t_delay_after_enqueue, the call returns only after 300 ms, so that the
// registration it belongs to is pushed after a later one of another thread.
thread_local bool t_delay_after_enqueue = false;
std::atomic<bool> g_delayed_enqueued{false};
decltype(custream::detail::DriverApi::cuEventRecord) g_real_record = nullptr;
decltype(custream::detail::DriverApi::cuStreamWriteValue64) g_real_write = nullptr;

void delay_if_asked() {
  if (!t_delay_after_enqueue) return;
  g_delayed_enqueued = true;
  std::this_thread::sleep_for(300ms);
}
CUresult delayed_record(CUevent e, CUstream s) {
  const CUresult r = g_real_record(e, s);
  delay_if_asked();
  return r;
}
CUresult delayed_write(CUstream s, CUdeviceptr p, cuuint64_t v, unsigned flags) {
  const CUresult r = g_real_write(s, p, v, flags);
  delay_if_asked();
  return r;
}
}  // namespace

TEST_CASE("completions: registrations pushed in another order than the stream's come no earlier",
          "[completions][gpu][threads]") {
  REQUIRE_DRIVER();
  // C, then A (on another thread, pushed late), then B behind a closed gate, on one stream:
  // pushed C, B, A. When the stream has done C and A but not B, B must not run: a watcher that
  // took "the newest pushed is done" for "all pushed before it are done" ran B early (and,
  // with written words, gave B's word back while the stream was still to write it). A runs
  // after B: callbacks on one stream are delivered in push order.
  const CompletionMechanism mechanism = each_mechanism();
  // The wrappers delay only the thread that asks; swapped before the engine's watcher starts,
  // restored after it ends.
  const TableSwap swap;
  g_real_record = swap.saved().cuEventRecord;
  g_real_write = swap.saved().cuStreamWriteValue64;
  TableSwap::table().cuEventRecord = &delayed_record;
  TableSwap::table().cuStreamWriteValue64 = &delayed_write;
  Completions engine(with(mechanism));
  const Stream s(Device(0), StreamFlags::non_blocking);
  engine.future(s).get();  // pools and the device's support ready
  g_delayed_enqueued = false;
  std::atomic<bool> b_gate_open{false};
  std::atomic<int> c_ran{0}, a_ran{0}, b_ran{0}, b_early{0};
  {
    auto first = std::make_unique<Gate>(s);
    engine.when_done(s, [&] { c_ran++; });
    std::thread a([&] {
      t_delay_after_enqueue = true;
      engine.when_done(s, [&] { a_ran++; });
    });
    while (!g_delayed_enqueued.load()) std::this_thread::yield();
    // The second gate: a host function that waits for b_gate_open (the stream reaches it only
    // after the first gate opens).
    std::atomic<bool> second_left{false};
    s.launch_host_func([&] {
      while (!b_gate_open.load()) std::this_thread::sleep_for(100us);
      second_left = true;
    });
    engine.when_done(s, [&] {
      b_ran++;
      if (!b_gate_open.load()) b_early++;
    });
    first.reset();  // C and A are done now; B waits for the second gate
    a.join();       // A is pushed, after B
    CHECK(eventually([&] { return c_ran.load() == 1; }));
    std::this_thread::sleep_for(50ms);
    CHECK(b_ran.load() == 0);
    CHECK(a_ran.load() == 0);  // delivered in push order: after B
    b_gate_open = true;
    CHECK(eventually([&] { return second_left.load(); }));
  }
  CHECK(eventually([&] { return b_ran.load() == 1 && a_ran.load() == 1; }));
  CHECK(b_early.load() == 0);
}

namespace {
// Wrappers of the driver's record and query, for one test: when each event was last recorded,
// and the shortest time from a record to a query of it.
std::mutex g_marks_mutex;
std::unordered_map<CUevent, std::chrono::steady_clock::time_point> g_recorded;
std::chrono::steady_clock::duration g_soonest_query = std::chrono::hours(1);
long g_queries = 0;
decltype(custream::detail::DriverApi::cuEventQuery) g_real_query = nullptr;
// Whether timed_query() answers "done" without asking the driver.
bool g_done_at_once = false;

CUresult timed_record(CUevent e, CUstream s) {
  const CUresult r = g_real_record(e, s);
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(g_marks_mutex);
  g_recorded[e] = now;
  return r;
}
CUresult timed_query(CUevent e) {
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> lock(g_marks_mutex);
    if (const auto it = g_recorded.find(e); it != g_recorded.end()) {
      g_soonest_query = std::min(g_soonest_query, now - it->second);
      ++g_queries;
    }
  }
  return g_done_at_once ? CUDA_SUCCESS : g_real_query(e);
}
}  // namespace

TEST_CASE("completions: the watcher queries no event within a microsecond of its record",
          "[completions][gpu][threads]") {
  REQUIRE_DRIVER();
  // Querying an event its thread has just recorded costs that thread the event's driver state
  // (about 200 ns a registration on an H200, on a stream whose work completes as it comes). The
  // watcher asked for the newest event of a queue as soon as the oldest was done: on a running
  // stream, often the record of the registration it had just taken. It now leaves an event
  // unqueried for a microsecond after it took it (and so after its record). With the driver's
  // answers this catches the old rule only sometimes (on the H200 its soonest query in one run
  // came 1.001 us after the record; on the emulator 4-500 us either way), so the test runs
  // twice: with the driver's answers, and with every query answered "done" at once, a lingering
  // watcher and paced registrations, so that each registration is the newest when the watcher
  // takes it. Without the rule that run failed 20 times in 20 on the emulator (2 cores, another
  // build running beside; its soonest query 0.4-0.8 us after the record); unpaced, with a
  // sleeping watcher, it failed in 13 of 20. The queue's rule itself has a unit test below.
  const bool done_at_once = GENERATE(false, true);
  g_done_at_once = done_at_once;
  {
    std::lock_guard<std::mutex> lock(g_marks_mutex);
    g_recorded.clear();
    g_soonest_query = std::chrono::hours(1);
    g_queries = 0;
  }
  std::atomic<int> ran{0};
  // Paced, three times as many: each is a chance to catch a query of the newest event.
  const int each = done_at_once ? 9000 : 3000;
  {
    const TableSwap swap;
    g_real_record = swap.saved().cuEventRecord;
    g_real_query = swap.saved().cuEventQuery;
    TableSwap::table().cuEventRecord = &timed_record;
    TableSwap::table().cuEventQuery = &timed_query;
    CompletionOptions options = with(CompletionMechanism::event);
    // Answered at once, the watcher lingers between registrations instead of sleeping: it
    // takes each as it comes, without a wake-up's delay.
    if (done_at_once) options.linger = 10s;
    Completions engine(options);
    const Stream s(Device(0), StreamFlags::non_blocking);
    const Stream other(Device(0), StreamFlags::non_blocking);
    // Answered "done" at once, registrations tens of microseconds apart: the watcher has taken
    // the one before, so each is the newest when taken (a thread registering flat out got
    // ahead of the watcher, and a sleeping watcher woke to a batch: the newest was old then).
    const auto pace = [done_at_once] {
      if (done_at_once) std::this_thread::sleep_for(20us);  // leaving the watcher a core
    };
    for (int i = 0; i < each; ++i) {  // the owner's ring
      engine.when_done(s, [&ran] { ran++; });
      pace();
    }
    std::thread([&] {  // the stack
      for (int i = 0; i < each; ++i) {
        engine.when_done(other, [&ran] { ran++; });
        pace();
      }
    })
        .join();
    REQUIRE(eventually([&] { return engine.pending() == 0; }));
  }
  g_done_at_once = false;
  CHECK(ran.load() == 2 * each);
  std::lock_guard<std::mutex> lock(g_marks_mutex);
  const double soonest_us = std::chrono::duration<double, std::micro>(g_soonest_query).count();
  INFO(g_queries << " queries; the soonest " << soonest_us << " us after its record"
                 << (done_at_once ? " (every query answered done at once)" : ""));
  CHECK(g_queries > 0);
  CHECK(g_soonest_query >= 1us);
  g_recorded.clear();
}

TEST_CASE("completions: with no spin, an event that waits to ripen costs no backoff sleep",
          "[completions][gpu]") {
  REQUIRE_DRIVER();
  // With `spin` 0 the watcher backs off as soon as a pass completes nothing. A pass that leaves
  // a just-taken event unqueried (it ripens a microsecond later) must not count as one: it
  // slept 50 us and more before asking for an event the driver had done, once per
  // registration (found in review: two sleeps a registration instead of one). The driver's
  // query answers done at once here, so each registration should cost the watcher one sleep:
  // the one it falls into once nothing is pending.
  constexpr int kRegistrations = 100;
  custream::detail::CompletionWakes before, after;
  {
    const TableSwap swap;
    TableSwap::table().cuEventQuery = [](CUevent) { return CUDA_SUCCESS; };
    CompletionOptions options = with(CompletionMechanism::event);
    options.spin = 0us;
    Completions engine(options);
    const Stream s(Device(0), StreamFlags::non_blocking);
    engine.future(s).get();
    before = custream::testing::completion_wakes(engine);
    for (int i = 0; i < kRegistrations; ++i) engine.future(s).get();
    after = custream::testing::completion_wakes(engine);
  }
  const std::size_t sleeps = after.sleeps - before.sleeps;
  INFO(sleeps << " watcher sleeps for " << kRegistrations << " registrations");
  CHECK(sleeps <= kRegistrations + kRegistrations / 4);
}

TEST_CASE("completions: a registration within `linger` of the last completion wakes no one",
          "[completions][gpu]") {
  REQUIRE_DRIVER();
  // With nothing pending the watcher sleeps, and the next registration wakes it with a system
  // call: microseconds on the registering thread, tens of them before the watcher runs (on an
  // H200 VM). With `linger` it keeps taking registrations that long after its last completion
  // instead, and sleeps after.
  constexpr int kRegistrations = 5;
  const auto run = [](std::chrono::microseconds linger) {
    CompletionOptions options = with(CompletionMechanism::event);
    options.linger = linger;
    Completions engine(options);
    const Stream s(Device(0), StreamFlags::non_blocking);
    engine.future(s).get();
    const auto before = custream::testing::completion_wakes(engine);
    for (int i = 0; i < kRegistrations; ++i) {
      std::this_thread::sleep_for(2ms);  // nothing pending meanwhile
      engine.future(s).get();
    }
    const auto after = custream::testing::completion_wakes(engine);
    return std::make_pair(after.wakes - before.wakes, after.sleeps - before.sleeps);
  };
  const auto [woken, slept] = run(0us);
  INFO("without linger: " << woken << " wake-up calls, " << slept << " sleeps");
  CHECK(woken >= 1);  // each registration that found it asleep woke it (all, unless it was late)
  const auto [woken_lingering, slept_lingering] = run(10s);
  INFO("lingering: " << woken_lingering << " wake-up calls, " << slept_lingering << " sleeps");
  CHECK(woken_lingering == 0);  // (a sleep here is a backoff, when the work outlasted `spin`)
  const Stream s(Device(0), StreamFlags::non_blocking);
  {  // a short linger ends: the watcher sleeps
    CompletionOptions options = with(CompletionMechanism::event);
    options.linger = 20ms;
    Completions engine(options);
    const std::size_t sleeps = custream::testing::completion_wakes(engine).sleeps;
    engine.future(s).get();
    CHECK(eventually([&] { return custream::testing::completion_wakes(engine).sleeps > sleeps; }));
  }
  {  // no linger before the first completion: a new engine's watcher sleeps
    CompletionOptions options = with(CompletionMechanism::event);
    options.linger = 60s;
    Completions engine(options);
    CHECK(eventually([&] { return custream::testing::completion_wakes(engine).sleeps >= 1; }));
  }
  {
    // Work taken while lingering is spun on for `spin` from then, as after a wake-up: taken
    // `spin` after the last completion, on a held stream, it costs no backoff sleep (found in
    // review: it went straight to backoff sleeps, which registrations then had to wake).
    CompletionOptions options = with(CompletionMechanism::event);
    options.linger = 10s;
    options.spin = 200ms;
    Completions engine(options);
    engine.future(s).get();
    std::this_thread::sleep_for(300ms);  // past `spin`, within `linger`
    std::future<void> f;
    {
      Gate gate(s);
      const std::size_t sleeps = custream::testing::completion_wakes(engine).sleeps;
      f = engine.future(s);
      std::this_thread::sleep_for(20ms);  // held: not done
      CHECK(custream::testing::completion_wakes(engine).sleeps == sleeps);
    }
    f.get();
  }
}

TEST_CASE("completions: the longest spin and linger are taken as a day", "[completions][gpu]") {
  REQUIRE_DRIVER();
  // Both are compared with clock differences in nanoseconds: microseconds::max() overflowed
  // there (undefined behaviour; the sanitizer build runs this test).
  CompletionOptions options = with(CompletionMechanism::event);
  options.spin = std::chrono::microseconds::max();
  options.linger = std::chrono::microseconds::max();
  Completions engine(options);
  const Stream s(Device(0), StreamFlags::non_blocking);
  engine.future(s).get();
  engine.future(s).get();                                         // taken while lingering
  CHECK(custream::testing::completion_wakes(engine).wakes <= 1);  // the first only
}

TEST_CASE("completions: a queue's tasks ripen for queries a microsecond after they were taken",
          "[completions][unit]") {
  // The watcher's queue of one stream (lib/completions/task_queue.hpp): poll() queries only its
  // ripe events, from the head.
  using custream::detail::CompletionTask;
  using custream::detail::TaskQueue;
  CompletionTask a{}, b{}, c{};
  a.thread = b.thread = 1;
  c.thread = 2;
  TaskQueue q;
  const TaskQueue::Clock::time_point t0 = TaskQueue::Clock::now();
  q.push(&a, t0);
  CHECK(q.ripe(t0) == 0);
  CHECK(q.ripe(t0 + 999ns) == 0);
  CHECK(q.ripe(t0 + 1us) == 1);
  q.push(&b, t0 + 500ns);
  CHECK_FALSE(q.mixed);
  q.push(&c, t0 + 500ns);  // another thread's: pushed in an order that need not be the stream's
  CHECK(q.mixed);
  CHECK(q.ripe(t0 + 1us) == 1);
  CHECK(q.ripe(t0 + 1499ns) == 1);
  CHECK(q.ripe(t0 + 1500ns) == 3);
  CHECK(q.pop(t0 + 2us) == &a);
  CHECK(q.head_since == t0 + 2us);
  CHECK(q.ripe(t0 + 2us) == 2);
  CHECK(q.head() == &b);
  CHECK(q.at(1) == &c);
  CHECK(q.pop(t0 + 3us) == &b);
  CHECK(q.pop(t0 + 3us) == &c);
  CHECK(q.empty());
  CHECK_FALSE(q.mixed);  // cleared once empty
  CHECK(q.ripe(t0 + 3us) == 0);
}

TEST_CASE("completions: a failed context is found while other devices keep completing",
          "[completions][emu-only]") {
  if (!custream_test::emulated()) CUSTREAM_SKIP("injects a failure of the watcher's probe");
  if (Device::count() < 2) CUSTREAM_SKIP("needs two devices");
  // Written words on device 0 wait behind a gate that stays shut, as a stream whose work failed
  // never writes; device 1 keeps completing. The watcher must still ask device 0's probe (here
  // made to answer an error) after `spin`: one that asked only when the whole engine had gone
  // quiet never asked, and device 0's future never became ready.
  CompletionOptions options = with(CompletionMechanism::memory_write);
  options.spin = 50ms;  // device 1 completes many times within it
  Completions engine(options);
  const Stream s0(Device(0), StreamFlags::non_blocking);
  const Stream s1(Device(1), StreamFlags::non_blocking);
  engine.future(s0).get();  // the probes and the pools ready
  engine.future(s1).get();
  auto fail =
      custream_test::emu_symbol<decltype(&custream_emu_fail_call)>("custream_emu_fail_call");
  Gate gate(s0);
  std::future<void> stuck = engine.future(s0);
  fail("cuEventQuery", 1, CUDA_ERROR_ILLEGAL_ADDRESS);  // the next query: the probe's
  std::atomic<bool> stop{false};
  std::atomic<long> others{0};
  std::atomic<long> others_failed{0};
  std::thread busy([&] {  // device 1 completes every 100 µs or so
    while (!stop.load()) {
      try {
        engine.future(s1).get();
        others++;
      } catch (const custream::Error&) {  // the injected failure taken by device 1's probe
        others_failed++;
      }
      std::this_thread::sleep_for(100us);
    }
  });
  const auto start = std::chrono::steady_clock::now();
  const bool told = stuck.wait_for(10s) == std::future_status::ready;
  const auto waited = std::chrono::steady_clock::now() - start;
  stop = true;
  busy.join();
  CHECK(told);
  CHECK(waited >= 40ms);  // not before `spin`
  INFO("device 1 completed " << others.load() << " times meanwhile");
  CHECK(others.load() >= 5);
  CHECK(others_failed.load() == 0);
  CHECK(eventually([&] { return engine.pending() == 0; }));  // as in the sticky-error case
  if (told) expect_error([&] { stuck.get(); }, CUDA_ERROR_ILLEGAL_ADDRESS, "failed");
}

TEST_CASE("completions: an engine destroyed from one of its own callbacks", "[completions][gpu]") {
  REQUIRE_DRIVER();
  // The callback deletes the engine while a later registration is pending: that one still
  // runs, and the engine goes only when its watcher has finished with it (AddressSanitizer:
  // the watcher once went on using the freed engine).
  const Stream s(Device(0), StreamFlags::non_blocking);
  Tracked::made = 0;
  Tracked::gone = 0;
  std::atomic<int> ran{0};
  auto* engine = new Completions(with(each_mechanism()));
  {
    Gate gate(s);
    engine->when_done(s, [engine, &ran] {
      delete engine;
      ran++;
    });
    engine->when_done(s, [&ran, t = Tracked{}] { ran++; });
  }
  CHECK(eventually([&] { return ran.load() == 2; }));
  CHECK(eventually([&] { return Tracked::made.load() == Tracked::gone.load(); }));
  std::this_thread::sleep_for(20ms);  // the watcher deletes the engine and ends
}

TEST_CASE("completions: the watcher's queries leave another thread's global capture valid",
          "[completions][gpu]") {
  REQUIRE_DRIVER();
  // The driver refuses a query made in global mode while another thread captures in global
  // mode, and invalidates that capture; the watcher's queries are made behind the
  // application's back, so it queries in relaxed mode (the written words' watcher queries too:
  // its probe, once per `spin`).
  CompletionOptions options = with(each_mechanism());
  options.spin = 1ms;
  Completions engine(options);
  const Stream s(Device(0), StreamFlags::non_blocking);
  const Stream captured(Device(0), StreamFlags::non_blocking);
  std::atomic<int> ran{0};
  {
    Gate gate(s);
    engine.when_done(s, [&ran] { ran++; });
    captured.begin_capture(custream::CaptureMode::global);
    captured.launch_host_func([] {});
    std::this_thread::sleep_for(30ms);  // the watcher asks about the gated registration meanwhile
    CHECK_NOTHROW(captured.end_capture());
    CHECK(ran.load() == 0);
  }
  CHECK(eventually([&] { return ran.load() == 1; }));
}

namespace {
// Holds the engine's watcher inside a callback (thread delivery) until released: registrations
// made meanwhile are all taken in one pass after it. The callback shares the flags with this
// object, and the destructor waits until the callback has left.
class WatcherHold {
 public:
  WatcherHold(Completions& engine, const Stream& s) : state_(std::make_shared<State>()) {
    engine.when_done(s, [state = state_] {
      state->held = true;
      while (!state->released.load()) std::this_thread::sleep_for(100us);
      state->left = true;
    });
    while (!state_->held.load()) std::this_thread::yield();
  }
  ~WatcherHold() {
    state_->released = true;
    while (!state_->left.load()) std::this_thread::yield();
  }

 private:
  struct State {
    std::atomic<bool> held{false};
    std::atomic<bool> released{false};
    std::atomic<bool> left{false};
  };
  std::shared_ptr<State> state_;
};

std::atomic<int> g_plain_runs{0};
void plain_function() { g_plain_runs++; }
}  // namespace

TEST_CASE("completions: the first thread's ring and the other threads' stack, in one order",
          "[completions][gpu][threads]") {
  REQUIRE_DRIVER();
  // The first thread to register owns the engine's ring (no locked instruction; a small
  // callable is made in the ring's record); once another thread registers, every registration
  // goes on the stack. The watcher takes the stack and then the ring, and puts the ring's
  // first: with the watcher held, all of the below are taken in one pass, and a watcher that
  // put the stack's first ran 11..14 before 0..10.
  const CompletionMechanism mechanism = each_mechanism();
  Completions engine(with(mechanism));
  const Stream s(Device(0), StreamFlags::non_blocking);
  const Stream other(Device(0), StreamFlags::non_blocking);
  std::vector<int> order;
  std::mutex order_mutex;
  const auto note = [&](int i) {
    std::lock_guard<std::mutex> lock(order_mutex);
    order.push_back(i);
  };
  Tracked::made = 0;
  Tracked::gone = 0;
  {
    WatcherHold hold(engine, other);  // this thread registers first: it owns the ring
    for (int i = 0; i < 10; ++i) {
      auto small = [&note, i, t = Tracked{}] { note(i); };
      static_assert(custream::detail::fits_inline<decltype(small), decltype(small)&&>,
                    "made in a ring record");
      engine.when_done(s, std::move(small));
    }
    // A callable too large for a ring record: a task, on the ring too.
    engine.when_done(s, [&note, big = std::array<char, 64>{}] { note(10 + big[0]); });
    std::thread([&] { engine.when_done(s, [&note] { note(11); }); }).join();     // the stack
    for (int i = 12; i < 15; ++i) engine.when_done(s, [i, &note] { note(i); });  // now too
    CHECK(engine.pending() == 16);
  }
  REQUIRE(eventually([&] { return engine.pending() == 0; }));
  std::lock_guard<std::mutex> lock(order_mutex);
  std::vector<int> expected(15);
  for (int i = 0; i < 15; ++i) expected[static_cast<std::size_t>(i)] = i;
  CHECK(order == expected);
  CHECK(Tracked::made.load() == Tracked::gone.load());
}

TEST_CASE("completions: a ring outgrown while the watcher is held", "[completions][gpu]") {
  REQUIRE_DRIVER();
  // 3,000 registrations of callables made in ring records (a ring holds 1,024 records), on two
  // streams in turn (a stream record before each), while the watcher cannot take any: the
  // owner goes on with new rings, and the watcher follows them in order, freeing each.
  Completions engine(with(each_mechanism()));
  const Stream s(Device(0), StreamFlags::non_blocking);
  const Stream other(Device(0), StreamFlags::non_blocking);
  constexpr int kMany = 3000;
  std::vector<int> order;  // written by the watcher only; read once every callback ran
  Tracked::made = 0;
  Tracked::gone = 0;
  {
    WatcherHold hold(engine, other);
    for (int i = 0; i < kMany; ++i) {
      auto small = [&order, i, t = Tracked{}] { order.push_back(i); };
      static_assert(custream::detail::fits_inline<decltype(small), decltype(small)&&>,
                    "made in a ring record");
      engine.when_done(i % 2 == 0 ? s : other, std::move(small));
    }
    CHECK(engine.pending() == kMany + 1);
  }
  REQUIRE(eventually([&] { return engine.pending() == 0; }));
  REQUIRE(order.size() == kMany);
  // Each stream's in registration order, every one once.
  std::array<std::vector<int>, 2> by_stream;
  for (const int i : order) by_stream[static_cast<std::size_t>(i % 2)].push_back(i);
  for (int parity = 0; parity < 2; ++parity) {
    std::vector<int> expected;
    for (int i = parity; i < kMany; i += 2) expected.push_back(i);
    CHECK(by_stream[static_cast<std::size_t>(parity)] == expected);
  }
  CHECK(Tracked::made.load() == Tracked::gone.load());
  // A plain function is a callback too (its pointer is kept).
  g_plain_runs = 0;
  engine.when_done(s, plain_function);
  engine.when_done(s, &plain_function);
  CHECK(eventually([&] { return g_plain_runs.load() == 2; }));
}

// How many allocations of at least 8 KiB the process has made (external_stream_test.cpp's
// operator new); absent under AddressSanitizer, which keeps its own operator new.
extern "C" __attribute__((weak)) long custream_test_large_allocations();

TEST_CASE("completions: a large backlog is taken with few allocations", "[completions][gpu]") {
  REQUIRE_DRIVER();
  if (custream_test_large_allocations == nullptr) {
    CUSTREAM_SKIP("operator new is not replaced in this build (AddressSanitizer)");
  }
  // 128 rings of records wait while the watcher is held, then are taken in one pass. The
  // watcher's batch grows geometrically: a reserve of exactly one more ring's records each time
  // reallocated it once a ring (128 allocations of 8 KiB to 1 MiB here) and copied what it held,
  // quadratic in the backlog (5 M registrations: 292 s, 2 GB). The rest here are other vectors
  // and hash tables growing geometrically (the emulator's among them).
  Completions engine(with(each_mechanism()));
  const Stream s(Device(0), StreamFlags::non_blocking);
  const Stream other(Device(0), StreamFlags::non_blocking);
  constexpr int kRings = 128;
  constexpr int kMany = kRings * 1024;
  std::atomic<int> ran{0};
  long large = 0;
  {
    WatcherHold hold(engine, other);  // this thread registers first: it owns the ring
    for (int i = 0; i < kMany; ++i) engine.when_done(s, [&ran] { ran++; });
    large = custream_test_large_allocations();
  }
  REQUIRE(eventually([&] { return engine.pending() == 0; }));
  CHECK(ran.load() == kMany);
  large = custream_test_large_allocations() - large;
  INFO("allocations of 8 KiB or more while the backlog was taken: " << large);
  CHECK(large < kRings / 2);  // 20-36 on the emulator; 140-156 with the reserve of one ring
}

// Makes every allocation of `from` to `upto` bytes by the thread `*thread` (nullptr: by none)
// throw std::bad_alloc (external_stream_test.cpp's operator new); absent under AddressSanitizer.
extern "C" __attribute__((weak)) void custream_test_fail_allocations_of(const std::thread::id*,
                                                                        std::size_t, std::size_t);

namespace {
// Fails the allocations of `from` to `upto` bytes by `thread` until stop() or the end of its
// scope (also when a check throws: a watcher left failing would hang its engine's destructor).
class FailingAllocations {
 public:
  explicit FailingAllocations(std::thread::id thread, std::size_t from = 0,
                              std::size_t upto = ~std::size_t{0})
      : thread_(thread) {
    custream_test_fail_allocations_of(&thread_, from, upto);
  }
  ~FailingAllocations() { stop(); }
  FailingAllocations(const FailingAllocations&) = delete;
  FailingAllocations& operator=(const FailingAllocations&) = delete;
  void stop() { custream_test_fail_allocations_of(nullptr, 0, 0); }

 private:
  std::thread::id thread_;
};
}  // namespace

TEST_CASE("completions: a watcher out of memory loses nothing and runs each registration once",
          "[completions][gpu][threads]") {
  REQUIRE_DRIVER();
  if (custream_test_fail_allocations_of == nullptr) {
    CUSTREAM_SKIP("operator new is not replaced in this build (AddressSanitizer)");
  }
  // Every allocation of the watcher fails while registrations of every kind come: small
  // callables made in ring records, larger ones and futures in tasks, on the owner's ring and
  // on the stack (another thread's, then the owner's), on three streams (two of them new
  // queues); then the first stream's work completes, still without memory.
  // Before, an allocation failure in the watch loop ended the process (std::terminate); now
  // what cannot be taken or queued waits, in order, and all of it runs once memory is back.
  const CompletionDelivery delivery =
      GENERATE(CompletionDelivery::thread, CompletionDelivery::caller);
  UNSCOPED_INFO("delivery " << (delivery == CompletionDelivery::thread ? "thread" : "caller"));
  Completions engine(with(each_mechanism(), delivery));
  const std::array<Stream, 3> streams{Stream(Device(0), StreamFlags::non_blocking),
                                      Stream(Device(0), StreamFlags::non_blocking),
                                      Stream(Device(0), StreamFlags::non_blocking)};
  engine.future(streams[0]).get();  // this thread owns the ring
  struct Log {                      // by stream, in the order run
    std::mutex mutex;
    std::array<std::vector<int>, 3> ran;
    void note(int i) {
      std::lock_guard<std::mutex> lock(mutex);
      ran[static_cast<std::size_t>(i % 3)].push_back(i);
    }
    std::size_t size() {
      std::lock_guard<std::mutex> lock(mutex);
      return ran[0].size() + ran[1].size() + ran[2].size();
    }
  } log;
  std::vector<std::future<void>> futures;
  Tracked::made = 0;
  Tracked::gone = 0;
  const auto add = [&](int i) {
    const Stream& s = streams[static_cast<std::size_t>(i % 3)];
    if (i % 15 == 7) {  // too large for a record: a task
      engine.when_done(s, [&log, i, t = Tracked{}, pad = std::array<char, 64>{}] {
        log.note(i + pad[0]);  // pad[0] is 0
      });
    } else {
      auto small = [&log, i, t = Tracked{}] { log.note(i); };
      static_assert(custream::detail::fits_inline<decltype(small), decltype(small)&&>,
                    "made in a ring record");
      engine.when_done(s, std::move(small));
    }
    if (i % 50 == 0) futures.push_back(engine.future(s));
  };
  for (auto& r : log.ran) r.reserve(420);  // the callbacks allocate nothing
  // The first stream is held, and its first registration queued, before the failures begin: its
  // queue grows, and its completions are handed on (or their events given back), without memory.
  std::optional<Gate> gate(std::in_place, streams[0]);
  add(0);
  std::this_thread::sleep_for(20ms);
  FailingAllocations failing(custream::testing::completion_thread(engine));
  int i = 1;
  for (; i < 300; ++i) add(i);  // the owner's ring
  std::thread([&] {
    for (int j = 300; j < 360; ++j) add(j);  // the stack, from now on for every thread
  }).join();
  for (i = 360; i < 420; ++i) add(i);
  std::this_thread::sleep_for(30ms);
  // Nothing could be queued meanwhile: every new queue is an allocation.
  CHECK(engine.run_ready() == 0);
  CHECK(log.size() == 0);
  CHECK(futures.front().wait_for(0s) == std::future_status::timeout);
  gate.reset();  // the first stream's work completes while the watcher still cannot allocate
  std::this_thread::sleep_for(30ms);
  engine.run_ready();
  failing.stop();
  REQUIRE(eventually([&] {
    engine.run_ready();
    return log.size() == 420;
  }));
  for (int k = 0; k < 3; ++k) {  // each stream's in registration order, each once
    std::vector<int> expected;
    for (int j = k; j < 420; j += 3) expected.push_back(j);
    CHECK(log.ran[static_cast<std::size_t>(k)] == expected);
  }
  for (auto& f : futures) CHECK_NOTHROW(f.get());
  CHECK(eventually([&] { return engine.pending() == 0; }));
  CHECK(Tracked::made.load() == Tracked::gone.load());
}

TEST_CASE("completions: records a watcher out of memory leaves on the ring are not overtaken",
          "[completions][gpu][threads]") {
  REQUIRE_DRIVER();
  if (custream_test_fail_allocations_of == nullptr) {
    CUSTREAM_SKIP("operator new is not replaced in this build (AddressSanitizer)");
  }
  // 2,000 of the owner's registrations on its ring while the watcher is held; then another
  // thread registers (from now on every registration goes on the stack) and the owner registers
  // once more, on the stack. Its registration comes after the 2,000 on the same stream. The
  // watcher, released, cannot take the ring: its batch cannot grow (allocations of 8 KiB or
  // more fail), or the callables cannot be moved into tasks (task blocks fail) after the first.
  // Before, it queued the stack's task anyway and ran 2,000 first (or 0, 2,000, 1, ...).
  const bool batch_fails = GENERATE(true, false);
  UNSCOPED_INFO((batch_fails ? "the batch cannot grow" : "no task block"));
  Completions engine(with(each_mechanism()));
  const Stream s(Device(0), StreamFlags::non_blocking);
  const Stream other(Device(0), StreamFlags::non_blocking);
  engine.future(s).get();  // this thread owns the ring
  struct Log {
    std::mutex mutex;
    std::vector<int> order;
    void note(int i) {
      std::lock_guard<std::mutex> lock(mutex);
      order.push_back(i);
    }
    std::size_t size() {
      std::lock_guard<std::mutex> lock(mutex);
      return order.size();
    }
  } log;
  log.order.reserve(3000);  // the callbacks allocate nothing
  constexpr int kRing = 2000;
  std::optional<FailingAllocations> failing;
  {
    WatcherHold hold(engine, other);
    for (int i = 0; i < kRing; ++i) engine.when_done(s, [&log, i] { log.note(i); });
    const std::thread::id watcher = custream::testing::completion_thread(engine);
    if (batch_fails) {
      failing.emplace(watcher, 8192);
    } else {
      failing.emplace(watcher, custream::detail::kTaskBlock, custream::detail::kTaskBlock);
    }
    std::thread([&] { engine.when_done(other, [] {}); }).join();
    engine.when_done(s, [&log] { log.note(kRing); });
  }
  std::this_thread::sleep_for(50ms);
  failing.reset();
  REQUIRE(eventually([&] { return log.size() == kRing + 1; }));
  std::vector<int> expected;
  for (int i = 0; i <= kRing; ++i) expected.push_back(i);
  CHECK(log.order == expected);
}

namespace {
// Registers on `engine` when destroyed: as a thread-local object made before the thread's first
// registration, after the thread's caches of custream are gone.
struct RegistersAtExit {
  Completions* engine = nullptr;
  const Stream* stream = nullptr;
  std::atomic<int>* ran = nullptr;
  std::future<void>* future = nullptr;
  ~RegistersAtExit() {
    if (engine == nullptr) return;
    engine->when_done(*stream, [ran = ran] { ++*ran; });  // a small callable
    engine->when_done(*stream, [ran = ran, pad = std::array<char, 64>{}] { *ran += 1 + pad[0]; });
    *future = engine->future(*stream);
  }
};
}  // namespace

TEST_CASE("completions: registrations while a thread ends, after its caches are gone",
          "[completions][gpu][threads]") {
  REQUIRE_DRIVER();
  // A thread-local object's destructor registers after the thread's caches of events, words and
  // task blocks were destroyed (they were made later, so they go first). Before, the
  // registrations used the destroyed caches (valgrind: invalid reads); now they
  // take from the shared pools directly.
  Completions engine(with(each_mechanism()));
  const Stream s(Device(0), StreamFlags::non_blocking);
  std::atomic<int> ran{0};
  std::future<void> f;
  std::thread([&] {
    thread_local RegistersAtExit at_exit;
    at_exit.stream = &s;
    at_exit.ran = &ran;
    at_exit.future = &f;
    at_exit.engine = &engine;
    engine.when_done(s, [&ran] { ++ran; });  // the caches are made now
    engine.future(s).get();                  // a task block too
    engine.when_done(s, [&ran, pad = std::array<char, 64>{}] { ran += 1 + pad[0]; });
  }).join();
  REQUIRE(f.valid());
  CHECK(f.wait_for(10s) == std::future_status::ready);
  CHECK(eventually([&] { return ran.load() == 4; }));
}

TEST_CASE("completions: a sleeping watcher is woken by every registration", "[completions][gpu]") {
  REQUIRE_DRIVER();
  // The ring's owner publishes without a fence; the watcher, before it sleeps with nothing
  // pending, makes every thread pass a barrier (membarrier) and looks again. A lost wake-up
  // leaves a registration waiting for ever on an idle watcher. (The race is nanoseconds wide:
  // this catches a watcher that does not look at the ring, or is not notified, at all.)
  CompletionOptions options = with(each_mechanism());
  options.spin = std::chrono::microseconds(0);  // back off and sleep at once
  // With the barrier (the owner fence-free), and without (a fence per registration).
  options.process_barrier = GENERATE(true, false);
  UNSCOPED_INFO("process_barrier " << options.process_barrier);
  Completions engine(options);
  const Stream s(Device(0), StreamFlags::non_blocking);
  std::atomic<int> ran{0};
  int i = 0;
  for (; i < 300; ++i) {
    if (i % 3 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200 * (i % 7)));
    engine.when_done(s, [&ran] { ran++; });
    const auto deadline = std::chrono::steady_clock::now() + 2s;
    while (ran.load() != i + 1 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::yield();
    }
    if (ran.load() != i + 1) break;
  }
  CHECK(i == 300);  // every registration told within 2 s
}

TEST_CASE("completions: each watcher sleep is claimed once, and a late claim takes no newer sleep",
          "[completions][unit]") {
  // The claims behind "a burst of registrations wakes a sleeping watcher with one call". A
  // registration reads the sleep's number, then claims it; the watcher may meanwhile wake (a
  // timeout, or its last look found that registration's record), take the record, and fall
  // asleep again. A claim that took whatever sleep was current then (a flag cleared by
  // exchange) left that newer sleep unclaimed and marked awake: no later registration woke it,
  // and registrations hung (seen in 1 of ~20 runs of a million registrations on the emulator).
  custream::detail::WatcherSleeps sleeps;
  const auto now = [&] { return sleeps.current(std::memory_order_seq_cst); };
  CHECK(now() == 0);  // awake
  sleeps.begin();
  CHECK(now() == 1);
  CHECK(sleeps.claim(1));        // the first registration to find it asleep notifies
  CHECK_FALSE(sleeps.claim(1));  // the rest of the burst does not
  sleeps.end();
  CHECK(now() == 0);
  sleeps.begin();
  const std::uint64_t read_late = now();  // a registration reads sleep 2, then stalls
  CHECK(read_late == 2);
  sleeps.end();    // the watcher wakes unclaimed (its last look found the record) ...
  sleeps.begin();  // ... and falls asleep again
  CHECK(sleeps.claim(read_late));  // the stalled claim: a notification that finds nothing
  CHECK(now() == 3);  // sleep 3 is still a sleep, and still the next registration's to claim
  CHECK(sleeps.claim(3));
  CHECK_FALSE(sleeps.claim(3));
  CHECK_FALSE(sleeps.claim(read_late));  // an older number never takes back a newer claim
  CHECK(sleeps.count() == 3);
}

TEST_CASE("completions: a notification that finds nothing ends the watcher's sleep",
          "[completions][unit][threads]") {
  // A registration can stall between publishing its record and reading the sleep's number;
  // meanwhile the watcher takes the record, completes it and begins sleep n. The stalled
  // registration then claims n and notifies, and the watcher finds nothing new. Had it waited
  // on in sleep n, the next registration would find n claimed and make no call, and the
  // watcher would sleep until the engine's destruction. So a sleep waits once: the watcher
  // returns and begins sleep n + 1, which the next registration claims. (Found in review; a
  // wait with the "anything new?" predicate, which waits again, fails here.)
  custream::detail::WatcherSleeps sleeps;
  std::mutex mutex;
  std::condition_variable cv;
  bool work = false;  // what the watcher would find: nothing, in this sleep
  std::atomic<bool> returned{false};
  bool found = true;  // what wait_once() answered (under the mutex)
  std::thread watcher([&] {
    std::unique_lock<std::mutex> lock(mutex);
    sleeps.begin();
    found =
        custream::detail::WatcherSleeps::wait_once(cv, lock, std::nullopt, [&] { return work; });
    sleeps.end();
    returned = true;
  });
  while (sleeps.current(std::memory_order_seq_cst) == 0) std::this_thread::yield();
  { std::lock_guard<std::mutex> waiting(mutex); }  // the watcher holds it until it waits
  const std::uint64_t late = sleeps.current(std::memory_order_seq_cst);
  REQUIRE(sleeps.claim(late));  // the stalled registration's claim, its record long taken
  {
    std::lock_guard<std::mutex> lock(mutex);
    cv.notify_one();
  }
  const auto deadline = std::chrono::steady_clock::now() + 2s;
  while (!returned.load() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  const bool ended = returned.load();
  if (!ended) {  // release a watcher that waited on, so that the test ends
    std::lock_guard<std::mutex> lock(mutex);
    work = true;
    cv.notify_one();
  }
  watcher.join();
  CHECK(ended);
  if (ended) CHECK_FALSE(found);  // it returned saying it found nothing
  // The watcher's next sleep has a new number, which the next registration claims.
  sleeps.begin();
  CHECK(sleeps.current(std::memory_order_seq_cst) == late + 1);
  CHECK(sleeps.claim(late + 1));
}

TEST_CASE("completions: a burst of registrations wakes a sleeping watcher with one call",
          "[completions][gpu][threads]") {
  REQUIRE_DRIVER();
  // A registration that finds the watcher asleep notifies it (a mutex and a futex call). Until
  // the woken watcher runs (microseconds), every registration after it would find it asleep
  // too and pay the same: only the first to claim the sleep's number may notify, so a
  // registration wakes the watcher at most once a sleep. A registering thread that notified on
  // every registration it made before the watcher ran gave more wakes than sleeps here.
  Completions engine(with(each_mechanism()));
  const Stream s(Device(0), StreamFlags::non_blocking);
  constexpr int kBursts = 20;
  constexpr int kBurst = 500;
  std::atomic<int> ran{0};
  for (int burst = 0; burst < kBursts; ++burst) {
    // Nothing pending: the watcher goes to sleep until a registration wakes it.
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (engine.pending() != 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::yield();
    }
    REQUIRE(engine.pending() == 0);
    std::this_thread::sleep_for(20ms);
    for (int i = 0; i < kBurst; ++i) engine.when_done(s, [&ran] { ran++; });
  }
  s.synchronize();
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (ran.load() != kBursts * kBurst && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  CHECK(ran.load() == kBursts * kBurst);
  const custream::testing::CompletionWakes w = custream::testing::completion_wakes(engine);
  INFO("sleeps " << w.sleeps << ", wakes " << w.wakes);
  CHECK(w.wakes >= kBursts);   // each burst began on a sleeping watcher
  CHECK(w.wakes <= w.sleeps);  // and woke it once
}

namespace {

// Runs this test binary with `tag` (a hidden test case) in a child process and returns its
// wait status; -1 when it ran past `limit` (then it is killed): a hang fails, never hangs.
int run_child(const std::string& tag, std::chrono::seconds limit = 20s) {
  std::string self = "/proc/self/exe", arg = tag;
  char* argv[] = {self.data(), arg.data(), nullptr};
  pid_t pid = 0;
  REQUIRE(posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv, environ) == 0);
  return custream_test_wait_child(pid, limit);
}

}  // namespace

TEST_CASE("completions: a registration keeps its created or green context until it has run",
          "[completions][lifetime][gpu]") {
  REQUIRE_DRIVER();
  // The Stream and its owned Context are dropped while a registration is pending: the
  // registration keeps them (and the event it recorded, which lives in the context) until its
  // callback has run and the event is destroyed. It once held nothing: the context went at
  // once (cuCtxDestroy waits for its work), its event with it, and the callbacks were told
  // CUDA_ERROR_INVALID_HANDLE (H100: CONTEXT_IS_DESTROYED) for work that succeeded.
  const auto& api = custream::detail::api();
  const bool green = GENERATE(false, true);
  const CompletionDelivery delivery =
      GENERATE(CompletionDelivery::thread, CompletionDelivery::caller);
  UNSCOPED_INFO(
      (green ? "green" : "created")
      << " context, "
      << (delivery == CompletionDelivery::thread ? "thread delivery" : "caller delivery"));
  if (!green && api.cuCtxCreate == nullptr) CUSTREAM_SKIP("the driver has no cuCtxCreate");
  if (green && api.cuGreenCtxCreate == nullptr) CUSTREAM_SKIP("the driver has no green contexts");
  const long live_before = custream_test::emulated() ? custream_test::emu_live_objects() : 0;
  custream_test::ReleaseReports releases;
  std::mutex m;
  std::vector<std::string> reported;
  const auto previous =
      custream::set_host_function_error_handler([&](const custream::HostFunctionError& e) {
        std::lock_guard<std::mutex> lock(m);
        reported.push_back(e.message());
      });
  Tracked::made = 0;
  Tracked::gone = 0;
  std::atomic<CUresult> seen{CUDA_ERROR_NOT_READY};
  std::atomic<bool> plain{false};
  std::future<void> f;
  {
    Completions engine(with(CompletionMechanism::automatic, delivery));
    {
      auto context = std::make_unique<custream::Context>(
          green ? custream::Context::create_green(Device(0).split_sms(1, 1).groups.at(0),
                                                  custream::GreenReuse::none)  // destroyed
                : custream::Context::create(Device(0)));
      auto s = std::make_unique<Stream>(*context, StreamFlags::non_blocking);
      auto gate = std::make_unique<Gate>(*s);
      engine.when_done(*s, [&seen](CUresult r) { seen = r; });
      engine.when_done(*s, [&plain, t = Tracked{}] { plain = true; });
      f = engine.future(*s);
      std::thread opener([&] {
        std::this_thread::sleep_for(30ms);
        gate->open();
      });
      s.reset();  // the registrations keep the stream and its context
      context.reset();
      opener.join();
    }
    REQUIRE(eventually([&] {
      engine.run_ready();
      return engine.pending() == 0;
    }));
  }
  custream::set_host_function_error_handler(previous);
  CHECK(seen.load() == CUDA_SUCCESS);
  CHECK(plain.load());
  REQUIRE(f.wait_for(0s) == std::future_status::ready);
  CHECK_NOTHROW(f.get());
  CHECK(Tracked::made.load() == Tracked::gone.load());
  for (const std::string& r : reported) FAIL_CHECK("host-function error: " << r);
  for (const custream::ReleaseError& e : releases.seen())
    FAIL_CHECK("release error: " << e.message());
  if (custream_test::emulated()) {  // the context and its stream went after the registrations
    CHECK(eventually([&] { return custream_test::emu_live_objects() == live_before; }));
  }
}

TEST_CASE("completions: the release of a kept context does not hold the watcher back",
          "[completions][lifetime][gpu]") {
  REQUIRE_DRIVER();
  // The registration is the last holder of a created context whose stream has more work, held:
  // destroying the context waits for that work (cuCtxDestroy). Done on the watcher, it held
  // back every other registration of the engine until the work ended (for ever where that work
  // waited on one of them).
  if (custream::detail::api().cuCtxCreate == nullptr)
    CUSTREAM_SKIP("the driver has no cuCtxCreate");
  Completions engine;
  const Stream primary(Device(0), StreamFlags::non_blocking);
  std::atomic<bool> first{false}, second{false};
  std::promise<void> mark, after;
  {
    auto context = std::make_unique<custream::Context>(custream::Context::create(Device(0)));
    auto s = std::make_unique<Stream>(*context, StreamFlags::non_blocking);
    // Held before the registration's mark (so that the registration is the last holder when
    // its callback runs) and after it (what destroying the context then waits for).
    s->launch_host_func([held = mark.get_future().share()] { held.wait(); });
    engine.when_done(*s, [&first] { first = true; });
    s->launch_host_func([held = after.get_future().share()] { held.wait(); });
    s.reset();  // the registration keeps the stream and the context
    context.reset();
  }
  mark.set_value();
  REQUIRE(eventually([&] { return first.load(); }));
  engine.when_done(primary, [&second] { second = true; });
  const auto until = std::chrono::steady_clock::now() + 2s;
  while (!second.load() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(100us);
  }
  CHECK(second.load());  // while the context's work is still held
  after.set_value();     // the context goes
  CHECK(eventually([&] { return second.load(); }));
}

TEST_CASE("completions: a caller-delivery engine destroyed from a callback that run_ready() runs",
          "[completions][lifetime][gpu]") {
  REQUIRE_DRIVER();
  // The first callback deletes the engine; the second, ready in the same run_ready() batch,
  // is pending then: the destructor runs it (in order) before it returns, and run_ready()
  // touches nothing of the engine after (AddressSanitizer: it once counted the callback on the
  // freed engine, and ran the second after the destructor had returned).
  const Stream s(Device(0), StreamFlags::non_blocking);
  Tracked::made = 0;
  Tracked::gone = 0;
  std::vector<int> order;
  auto* engine = new Completions(with(each_mechanism(), CompletionDelivery::caller));
  const int fd = engine->eventfd();
  {
    Gate gate(s);
    engine->when_done(s, [engine, &order] {
      order.push_back(1);
      delete engine;
      order.push_back(3);
    });
    engine->when_done(s, [&order, t = Tracked{}] { order.push_back(2); });
  }
  pollfd p{fd, POLLIN, 0};
  REQUIRE(::poll(&p, 1, 10000) == 1);
  REQUIRE(eventually([&] { return engine->pending() == 2; }));
  std::this_thread::sleep_for(20ms);  // both ready: one batch
  (void)engine->run_ready();          // deletes the engine
  CHECK(order == std::vector<int>{1, 2, 3});
  CHECK(Tracked::made.load() == Tracked::gone.load());
}

TEST_CASE("completions: a caller-delivery destructor runs what the callbacks it runs register",
          "[completions][lifetime][gpu]") {
  REQUIRE_DRIVER();
  // The destructor runs pending callbacks on the destroying thread; one of them registers
  // another: that one is pending too, and runs before the destructor returns (it was once
  // left on the stopped watcher's queue: never run, never destroyed).
  const Stream s(Device(0), StreamFlags::non_blocking);
  Tracked::made = 0;
  Tracked::gone = 0;
  std::atomic<int> outer{0}, inner{0};
  {
    Completions engine(with(each_mechanism(), CompletionDelivery::caller));
    Gate gate(s);
    engine.when_done(s, [&] {
      engine.when_done(s, [&inner, t = Tracked{}] { inner++; });
      outer++;
    });
    gate.open();
  }
  CHECK(outer.load() == 1);
  CHECK(inner.load() == 1);
  CHECK(Tracked::made.load() == Tracked::gone.load());
}

TEST_CASE("completions: a child process after fork() refuses registrations and destroys engines",
          "[completions][fork][gpu]") {
  REQUIRE_DRIVER();
  // The child has no watcher thread (fork copies only the forking thread), and its driver is
  // unusable. It once hung destroying an engine whose watcher was asleep (joining a thread the
  // child does not have), 5 children of 5.
  const CompletionDelivery delivery =
      GENERATE(CompletionDelivery::thread, CompletionDelivery::caller);
  auto engine = std::make_unique<Completions>(with(CompletionMechanism::event, delivery));
  const Stream s(Device(0), StreamFlags::non_blocking);
  std::future<void> done = engine->future(s);
  REQUIRE(done.wait_for(10s) == std::future_status::ready);
  REQUIRE(eventually([&] { return engine->pending() == 0; }));
  for (int child = 0; child < 5; ++child) {
    std::this_thread::sleep_for(20ms);  // the watcher is asleep
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      int code = 0;
      try {
        engine->when_done(s, [t = Tracked{}] {});
        code = 10;  // accepted
      } catch (const custream::Error& e) {
        const std::string text = e.what();
        code = e.result() != CUDA_ERROR_NOT_PERMITTED   ? 11
               : text.find("fork") == std::string::npos ? 12
                                                        : 0;
      } catch (...) {
        code = 13;
      }
      engine.reset();  // no watcher to stop or join
      ::_exit(code);
    }
    const int status = custream_test_wait_child(pid, 10s);
    INFO("child " << child << ", wait status " << status);
    REQUIRE(status != -1);  // -1: it hung, and was killed
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  // The parent's engine goes on as before.
  CHECK(engine->future(s).wait_for(10s) == std::future_status::ready);
}

TEST_CASE("completions: a fork() child runs none of the parent's ready callbacks",
          "[completions][fork][gpu]") {
  REQUIRE_DRIVER();
  // Caller delivery: the ready list and the eventfd came with the fork. A child's run_ready()
  // once ran the parent's callbacks a second time and cleared the parent's eventfd (one file
  // description), whose next signal comes only when the list goes from empty to not.
  Completions engine(with(CompletionMechanism::event, CompletionDelivery::caller));
  const Stream s(Device(0), StreamFlags::non_blocking);
  std::atomic<int> ran{0};
  engine.when_done(s, [&ran] { ++ran; });
  engine.when_done(s, [&ran] { ++ran; });
  pollfd readable{engine.eventfd(), POLLIN, 0};
  REQUIRE(::poll(&readable, 1, 10000) == 1);  // both ready (one signal), none run yet
  REQUIRE(eventually([&] { return engine.pending() == 2; }));
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const std::size_t n = engine.run_ready();
    pollfd p{engine.eventfd(), POLLIN, 0};
    ::_exit(n != 0 ? 10 : ran.load() != 0 ? 11 : ::poll(&p, 1, 0) != 0 ? 12 : 0);
  }
  const int status = custream_test_wait_child(pid, 10s);
  INFO("wait status " << status);
  REQUIRE(status != -1);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  readable.revents = 0;
  CHECK(::poll(&readable, 1, 0) == 1);  // the parent's signal is still there
  CHECK(engine.run_ready() == 2);
  CHECK(ran.load() == 2);
}

TEST_CASE("completions child: exit() from a standard() callback", "[.completions-exit-child]") {
  const Stream s(Device(0), StreamFlags::non_blocking);
  Completions::standard().when_done(s, [] { std::exit(7); });
  std::this_thread::sleep_for(30s);  // the callback ends the process first
}

TEST_CASE("completions: exit() called from a standard() callback exits with its status",
          "[completions][exit][gpu]") {
  REQUIRE_DRIVER();
  // standard()'s exit handler then runs on the watcher thread: it once joined that thread
  // (std::system_error in a noexcept function: the process aborted).
  const int status = run_child("[.completions-exit-child]");
  INFO("wait status " << status);
  REQUIRE(status != -1);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 7);
}

TEST_CASE("completions child: registering on standard() after its exit handler",
          "[.completions-after-exit-child]") {
  static const Stream* const s = new Stream(Device(0), StreamFlags::non_blocking);
  // Registered before standard()'s own handler, so run after it.
  std::atexit([] {
    try {
      Completions::standard().future(*s).wait();  // it once hung here
      std::_Exit(10);
    } catch (const custream::Error& e) {
      std::_Exit(e.result() == CUDA_ERROR_DEINITIALIZED &&
                         std::string(e.what()).find("exit") != std::string::npos
                     ? 42
                     : 11);
    } catch (...) {
      std::_Exit(12);
    }
  });
  Completions::standard().future(*s).wait();  // standard()'s first use: its handler
}

TEST_CASE("completions: registering on standard() after its exit handler is a clear Error",
          "[completions][exit][gpu]") {
  REQUIRE_DRIVER();
  const int status = run_child("[.completions-after-exit-child]");
  INFO("wait status " << status);
  REQUIRE(status != -1);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 42);
}

TEST_CASE("completions: a long poll_interval delays neither finished work nor the destructor",
          "[completions][poll][gpu]") {
  REQUIRE_DRIVER();
  // The pause between passes once lasted poll_interval whatever happened: work already done
  // when registered waited a whole interval (its event ripens a microsecond after it was
  // taken), and a destructor waited for a lingering pause to end.
  CompletionOptions o = with(each_mechanism());
  o.poll_interval = 3s;
  const Stream s(Device(0), StreamFlags::non_blocking);
  using Clock = std::chrono::steady_clock;
  {
    Completions engine(o);
    for (int i = 0; i < 3; ++i) {
      const auto start = Clock::now();
      REQUIRE(engine.future(s).wait_for(10s) == std::future_status::ready);
      INFO("iteration "
           << i << ": "
           << std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count()
           << " ms");
      CHECK(Clock::now() - start < 1s);
    }
    // A registration while the watcher pauses with other work pending is taken too.
    Gate gate(s);
    engine.when_done(s, [] {});
    const Stream other(Device(0), StreamFlags::non_blocking);
    std::this_thread::sleep_for(10ms);
    const auto start = Clock::now();
    REQUIRE(engine.future(other).wait_for(10s) == std::future_status::ready);
    CHECK(Clock::now() - start < 1s);
  }
  o.linger = std::chrono::hours(1);  // after a completion, passes a poll_interval apart
  auto engine = std::make_unique<Completions>(o);
  REQUIRE(engine->future(s).wait_for(10s) == std::future_status::ready);
  std::this_thread::sleep_for(10ms);
  const auto start = Clock::now();
  engine.reset();
  CHECK(Clock::now() - start < 1s);
}

TEST_CASE("completions: a special handle with no current context is refused",
          "[completions][gpu]") {
  REQUIRE_DRIVER();
  // The header promises CUDA_ERROR_INVALID_CONTEXT; registrations once went to device 0.
  Completions engine;
  Tracked::made = 0;
  Tracked::gone = 0;
  std::atomic<int> ran{0};
  std::thread([&] {
    for (const custream::StreamRef h : {custream::StreamRef::null(), custream::StreamRef::legacy(),
                                        custream::StreamRef::per_thread()}) {
      expect_error([&] { engine.when_done(h, [t = Tracked{}, &ran] { ran++; }); },
                   CUDA_ERROR_INVALID_CONTEXT, "no context is current");
      expect_error([&] { (void)engine.future(h); }, CUDA_ERROR_INVALID_CONTEXT);
    }
  }).join();
  std::this_thread::sleep_for(20ms);
  CHECK(ran.load() == 0);
  CHECK(engine.pending() == 0);
  CHECK(Tracked::made.load() == Tracked::gone.load());
}

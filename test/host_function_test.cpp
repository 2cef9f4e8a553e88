// Host functions and callbacks outside capture: order, arguments, lifetimes, exceptions,
// wrapped streams. Runs on the emulator and the GPU.
#include "custream/host_function.hpp"

#include <array>
#include <atomic>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "custream/capture.hpp"
#include "custream/device_buffer.hpp"
#include "custream/external_stream.hpp"
#include "custream/host_function_error_handler.hpp"
#include "custream/stream.hpp"
#include "error.hpp"
#include "graph_support.hpp"

using custream::Stream;
using custream_test::Payload;
using custream_test::Probe;

namespace {

struct RawContext {
  std::vector<int> order;
  std::vector<CUstream> streams;
  std::vector<CUresult> statuses;
};

void CUDA_CB raw_host_fn(void* p) { static_cast<RawContext*>(p)->order.push_back(1); }

void CUDA_CB raw_callback(CUstream s, CUresult status, void* p) {
  auto* ctx = static_cast<RawContext*>(p);
  ctx->order.push_back(2);
  ctx->streams.push_back(s);
  ctx->statuses.push_back(status);
}

// Collects what the host-function error handler receives; restores the previous handler.
class HandlerSpy {
 public:
  HandlerSpy() {
    previous_ =
        custream::set_host_function_error_handler([this](const custream::HostFunctionError& e) {
          std::lock_guard<std::mutex> lock(mutex_);
          messages_.push_back(e.message());
          streams_.push_back(e.stream.handle());
          captured_.push_back(e.captured);
        });
  }
  ~HandlerSpy() { custream::set_host_function_error_handler(std::move(previous_)); }
  std::vector<std::string> messages() {
    std::lock_guard<std::mutex> lock(mutex_);
    return messages_;
  }
  std::vector<CUstream> streams() {
    std::lock_guard<std::mutex> lock(mutex_);
    return streams_;
  }
  std::vector<bool> captured() {
    std::lock_guard<std::mutex> lock(mutex_);
    return captured_;
  }

 private:
  std::mutex mutex_;
  std::vector<std::string> messages_;
  std::vector<CUstream> streams_;
  std::vector<bool> captured_;
  custream::HostFunctionErrorHandler previous_;
};

}  // namespace

TEST_CASE("100 host functions run in order with their arguments", "[gpu][host_function]") {
  REQUIRE_DRIVER();
  Stream s(custream::StreamFlags::non_blocking);
  std::vector<int> seen;
  for (int i = 0; i < 100; ++i) s.launch_host_func([&seen, i] { seen.push_back(i); });
  s.synchronize();
  REQUIRE(seen.size() == 100);
  for (int i = 0; i < 100; ++i) CHECK(seen[i] == i);
}

TEST_CASE("100 callbacks after async copies run in order and get the right stream",
          "[gpu][host_function]") {
  REQUIRE_DRIVER();
  Stream s(custream::StreamFlags::non_blocking);
  custream::DeviceBuffer device(100 * sizeof(int));
  std::vector<int> values(100), back(100, -1);
  std::vector<int> order;
  std::vector<bool> copied;
  int wrong_stream = 0, wrong_status = 0;
  for (int i = 0; i < 100; ++i) {
    values[i] = 1000 + i;
    const CUdeviceptr at = device.get() + i * sizeof(int);
    s.copy(at, &values[i], sizeof(int));
    s.copy(&back[i], at, sizeof(int));
    s.add_callback([&, i](Stream cs, CUresult status) {
      order.push_back(i);
      copied.push_back(back[i] == 1000 + i);  // the copies before it are done
      if (cs != s || cs.device_id() != s.device_id()) ++wrong_stream;
      if (status != CUDA_SUCCESS) ++wrong_status;
    });
  }
  s.synchronize();
  REQUIRE(order.size() == 100);
  for (int i = 0; i < 100; ++i) {
    CHECK(order[i] == i);
    CHECK(copied[i]);
  }
  CHECK(wrong_stream == 0);
  CHECK(wrong_status == 0);
}

TEST_CASE("raw host functions and callbacks run in stream order", "[gpu][host_function]") {
  REQUIRE_DRIVER();
  Stream s(custream::StreamFlags::non_blocking);
  RawContext ctx;
  s.launch_host_func(&raw_host_fn, &ctx);
  s.add_callback(&raw_callback, &ctx);
  s.launch_host_func([&ctx] { ctx.order.push_back(3); });
  s.launch_host_func(&raw_host_fn, &ctx);
  s.synchronize();
  CHECK(ctx.order == std::vector<int>{1, 2, 3, 1});
  REQUIRE(ctx.streams.size() == 1);
  CHECK(ctx.streams[0] == s.handle());
  CHECK(ctx.statuses[0] == CUDA_SUCCESS);
  CHECK_THROWS_AS(s.add_callback(static_cast<CUstreamCallback>(nullptr), nullptr), custream::Error);
}

TEST_CASE("a host-function payload runs once and is destroyed once, after it ran",
          "[gpu][host_function]") {
  REQUIRE_DRIVER();
  Stream s(custream::StreamFlags::non_blocking);
  auto probe = std::make_shared<Probe>();
  int destroyed_when_run = -1;
  auto check = [&destroyed_when_run, probe] { destroyed_when_run = probe->destroyed.load(); };
  {
    Payload payload(probe);
    s.launch_host_func(std::move(payload));  // the original object is a moved-from shell
    s.launch_host_func(check);
  }
  s.synchronize();
  CHECK(probe->runs == 1);
  CHECK(destroyed_when_run == 1);  // freed right after it ran, before the next one
  CHECK(probe->destroyed == 1);

  // Also through add_callback.
  auto probe2 = std::make_shared<Probe>();
  {
    auto cb = [p = Payload(probe2)](Stream, CUresult) mutable { p(); };
    s.add_callback(std::move(cb));
  }
  s.synchronize();
  CHECK(probe2->runs == 1);
  CHECK(custream_test::eventually([&] { return probe2->destroyed == 1; }));
}

TEST_CASE("host functions on the null and per-thread streams", "[gpu][host_function]") {
  REQUIRE_DRIVER();
  custream::Device(0).make_current();
  for (Stream s : {Stream::null(), Stream::per_thread(), Stream::legacy()}) {
    std::vector<int> seen;
    s.launch_host_func([&seen] { seen.push_back(1); });
    s.add_callback([&seen](Stream cs, CUresult) { seen.push_back(cs.is_special() ? 2 : -2); });
    s.synchronize();
    CHECK(seen == std::vector<int>{1, 2});
  }
}

TEST_CASE("host functions on special handles with no current context use device 0's",
          "[gpu][host_function]") {
  REQUIRE_DRIVER();
  std::thread([] {  // a fresh thread has no current context
    for (Stream s : {Stream::null(), Stream::per_thread(), Stream::legacy()}) {
      auto probe = std::make_shared<Probe>();
      RawContext raw;
      s.launch_host_func(Payload(probe));     // capture check fails first: retried
      s.launch_host_func(raw_host_fn, &raw);  // the launch fails first: retried
      std::atomic<int> small_runs{0};
      std::atomic<int>* small = &small_runs;
      s.launch_host_func([small]() noexcept { ++*small; });  // special: the heap path
      s.add_callback([p = Payload(probe)](Stream, CUresult) mutable { p(); });
      CUcontext current = reinterpret_cast<CUcontext>(1);
      REQUIRE(custream::detail::api().cuCtxGetCurrent(&current) == CUDA_SUCCESS);
      CHECK(current == nullptr);  // the retry's context was not left current
      custream::Device(0).make_current();
      s.synchronize();
      CHECK(probe->runs == 2);
      CHECK(small_runs == 1);
      CHECK(raw.order == std::vector<int>{1});
      CHECK(custream_test::eventually([&] { return probe->destroyed == 2; }));
      REQUIRE(custream::detail::api().cuCtxSetCurrent(nullptr) == CUDA_SUCCESS);
    }
  })
      .join();
}

TEST_CASE("callbacks and host functions on a wrapped stream run in order",
          "[gpu][host_function][external]") {
  REQUIRE_DRIVER();
  Stream owner(custream::StreamFlags::non_blocking);
  custream::ExternalStream wrapped(owner.handle());
  std::vector<int> seen;
  int wrong = 0;
  for (int i = 0; i < 20; ++i) {
    if (i % 2 == 0) {
      wrapped.launch_host_func([&seen, i] { seen.push_back(i); });
    } else {
      wrapped.add_callback([&, i](Stream cs, CUresult) {
        seen.push_back(i);
        if (cs.handle() != owner.handle() || cs.kind() != Stream::Kind::external) ++wrong;
      });
    }
  }
  wrapped.synchronize();
  REQUIRE(seen.size() == 20);
  for (int i = 0; i < 20; ++i) CHECK(seen[i] == i);
  CHECK(wrong == 0);
}

TEST_CASE("an exception thrown by a host function or callback reaches the handler",
          "[gpu][host_function]") {
  REQUIRE_DRIVER();
  Stream s(custream::StreamFlags::non_blocking);
  HandlerSpy spy;
  std::vector<int> after;
  s.launch_host_func([] { throw std::runtime_error("boom from a host function"); });
  s.launch_host_func([&after] { after.push_back(1); });  // the driver thread survived
  s.add_callback([](Stream, CUresult) { throw 42; });
  s.add_callback([&after](Stream, CUresult) { after.push_back(2); });
  s.synchronize();
  CHECK(after == std::vector<int>{1, 2});
  const auto messages = spy.messages();
  REQUIRE(messages.size() == 2);
  CHECK(messages[0].find("boom from a host function") != std::string::npos);
  CHECK(messages[0].find(s.to_string()) != std::string::npos);
  CHECK(messages[1].find("not derived from std::exception") != std::string::npos);
  CHECK(spy.streams() == std::vector<CUstream>{s.handle(), s.handle()});
  CHECK(spy.captured() == std::vector<bool>{false, false});
}

TEST_CASE("the default host-function error handler writes to stderr naming the stream",
          "[gpu][host_function]") {
  REQUIRE_DRIVER();
  Stream s(custream::StreamFlags::non_blocking);
  auto previous = custream::set_host_function_error_handler({});  // the default
  const std::string text = custream_test::captured_stderr([&] {
    s.launch_host_func([] { throw std::logic_error("default handler text"); });
    s.synchronize();
  });
  custream::set_host_function_error_handler(std::move(previous));
  CHECK(text.find("custream: a host function enqueued on " + s.to_string() +
                  " threw: default handler text") != std::string::npos);
}

TEST_CASE("which callables travel in the driver's userData", "[unit][host_function]") {
  using custream::detail::fits_in_pointer;
  int* p = nullptr;
  auto plain = [p]() noexcept { (void)p; };
  auto may_throw = [p] { (void)p; };
  auto changes_itself = [p]() mutable noexcept { p = nullptr; };
  auto two_pointers = [p, q = p]() noexcept { (void)p, (void)q; };
  auto padded = [b = true, i = 1]() noexcept { (void)b, (void)i; };  // 3 padding bytes
  auto owns = [o = std::make_shared<int>(1)]() noexcept { (void)o; };
  void (*function)() noexcept = nullptr;
  CHECK(fits_in_pointer<decltype(plain)>);
  CHECK(fits_in_pointer<decltype(function)>);
  CHECK_FALSE(fits_in_pointer<decltype(may_throw)>);       // the handler must see exceptions
  CHECK_FALSE(fits_in_pointer<decltype(changes_itself)>);  // replays would each see a copy
  CHECK_FALSE(fits_in_pointer<decltype(two_pointers)>);
  CHECK_FALSE(fits_in_pointer<decltype(padded)>);  // indeterminate bytes in userData
  CHECK_FALSE(fits_in_pointer<decltype(owns)>);
  CHECK_FALSE(fits_in_pointer<Payload>);
}

TEST_CASE("small noexcept callables run in order, carried in userData", "[gpu][host_function]") {
  REQUIRE_DRIVER();
  Stream s(custream::StreamFlags::non_blocking);
  struct Entry {
    int id;
    std::vector<int>* log;
  };
  std::vector<int> log;
  std::vector<Entry> entries;
  for (int i = 0; i < 100; ++i) entries.push_back({i, &log});
  for (Entry& entry : entries) {
    Entry* e = &entry;
    s.launch_host_func([e]() noexcept { e->log->push_back(e->id); });
  }
  s.synchronize();
  std::vector<int> expected(100);
  for (int i = 0; i < 100; ++i) expected[i] = i;
  CHECK(log == expected);
}

TEST_CASE("a small noexcept callable is enqueued without a capture check",
          "[gpu][host_function][emu-only]") {
  REQUIRE_EMULATOR();
  Stream s(custream::StreamFlags::non_blocking);
  std::atomic<int> runs{0};
  std::atomic<int>* counter = &runs;
  custream_test::emu_fail_call("cuStreamIsCapturing", 1, CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES);
  s.launch_host_func([counter]() noexcept { counter->fetch_add(1); });  // makes no check
  try {
    s.launch_host_func([counter] { counter->fetch_add(1); });  // checks, meets the failure
    FAIL("no throw");
  } catch (const custream::Error& e) {
    CHECK(e.call() == std::string("cuStreamIsCapturing"));
  }
  custream_test::emu_reset();
  s.synchronize();
  CHECK(runs == 1);
}

TEST_CASE("a host function enqueue failure destroys the payload at once",
          "[gpu][host_function][emu-only]") {
  REQUIRE_EMULATOR();
  Stream s(custream::StreamFlags::non_blocking);
  const long live = custream_test::emu_live_objects();
  for (const char* call : {"cuLaunchHostFunc", "cuStreamIsCapturing"}) {
    auto probe = std::make_shared<Probe>();
    custream_test::emu_fail_call(call, 1, CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES);
    try {
      s.launch_host_func(Payload(probe));
      FAIL("no throw");
    } catch (const custream::Error& e) {
      CHECK(e.result() == CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES);
      CHECK(e.call() == call);
      // One subject format for every error: "stream 0x… (device N)".
      CHECK(e.subject() == "stream " + custream::detail::pointer_text(s.handle()) + " (device " +
                               std::to_string(s.device_id()) + ")");
    }
    CHECK(probe->destroyed == 1);  // synchronously: nothing was enqueued
    s.synchronize();
    CHECK(probe->runs == 0);
  }
  // cuStreamAddCallback failing likewise.
  auto probe = std::make_shared<Probe>();
  custream_test::emu_fail_call("cuStreamAddCallback", 1, CUDA_ERROR_INVALID_VALUE);
  CHECK_THROWS_AS(s.add_callback([p = Payload(probe)](Stream, CUresult) mutable { p(); }),
                  custream::Error);
  CHECK(probe->destroyed == 1);
  custream_test::expect_emulator_back_to(live);
}

TEST_CASE("a host function enqueued by a thread_local destructor at thread exit runs",
          "[gpu][host_function]") {
  REQUIRE_DRIVER();
  Stream s(custream::StreamFlags::non_blocking);
  auto probe = std::make_shared<Probe>();
  // Constructed before the thread's first host function, so destroyed after the pool has
  // taken this thread's blocks back: its enqueue gets a block of its own (ASan: no leak).
  struct AtExit {
    const Stream* stream = nullptr;
    std::shared_ptr<Probe> probe;
    ~AtExit() {
      if (stream != nullptr) stream->launch_host_func(Payload(probe));
    }
  };
  std::thread([&] {
    static thread_local AtExit at_exit;
    at_exit.stream = &s;
    at_exit.probe = probe;
    s.launch_host_func(Payload(probe));
  }).join();
  s.synchronize();
  CHECK(probe->runs == 2);
  CHECK(custream_test::eventually([&] { return probe->destroyed == 2; }));
}

TEST_CASE("many threads enqueue host functions of every size; each runs and is freed once",
          "[gpu][host_function][threads]") {
  REQUIRE_DRIVER();
  // Small callables come from the recycled task pool (freed on the driver's thread, reused by
  // the enqueueing threads); a large one goes through operator new. ASan and TSan watch both.
  auto probe = std::make_shared<Probe>();
  std::atomic<long> big_runs{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      Stream s(custream::Device(0), custream::StreamFlags::non_blocking);
      for (int i = 0; i < 300; ++i) {
        s.launch_host_func(Payload(probe));
        if (i % 50 == t) {
          std::array<char, 512> big{};
          big[0] = 1;
          s.launch_host_func([big, &big_runs] { big_runs += big[0]; });
        }
      }
      s.synchronize();
    });
  }
  for (auto& t : threads) t.join();
  CHECK(probe->runs == 1200);
  CHECK(big_runs == 24);
  CHECK(custream_test::eventually([&] { return probe->destroyed == 1200; }));
}

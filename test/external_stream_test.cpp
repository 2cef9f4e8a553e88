// ExternalStream: wrapping foreign streams, device inference, keep-alive owners.
#include "custream/external_stream.hpp"

#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <new>
#include <sstream>
#include <thread>

#include "custream/current_stream.hpp"
#include "custream/device_scope.hpp"
#include "custream/event.hpp"
#include "custream/stream_scope.hpp"
#include "driver.hpp"
#include "test_support.hpp"

using custream::Device;
using custream::DeviceScope;
using custream::ExternalStream;
using custream::Stream;

namespace {

// Counts operator new calls made by this thread (replaces the global operator new).
thread_local long t_allocations = 0;

// A stream made with the raw driver on `device`; destroyed by the caller.
CUstream raw_stream(int device) {
  const auto& api = custream::detail::api();
  custream::ContextScope scope(Device(device).primary_context().handle());
  CUstream s = nullptr;
  REQUIRE(api.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  return s;
}

void destroy_raw(CUstream s) {
  REQUIRE(custream::detail::api().cuStreamDestroy(s) == CUDA_SUCCESS);
}

}  // namespace

// Counting operator new replaces the global one, except under AddressSanitizer, whose own
// replacement must stay in charge (it reported alloc-dealloc mismatches at exit otherwise);
// the allocation count is then not checked.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kCountsAllocations = false;
#else
constexpr bool kCountsAllocations = true;
namespace {
thread_local bool t_fail_next_allocation = false;
// Allocations of 8 KiB or more, by every thread (completions_test.cpp: the watcher's batch).
std::atomic<long> g_large_allocations{0};
// A thread whose allocations of g_failing_from to g_failing_upto bytes fail (none by default).
std::atomic<std::thread::id> g_failing_thread{};
std::atomic<std::size_t> g_failing_from{0};
std::atomic<std::size_t> g_failing_upto{0};
}  // namespace
// Makes every allocation of `from` to `upto` bytes by the thread `*thread` (nullptr: by no
// thread) throw std::bad_alloc from now on (completions_test.cpp: a watcher out of memory). Only
// this operator new: not the aligned forms, nor malloc.
extern "C" void custream_test_fail_allocations_of(const std::thread::id* thread, std::size_t from,
                                                  std::size_t upto) {
  g_failing_from.store(from, std::memory_order_relaxed);
  g_failing_upto.store(upto, std::memory_order_relaxed);
  g_failing_thread.store(thread != nullptr ? *thread : std::thread::id(),
                         std::memory_order_relaxed);
}
// How many allocations of at least 8 KiB every thread of the process has made so far.
extern "C" long custream_test_large_allocations() {
  return g_large_allocations.load(std::memory_order_relaxed);
}
// Makes this thread's next operator new throw std::bad_alloc (emu_fidelity_test.cpp); returns
// whether it was armed already.
extern "C" int custream_test_arm_allocation_failure(int arm) {
  const int was = t_fail_next_allocation ? 1 : 0;
  t_fail_next_allocation = arm != 0;
  return was;
}
void* operator new(std::size_t size) {
  if (t_fail_next_allocation) {
    t_fail_next_allocation = false;
    throw std::bad_alloc();
  }
  if (const std::thread::id failing = g_failing_thread.load(std::memory_order_relaxed);
      failing != std::thread::id() && failing == std::this_thread::get_id() &&
      size >= g_failing_from.load(std::memory_order_relaxed) &&
      size <= g_failing_upto.load(std::memory_order_relaxed)) {
    throw std::bad_alloc();
  }
  ++t_allocations;
  if (size >= 8192) g_large_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size ? size : 1)) return p;
  throw std::bad_alloc();
}
// GCC takes the free() below for a mismatch with operator new, not seeing that this file
// replaces both (-Wmismatched-new-delete); here they match: malloc above, free below.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
#pragma GCC diagnostic pop
#endif
#endif

TEST_CASE("wrapping infers device and context, and never destroys", "[gpu][external]") {
  REQUIRE_DRIVER();
  for (int d = 0; d < Device::count(); ++d) {
    CUstream raw = raw_stream(d);
    {
      DeviceScope other(0);  // the current device does not matter
      ExternalStream s(raw);
      CHECK(s.handle() == raw);
      CHECK(s.device_id() == d);
      CHECK(s.context() == Device(d).primary_context().handle());
      CHECK(s.kind() == Stream::Kind::external);
      CHECK(s.non_blocking());
      std::ostringstream text;
      text << s;
      CHECK(text.str() == "<ExternalStream " + custream::detail::pointer_text(raw) + " (device " +
                              std::to_string(d) + ")>");
      ExternalStream checked(raw, d);  // explicit, matching id
      CHECK(checked == s);
    }
    CHECK(custream::detail::api().cuStreamQuery(raw) == CUDA_SUCCESS);  // not destroyed
    destroy_raw(raw);
  }
}

TEST_CASE("a wrong explicit device throws, naming both", "[gpu][external][multi]") {
  REQUIRE_DRIVER();
  if (Device::count() < 2) CUSTREAM_SKIP("needs 2 devices (the emulator has 2 by default)");
  CUstream raw = raw_stream(1);
  try {
    ExternalStream s(raw, 0);
    FAIL("no throw");
  } catch (const custream::Error& e) {
    CHECK(e.result() == CUDA_ERROR_INVALID_DEVICE);
    CHECK(std::string(e.what()).find("given device 0 but belongs to device 1") !=
          std::string::npos);
  }
  destroy_raw(raw);
}

TEST_CASE("special handles wrapped stay device -1", "[unit][external]") {
  for (CUstream h : {static_cast<CUstream>(nullptr), CU_STREAM_LEGACY, CU_STREAM_PER_THREAD}) {
    ExternalStream s(h);  // no driver call: nothing to infer
    CHECK(s.device_id() == -1);
    CHECK(s.is_special());
  }
  std::ostringstream text;
  text << ExternalStream(CU_STREAM_LEGACY);
  CHECK(text.str() == "<ExternalStream 0x1 (device -1)>");
}

TEST_CASE("copying a non-owning handle allocates nothing", "[gpu][external]") {
  REQUIRE_DRIVER();
  if (!kCountsAllocations) CUSTREAM_SKIP("allocations are not counted under AddressSanitizer");
  CUstream raw = raw_stream(0);
  {
    const long before = t_allocations;
    ExternalStream s(raw);
    Stream a = s;
    Stream b = std::move(a);
    a = b;
    CHECK(t_allocations == before);
    CHECK(b.device_id() == 0);
  }
  destroy_raw(raw);
}

TEST_CASE("the keep-alive owner lives exactly as long as the last handle", "[gpu][external]") {
  REQUIRE_DRIVER();
  CUstream raw = raw_stream(0);
  std::atomic<int> freed{0};
  {
    std::shared_ptr<void> owner(new int(5), [&](void* p) {
      delete static_cast<int*>(p);
      ++freed;
    });
    ExternalStream s(raw, -1, std::move(owner));
    CHECK(freed == 0);
    std::thread([copy = Stream(s)] { copy.synchronize(); }).join();
    Stream kept = s;
    { ExternalStream dropped = std::move(s); }
    CHECK(freed == 0);
    DeviceScope scope(0);
    kept.use();  // this thread now refers to it too
    kept = Stream();
    CHECK(freed == 0);
    Stream::null().use();
    CHECK(freed == 1);
  }
  CHECK(freed == 1);
  destroy_raw(raw);
}

TEST_CASE("a wrapped stream works in a scope, synchronize and done", "[gpu][external]") {
  REQUIRE_DRIVER();
  CUstream raw = raw_stream(0);
  {
    DeviceScope device(0);
    ExternalStream s(raw);
    {
      custream::StreamScope scope(s);
      CHECK(custream::current_stream() == s);
      custream::current_stream().synchronize();
    }
    CHECK(custream::current_stream() == Stream::null());
    s.synchronize();
    CHECK(s.done());
    CHECK(s.priority() == 0);
  }
  destroy_raw(raw);
}

TEST_CASE("wrapping a capturing stream keeps its capture valid", "[gpu][external][capture]") {
  REQUIRE_DRIVER();
  const auto& api = custream::detail::api();
  CUstream raw = raw_stream(0);
  REQUIRE(api.cuStreamBeginCapture(raw, CU_STREAM_CAPTURE_MODE_RELAXED) == CUDA_SUCCESS);
  ExternalStream s(raw);
  CHECK(s.device_id() == 0);
  CHECK(s.priority() == 0);  // capture-safe
  // Capture-unsafe queries are refused before the driver could invalidate the capture.
  try {
    (void)s.non_blocking();
    FAIL("no throw");
  } catch (const custream::Error& e) {
    CHECK(e.result() == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    CHECK(std::string(e.what()).find("custream refused it") != std::string::npos);
  }
  CUstreamCaptureStatus status{};
  REQUIRE(api.cuStreamIsCapturing(raw, &status) == CUDA_SUCCESS);
  CHECK(status == CU_STREAM_CAPTURE_STATUS_ACTIVE);
  CUgraph graph = nullptr;
  CHECK(api.cuStreamEndCapture(raw, &graph) == CUDA_SUCCESS);  // not invalidated
  REQUIRE(graph != nullptr);
  CHECK(api.cuGraphDestroy(graph) == CUDA_SUCCESS);
  destroy_raw(raw);
}

TEST_CASE("a stream created by the CUDA runtime API is wrapped with its device inferred",
          "[gpu][external][cudart][real-gpu]") {
  REQUIRE_REAL_GPU();  // the runtime loads the real libcuda, not the emulator
  void* rt = nullptr;
  for (const char* name : {"libcudart.so", "libcudart.so.13", "libcudart.so.12",
                           "/usr/local/cuda/lib64/libcudart.so"}) {
    if ((rt = dlopen(name, RTLD_NOW | RTLD_LOCAL)) != nullptr) break;
  }
  if (rt == nullptr) CUSTREAM_SKIP("libcudart not found");
  using SetDevice = int (*)(int);
  using StreamCreate = int (*)(CUstream*);
  using StreamDestroy = int (*)(CUstream);
  auto set_device = reinterpret_cast<SetDevice>(dlsym(rt, "cudaSetDevice"));
  auto create = reinterpret_cast<StreamCreate>(dlsym(rt, "cudaStreamCreate"));
  auto destroy = reinterpret_cast<StreamDestroy>(dlsym(rt, "cudaStreamDestroy"));
  REQUIRE((set_device && create && destroy));
  std::thread([&] {
    const int last = Device::count() - 1;
    REQUIRE(set_device(last) == 0);
    CUstream s = nullptr;
    REQUIRE(create(&s) == 0);
    REQUIRE(set_device(0) == 0);  // another device current while wrapping
    ExternalStream wrapped(s);
    CHECK(wrapped.device_id() == last);
    CHECK(custream::Device::current().ordinal() == 0);  // cudaSetDevice agrees with custream
    wrapped.synchronize();
    REQUIRE(destroy(s) == 0);
  }).join();
}

TEST_CASE(
    "a stream of a created context, wrapped while the primary context is current: record() "
    "and wait() work in its context, and nothing current changes",
    "[gpu][external][context]") {
  REQUIRE_DRIVER();
  const auto& api = custream::detail::api();
  if (api.cuCtxCreate == nullptr || api.cuCtxDestroy == nullptr) {
    CUSTREAM_SKIP("the driver serves no cuCtxCreate / cuCtxDestroy");
  }
  Device(0).make_current();
  CUcontext primary = nullptr, created = nullptr, now = nullptr;
  REQUIRE(api.cuCtxGetCurrent(&primary) == CUDA_SUCCESS);
  REQUIRE(api.cuCtxCreate(&created, 0, 0) == CUDA_SUCCESS);  // current on this thread now
  CUstream foreign = nullptr;
  REQUIRE(api.cuStreamCreate(&foreign, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  CUcontext popped = nullptr;
  REQUIRE(api.cuCtxPopCurrent(&popped) == CUDA_SUCCESS);
  REQUIRE(popped == created);
  {
    ExternalStream wrapped(foreign);
    CHECK(wrapped.device_id() == 0);
    CHECK(wrapped.context() == created);
    // Before the fix: the event was made in the primary context, and recording it on this
    // stream failed with CUDA_ERROR_INVALID_HANDLE.
    custream::Event event = wrapped.record();
    wrapped.synchronize();
    CHECK(event.done());
    Stream ours(custream::StreamFlags::non_blocking);
    ours.wait(wrapped);  // an event of the created context, waited on in the primary one
    wrapped.wait(ours);  // and the other way round
    ours.synchronize();
    wrapped.synchronize();
    REQUIRE(api.cuCtxGetCurrent(&now) == CUDA_SUCCESS);
    CHECK(now == primary);
  }
  CHECK(api.cuStreamDestroy(foreign) == CUDA_SUCCESS);
  CHECK(api.cuCtxDestroy(created) == CUDA_SUCCESS);
  REQUIRE(api.cuCtxGetCurrent(&now) == CUDA_SUCCESS);
  CHECK(now == primary);
}

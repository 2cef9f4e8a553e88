// The fault-injection sweep: every driver entry point custream calls, failed at each call an
// operation makes, on the CPU driver emulator (docs/fault_injection.md).
//
// For each operation: a clean run counts the calls it makes of every entry point (N each).
// Then for every entry point and every k in 1..N, the k-th call fails with
// CUDA_ERROR_UNKNOWN and the operation runs again. It must either throw custream::Error with
// that result, or complete having reported the failure to the release-error handler (a
// destructor cannot throw). Afterwards nothing may be left alive in the driver (unless the
// failed call was itself a release, which the injected fault turned into a no-op), and the
// operation must run clean again. A second pass sets a sticky error (as after an illegal
// address) and runs every operation: errors, no crash. Finally every entry of custream's
// driver table must have been reached, or be listed below with the reason it cannot be.
#include <cuda.h>
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

#include <algorithm>
#include <exception>
#include <atomic>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "custream/capture_scope.hpp"
#include "custream/context_scope.hpp"
#include "custream/current_stream.hpp"
#include "custream/device.hpp"
#include "custream/device_buffer.hpp"
#include "custream/device_scope.hpp"
#include "custream/event.hpp"
#include "custream/external_stream.hpp"
#include "custream/graph.hpp"
#include "custream/release_error_handler.hpp"
#include "custream/stream.hpp"
#include "custream/stream_scope.hpp"
#include "driver.hpp"
#include "graph_support.hpp"

using custream::Stream;

namespace {

struct Operation {
  std::string name;
  std::function<void()> setup;  // untimed, uncounted preparation (e.g. the current context)
  std::function<void()> run;
};

void with_primary_context() {
  REQUIRE(custream_test::raw().cuCtxSetCurrent(custream::Device(0).primary_context()) ==
          CUDA_SUCCESS);
}

void without_context() { REQUIRE(custream_test::raw().cuCtxSetCurrent(nullptr) == CUDA_SUCCESS); }

// A capture of `s` with a host function, a callback and a memset, ended into a Graph.
custream::Graph capture_some_work(const Stream& s, const custream::DeviceBuffer& b) {
  s.begin_capture();
  s.memset32(b.get(), 1, 16);
  s.launch_host_func([tag = std::string("captured")] { (void)tag; });
  s.add_callback([](const Stream&, CUresult) {});
  return s.end_capture();
}

// Tells LeakSanitizer, where it runs, that `p` may leak on purpose.
void ignore_leak(const void* p) {
#if defined(__SANITIZE_ADDRESS__)
  __lsan_ignore_object(p);
#else
  (void)p;
#endif
}

void CUDA_CB raw_host_fn(void*) {}
void CUDA_CB raw_callback(CUstream, CUresult, void*) {}

std::vector<Operation> operations() {
  std::vector<Operation> ops;
  auto add = [&](std::string name, std::function<void()> run,
                 std::function<void()> setup = with_primary_context) {
    ops.push_back({std::move(name), std::move(setup), std::move(run)});
  };
  add("stream: create, query, destroy", [] {
    Stream s(true, -1);
    (void)s.priority();
    (void)s.non_blocking();
    (void)s.id();
    s.synchronize();
    (void)s.done();
  });
  add("stream: wrap a foreign stream (device inferred), its flags", [] {
    Stream s(false);
    custream::ExternalStream wrapped(s.handle());
    (void)wrapped.non_blocking();
    (void)wrapped.priority();
    wrapped.synchronize();
  });
  add("stream: wait for another, use(), current stream, scopes", [] {
    Stream a(true), b(true);
    a.wait(b);
    {
      custream::StreamScope scope(a);
      custream::current_stream().synchronize();
    }
    {
      custream::DeviceScope device(0);
      (void)custream::Device::current();
    }
    // In a thread of its own, whose current streams go when it ends, also after a failure.
    std::exception_ptr failure;
    std::thread([&] {
      try {
        custream::DeviceScope device(0);
        b.use();
        Stream::null().use();
      } catch (...) {
        failure = std::current_exception();
      }
    }).join();
    if (failure) std::rethrow_exception(failure);
  });
  add("device queries", [] {
    const custream::Device d(0);
    (void)d.name();
    (void)d.total_memory();
    (void)d.compute_capability();
    (void)d.attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    (void)d.primary_context_active();
    d.make_current();
  });
  add(
      "special handles with no current context",
      [] {
        Stream::null().synchronize();
        (void)Stream::legacy().done();
        Stream::per_thread().launch_host_func([tag = std::string("x")] { (void)tag; });
        Stream::per_thread().launch_host_func(&raw_host_fn, nullptr);
        custream::Event e;
        Stream::null().record(e);
        Stream::per_thread().wait_event(e);
        (void)Stream::per_thread().is_capturing();
        Stream::per_thread().synchronize();
      },
      without_context);
  add("events: record, wait, query, synchronize, elapsed time", [] {
    Stream s(true);
    custream::Event plain;
    s.record(plain);
    s.wait_event(plain);
    (void)plain.done();
    plain.synchronize();
    custream::Event start(custream::EventFlags::timing), end(custream::EventFlags::timing);
    start.record(s);
    end.record(s);
    end.synchronize();
    (void)custream::Event::elapsed_ms(start, end);
    custream::Event recorded = s.record();
    recorded.record();
  });
  add("events: interprocess export and open", [] {
    custream::Event e(custream::EventFlags::interprocess);
    const CUipcEventHandle handle = e.ipc_handle();
    custream::Event opened = custream::Event::open_ipc(handle);
    (void)opened.done();
  });
  add("host functions and callbacks", [] {
    Stream s(true);
    static std::atomic<int> runs{0};  // outlives host functions a failure leaves enqueued
    std::atomic<int>* counter = &runs;
    s.launch_host_func([counter, tag = std::string("heap")] { counter->fetch_add(1); });
    s.launch_host_func([counter]() noexcept { counter->fetch_add(1); });
    s.launch_host_func(&raw_host_fn, nullptr);
    s.add_callback([counter](const Stream&, CUresult) { counter->fetch_add(1); });
    s.add_callback(&raw_callback, nullptr);
    s.synchronize();
  });
  add("memory: allocate, set, copy, free (plain and stream-ordered)", [] {
    Stream s(true);
    custream::DeviceBuffer a(256), b(256, s);
    // Outlives the copies: a failure may throw before the synchronize below.
    static std::vector<unsigned char> host(256, 1);
    s.memset(a.get(), 0, 256);
    s.memset32(b.get(), 7, 64);
    s.copy(a.get(), b.get(), 256);
    s.copy(a.get(), host.data(), 256);
    s.copy(host.data(), a.get(), 256);
    s.synchronize();
  });
  add("capture: begin, query, end, instantiate, upload, launch, inspect", [] {
    Stream s(true);
    custream::DeviceBuffer b(64);
    custream::Graph g = capture_some_work(s, b);
    (void)s.is_capturing();
    (void)s.capture_id();
    g.upload(s);
    g.launch(s);
    s.synchronize();
    (void)g.node_count();
    (void)g.dot();
  });
  add("capture: a CaptureScope that unwinds, and one that ends", [] {
    Stream s(true);
    custream::DeviceBuffer b(64);
    struct Unwind {};
    try {
      custream::CaptureScope capture(s);
      s.memset32(b.get(), 2, 16);
      s.launch_host_func([tag = std::string("discarded")] { (void)tag; });
      throw Unwind{};
    } catch (const Unwind&) {
    }
    custream::CaptureScope capture(s);
    s.memset32(b.get(), 3, 16);
    custream::Graph g = capture.end();
    g.launch(s);
    s.synchronize();
  });
  add("graphs: update from a newer capture", [] {
    Stream s(true);
    custream::DeviceBuffer b(64);
    custream::Graph g = capture_some_work(s, b);
    custream::Graph newer = capture_some_work(s, b);
    g.update(newer);
    g.launch(s);
    s.synchronize();
  });
  add("graphs: adopt and wrap a foreign capture", [] {
    Stream s(true);
    custream::DeviceBuffer b(64);
    const auto& api = custream_test::raw();
    for (const bool adopt : {true, false}) {
      CUgraph graph = nullptr;
      s.begin_capture();
      s.memset32(b.get(), 4, 16);
      if (api.cuStreamEndCapture(s.handle(), &graph) != CUDA_SUCCESS) {
        throw custream::Error(CUDA_ERROR_UNKNOWN, "cuStreamEndCapture (the test's own call)", {});
      }
      std::exception_ptr failure;
      try {
        custream::Graph g =
            adopt ? custream::Graph::adopt(graph, custream::InstantiateFlags::upload, s)
                  : custream::Graph::wrap(graph, custream::InstantiateFlags::none, s);
        g.launch(s);
        s.synchronize();
      } catch (...) {
        failure = std::current_exception();
      }
      if (!adopt) {  // a wrapped graph stays the caller's
        if (const CUresult r = api.cuGraphDestroy(graph); r != CUDA_SUCCESS) {
          (void)api.cuGraphDestroy(graph);  // injected faults hit once: this one frees it
          throw custream::Error(r, "cuGraphDestroy (the test's own call)", {});
        }
      }
      if (failure) std::rethrow_exception(failure);
    }
  });
  add("a host function captured by a racing capture (run-once node made graph-owned)", [] {
    Stream s(true);
    s.begin_capture();
    auto run = [tag = std::string("raced")] { (void)tag; };
    auto* task = new custream::detail::HostFunctionTask<decltype(run)>(run);
    // Documented: when the driver discards this graph (a failed end) or the scan for run-once
    // nodes fails, nobody can find this payload again, and it leaks rather than dangles.
    ignore_leak(task);
    if (const CUresult r = custream_test::raw().cuLaunchHostFunc(
            s.handle(), &custream::detail::run_host_task_once, task);
        r != CUDA_SUCCESS) {
      task->destroy(task);
      (void)s.end_capture();
      throw custream::Error(r, "cuLaunchHostFunc (the test's own call)", {});
    }
    custream::Graph g = s.end_capture();
    g.launch(s);
    g.launch(s);
    s.synchronize();
  });
  add(
      "a captured host function whose graph refuses its user object",
      [] {
        Stream s(true);
        s.begin_capture();
        try {
          s.launch_host_func([tag = std::string("refused")] { (void)tag; });
        } catch (const custream::Error& e) {
          if (e.result() != CUDA_ERROR_NOT_PERMITTED) throw;  // the setup's fault: expected
        }
        (void)s.end_capture();
      },
      [] {
        with_primary_context();
        custream_test::emu_fail_call("cuGraphRetainUserObject", 1, CUDA_ERROR_NOT_PERMITTED);
      });
  return ops;
}

// Entry points of custream's table that no operation can reach on the emulator, and why.
const std::map<std::string, std::string>& unreachable() {
  static const std::map<std::string, std::string> reasons = {
      {"cuInit", "called once, when the driver loads: test/loader_test.cpp (init-fails)"},
      {"cuDriverGetVersion", "called once, when the driver loads: test/loader_test.cpp"},
      {"cuDeviceGetCount", "called once, when the driver loads: loader_test (negative-count)"},
      {"cuDeviceGet", "called once, when the driver loads: test/loader_test.cpp"},
      {"cuGetErrorString",
       "called only while composing an error message; a failure falls back to custream's "
       "own text"},
      {"cuGetErrorName", "optional; custream names results itself (tests call it)"},
      {"cuCtxGetDevice",
       "only for a context custream did not retain (a created or green context); the "
       "emulator has primary contexts only"},
      {"cuDevicePrimaryCtxRetain",
       "called once per device per process (retained, never released): "
       "test/loader_test.cpp retain-once"},
      {"cuDevicePrimaryCtxRelease", "optional; only tests and benchmarks call it"},
      {"cuCtxPushCurrent", "optional; only the conformance suite calls it"},
      {"cuCtxPopCurrent", "optional; only the conformance suite calls it"},
      {"cuCtxSynchronize", "optional; only the conformance suite calls it"},
      {"cuStreamCreate", "optional; custream creates with cuStreamCreateWithPriority"},
      {"cuStreamGetDevice", "optional; never called: it would invalidate a capture"},
      {"cuThreadExchangeStreamCaptureMode", "optional; only the conformance suite calls it"},
      {"cuMemcpyDtoDAsync", "optional; custream copies device to device with cuMemcpyAsync"},
      {"cuGraphCreate", "optional; only tests call it"},
      {"cuModuleLoadDataEx", "module loading: the emulator cannot load PTX (GPU tests)"},
      {"cuModuleUnload", "module loading: the emulator cannot load PTX (GPU tests)"},
      {"cuModuleGetFunction", "module loading: the emulator cannot load PTX (GPU tests)"},
      {"cuLaunchKernel", "needs a loaded module: GPU tests only"},
  };
  return reasons;
}

// Failures an operation may swallow without throwing or reporting, and why.
bool swallow_allowed(const std::string& entry) {
  // cuGraphNodeGetType only decorates an error message with the node's type.
  return entry == "cuGraphNodeGetType";
}

template <typename Fn>
Fn emu(const char* name) {
  Fn fn = custream_test::emu_symbol<Fn>(name);
  REQUIRE(fn != nullptr);
  return fn;
}

// The table's symbols (each once; some appear under two ABIs).
std::vector<std::string> table_symbols() {
  std::size_t count = 0;
  const custream::detail::DriverEntry* entries = custream::detail::driver_entries(&count);
  std::set<std::string> names;
  for (std::size_t i = 0; i < count; ++i) names.insert(entries[i].symbol);
  return {names.begin(), names.end()};
}

struct Outcome {
  bool threw = false;
  CUresult result = CUDA_SUCCESS;
  std::string what;
};

Outcome run_catching(const Operation& op) {
  Outcome o;
  try {
    op.run();
  } catch (const custream::Error& e) {
    o.threw = true;
    o.result = e.result();
    o.what = e.what();
  } catch (const std::exception& e) {
    o.threw = true;
    o.result = CUDA_ERROR_UNKNOWN;
    o.what = std::string("not a custream::Error: ") + e.what();
  }
  return o;
}

class ReportCounter {
 public:
  ReportCounter()
      : previous_(custream::set_release_error_handler([this](const custream::ReleaseError&) {
          count_.fetch_add(1);
        })) {}
  ~ReportCounter() { custream::set_release_error_handler(std::move(previous_)); }
  long take() { return count_.exchange(0); }

 private:
  std::atomic<long> count_{0};
  custream::ReleaseErrorHandler previous_;
};

}  // namespace

TEST_CASE("every entry point custream calls, failed at every call site", "[fault-sweep][emu-only]") {
  REQUIRE_EMULATOR();
  auto count_calls = emu<void (*)(int)>("custream_emu_count_calls");
  auto call_count = emu<long (*)(const char*)>("custream_emu_call_count");
  auto set_sticky = emu<void (*)(CUresult)>("custream_emu_set_sticky_error");
  const std::vector<std::string> symbols = table_symbols();
  const std::vector<Operation> ops = operations();
  ReportCounter reports;

  // Warm up: retain the primary contexts, make this thread's slots, load lazily-made state.
  for (const Operation& op : ops) {
    op.setup();
    INFO(op.name);
    op.run();
  }
  CHECK(custream_test::emu_wait_idle());

  std::map<std::string, std::set<std::string>> reached_by;  // entry -> operations
  std::map<std::string, long> injected;                     // entry -> injected runs
  long runs = 0;
  for (const Operation& op : ops) {
    // The clean run: which entries, how often.
    op.setup();
    count_calls(1);
    op.run();
    std::map<std::string, long> calls;
    for (const std::string& s : symbols) {
      if (const long n = call_count(s.c_str()); n > 0) calls[s] = n;
    }
    count_calls(0);
    CHECK(custream_test::emu_wait_idle());
    reports.take();
    for (const auto& [entry, n] : calls) {
      reached_by[entry].insert(op.name);
      for (long k = 1; k <= n; ++k) {
        INFO(op.name << ": call " << k << " of " << n << " to " << entry << " fails");
        op.setup();
        const long live = custream_test::emu_live_objects();
        custream_test::emu_fail_call(entry.c_str(), static_cast<int>(k), CUDA_ERROR_UNKNOWN);
        const Outcome o = run_catching(op);
        custream_test::emu_reset();
        REQUIRE(custream_test::emu_wait_idle());
        const long reported = reports.take();
        ++runs;
        ++injected[entry];
        if (o.threw) {
          // The injected error, or the consequence of a failure already reported (e.g. a
          // capture a failed end left running refuses the next begin).
          INFO(o.what);
          CHECK((o.result == CUDA_ERROR_UNKNOWN || reported > 0));
        } else if (!swallow_allowed(entry)) {
          CHECK(reported > 0);  // completed: the failure was in a cleanup path, and reported
        }
        if (reported == 0) CHECK(custream_test::emu_live_objects() == live);  // nothing leaked
        // The next operation works.
        op.setup();
        const Outcome again = run_catching(op);
        INFO("the clean run after: " << again.what);
        CHECK_FALSE(again.threw);
        REQUIRE(custream_test::emu_wait_idle());
      }
    }
  }

  // A sticky error (as after an illegal address): every operation fails cleanly.
  for (const Operation& op : ops) {
    INFO(op.name << " with a sticky CUDA_ERROR_ILLEGAL_ADDRESS");
    op.setup();
    set_sticky(CUDA_ERROR_ILLEGAL_ADDRESS);
    const Outcome o = run_catching(op);
    set_sticky(CUDA_SUCCESS);
    custream_test::emu_reset();
    REQUIRE(custream_test::emu_wait_idle());
    reports.take();
    CHECK(o.threw);
    CHECK(o.result == CUDA_ERROR_ILLEGAL_ADDRESS);
  }
  with_primary_context();

  // Coverage: every table entry reached, or listed with its reason.
  std::printf("fault sweep: %ld injected runs over %zu operations\n", runs, ops.size());
  std::printf("%-36s %-9s %s\n", "entry point", "injected", "operations / reason");
  std::size_t covered = 0;
  for (const std::string& s : symbols) {
    const auto it = reached_by.find(s);
    if (it != reached_by.end()) {
      ++covered;
      std::string names;
      for (const std::string& n : it->second) names += (names.empty() ? "" : "; ") + n;
      std::printf("%-36s %-9ld %s\n", s.c_str(), injected[s], names.c_str());
      continue;
    }
    const auto why = unreachable().find(s);
    INFO(s << " is neither reached by an operation nor listed as unreachable");
    CHECK(why != unreachable().end());
    if (why != unreachable().end()) {
      std::printf("%-36s %-9s %s\n", s.c_str(), "-", why->second.c_str());
    }
  }
  std::printf("fault sweep: %zu of %zu entry points injected; %zu listed as unreachable here\n",
              covered, symbols.size(), symbols.size() - covered);
  for (const auto& [entry, reason] : unreachable()) {
    INFO(entry << " is listed as unreachable but an operation reached it");
    CHECK(reached_by.count(entry) == 0);
  }
}

// The fault-injection sweep: every driver entry point custream calls, failed at each call an
// operation makes, on the CPU driver emulator (docs/fault_injection.md).
//
// For each operation: a clean run counts the calls it makes of every entry point (N each).
// Then for every entry point and every k in 1..N, the k-th call fails with a representative
// error (CUDA_ERROR_OUT_OF_MEMORY for calls that create or allocate, CUDA_ERROR_UNKNOWN for
// the others) and the operation runs again; a second pass fails every call with
// CUDA_ERROR_INVALID_CONTEXT, the error custream retries for the special stream handles (with a
// context current the retry must succeed; without one the injection hits the retry, which
// must fail visibly). Each run must:
//  - throw custream::Error with the injected result, naming the failed call; or complete
//    because the failure was in a destructor or cleanup path and was reported to the
//    release-error handler; or complete because custream retried the call (special handles
//    with CUDA_ERROR_INVALID_CONTEXT) or documents that it needs no answer (swallowed());
//  - leave nothing alive in the driver (the emulator's live objects), no host-function
//    payload and no capture running, unless a reported release failure kept it; never free
//    anything twice;
//  - leave the thread's current context as it found it (or report why not);
//  - and then the same operation runs clean.
// Calls made once per process (loading the driver, retaining a primary context, looking up
// the device of a context custream did not retain) are swept in processes of their own: the
// test runs itself again, one child per injected call. A sticky error pass (as after an
// illegal address) runs every operation once more: each reports that error, nothing crashes.
// Finally every entry of custream's driver table must have been reached, or be listed in
// unreachable() with the reason; the test fails otherwise.
//
// Failures the library does not handle yet are listed in known_defects(): they are still run
// and their violations printed, but do not fail the test. Remove an entry when its fix lands.
#include <cuda.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "custream/capture.hpp"
#include "custream/capture_scope.hpp"
#include "custream/completions.hpp"
#include "custream/context_scope.hpp"
#include "custream/current_stream.hpp"
#include "custream/device.hpp"
#include "custream/device_array.hpp"
#include "custream/device_buffer.hpp"
#include "custream/device_scope.hpp"
#include "custream/driver.hpp"
#include "custream/event.hpp"
#include "custream/external_stream.hpp"
#include "custream/graph.hpp"
#include "custream/graph_builder.hpp"
#include "custream/graph_capture_scope.hpp"
#include "custream/host_function.hpp"
#include "custream/kernel.hpp"
#include "custream/launch_config.hpp"
#include "custream/library.hpp"
#include "custream/library_kernel.hpp"
#include "custream/memory_pool.hpp"
#include "custream/module.hpp"
#include "custream/pinned_array.hpp"
#include "custream/release_error_handler.hpp"
#include "custream/stream.hpp"
#include "custream/stream_scope.hpp"
#include "custream/testing.hpp"
#include "driver.hpp"
#include "graph_builder/set_condition.hpp"
#include "graph_support.hpp"

extern char** environ;

namespace {

using custream::Stream;

// ---------------------------------------------------------------------------------------
// The emulator's controls (emulator/emu_control.h), from a handle of the loaded emulator.

struct EmuControls {
  void (*fail_call)(const char*, int, CUresult) = nullptr;
  void (*set_sticky)(CUresult) = nullptr;
  void (*reset)() = nullptr;
  void (*count_calls)(int) = nullptr;
  long (*call_count)(const char*) = nullptr;
  long (*live_objects)() = nullptr;
  int (*wait_idle)(int) = nullptr;
  int (*wait_destructors)(int) = nullptr;

  explicit EmuControls(void* handle) {
    auto get = [handle](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(handle, name));
      if (fn == nullptr) throw std::runtime_error(std::string("the emulator lacks ") + name);
    };
    get(fail_call, "custream_emu_fail_call");
    get(set_sticky, "custream_emu_set_sticky_error");
    get(reset, "custream_emu_reset");
    get(count_calls, "custream_emu_count_calls");
    get(call_count, "custream_emu_call_count");
    get(live_objects, "custream_emu_live_objects");
    get(wait_idle, "custream_emu_wait_idle");
    get(wait_destructors, "custream_emu_wait_destructors");
  }
  /// Clears faults, then waits until streams, host functions and user-object destructors are
  /// done. False on a 10 s timeout.
  bool quiesce() const {
    reset();
    return settle();
  }
  /// Waits, faults still armed, until streams, host functions and user-object destructors are
  /// done: what an operation set off (a payload released after its last launch, on the
  /// emulator's threads) is counted with it. False on a 10 s timeout.
  // The emulator's threads, then custream's releasing thread (what user-object destructors and
  // host functions handed over), then the emulator's again: a release may destroy more.
  bool settle() const {
    bool ok = true;
    for (int round = 0; round < 4; ++round) {  // releases can chain
      ok = wait_idle(10000) == 1 && wait_destructors(10000) == 1 &&
           custream::testing::wait_for_releases(std::chrono::seconds(10)) && ok;
    }
    return ok;
  }
};

// ---------------------------------------------------------------------------------------
// The driver table: fields, symbols, which field a configuration calls.

const custream::detail::DriverEntry* table(std::size_t* count) {
  return custream::detail::driver_entries(count);
}

// The table's symbols, each once (cuStreamGetCtx and cuCtxGetDevice are listed under two ABIs).
std::vector<std::string> table_symbols() {
  std::size_t count = 0;
  const custream::detail::DriverEntry* entries = table(&count);
  std::set<std::string> names;
  for (std::size_t i = 0; i < count; ++i) names.insert(entries[i].symbol);
  return {names.begin(), names.end()};
}

// The oldest ABI of `symbol` when the table lists it under several, else 0.
int oldest_of_several_abis(const char* symbol) {
  std::size_t count = 0;
  const custream::detail::DriverEntry* entries = table(&count);
  int oldest = 0;
  int seen = 0;
  for (std::size_t i = 0; i < count; ++i) {
    if (std::strcmp(entries[i].symbol, symbol) != 0) continue;
    ++seen;
    if (oldest == 0 || entries[i].version < oldest) oldest = entries[i].version;
  }
  return seen > 1 ? oldest : 0;
}

// The table field a call of `symbol` went through. custream prefers the newest ABI the
// driver serves (the emulator serves all of them); with `old_abi` (a cuGetProcAddress that
// hides the newer ABIs of symbols listed twice, see old_abi_get_proc_address) the oldest.
std::string field_of(const std::string& symbol, bool old_abi) {
  std::size_t count = 0;
  const custream::detail::DriverEntry* entries = table(&count);
  const custream::detail::DriverEntry* chosen = nullptr;
  for (std::size_t i = 0; i < count; ++i) {
    if (symbol != entries[i].symbol) continue;
    if (chosen == nullptr ||
        (old_abi ? entries[i].version < chosen->version : entries[i].version > chosen->version)) {
      chosen = &entries[i];
    }
  }
  return chosen != nullptr ? chosen->field : symbol;
}

// The error an injected failure of `symbol` returns in the first pass.
CUresult representative_error(const std::string& symbol) {
  static const std::set<std::string> creating = {
      "cuMemAlloc",         "cuMemAllocAsync",          "cuStreamCreateWithPriority",
      "cuEventCreate",      "cuUserObjectCreate",       "cuGraphInstantiateWithParams",
      "cuModuleLoadDataEx", "cuDevicePrimaryCtxRetain", "cuIpcOpenEventHandle"};
  return creating.count(symbol) != 0 ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_UNKNOWN;
}

// Entry points (table fields) no operation reaches on the emulator, and why.
const std::map<std::string, std::string>& unreachable() {
  static const std::map<std::string, std::string> reasons = {
      {"cuGetErrorName", "never called by the library (custream names results itself)"},
      {"cuDevicePrimaryCtxRelease",
       "never called by the library (primary contexts stay retained); tests and benchmarks"},
      {"cuStreamCreate", "never called by the library (it uses cuStreamCreateWithPriority)"},
      {"cuStreamGetDevice", "never called by the library: it would invalidate a capture"},
      {"cuMemcpyDtoDAsync", "never called by the library (device to device is cuMemcpyAsync)"},
      // Served (and checked by the conformance suite) for tests and users' programs.
      {"cuStreamWriteValue32", "never called by the library (completions write 64-bit words)"},
      {"cuStreamWaitValue32", "never called by the library; tests and benchmarks"},
      {"cuStreamWaitValue64", "never called by the library; tests and benchmarks"},
  };
  return reasons;
}

// Entry points a thread of custream's calls as often as timing makes it, and why.
const std::map<std::string, std::string>& polled() {
  static const std::map<std::string, std::string> reasons = {
      {"cuEventQuery", "the completion watcher queries pending events until they are done"},
  };
  return reasons;
}

// Entry points whose failure custream may swallow without throwing or reporting, and why.
const std::map<std::string, std::string>& swallowed() {
  static const std::map<std::string, std::string> reasons = {
      {"cuGetErrorString",
       "only words an error message; custream falls back to its own copy of the text"},
      {"cuGraphNodeGetType", "only decorates an error message with the failing node's type"},
      {"cuThreadExchangeStreamCaptureMode",
       "the completion watcher relaxes its own capture mode when it starts; failing, it stays in "
       "global mode, where its queries are refused only while another thread captures globally"},
  };
  return reasons;
}

// ---------------------------------------------------------------------------------------
// Known defects: library bugs the sweep found that are not fixed yet. A run of `operation`
// with a failure of `entry` (empty: any, also a clean run) at call `call` (0: any) with
// `result` (CUDA_SUCCESS: any) whose violations include `symptoms[0]` has every violation
// that contains one of `symptoms` printed instead of failing the test; any other violation
// still fails it. Keep this list short; when a fix lands the sweep prints that the entry no
// longer reproduces: remove it then.

struct KnownDefect {
  const char* operation;
  const char* entry;
  long call;
  CUresult result;
  std::vector<std::string> symptoms;
  const char* reason;  // where the bug is, and the fix
};

const std::vector<KnownDefect>& known_defects() {
  static const std::vector<KnownDefect> defects = {
      // None open: the five the sweep found are fixed (see docs/fault_injection.md).
  };
  return defects;
}

// ---------------------------------------------------------------------------------------
// What an operation left behind.

std::atomic<long> g_payloads{0};  // live host-function payloads (Counted objects)

/// Counts itself: every construction (also a copy or move) one, every destruction minus one.
struct Counted {
  Counted() noexcept { g_payloads.fetch_add(1); }
  Counted(const Counted&) noexcept { g_payloads.fetch_add(1); }
  Counted& operator=(const Counted&) = default;
  ~Counted() { g_payloads.fetch_sub(1); }
};

struct Report {
  CUresult result;
  std::string call;
};

/// Collects what the release-error handler hears while it lives.
class Reports {
 public:
  Reports()
      : previous_(custream::set_release_error_handler([this](const custream::ReleaseError& e) {
          std::lock_guard<std::mutex> lock(mutex_);
          reports_.push_back({e.result, e.call});
        })) {}
  ~Reports() { custream::set_release_error_handler(std::move(previous_)); }
  Reports(const Reports&) = delete;
  Reports& operator=(const Reports&) = delete;
  std::vector<Report> take() {
    std::lock_guard<std::mutex> lock(mutex_);
    return std::exchange(reports_, {});
  }

 private:
  std::mutex mutex_;
  std::vector<Report> reports_;
  custream::ReleaseErrorHandler previous_;
};

struct Outcome {
  bool threw = false;
  bool custream_error = false;
  CUresult result = CUDA_SUCCESS;
  std::string call;
  std::string what;
};

Outcome run_catching(const std::function<void()>& run) {
  Outcome o;
  try {
    run();
  } catch (const custream::Error& e) {
    o.threw = true;
    o.custream_error = true;
    o.result = e.result();
    o.call = e.call();
    o.what = e.what();
  } catch (const std::exception& e) {
    o.threw = true;
    o.what = std::string("not a custream::Error: ") + e.what();
  } catch (...) {
    o.threw = true;
    o.what = "not a std::exception";
  }
  return o;
}

/// One run with one injected failure (entry empty for a clean run), as observed.
struct Run {
  std::string entry;
  long k = 0;
  CUresult injected = CUDA_SUCCESS;
  long clean_calls = 0;  // calls of `entry` in the clean run
  Outcome outcome;
  std::vector<Report> reports;
  std::map<std::string, long> calls;  // calls per symbol in this run
  long live_before = 0;
  long live_after = 0;
  // Driver objects this run keeps by design (a pool's first page): at least keeps_min, at most
  // keeps.
  long keeps_min = 0;
  long keeps = 0;
  long payloads_after = 0;
  bool context_kept = true;
  bool check_context = false;
  bool capture_left = false;  // a capture still ran on a per-thread stream afterwards
  std::string note;           // what ran before (for the clean run after a failure)
  // The run started with no current context: a special handle's first call fails with
  // CUDA_ERROR_INVALID_CONTEXT by itself, so that injected result can change nothing.
  bool no_context = false;
};

bool reported(const Run& r, const std::string& call, CUresult result) {
  return std::any_of(r.reports.begin(), r.reports.end(),
                     [&](const Report& p) { return p.call == call && p.result == result; });
}

// True when the injected failure was reported (the same call, the same result): what a
// cleanup path does instead of throwing.
// Only then may something stay behind (a release the fault turned into a no-op).
bool injected_reported(const Run& r) {
  return !r.entry.empty() && std::any_of(r.reports.begin(), r.reports.end(), [&](const Report& p) {
    return p.result == r.injected && p.call == r.entry;
  });
}

std::string result_text(CUresult r) { return custream::result_name(r); }

// Everything wrong with a run; empty when it behaved.
std::vector<std::string> violations(const Run& r) {
  std::vector<std::string> v;
  const long made = r.calls.count(r.entry) != 0 ? r.calls.at(r.entry) : 0;
  // A polling thread's calls vary in number from run to run: a failure injected past the
  // calls this run made was not made, and there is nothing to judge of it.
  if (!r.entry.empty() && made < r.k && polled().count(r.entry) != 0) return v;
  if (!r.entry.empty() && made < r.k) {
    v.push_back("the injected call was never made (" + std::to_string(made) + " calls of " +
                r.entry + "): the operation's path differs from its clean run");
  }
  const Outcome& o = r.outcome;
  const bool kept_by_fault = injected_reported(r);
  if (o.threw && !o.custream_error) v.push_back("threw " + o.what);
  if (o.custream_error && r.entry.empty()) v.push_back("the clean run threw: " + o.what);
  if (o.custream_error && !r.entry.empty()) {
    if (o.result != r.injected && !kept_by_fault) {
      v.push_back("threw " + result_text(o.result) + " instead of the injected " +
                  result_text(r.injected) + ": " + o.what);
    } else if (o.result == r.injected && r.reports.empty() && o.call != r.entry) {
      v.push_back("the error names the call \"" + o.call + "\", not " + r.entry + ": " + o.what);
    }
  }
  if (!o.threw && !r.entry.empty() && !reported(r, r.entry, r.injected)) {
    const bool invalid_context = r.injected == CUDA_ERROR_INVALID_CONTEXT;
    const bool retried = invalid_context && made == r.clean_calls + 1;
    const bool failed_anyway = invalid_context && r.no_context && made == r.clean_calls;
    if (!retried && !failed_anyway && swallowed().count(r.entry) == 0) {
      v.push_back("completed, but the failure was neither thrown nor reported" +
                  std::string(r.injected == CUDA_ERROR_INVALID_CONTEXT
                                  ? " nor retried (" + std::to_string(made) + " calls, " +
                                        std::to_string(r.clean_calls) + " in the clean run)"
                                  : ""));
    }
  }
  for (const Report& p : r.reports) {
    if (r.entry.empty() || p.result != r.injected || p.call != r.entry) {
      v.push_back("a cleanup call failed by itself (reported): " + p.call + " " +
                  result_text(p.result));
    }
  }
  if (r.live_after < r.live_before) {
    v.push_back("driver objects were destroyed that the operation did not create (" +
                std::to_string(r.live_before) + " live before, " + std::to_string(r.live_after) +
                " after)");
  }
  if (r.capture_left && !kept_by_fault) {
    v.push_back("a capture was left running on the per-thread stream (the sweep ended it)");
  }
  if (!kept_by_fault) {
    if (r.live_after < r.live_before + r.keeps_min || r.live_after > r.live_before + r.keeps) {
      v.push_back("driver objects leaked: " + std::to_string(r.live_before) + " live before, " +
                  std::to_string(r.live_after) + " after");
    }
    if (r.payloads_after != 0) {
      v.push_back(std::to_string(r.payloads_after) + " host-function payload(s) never destroyed");
    }
  }
  if (r.check_context && !r.context_kept && !kept_by_fault) {
    v.push_back("the thread's current context changed and nothing was reported");
  }
  return v;
}

std::string describe(const Run& r, const std::string& op) {
  std::ostringstream s;
  s << op << ": ";
  if (r.entry.empty()) {
    s << "clean run" << r.note;
  } else {
    s << "call " << r.k << " of " << r.clean_calls << " to " << r.entry << " fails with "
      << result_text(r.injected);
  }
  s << " -> "
    << (r.outcome.threw
            ? "threw " + result_text(r.outcome.result) + " from \"" + r.outcome.call + "\""
            : std::string("completed"));
  for (const Report& p : r.reports) s << "; reported " << p.call << " " << result_text(p.result);
  return s.str();
}

// ---------------------------------------------------------------------------------------
// The operations (one process; each creates what it needs and destroys it).

enum class ContextAtStart { primary, none };

struct Operation {
  std::string name;
  ContextAtStart context = ContextAtStart::primary;
  std::function<void()> run;
  std::function<void()> inject;  // extra injections of the operation itself (before counting)
};

CUcontext current_context() {
  CUcontext c = nullptr;
  REQUIRE(custream_test::raw().cuCtxGetCurrent(&c) == CUDA_SUCCESS);
  return c;
}

CUcontext context_for(ContextAtStart c) {
  return c == ContextAtStart::primary ? custream::Device(0).primary_context().handle() : nullptr;
}

void set_context(ContextAtStart c) {
  REQUIRE(custream_test::raw().cuCtxSetCurrent(context_for(c)) == CUDA_SUCCESS);
}

// Ends a capture an operation left running on this thread's per-thread stream of a device
// (created streams end theirs when destroyed; the null and legacy streams cannot capture), so
// one run cannot refuse the legacy stream to the next. True when there was one.
bool end_leftover_captures() {
  const auto& api = custream_test::raw();
  const CUcontext saved = current_context();
  bool found = false;
  for (int d = 0; d < custream::Device::count(); ++d) {
    REQUIRE(api.cuCtxSetCurrent(custream::Device(d).primary_context().handle()) == CUDA_SUCCESS);
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    REQUIRE(api.cuStreamIsCapturing(CU_STREAM_PER_THREAD, &status) == CUDA_SUCCESS);
    if (status == CU_STREAM_CAPTURE_STATUS_NONE) continue;
    found = true;
    CUgraph graph = nullptr;
    REQUIRE(api.cuStreamEndCapture(CU_STREAM_PER_THREAD, &graph) != CUDA_ERROR_UNKNOWN);
    if (graph != nullptr) REQUIRE(api.cuGraphDestroy(graph) == CUDA_SUCCESS);
  }
  REQUIRE(api.cuCtxSetCurrent(saved) == CUDA_SUCCESS);
  return found;
}

// The ops' own consistency checks.
void expect(bool condition, const char* what) {
  if (!condition) throw std::logic_error(std::string("the operation found a wrong value: ") + what);
}

// A failure of the test's own raw driver call, as custream would word it.
[[noreturn]] void own_call_failed(CUresult r, const char* call) {
  throw custream::Error(r, call, "the test's own call");
}

int other_device() { return custream::Device::count() > 1 ? 1 : 0; }

// A capture of `s` with a host function, a callback and a memset, ended into a Graph.
custream::Graph capture_some_work(const Stream& s, const custream::DeviceBuffer& b) {
  s.begin_capture();
  s.memset32(b.get(), 1, 16);
  s.launch_host_func([c = Counted{}] {});
  s.add_callback([c = Counted{}](const Stream&, CUresult) {});
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

std::atomic<int> g_small_runs{0};  // outlives host functions a failure leaves enqueued

// Every kind of call on the special handles 0, 1 and 2; run with and without a current
// context (custream retries with the current device's primary context where the driver
// refuses a special handle for want of one).
void use_special_handles() {
  const Stream null = Stream::null(), legacy = Stream::legacy(), per_thread = Stream::per_thread();
  null.synchronize();
  (void)legacy.done();
  (void)legacy.priority();
  (void)per_thread.non_blocking();
  (void)per_thread.id();
  (void)per_thread.is_capturing();
  per_thread.launch_host_func([c = Counted{}] {});
  std::atomic<int>* runs = &g_small_runs;
  per_thread.launch_host_func([runs]() noexcept { runs->fetch_add(1); });  // heap path here
  null.launch_host_func(&raw_host_fn, nullptr);
  legacy.add_callback([c = Counted{}](const Stream&, CUresult) {});
  null.add_callback(&raw_callback, nullptr);
  custream::Event e;
  null.record(e);
  per_thread.wait_event(e);
  custream::DeviceBuffer b(64);
  null.memset(b.get(), 0, 64);
  legacy.copy(b.get(), b.get(), 32);
  // A CaptureScope: the per-thread stream outlives the operation, and a capture left running
  // on it would refuse the legacy stream to every later operation.
  custream::CaptureScope capture(per_thread);
  per_thread.memset(b.get(), 1, 64);
  (void)per_thread.is_capturing();  // throws the failing call's own error (capture_info()
                                    // would report only the result)
  custream::Graph g = capture.end();
  g.upload(null);
  g.launch(null);
  g.launch(per_thread);
  null.synchronize();
}

// Completions of both mechanisms: a callback taking the result and a future, on the watcher
// and delivered to this thread. A failure of the watcher's query reaches the future.
void use_completions() {
  Stream s(custream::StreamFlags::non_blocking);
  for (const auto mechanism :
       {custream::CompletionMechanism::event, custream::CompletionMechanism::memory_write}) {
    for (const auto delivery :
         {custream::CompletionDelivery::thread, custream::CompletionDelivery::caller}) {
      custream::CompletionOptions options;
      options.mechanism = mechanism;
      options.delivery = delivery;
      // A pass over the pending events every millisecond: a few queries a registration, so
      // that the sweep (one run per call) stays short.
      options.poll_interval = std::chrono::milliseconds(1);
      custream::Completions engine(options);
      constexpr CUresult kNotYet = CUDA_ERROR_NOT_READY;
      std::atomic<CUresult> seen{kNotYet};
      engine.when_done(s, [&seen](CUresult r) { seen = r; });
      std::future<void> done = engine.future(s);
      done.wait();  // after the callback's point: with thread delivery it ran first
      // Every task run and let go of (caller delivery: here) before the future's result is
      // read: its exception's reference count is libstdc++'s, unseen by ThreadSanitizer.
      while (engine.pending() > 0) {
        engine.run_ready();
        std::this_thread::yield();
      }
      done.get();
      // A failed query is the callback's result: the error the stream's work had, as far as
      // the callback can know.
      if (seen.load() != CUDA_SUCCESS) {
        throw custream::Error(seen.load(), "cuEventQuery", "a completion callback's result");
      }
    }
  }
}

// A registration on a created or a green context's stream, the Stream and the Context dropped
// while it is pending (the registration keeps them).
void use_kept_completions(bool green, custream::CompletionDelivery delivery) {
  custream::CompletionOptions options;
  options.delivery = delivery;
  options.poll_interval = std::chrono::milliseconds(1);
  custream::Completions engine(options);
  std::atomic<CUresult> seen{CUDA_ERROR_NOT_READY};
  std::future<void> done;
  {
    const custream::Context c =
        green ? custream::Context::create_green(custream::Device(0).split_sms(1, 1).groups.at(0),
                                                custream::GreenReuse::none)  // destroyed
              : custream::Context::create(custream::Device(0));
    Stream s(c, custream::StreamFlags::non_blocking);
    s.launch_host_func(
        [c = Counted{}] { std::this_thread::sleep_for(std::chrono::milliseconds(1)); });
    engine.when_done(s, [&seen](CUresult r) { seen = r; });
    done = engine.future(s);
  }  // pending: the registrations keep both
  done.wait();
  while (engine.pending() > 0) {
    engine.run_ready();
    std::this_thread::yield();
  }
  done.get();
  if (seen.load() != CUDA_SUCCESS) {
    throw custream::Error(seen.load(), "cuEventQuery", "a completion callback's result");
  }
}

std::vector<Operation> operations() {
  std::vector<Operation> ops;
  auto add = [&](std::string name, std::function<void()> run,
                 ContextAtStart context = ContextAtStart::primary,
                 std::function<void()> inject = {}) {
    ops.push_back({std::move(name), context, std::move(run), std::move(inject)});
  };
  add("stream: create (current device and by device), query, destroy", [] {
    Stream s(custream::StreamFlags::non_blocking, -1);
    (void)s.priority();
    (void)s.non_blocking();
    (void)s.id();
    s.synchronize();
    (void)s.done();
    Stream t(custream::Device(other_device()), custream::StreamFlags::none, 0);
    t.synchronize();
  });
  add("stream: wrap a foreign stream (device inferred, or checked, kept alive)", [] {
    Stream s(custream::StreamFlags::none);
    custream::ExternalStream wrapped(s.handle());
    expect(wrapped.device_id() == 0, "the wrapped stream's device");
    (void)wrapped.non_blocking();
    (void)wrapped.priority();
    (void)wrapped.id();
    wrapped.synchronize();
    custream::ExternalStream kept(s.handle(), 0, std::make_shared<int>(1));
    const Stream copy = kept;
    (void)copy.done();
  });
  add("stream: wait for another, use(), current stream, scopes", [] {
    Stream a(custream::StreamFlags::non_blocking), b(custream::StreamFlags::non_blocking);
    a.wait(b);
    {
      custream::StreamScope scope(a);
      custream::current_stream().synchronize();
    }
    (void)custream::current_stream(other_device());
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
  add("device: queries, scopes, make_current", [] {
    const custream::Device d(0);
    (void)d.name();
    (void)d.total_memory();
    (void)d.compute_capability();
    (void)d.attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    (void)d.primary_context_active();
    {
      custream::DeviceScope outer(other_device());
      custream::DeviceScope inner(0);
      expect(custream::Device::current() == d, "the current device in a scope");
    }
    d.make_current();
  });
  add("special handles 0, 1, 2 with no current context", use_special_handles, ContextAtStart::none);
  add("special handles 0, 1, 2 with a current context", use_special_handles);
  add("events: record, wait, query, synchronize, elapsed time, other device", [] {
    Stream s(custream::StreamFlags::non_blocking);
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
    recorded.record();  // on the current stream of its device: the null stream
    const custream::Device other(other_device());
    custream::Event elsewhere(other, custream::EventFlags::blocking_sync);
    Stream t(other, custream::StreamFlags::non_blocking);
    elsewhere.record(t);
    elsewhere.synchronize();
  });
  add("events: interprocess export and open", [] {
    custream::Event e(custream::EventFlags::interprocess);
    const CUipcEventHandle handle = e.ipc_handle();
    custream::Event opened = custream::Event::open_ipc(handle);
    (void)opened.done();
  });
  add("host functions and callbacks (heap, small callable, raw)", [] {
    Stream s(custream::StreamFlags::non_blocking);
    std::atomic<int>* runs = &g_small_runs;
    s.launch_host_func([c = Counted{}] {});
    s.launch_host_func([runs]() noexcept { runs->fetch_add(1); });
    s.launch_host_func(&raw_host_fn, nullptr);
    s.add_callback([c = Counted{}](const Stream&, CUresult) {});
    s.add_callback(&raw_callback, nullptr);
    s.synchronize();
  });
  add("memory: allocate, set, copy, free (plain, by device, stream-ordered)", [] {
    Stream s(custream::StreamFlags::non_blocking);
    custream::DeviceBuffer a(256), b(256, s);
    custream::DeviceBuffer elsewhere(64, custream::Device(other_device()));
    // Outlives the copies: a failure may throw before the synchronize below.
    static std::vector<unsigned char> host(256, 1);
    s.memset(a.get(), 0, 256);
    s.memset32(b.get(), 7, 64);
    s.copy(a.get(), b.get(), 256);
    s.copy(a.get(), host.data(), 256);
    s.copy(host.data(), a.get(), 256);
    s.synchronize();
    custream::DeviceBuffer moved(64);
    moved = std::move(elsewhere);  // frees its own allocation first
    moved.reset();
  });
  add(
      "memory: stream-ordered on the null stream, freed with no current context",
      [] {
        custream::DeviceBuffer b(64, Stream::null());
        Stream::null().memset(b.get(), 0, 64);
      },
      ContextAtStart::none);
  add("capture: begin, query, end, instantiate, upload, launch, inspect", [] {
    Stream s(custream::StreamFlags::non_blocking);
    custream::DeviceBuffer b(64);
    s.begin_capture();
    const custream::CaptureInfo info = s.capture_info();
    if (info.result != CUDA_SUCCESS) {
      throw custream::Error(info.result, "cuStreamGetCaptureInfo", "capture_info()");
    }
    expect(s.is_capturing(), "is_capturing() while capturing");
    expect(s.capture_id() == info.id, "capture_id()");
    s.memset32(b.get(), 1, 16);
    s.launch_host_func([c = Counted{}] {});
    custream::Graph g = s.end_capture(custream::InstantiateFlags::none);
    expect(!s.is_capturing(), "is_capturing() after the end");
    g.upload(s);
    g.launch(s);
    s.synchronize();
    (void)g.node_count();
    (void)g.dot();
  });
  add("capture: host functions and callbacks in every form, on a joined stream", [] {
    Stream a(custream::StreamFlags::non_blocking), b(custream::StreamFlags::non_blocking);
    a.begin_capture();
    custream::Event fork, join;
    a.record(fork);
    b.wait_event(fork);
    b.launch_host_func([c = Counted{}] {});
    b.add_callback([c = Counted{}](const Stream&, CUresult) {});
    b.add_callback(&raw_callback, nullptr);
    std::atomic<int>* runs = &g_small_runs;
    a.launch_host_func([runs]() noexcept { runs->fetch_add(1); });
    a.launch_host_func(&raw_host_fn, nullptr);
    b.record(join);
    a.wait_event(join);
    custream::Graph g = a.end_capture();
    g.launch(a);
    g.launch(a);
    a.synchronize();
  });
  add("capture: a CaptureScope that unwinds, and one that ends", [] {
    Stream s(custream::StreamFlags::non_blocking);
    custream::DeviceBuffer b(64);
    struct Unwind {};
    try {
      custream::CaptureScope capture(s);
      s.memset32(b.get(), 2, 16);
      s.launch_host_func([c = Counted{}] {});
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
    Stream s(custream::StreamFlags::non_blocking);
    custream::DeviceBuffer b(64);
    custream::Graph g = capture_some_work(s, b);
    custream::Graph newer = capture_some_work(s, b);
    g.update(newer);
    g.launch(s);
    s.synchronize();
  });
  add("graphs: update from a capture (update_from_capture)", [] {
    Stream s(custream::StreamFlags::non_blocking);
    custream::DeviceBuffer b(64);
    custream::Graph g = capture_some_work(s, b);
    s.begin_capture();
    s.memset32(b.get(), 2, 16);
    s.launch_host_func([c = Counted{}] {});
    s.add_callback([c = Counted{}](const Stream&, CUresult) {});
    g.update_from_capture(s);
    g.launch(s);
    s.synchronize();
  });
  add("graphs: a GraphBuilder with every node kind and an edge, instantiated and launched", [] {
    Stream s(custream::StreamFlags::non_blocking);
    custream::DeviceBuffer b(64);
    // A launch an injected failure leaves running copies into it after the operation unwinds.
    static std::uint32_t host[16];
    host[0] = 0;
    custream::Event e;
    const custream::Module m = custream::Module::from_ptx(
        ".version 7.0\n.target sm_70\n.address_size 64\n.visible .entry noop()\n{\n  ret;\n}\n");
    const custream::Kernel k = m.kernel("noop");
    custream::GraphBuilder g = custream::GraphBuilder::create();
    const custream::GraphNode fill = g.add_memset({}, b.get(), std::uint32_t{3}, 16);
    custream::LaunchConfig with_priority{{1}, {1}};
    with_priority.priority = 0;  // a kernel node attribute (cuGraphKernelNodeSetAttribute)
    const custream::GraphNode run = g.add_kernel(fill, k, with_priority);
    const custream::GraphNode copy = g.add_copy_to_host(run, host, b.get(), 64);
    const custream::GraphNode call = g.add_host(copy, [c = Counted{}] {});
    const custream::GraphNode record = g.add_event_record(call, e);
    const custream::GraphNode wait = g.add_event_wait(record, e);
    {
      custream::GraphBuilder child = custream::GraphBuilder::create();
      child.add_host({}, [c = Counted{}] {});
      (void)g.add_child(wait, child);
    }
    const custream::GraphAllocation alloc = g.add_alloc(wait, 64);
    g.add_free(alloc.node, alloc.address);
    g.add_dependency(g.add_empty({}), fill);
    (void)g.dot();
    custream::Graph exec = g.instantiate();
    exec.launch(s);
    s.synchronize();
    expect(host[0] == 3, "the word the built graph copied back");
  });
  add("graphs: conditional nodes (a WHILE body captured from a stream, a set-condition node, "
      "an IF body with nested child graphs), instantiated and launched",
      [] {
        Stream s(custream::StreamFlags::non_blocking);
        custream::DeviceBuffer b(64);
        custream::GraphBuilder g = custream::GraphBuilder::create();
        const custream::ConditionalHandle more = g.add_condition(1, true);
        const custream::GraphNode fill = g.add_memset({}, b.get(), std::uint32_t{0}, 16);
        custream::GraphBuilder body = g.add_while(fill, more).body();
        std::vector<custream::GraphNode> last;
        {
          custream::GraphCaptureScope capture(s, body);
          s.memset32(b.get(), 0, 16);
          last = capture.end();
        }
        // The word is 0: the loop runs once (without the kernel, the default ends it at once).
        if (custream::detail::have_set_condition_kernel()) {
          body.add_set_condition(last, more, b.get());
        }
        custream::ConditionalNode branch = g.add_if({}, g.add_condition(0));
        custream::GraphBuilder inner = custream::GraphBuilder::create();
        {
          custream::GraphBuilder innermost = custream::GraphBuilder::create();
          innermost.add_empty({});
          inner.add_child({}, innermost);
        }
        branch.body().add_child({}, inner);  // its nodes checked for the body (nested child)
        custream::Graph exec = g.instantiate();
        exec.launch(s);
        s.synchronize();
      });
  add("graphs: adopt and wrap a foreign capture, launch on the current stream", [] {
    Stream s(
        custream::StreamFlags::none);  // blocking: ordered with the null stream, the current one
    custream::DeviceBuffer b(64);
    const auto& api = custream_test::raw();
    for (const bool adopt : {true, false}) {
      CUgraph graph = nullptr;
      s.begin_capture();
      s.memset32(b.get(), 4, 16);
      if (const CUresult r = api.cuStreamEndCapture(s.handle(), &graph); r != CUDA_SUCCESS) {
        own_call_failed(r, "cuStreamEndCapture");
      }
      std::exception_ptr failure;
      try {
        custream::Graph g = adopt ? custream::Graph::adopt(graph)  // uploads on current_stream()
                                  : custream::Graph::wrap(graph, custream::InstantiateFlags::none);
        g.upload();
        g.launch();
        g.launch(s);
        custream::current_stream().synchronize();
        s.synchronize();
      } catch (...) {
        failure = std::current_exception();
      }
      if (!adopt) {  // a wrapped graph stays the caller's
        if (const CUresult r = api.cuGraphDestroy(graph); r != CUDA_SUCCESS) {
          (void)api.cuGraphDestroy(graph);  // injected faults hit once: this one frees it
          if (!failure) own_call_failed(r, "cuGraphDestroy");
        }
      }
      if (failure) std::rethrow_exception(failure);
    }
  });
  add("a host function captured by a racing capture (run-once node made graph-owned)", [] {
    Stream s(custream::StreamFlags::non_blocking);
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
      own_call_failed(r, "cuLaunchHostFunc");
    }
    custream::Graph g = s.end_capture();
    g.launch(s);
    g.launch(s);
    s.synchronize();
  });
  add(
      "a captured host function whose graph refuses its user object",
      [] {
        Stream s(custream::StreamFlags::non_blocking);
        s.begin_capture();
        try {
          s.launch_host_func([c = Counted{}] {});
        } catch (const custream::Error& e) {
          if (e.result() != CUDA_ERROR_NOT_PERMITTED) throw;  // the operation's own fault
        }
        (void)s.end_capture();
      },
      ContextAtStart::primary,
      [] { custream_test::emu_fail_call("cuGraphRetainUserObject", 1, CUDA_ERROR_NOT_PERMITTED); });
  add("modules: load PTX, look up a kernel, launch it, unload (current device and another)", [] {
    for (const int device : {-1, other_device()}) {
      custream::Kernel k;
      {
        custream::Module m = custream::Module::from_ptx(
            ".version 7.0\n.target sm_70\n.address_size 64\n.visible .entry noop()\n{\n  ret;\n}\n",
            device);
        k = m.kernel("noop");
      }  // the kernel keeps its module loaded
      custream::Stream s = device < 0 ? custream::Stream(custream::StreamFlags::non_blocking)
                                      : custream::Stream(custream::Device(device),
                                                         custream::StreamFlags::non_blocking);
      k.launch(s, {1}, {1}, 0);
      s.synchronize();
    }
  });
  add("contexts: a created context with its stream, event, module, buffer and scopes", [] {
    const custream::Context c = custream::Context::create(custream::Device(0));
    Stream s(c, custream::StreamFlags::non_blocking);
    const custream::ExternalStream wrapped(s.handle());
    expect(wrapped.context_kind() == custream::ContextKind::created, "the inferred kind");
    custream::Event e(c);
    s.record(e);
    wrapped.wait_event(e);
    const custream::Event made = wrapped.record();
    custream::DeviceBuffer plain(64, c);
    custream::DeviceBuffer ordered(64, s);
    const custream::Module m = custream::Module::from_ptx(
        ".version 7.0\n.target sm_70\n.address_size 64\n.visible .entry noop()\n{\n  ret;\n}\n", c);
    m.kernel("noop").launch(s, {1}, {1}, 0);
    {
      custream::ContextScope scope(c);
      expect(custream::Context::current() == c, "the scope's context");
    }
    {
      custream::StreamScope scope(s);
      s.memset(ordered.get(), 0, 64);
    }
    c.record(e);
    const custream::Event primary_event(custream::Device(0));
    custream::Device(0).primary_context().record(primary_event);
    c.wait(primary_event);
    c.synchronize();
    s.synchronize();
  });
  add("contexts: a green context (split, create, stream, events, capture, record and wait)", [] {
    const custream::SmSplit split = custream::Device(0).split_sms(1, 1);
    // Destroyed by its last user (reuse: the operation below).
    const custream::Context g =
        custream::Context::create_green(split.groups.at(0), custream::GreenReuse::none);
    expect(g.sm_count() == split.groups.at(0).sm_count(), "the green context's SMs");
    Stream s(g);
    const custream::ExternalStream wrapped(s.handle());
    expect(wrapped.context_kind() == custream::ContextKind::green, "the inferred kind");
    expect(wrapped.green_context() == g.green_handle(), "the inferred green context");
    custream::Event e(g);
    g.record(e);
    g.wait(e);
    custream::DeviceBuffer b(64, s);
    custream::CaptureScope capture(s);
    s.memset(b.get(), 1, 64);
    s.launch_host_func([c = Counted{}] {});
    custream::Graph graph = capture.end();
    graph.launch(wrapped);
    s.synchronize();
  });
  add("contexts: green contexts kept for reuse (give back while current, take, evict, clear)", [] {
    // Ends with nothing kept, the default limit and the thread's context, also when a failure
    // throws midway.
    struct Restore {
      CUcontext current = nullptr;
      Restore() {
        custream::detail::release_call<&custream::detail::DriverApi::cuCtxGetCurrent>(
            "context (saving it)", nullptr, &current);
      }
      ~Restore() {
        custream::Context::set_green_cache_limit(custream::Context::default_green_cache_limit);
        custream::Context::clear_green_cache();
        custream::detail::release_call<&custream::detail::DriverApi::cuCtxSetCurrent>(
            "context (restoring it)", current, current);
      }
    } restore;
    custream::Context::set_green_cache_limit(1);
    const custream::SmSplit split = custream::Device(0).split_sms(8, 2);
    {
      const custream::Context g = custream::Context::create_green(split.groups.at(0));
      Stream s(g);
      s.launch_host_func([c = Counted{}] {});
    }  // drained and kept
    {
      const custream::Context again = custream::Context::create_green(split.groups.at(0));
      const custream::Context other = custream::Context::create_green(split.groups.at(1));
      Stream(again).synchronize();
    }  // both given back: the limit keeps one, the other is evicted
    // Last (a failed cuCtxGetCurrent leaves it current, destroyed, until Restore): given back
    // while current, it is popped.
    custream::Context::create_green(split.groups.at(0)).make_current();
    custream::Context::set_green_cache_limit(0);  // evicts the rest
  });
  add("libraries: load (cached and not), kernels by name, launch, globals, attributes", [] {
    const char* const ptx =
        ".version 7.0\n.target sm_70\n.address_size 64\n"
        ".visible .global .align 4 .u32 sweep_counter;\n"
        ".visible .entry sweep_noop()\n{\n  ret;\n}\n";
    const custream::Library lib = custream::Library::from_ptx(ptx, custream::LibraryCache::bypass);
    const custream::Library cached = custream::Library::from_ptx(ptx);
    expect(custream::Library::from_ptx(ptx) == cached, "the cached library");
    custream::Library::clear_cache();
    const custream::LibraryKernel k = lib.kernel("sweep_noop");
    for (const int device : {0, other_device()}) {
      Stream s(custream::Device(device), custream::StreamFlags::non_blocking);
      k.launch(s, {1}, {1}, 0);
      k.launch(s, {1}, {1}, 0);  // the cached function
      s.synchronize();
    }
    lib.preload(custream::Device(0));
    const custream::LibraryGlobal g =
        lib.global("sweep_counter", custream::Device(0).primary_context());
    expect(g.bytes == 4, "the global's size");
    try {
      (void)lib.managed("sweep_counter");  // not managed: the driver says so
    } catch (const custream::Error& e) {
      if (e.result() != CUDA_ERROR_NOT_FOUND && e.result() != CUDA_ERROR_INVALID_VALUE) throw;
    }
    expect(k.attribute(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 0) > 0, "an attribute");
    k.set_attribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 0, 0);
  });
  add("libraries: launch attributes, argument checks, a graph holding its library, unload", [] {
    const char* const ptx =
        ".version 7.0\n.target sm_70\n.address_size 64\n"
        ".visible .entry sweep_take(\n  .param .u64 p\n)\n{\n  ret;\n}\n";
    Stream s(custream::Device(0), custream::StreamFlags::non_blocking);
    custream::Graph graph;
    {
      custream::Library lib = custream::Library::from_ptx(ptx, custream::LibraryCache::bypass);
      const custream::LibraryKernel& k = lib.kernel("sweep_take");
      const CUdeviceptr p = 0;
      custream::LaunchConfig config(custream::Dim3{4}, custream::Dim3{32});
      config.cluster = custream::Dim3{2};
      config.priority = 0;
      k.launch(s, config, p);
      config.cluster = custream::Dim3{16};
      config.grid = custream::Dim3{16};
      k.set_attribute(CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1, 0);
      k.launch(s, config, p);  // asks the driver whether clusters of 16 fit
      custream::LaunchConfig cooperative(custream::Dim3{2}, custream::Dim3{32});
      cooperative.cooperative = true;
      k.launch(s, cooperative, p);
      try {
        k.launch(s, {1}, {1}, 0, 1);  // refused: an int for a pointer
        throw std::logic_error("a wrong argument size was launched");
      } catch (const custream::Error& e) {
        if (e.result() != CUDA_ERROR_INVALID_VALUE) throw;
      }
      custream::CaptureScope capture(s);
      k.launch(s, {1}, {1}, 0, p);
      graph = capture.end();
      custream::Library other = custream::Library::from_ptx(ptx, custream::LibraryCache::bypass);
      other.unload();
    }
    graph.launch(s);  // the graph keeps the library loaded
    s.synchronize();
  });
  add("libraries: the cache's unloads in relaxed capture mode, a bad image's JIT log", [] {
    const char* const ptx =
        ".version 7.0\n.target sm_70\n.address_size 64\n"
        ".visible .entry sweep_cached()\n{\n  ret;\n}\n";
    custream::Library::clear_cache();
    (void)custream::Library::from_ptx(ptx);  // only the cache holds it
    custream::Library::clear_cache();        // unloads it with the thread's capture mode relaxed
    // A bad image loads lazily; its first use fails with the driver's error and the JIT's log.
    const char* const broken =
        ".version 7.0\n.target sm_70\n.address_size 64\n"
        ".visible .entry sweep_broken(\n{\n  ret;\n}\n";
    const custream::Library bad = custream::Library::from_ptx(broken);
    expect(custream::Library::cached_count() == 0, "a broken library is not cached");
    try {
      (void)bad.kernel("sweep_broken");
      throw std::logic_error("a kernel of a broken library was found");
    } catch (const custream::Error& e) {
      if (e.result() != CUDA_ERROR_INVALID_PTX) throw;
      expect(std::string(e.what()).find("JIT error log") != std::string::npos, "the JIT log");
    }
  });
  add("completions: a callback and a future by events, by written words, and through an eventfd",
      [] { use_completions(); });
  // The registrations keep the Stream and its owned Context, dropped while they are pending,
  // until they ran: then the watcher (thread delivery) or run_ready() (caller delivery)
  // destroys the event, the stream and the context. Each on a thread of its own: a ContextScope
  // whose restore fails (reported) leaves the created context current in its thread, where it
  // dangles once the registration has destroyed it elsewhere (a later scope's restore to it
  // would fail again); the thread ends with it.
  add("completions: on a created and a green context's streams, both dropped while pending", [] {
    for (const bool green : {false, true}) {
      for (const auto delivery :
           {custream::CompletionDelivery::thread, custream::CompletionDelivery::caller}) {
        std::exception_ptr failed;
        std::thread([&failed, green, delivery] {
          try {
            use_kept_completions(green, delivery);
          } catch (...) {
            failed = std::current_exception();
          }
        }).join();
        if (failed) std::rethrow_exception(failed);
      }
    }
  });
  add("errors: the driver's description of a failed call", [] {
    try {
      (void)custream::Device(0).attribute(static_cast<CUdevice_attribute>(100000));
      throw std::logic_error("an unknown attribute was answered");
    } catch (const custream::Error& e) {
      if (e.result() != CUDA_ERROR_INVALID_VALUE) throw;
      expect(!e.description().empty(), "the description");
    }
  });
  add("typed memory: DeviceArray (plain, stream-ordered), PinnedArray, fills, memory pool", [] {
    Stream s(custream::StreamFlags::non_blocking);
    // Pinned memory: its free waits for the work that may still use it (a failure may throw
    // before the synchronize below).
    custream::PinnedArray<std::uint32_t> host(64, custream::PinnedFlags::mapped);
    custream::DeviceArray<std::uint32_t> plain(64), ordered(64, s);
    custream::DeviceArray<std::uint16_t> halves(64, s);
    custream::DeviceArray<unsigned char> bytes(64, s);
    const custream::DeviceArray<unsigned char> elsewhere(64, custream::Device(other_device()));
    plain.copy_from(s, host);
    bytes.fill(s, static_cast<unsigned char>(1));
    ordered.fill(s, 7u);
    halves.fill(s, std::uint16_t{9});
    ordered.copy_to(s, host);
    expect(plain.to_vector(s).size() == 64, "to_vector's size");
    expect(host[63] == 7u, "the 32-bit fill copied back");
    (void)host.device_pointer();
    const custream::MemoryPool pool = custream::MemoryPool::device_default(custream::Device(0));
    const std::uint64_t threshold = pool.release_threshold();
    pool.set_release_threshold(threshold);
    (void)pool.used_bytes();
    (void)pool.reserved_bytes();
    pool.trim_to(0);
    custream::DeviceArray<std::uint32_t> moved(std::move(ordered));
  });
  add("graphs: per-node updates of a built graph (kernel, memset, copy, host, child, enabled)", [] {
    Stream s(custream::StreamFlags::non_blocking);
    custream::DeviceBuffer b(64);
    static std::uint32_t host[16];  // a failure may leave a launch copying into it
    const custream::Module m = custream::Module::from_ptx(
        ".version 7.0\n.target sm_70\n.address_size 64\n.visible .entry noop()\n{\n  "
        "ret;\n}\n");
    const custream::Kernel k = m.kernel("noop");
    custream::GraphBuilder g = custream::GraphBuilder::create();
    const custream::GraphNode fill = g.add_memset({}, b.get(), std::uint32_t{1}, 16);
    const custream::GraphNode run = g.add_kernel(fill, k, custream::LaunchConfig{{1}, {1}});
    const custream::GraphNode copy = g.add_copy_to_host(run, host, b.get(), 64);
    const custream::GraphNode call = g.add_host(copy, [c = Counted{}] {});
    custream::GraphBuilder child = custream::GraphBuilder::create();
    child.add_host({}, [c = Counted{}] {});
    const custream::GraphNode nested = g.add_child(call, child);
    custream::Graph exec = g.instantiate();
    exec.update_memset(fill, b.get(), std::uint32_t{5}, 16);
    exec.update_kernel(run, custream::LaunchConfig{{1}, {1}});
    exec.update_copy_to_host(copy, host, b.get(), 64);
    exec.set_host(call, [c = Counted{}] {});
    custream::GraphBuilder other = custream::GraphBuilder::create();
    other.add_host({}, [c = Counted{}] {});
    exec.set_child(nested, other);
    exec.set_enabled(run, false);
    expect(!exec.enabled(run), "the kernel node disabled");
    exec.set_enabled(run, true);
    exec.launch(s);
    s.synchronize();
    expect(host[0] == 5, "the word the updated memset wrote");
  });
  return ops;
}

// ---------------------------------------------------------------------------------------
// Operations that need a process of their own: the calls they sweep happen once per
// process (or once per device), or need a driver without the newest ABIs.

struct FreshOperation {
  std::string name;
  bool old_abi = false;         // hide the newer ABIs of symbols listed twice
  std::function<void()> setup;  // before counting (may load the driver)
  std::function<void()> run;
  // Driver objects a run keeps by design (made once per process, never freed): the clean run
  // keeps exactly `keeps`; a run whose injected failure is of an entry in `kept_when` exactly
  // what it gives (what was made before that call), any other from none to `keeps`.
  long keeps = 0;
  std::map<std::string, long> kept_when = {};
};

// What the fresh operations share between setup and run (one process each).
struct Foreign {
  CUcontext context = nullptr;  // device 1's primary context, retained behind custream's back
  CUstream stream = nullptr;    // a stream created in it
};
Foreign g_foreign;

// Setup: a stream of a context custream has not retained, nothing current.
void make_foreign_stream() {
  (void)custream::driver_info();
  const auto& api = custream::detail::api();
  const int device = custream::Device::count() - 1;
  CUdevice d = 0;
  REQUIRE(api.cuDeviceGet(&d, device) == CUDA_SUCCESS);
  REQUIRE(api.cuDevicePrimaryCtxRetain(&g_foreign.context, d) == CUDA_SUCCESS);
  REQUIRE(api.cuCtxSetCurrent(g_foreign.context) == CUDA_SUCCESS);
  REQUIRE(api.cuStreamCreateWithPriority(&g_foreign.stream, CU_STREAM_NON_BLOCKING, 0) ==
          CUDA_SUCCESS);
  REQUIRE(api.cuCtxSetCurrent(nullptr) == CUDA_SUCCESS);
}

// Run: wrap it (device inferred from its context), and ask for the current device in it.
void wrap_foreign_stream() {
  const int device = custream::Device::count() - 1;
  custream::ExternalStream wrapped(g_foreign.stream);
  expect(wrapped.device_id() == device, "the device inferred from a foreign context");
  custream::ContextScope scope(g_foreign.context);
  expect(custream::Device::current().ordinal() == device, "the current device");
}

std::vector<FreshOperation> fresh_operations() {
  return {
      {"load the driver", false, [] {},
       [] {
         (void)custream::driver_info();
         expect(custream::Device::count() >= 1, "the device count");
       }},
      {"first use of each device (its primary context is retained)", false,
       [] { (void)custream::driver_info(); },
       [] {
         for (int d = 0; d < custream::Device::count(); ++d) {
           Stream s(custream::Device(d), custream::StreamFlags::non_blocking);
           s.synchronize();
         }
       }},
      {"wrap a stream of a context custream did not retain", false, make_foreign_stream,
       wrap_foreign_stream},
      {"the first completion by a written word (its page of host-mapped memory)",
       false,
       [] {
         const Stream s(custream::StreamFlags::non_blocking);  // the primary context retained
         s.synchronize();
       },
       [] {
         custream::CompletionOptions options;
         options.mechanism = custream::CompletionMechanism::memory_write;
         custream::Completions engine(options);
         engine.future(Stream(custream::StreamFlags::non_blocking)).get();
       },
       // The device's probe event and the page of words, kept (in the pools) for every later
       // completion; made in that order.
       2,
       {{"cuMemHostAlloc", 1},
        {"cuMemHostGetDevicePointer", 1},
        {"cuStreamWriteValue64", 2},
        {"cuStreamDestroy", 2}}},
      {"wrap a stream of a context custream did not retain (driver < 13.0 ABIs)", true,
       make_foreign_stream, wrap_foreign_stream},
  };
}

// Entries called while loading: a failure there is recorded and re-thrown by every later
// call (lib/driver.hpp, invariant 1), so the next operation reports it again.
bool load_time(const std::string& symbol) {
  return symbol == "cuInit" || symbol == "cuDriverGetVersion" || symbol == "cuDeviceGetCount" ||
         symbol == "cuDeviceGet";
}

// The emulator's cuGetProcAddress, for the child's old-ABI driver.
PFN_cuGetProcAddress_v12000 g_emu_get_proc_address = nullptr;

// A driver without the newer ABIs of the symbols custream lists twice (a driver < 13.0).
CUresult old_abi_get_proc_address(const char* symbol, void** pfn, int version, cuuint64_t flags,
                                  CUdriverProcAddressQueryResult* status) {
  if (const int oldest = oldest_of_several_abis(symbol); oldest != 0 && version > oldest) {
    *pfn = nullptr;
    if (status != nullptr) *status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
    return CUDA_SUCCESS;
  }
  return g_emu_get_proc_address(symbol, pfn, version, flags, status);
}

// --- The child side: one fresh operation, at most one injected failure, results to a file.

std::string outcome_line(const Outcome& o) {
  if (!o.threw) return "ok";
  std::string what = o.what;
  std::replace(what.begin(), what.end(), '\n', ' ');
  return "threw " + std::to_string(o.custream_error ? static_cast<int>(o.result) : -1) + " " +
         (o.call.empty() ? "-" : o.call) + " " + what;
}

Outcome parse_outcome(const std::string& line) {
  Outcome o;
  std::istringstream in(line);
  std::string word;
  in >> word;
  if (word != "threw") return o;
  int result = 0;
  o.threw = true;
  in >> result >> o.call;
  std::getline(in, o.what);
  o.custream_error = result >= 0;
  o.result = static_cast<CUresult>(result);
  if (o.call == "-") o.call.clear();
  return o;
}

void run_child(const std::string& op_name, const char* fault, const char* out_path) {
  std::vector<FreshOperation> ops = fresh_operations();
  const auto op = std::find_if(ops.begin(), ops.end(),
                               [&](const FreshOperation& f) { return f.name == op_name; });
  REQUIRE(op != ops.end());
  const char* path = secure_getenv("CUSTREAM_LIBCUDA");
  REQUIRE(path != nullptr);
  void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);  // the library's dlopen finds this one
  REQUIRE(handle != nullptr);
  const EmuControls emu(handle);
  if (op->old_abi) {
    g_emu_get_proc_address =
        reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(handle, "cuGetProcAddress_v2"));
    REQUIRE(g_emu_get_proc_address != nullptr);
    custream::use_driver_entry_point(&old_abi_get_proc_address);
  }
  Reports reports;
  op->setup();
  std::string entry;
  long k = 0;
  int injected = 0;
  if (fault != nullptr && fault[0] != '\0') {
    std::istringstream in(fault);
    in >> entry >> k >> injected;
  }
  const long live_before = emu.live_objects();
  emu.count_calls(1);
  if (!entry.empty())
    emu.fail_call(entry.c_str(), static_cast<int>(k), static_cast<CUresult>(injected));
  const Outcome outcome = run_catching(op->run);
  (void)emu.settle();  // quiesce below requires it
  std::map<std::string, long> calls;
  for (const std::string& s : table_symbols()) {
    if (const long n = emu.call_count(s.c_str()); n > 0) calls[s] = n;
  }
  emu.count_calls(0);
  REQUIRE(emu.quiesce());
  const long live_after = emu.live_objects();
  const std::vector<Report> heard = reports.take();
  const Outcome again = run_catching(op->run);
  REQUIRE(emu.quiesce());
  const std::vector<Report> heard_again = reports.take();

  std::ofstream out(out_path);
  out << "outcome " << outcome_line(outcome) << "\n";
  for (const Report& r : heard)
    out << "report " << static_cast<int>(r.result) << " " << r.call << "\n";
  out << "live " << live_before << " " << live_after << "\n";
  for (const auto& [s, n] : calls) out << "count " << s << " " << n << "\n";
  out << "again " << outcome_line(again) << "\n";
  out << "again-reports " << heard_again.size() << "\n";
  out << "end\n";
}

// --- The parent side: runs a child and reads what it found.

struct ChildRun {
  int status = -1;
  std::string log;
  Run run;
  Outcome again;
  std::size_t again_reports = 0;
  bool complete = false;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

class Children {
 public:
  Children() {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern =
        std::string(tmp != nullptr && tmp[0] != '\0' ? tmp : "/tmp") + "/custream-sweep-XXXXXX";
    REQUIRE(mkdtemp(pattern.data()) != nullptr);
    dir_ = pattern;
  }
  ~Children() {
    for (const std::string& f : files_) ::unlink(f.c_str());
    ::rmdir(dir_.c_str());
  }
  Children(const Children&) = delete;
  Children& operator=(const Children&) = delete;

  ChildRun run(const std::string& op, const std::string& entry, long k, CUresult injected) {
    const std::string base = dir_ + "/child-" + std::to_string(++count_);
    const std::string out = base + ".out", log = base + ".log";
    files_.push_back(out);
    files_.push_back(log);
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      if (std::strncmp(*e, "CUSTREAM_FAULT_SWEEP_", 21) != 0) env.emplace_back(*e);
    }
    env.push_back("CUSTREAM_FAULT_SWEEP_OP=" + op);
    env.push_back("CUSTREAM_FAULT_SWEEP_FAULT=" +
                  (entry.empty() ? std::string()
                                 : entry + " " + std::to_string(k) + " " +
                                       std::to_string(static_cast<int>(injected))));
    env.push_back("CUSTREAM_FAULT_SWEEP_OUT=" + out);
    std::vector<char*> envp;
    for (std::string& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::string exe = "/proc/self/exe", tag = "[fault-sweep-child]";
    char* argv[] = {exe.data(), tag.data(), nullptr};
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    pid_t pid = 0;
    const int spawned = posix_spawn(&pid, exe.c_str(), &actions, nullptr, argv, envp.data());
    posix_spawn_file_actions_destroy(&actions);
    ChildRun c;
    REQUIRE(spawned == 0);
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    c.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    c.log = read_file(log);
    c.run.entry = entry;
    c.run.k = k;
    c.run.injected = injected;
    std::istringstream in(read_file(out));
    for (std::string line; std::getline(in, line);) {
      std::istringstream words(line);
      std::string key;
      words >> key;
      std::string rest;
      std::getline(words, rest);
      if (!rest.empty() && rest[0] == ' ') rest.erase(0, 1);
      if (key == "outcome") {
        c.run.outcome = parse_outcome(rest);
      } else if (key == "report") {
        int result = 0;
        std::string call;
        std::istringstream(rest) >> result >> call;
        c.run.reports.push_back({static_cast<CUresult>(result), call});
      } else if (key == "live") {
        std::istringstream(rest) >> c.run.live_before >> c.run.live_after;
      } else if (key == "count") {
        std::string symbol;
        long n = 0;
        std::istringstream(rest) >> symbol >> n;
        c.run.calls[symbol] = n;
      } else if (key == "again") {
        c.again = parse_outcome(rest);
      } else if (key == "again-reports") {
        std::istringstream(rest) >> c.again_reports;
      } else if (key == "end") {
        c.complete = true;
      }
    }
    return c;
  }

 private:
  std::string dir_;
  std::vector<std::string> files_;
  int count_ = 0;
};

// ---------------------------------------------------------------------------------------
// Coverage bookkeeping (per table field).

struct Coverage {
  std::map<std::string, std::set<std::string>> reached_by;  // field -> operations
  std::map<std::string, long> injected;                     // field -> injected runs
  long runs = 0;
  long child_runs = 0;  // of those, in processes of their own
  long known = 0;       // runs whose violations are known defects
  struct Seen {
    long runs = 0;
    std::string first;  // the first run that showed it
  };
  std::map<const KnownDefect*, Seen> reproduced;
};

// Records a run's violations: those of known defects are printed, the others fail the test.
void judge(const Run& r, const std::string& op, Coverage& coverage,
           const std::vector<std::string>& extra = {}) {
  std::vector<std::string> v = violations(r);
  v.insert(v.end(), extra.begin(), extra.end());
  if (v.empty()) return;
  auto contains = [](const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
  };
  std::vector<std::string> known, unknown;
  const KnownDefect* defect = nullptr;
  for (const KnownDefect& d : known_defects()) {
    if (op != d.operation || (d.entry[0] != '\0' && r.entry != d.entry) ||
        (d.call != 0 && d.call != r.k) || (d.result != CUDA_SUCCESS && d.result != r.injected)) {
      continue;
    }
    if (std::any_of(v.begin(), v.end(),
                    [&](const std::string& s) { return contains(s, d.symptoms.front()); })) {
      defect = &d;
      break;
    }
  }
  for (const std::string& s : v) {
    const bool is_known =
        defect != nullptr && std::any_of(defect->symptoms.begin(), defect->symptoms.end(),
                                         [&](const std::string& m) { return contains(s, m); });
    (is_known ? known : unknown).push_back(s);
  }
  if (!known.empty()) {
    Coverage::Seen& seen = coverage.reproduced[defect];
    if (seen.runs++ == 0) {
      seen.first = describe(r, op);
      for (const std::string& s : known) seen.first += "\n  - " + s;
    }
    ++coverage.known;
  }
  if (!unknown.empty()) {
    std::string text = describe(r, op);
    for (const std::string& s : unknown) text += "\n  - " + s;
    FAIL_CHECK(text);
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------

TEST_CASE("fault sweep: one operation in a process of its own", "[.][fault-sweep-child]") {
  const char* op = std::getenv("CUSTREAM_FAULT_SWEEP_OP");
  const char* out = std::getenv("CUSTREAM_FAULT_SWEEP_OUT");
  if (op == nullptr || out == nullptr) {
    CUSTREAM_SKIP("run by the fault sweep only");
  }
  run_child(op, std::getenv("CUSTREAM_FAULT_SWEEP_FAULT"), out);
}

TEST_CASE("every entry point custream calls, failed at every call site",
          "[fault-sweep][emu-only]") {
  REQUIRE_EMULATOR();
  void* handle = dlopen(custream::driver_info().library.c_str(), RTLD_NOW | RTLD_NOLOAD);
  REQUIRE(handle != nullptr);
  const EmuControls emu(handle);
  const std::vector<std::string> symbols = table_symbols();
  const std::vector<Operation> ops = operations();
  Reports reports;
  Coverage coverage;

  // Warm up: retain the primary contexts, make this thread's slots, load lazily-made state.
  for (const Operation& op : ops) {
    set_context(op.context);
    if (op.inject) op.inject();
    INFO(op.name);
    op.run();
    REQUIRE(emu.quiesce());
  }
  (void)reports.take();

  // One run of `op` with `entry`'s k-th call failing with `injected` (none: entry empty).
  auto run_once = [&](const Operation& op, const std::string& entry, long k, CUresult injected,
                      long clean_calls) {
    Run r;
    r.entry = entry;
    r.k = k;
    r.injected = injected;
    r.clean_calls = clean_calls;
    r.check_context = true;
    r.no_context = op.context == ContextAtStart::none;
    set_context(op.context);
    const CUcontext context = current_context();
    r.live_before = emu.live_objects();
    const long payloads_before = g_payloads.load();
    if (op.inject) op.inject();
    emu.count_calls(1);
    if (!entry.empty()) emu.fail_call(entry.c_str(), static_cast<int>(k), injected);
    r.outcome = run_catching(op.run);
    (void)emu.settle();  // quiesce below requires it
    for (const std::string& s : symbols) {
      if (const long n = emu.call_count(s.c_str()); n > 0) r.calls[s] = n;
    }
    emu.count_calls(0);
    REQUIRE(emu.quiesce());
    r.context_kept = current_context() == context;
    r.capture_left = end_leftover_captures();
    if (r.capture_left) REQUIRE(emu.quiesce());
    r.live_after = emu.live_objects();
    r.payloads_after = g_payloads.load() - payloads_before;
    r.reports = reports.take();
    return r;
  };

  for (const Operation& op : ops) {
    const Run clean = run_once(op, {}, 0, CUDA_SUCCESS, 0);
    judge(clean, op.name, coverage);
    if (clean.outcome.threw) continue;
    for (const auto& [symbol, n] : clean.calls)
      coverage.reached_by[field_of(symbol, false)].insert(op.name);
    // Pass 1: a representative error at every call; pass 2: CUDA_ERROR_INVALID_CONTEXT at
    // every call (with a context current: custream's special-handle retry must make it
    // succeed; without: the retry itself fails, and that must surface).
    for (const bool invalid_context : {false, true}) {
      for (const auto& [symbol, n] : clean.calls) {
        const CUresult injected =
            invalid_context ? CUDA_ERROR_INVALID_CONTEXT : representative_error(symbol);
        for (long k = 1; k <= n; ++k) {
          const Run r = run_once(op, symbol, k, injected, n);
          ++coverage.runs;
          ++coverage.injected[field_of(symbol, false)];
          judge(r, op.name, coverage);
          // The next operation works.
          Run next = run_once(op, {}, 0, CUDA_SUCCESS, 0);
          next.note = " after (" + describe(r, op.name) + ")";
          judge(next, op.name, coverage);
        }
      }
    }
  }

  // A sticky error (as after an illegal address): every operation fails cleanly.
  for (const Operation& op : ops) {
    INFO(op.name << " with a sticky CUDA_ERROR_ILLEGAL_ADDRESS");
    set_context(op.context);
    const long live = emu.live_objects();
    emu.set_sticky(CUDA_ERROR_ILLEGAL_ADDRESS);
    const Outcome o = run_catching(op.run);
    emu.set_sticky(CUDA_SUCCESS);
    REQUIRE(emu.quiesce());
    (void)reports.take();
    INFO(o.what);
    CHECK(o.threw);
    CHECK(o.custream_error);
    CHECK(o.result == CUDA_ERROR_ILLEGAL_ADDRESS);
    CHECK(emu.live_objects() == live);
    const Outcome next = run_catching(op.run);
    REQUIRE(emu.quiesce());
    INFO("the clean run after: " << next.what);
    CHECK_FALSE(next.threw);
    (void)reports.take();
  }
  set_context(ContextAtStart::primary);

  // Calls made once per process: one child process per injected call.
  Children children;
  for (const FreshOperation& op : fresh_operations()) {
    ChildRun clean = children.run(op.name, {}, 0, CUDA_SUCCESS);
    clean.run.keeps_min = clean.run.keeps = op.keeps;
    INFO(op.name << " (clean, in a process of its own); its output:\n" << clean.log);
    REQUIRE(clean.status == 0);
    REQUIRE(clean.complete);
    judge(clean.run, op.name, coverage);
    CHECK_FALSE(clean.again.threw);
    for (const auto& [symbol, n] : clean.run.calls) {
      coverage.reached_by[field_of(symbol, op.old_abi)].insert(op.name + " (own process)");
    }
    for (const auto& [symbol, n] : clean.run.calls) {
      for (long k = 1; k <= n; ++k) {
        const CUresult injected = representative_error(symbol);
        ChildRun c = children.run(op.name, symbol, k, injected);
        ++coverage.child_runs;
        c.run.clean_calls = n;
        const auto kept = op.kept_when.find(symbol);
        c.run.keeps = kept != op.kept_when.end() ? kept->second : op.keeps;
        c.run.keeps_min = kept != op.kept_when.end() ? kept->second : 0;
        ++coverage.runs;
        ++coverage.injected[field_of(symbol, op.old_abi)];
        std::vector<std::string> extra;
        if (c.status != 0 || !c.complete) {
          extra.push_back("the child process failed (status " + std::to_string(c.status) +
                          "); its output:\n" + c.log);
        } else if (load_time(symbol) && c.run.outcome.threw) {
          if (!c.again.threw || c.again.result != c.run.outcome.result) {
            extra.push_back("the next operation did not report the recorded load failure: " +
                            outcome_line(c.again));
          }
        } else if (c.again.threw || c.again_reports != 0) {
          extra.push_back("the next operation failed: " + outcome_line(c.again));
        }
        judge(c.run, op.name + " (own process)", coverage, extra);
      }
    }
  }

  // Coverage: every table field reached, or listed with its reason.
  std::size_t count = 0;
  const custream::detail::DriverEntry* entries = table(&count);
  std::printf(
      "fault sweep: %ld injected runs over %zu operations and %zu more in processes of their "
      "own (%ld runs there); %ld runs showed known defects\n",
      coverage.runs, ops.size(), fresh_operations().size(), coverage.child_runs, coverage.known);
  std::printf(
      "| entry point (ABI) | injected runs | operations that reach it, or why none does |\n");
  std::printf("| --- | ---: | --- |\n");
  std::size_t covered = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const std::string field = entries[i].field;
    const std::string label =
        "`" + std::string(entries[i].symbol) + "` (" + std::to_string(entries[i].version) + ")";
    const auto it = coverage.reached_by.find(field);
    if (it != coverage.reached_by.end()) {
      ++covered;
      std::string names;
      for (const std::string& n : it->second) names += (names.empty() ? "" : "; ") + n;
      std::printf("| %s | %ld | %s |\n", label.c_str(), coverage.injected[field], names.c_str());
      INFO(field << " is reached but also listed as unreachable");
      CHECK(unreachable().count(field) == 0);
      continue;
    }
    const auto why = unreachable().find(field);
    INFO(field << " is neither reached by an operation nor listed as unreachable");
    CHECK(why != unreachable().end());
    if (why != unreachable().end()) {
      std::printf("| %s | — | %s |\n", label.c_str(), why->second.c_str());
    }
  }
  std::printf("fault sweep: %zu of %zu table entries injected; %zu listed as unreachable\n",
              covered, count, count - covered);
  for (const KnownDefect& d : known_defects()) {
    const auto seen = coverage.reproduced.find(&d);
    if (seen == coverage.reproduced.end()) {
      std::printf("known defect no longer reproduces (remove it from known_defects()): %s: %s\n",
                  d.operation, d.reason);
    } else {
      std::printf("known defect (%s) in %ld run(s), first:\n%s\n", d.reason, seen->second.runs,
                  seen->second.first.c_str());
    }
  }
}

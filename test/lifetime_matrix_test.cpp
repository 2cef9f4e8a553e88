// The lifetime matrix: every object kind custream hands out or keeps (stream, event, graph,
// library, library kernel, module and kernel, device buffer, completion registration, future,
// scopes), made in every context kind (primary, created, green), while work held on a stream
// still needs it; its handles (the object's, its stream's, its context's, …) are dropped in
// every order, then the work is let go. Each cell checks that the work completes with success
// (values written, callbacks given CUDA_SUCCESS, futures ready), that no release error and no
// host-function error is reported, that every payload is destroyed exactly once, and that the
// driver has nothing left alive (on the emulator). Design: docs/design/contexts.md (invariant
// 5), docs/design/libraries.md (invariants 1 and 5), docs/design/completions.md.
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <future>
#include <iostream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "custream/capture.hpp"
#include "custream/capture_scope.hpp"
#include "custream/completions.hpp"
#include "custream/context.hpp"
#include "custream/context_scope.hpp"
#include "custream/current_stream.hpp"
#include "custream/device.hpp"
#include "custream/device_buffer.hpp"
#include "custream/event.hpp"
#include "custream/graph.hpp"
#include "custream/host_function.hpp"
#include "custream/host_function_error_handler.hpp"
#include "custream/kernel.hpp"
#include "custream/library.hpp"
#include "custream/library_kernel.hpp"
#include "custream/module.hpp"
#include "custream/release_error_handler.hpp"
#include "custream/sm_resource.hpp"
#include "custream/stream.hpp"
#include "custream/stream_scope.hpp"
#include "emu_control.h"
#include "test_support.hpp"

using custream::CompletionMechanism;
using custream::CompletionOptions;
using custream::Completions;
using custream::Context;
using custream::ContextKind;
using custream::Device;
using custream::Stream;
using custream::StreamFlags;

namespace {

using namespace std::chrono_literals;

// Adds `value` to the word at `data`.
constexpr const char* kPtx = R"(
.version 7.0
.target sm_70
.address_size 64

.visible .entry matrix_add(
  .param .u64 data,
  .param .u32 value
)
{
  .reg .b32 %r<4>;
  .reg .b64 %rd<3>;
  ld.param.u64 %rd1, [data];
  ld.param.u32 %r1, [value];
  cvta.to.global.u64 %rd2, %rd1;
  ld.global.u32 %r2, [%rd2];
  add.s32 %r3, %r2, %r1;
  st.global.u32 [%rd2], %r3;
  ret;
}
)";

void cpu_add(const custream_emu_kernel_launch* l) {
  std::uint32_t* data = nullptr;
  std::uint32_t value = 0;
  std::memcpy(&data, l->params[0], sizeof data);
  std::memcpy(&value, l->params[1], sizeof value);
  *data += value;
}

// Waits (up to `limit`) until `done()` is true; returns whether it became true.
template <typename Pred>
bool eventually(Pred done, std::chrono::milliseconds limit = 10s) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(100us);
  }
  return true;
}

// ---------------------------------------------------------------------------------------
// What a cell observes.

// Counts the payloads of one cell (host functions, completion callbacks) and what they saw.
struct Probe {
  std::atomic<long> made{0};  // constructions, copies and moves included
  std::atomic<long> gone{0};  // destructions
  std::atomic<long> runs{0};
  std::atomic<long> wrong_value{0};  // runs that did not see the value the work wrote first
  std::atomic<long> callbacks{0};
  std::atomic<long> failed_callbacks{0};  // callbacks given something else than CUDA_SUCCESS
  std::atomic<int> last_failure{CUDA_SUCCESS};
  std::atomic<std::uint32_t> expect{0};
  volatile std::uint32_t* word = nullptr;  // the host view of the cell the work writes
  void reset(std::uint32_t expected) {
    made = gone = runs = wrong_value = callbacks = failed_callbacks = 0;
    last_failure = CUDA_SUCCESS;
    expect = expected;
  }
};

// A counted payload; one per host function or callback (small: it fits the inline paths).
class Payload {
 public:
  explicit Payload(Probe* probe) noexcept : probe_(probe) { probe_->made.fetch_add(1); }
  Payload(const Payload& other) noexcept : probe_(other.probe_) { probe_->made.fetch_add(1); }
  Payload(Payload&& other) noexcept : probe_(other.probe_) { probe_->made.fetch_add(1); }
  Payload& operator=(const Payload&) = delete;
  ~Payload() { probe_->gone.fetch_add(1); }
  void operator()() const noexcept {
    if (*probe_->word != probe_->expect.load()) probe_->wrong_value.fetch_add(1);
    probe_->runs.fetch_add(1);
  }
  void operator()(CUresult result) const noexcept {
    if (result != CUDA_SUCCESS) {
      probe_->failed_callbacks.fetch_add(1);
      probe_->last_failure = result;
    } else if (*probe_->word != probe_->expect.load()) {
      probe_->wrong_value.fetch_add(1);
    }
    probe_->callbacks.fetch_add(1);
  }

 private:
  Probe* probe_;
};

// A callback too big for a ring record, taking nothing (a failure goes to the host-function
// error handler instead).
struct BigCallback {
  Payload payload;
  std::array<char, 64> pad{};
  void operator()() const noexcept { payload(CUDA_SUCCESS); }
};

// How long a Gate holds before it lets go by itself. Where no drop may wait for held work, 1 s:
// letting go then is a violation. Destroying a created or green context waits for its work, as
// cuCtxDestroy (and the drain before a green context is kept) does on the driver, and so does
// unloading a module or a library whose kernels' launches are queued (cuModuleUnload,
// cuLibraryUnload; measured on an H100, driver 580: the emulator does not wait there): in such
// cells the gate lets go after 20 ms, and the cell checks that the work then ran, with its
// code and context still alive.
std::atomic<long> g_hold_ms{1000};

// Holds a stream at a host function until opened (or, so that a drop that waits for the held
// work cannot hang the test, until g_hold_ms has passed).
class Gate {
 public:
  explicit Gate(const custream::StreamRef& s)
      : state_(std::make_shared<State>()), limit_(g_hold_ms.load()) {
    custream::launch_host_func(s, [state = state_, limit = limit_] {
      std::unique_lock<std::mutex> lock(state->mutex);
      state->entered = true;
      state->changed.notify_all();
      if (!state->changed.wait_for(lock, limit, [&] { return state->open; })) {
        state->timed_out = true;
      }
      state->left = true;
      state->changed.notify_all();
    });
    std::unique_lock<std::mutex> lock(state_->mutex);
    state_->changed.wait_for(lock, 10s, [this] { return state_->entered; });
  }
  void open() {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->open = true;
    state_->changed.notify_all();
  }
  // Whether it was reached and let go when opened (false: something waited for the held work).
  bool held_until_opened() {
    std::unique_lock<std::mutex> lock(state_->mutex);
    state_->changed.wait_for(lock, 10s, [this] { return state_->left; });
    return state_->entered && state_->left && !state_->timed_out;
  }
  // Whether it was reached and let go at all.
  bool let_go() {
    std::unique_lock<std::mutex> lock(state_->mutex);
    state_->changed.wait_for(lock, 10s, [this] { return state_->left; });
    return state_->entered && state_->left;
  }
  bool owned_context_may_wait() const noexcept { return limit_ < std::chrono::milliseconds(1000); }

 private:
  struct State {
    std::mutex mutex;
    std::condition_variable changed;
    bool entered = false, open = false, left = false, timed_out = false;
  };
  std::shared_ptr<State> state_;
  std::chrono::milliseconds limit_;
};

// Everything a test case shares: the cell's word (host memory mapped for every context), the
// completion engines, a stream of the primary context, the handler reports.
struct Env {
  Probe probe;  // outlives the engines (their callbacks point at it)
  std::mutex reports_mutex;
  std::vector<std::string> reports;  // release errors and host-function errors
  void* host = nullptr;
  CUdeviceptr word = 0;
  Completions events{options(CompletionMechanism::event)};
  Completions writes{options(CompletionMechanism::memory_write)};
  Stream other;
  bool libraries = false;
  bool created = false;
  bool green = false;

  static CompletionOptions options(CompletionMechanism m) {
    CompletionOptions o;
    o.mechanism = m;
    return o;
  }
  void report(std::string what) {
    std::lock_guard<std::mutex> lock(reports_mutex);
    reports.push_back(std::move(what));
  }
  std::vector<std::string> take_reports() {
    std::lock_guard<std::mutex> lock(reports_mutex);
    return std::exchange(reports, {});
  }
};

// ---------------------------------------------------------------------------------------
// A cell: the handles of one row's object, dropped in one order while the work is held.

struct Cell {
  Env& env;
  std::uint32_t value;  // what the work writes into the word
  std::vector<std::pair<std::string, std::shared_ptr<void>>> handles;  // droppable
  std::vector<std::shared_ptr<void>> fixtures;  // kept until the work is done (not dropped)
  std::vector<std::unique_ptr<Gate>> gates;
  std::function<void(Cell&)> after_drops;  // runs once every handle is gone, before the release
  std::vector<std::future<void>> futures;
  long expect_runs = 0;       // host-function payload runs
  long expect_callbacks = 0;  // completion callbacks

  template <typename T>
  T& keep(const char* name, T value) {
    auto p = std::make_shared<T>(std::move(value));
    handles.emplace_back(name, p);
    return *p;
  }
  template <typename T>
  T& keep_ptr(const char* name, std::shared_ptr<T> p) {
    handles.emplace_back(name, p);
    return *p;
  }
  template <typename T>
  T& get(const char* name) {
    for (auto& [n, p] : handles)
      if (n == name) return *static_cast<T*>(p.get());
    FAIL("no handle " << name);
    throw std::logic_error("unreachable");
  }
  const Context& context() { return get<Context>("context"); }
  void hold(const custream::StreamRef& s) { gates.push_back(std::make_unique<Gate>(s)); }
  Payload payload() { return Payload(&env.probe); }
  // The common work: the word written (then a host function that checks it) on `s`.
  void write_then_check(const custream::StreamRef& s) {
    s.memset32(env.word, value, 1);
    custream::launch_host_func(s, payload());
    ++expect_runs;
  }
};

using Recipe = std::function<void(Cell&)>;

struct Row {
  std::string object;
  Recipe make;
  bool needs_libraries = false;
};

// ---------------------------------------------------------------------------------------
// The rows: what is made, the work that needs it, and its droppable handles (the context is
// always the first, kept by the harness).

Stream& new_stream(Cell& c, const char* name = "stream") {
  return c.keep(name, Stream(c.context(), StreamFlags::non_blocking));
}

// A kernel launch on the held stream that adds one to the word written as value - 1.
template <typename K>
void add_one(Cell& c, const K& kernel, const custream::StreamRef& s) {
  s.memset32(c.env.word, c.value - 1, 1);
  kernel.launch(s, {1}, {1}, 0, c.env.word, std::uint32_t{1});
  custream::launch_host_func(s, c.payload());
  ++c.expect_runs;
}

// A stream of the cell's context that does not keep it (made from a wrapped Context),
// destroyed with the cell's fixtures, before what they keep.
std::shared_ptr<Stream> unowned_stream(Cell& c) {
  const Context& ctx = c.context();
  auto s =
      std::make_shared<Stream>(ctx.kind() == ContextKind::green ? Context::wrap(ctx.green_handle())
                                                                : Context::wrap(ctx.handle()),
                               StreamFlags::non_blocking);
  c.fixtures.insert(c.fixtures.begin(), s);  // destroyed first
  return s;
}

// Keeps `graph` as a fixture only, and launches it (held, on an unowned stream of the
// context) once every handle is gone.
void launch_after_drops(Cell& c, custream::Graph graph) {
  auto g = std::make_shared<custream::Graph>(std::move(graph));
  c.fixtures.push_back(g);
  const auto launch = unowned_stream(c);
  c.after_drops = [g, launch](Cell& cell) {
    cell.hold(*launch);
    g->launch(*launch);
  };
}

std::vector<Row> rows() {
  std::vector<Row> r;
  r.push_back({"stream", [](Cell& c) {
                 Stream& s = new_stream(c);
                 c.hold(s);
                 c.write_then_check(s);
               }});
  r.push_back({"event", [](Cell& c) {
                 Stream& s = new_stream(c);
                 auto& e = c.keep("event", custream::Event(c.context()));
                 c.hold(s);
                 s.memset32(c.env.word, c.value, 1);
                 s.record(e);
                 c.env.other.wait_event(e);  // a stream of the primary context waits for it
                 custream::launch_host_func(c.env.other, c.payload());
                 ++c.expect_runs;
               }});
  r.push_back({"event (Stream::record)", [](Cell& c) {
                 Stream& s = new_stream(c);
                 c.hold(s);
                 s.memset32(c.env.word, c.value, 1);
                 auto& e = c.keep("event", s.record());
                 c.env.other.wait_event(e);
                 custream::launch_host_func(c.env.other, c.payload());
                 ++c.expect_runs;
               }});
  r.push_back({"graph", [](Cell& c) {
                 Stream& s = new_stream(c, "capture stream");
                 s.begin_capture();
                 c.write_then_check(s);
                 auto& g = c.keep("graph", s.end_capture());
                 Stream& l = new_stream(c, "launch stream");
                 c.hold(l);
                 g.launch(l);
                 g.launch(l);
                 c.expect_runs = 2;
               }});
  r.push_back({"library",
               [](Cell& c) {
                 auto& lib = c.keep(
                     "library", custream::Library::from_ptx(kPtx, custream::LibraryCache::bypass));
                 Stream& s = new_stream(c);
                 c.hold(s);
                 add_one(c, lib.kernel("matrix_add"), s);
               },
               true});
  r.push_back({"library kernel",
               [](Cell& c) {
                 auto& lib = c.keep(
                     "library", custream::Library::from_ptx(kPtx, custream::LibraryCache::bypass));
                 auto& k = c.keep("kernel", custream::LibraryKernel(lib.kernel("matrix_add")));
                 Stream& s = new_stream(c);
                 c.hold(s);
                 add_one(c, k, s);
               },
               true});
  r.push_back({"library graph",
               [](Cell& c) {
                 auto& lib = c.keep(
                     "library", custream::Library::from_ptx(kPtx, custream::LibraryCache::bypass));
                 Stream& s = new_stream(c);
                 s.begin_capture();
                 add_one(c, lib.kernel("matrix_add"), s);
                 auto& g = c.keep("graph", s.end_capture());
                 c.hold(s);
                 g.launch(s);
               },
               true});
  r.push_back({"library graph (launched after the drops)",
               [](Cell& c) {
                 // The graph outlives every other handle, then launches: it must hold the
                 // library and the context.
                 auto& lib = c.keep(
                     "library", custream::Library::from_ptx(kPtx, custream::LibraryCache::bypass));
                 Stream& s = new_stream(c);
                 s.begin_capture();
                 add_one(c, lib.kernel("matrix_add"), s);
                 launch_after_drops(c, s.end_capture());
               },
               true});
  r.push_back({"module graph (launched after the drops)", [](Cell& c) {
                 auto& m = c.keep("module", custream::Module::from_ptx(kPtx, c.context()));
                 auto& k = c.keep("kernel", m.kernel("matrix_add"));
                 Stream& s = new_stream(c);
                 s.begin_capture();
                 add_one(c, k, s);
                 launch_after_drops(c, s.end_capture());
               }});
  r.push_back({"module kernel", [](Cell& c) {
                 auto& m = c.keep("module", custream::Module::from_ptx(kPtx, c.context()));
                 auto& k = c.keep("kernel", m.kernel("matrix_add"));
                 Stream& s = new_stream(c);
                 c.hold(s);
                 add_one(c, k, s);
               }});
  r.push_back({"buffer (stream-ordered)", [](Cell& c) {
                 Stream& s = new_stream(c);
                 auto& b = c.keep("buffer", custream::DeviceBuffer(sizeof(std::uint32_t), s));
                 c.hold(s);
                 s.memset32(b.get(), c.value, 1);
                 s.copy(c.env.word, b.get(), sizeof(std::uint32_t));
                 custream::launch_host_func(s, c.payload());
                 ++c.expect_runs;
               }});
  r.push_back({"buffer (in the context)", [](Cell& c) {
                 // A plain free waits for all work (cuMemFree synchronizes): the buffer is
                 // dropped once the work is done, after the other handles.
                 auto b =
                     std::make_shared<custream::DeviceBuffer>(sizeof(std::uint32_t), c.context());
                 c.fixtures.push_back(b);
                 Stream& s = new_stream(c);
                 c.hold(s);
                 s.memset32(b->get(), c.value, 1);
                 s.copy(c.env.word, b->get(), sizeof(std::uint32_t));
                 custream::launch_host_func(s, c.payload());
                 ++c.expect_runs;
               }});
  r.push_back({"when_done (event)", [](Cell& c) {
                 Stream& s = new_stream(c);
                 c.hold(s);
                 s.memset32(c.env.word, c.value, 1);
                 c.env.events.when_done(s, c.payload());  // void(CUresult), in a ring record
                 ++c.expect_callbacks;
               }});
  r.push_back({"when_done (memory_write, void())", [](Cell& c) {
                 Stream& s = new_stream(c);
                 c.hold(s);
                 s.memset32(c.env.word, c.value, 1);
                 c.env.writes.when_done(s, BigCallback{c.payload()});  // a task of its own
                 ++c.expect_callbacks;
               }});
  r.push_back({"future", [](Cell& c) {
                 Stream& s = new_stream(c);
                 c.hold(s);
                 c.write_then_check(s);
                 c.futures.push_back(c.env.events.future(s));
               }});
  r.push_back({"StreamScope", [](Cell& c) {
                 Stream& s = new_stream(c);
                 c.keep_ptr("scope", std::make_shared<custream::StreamScope>(s));
                 const Stream current = custream::current_stream();
                 c.hold(current);
                 c.write_then_check(current);
               }});
  r.push_back({"ContextScope", [](Cell& c) {
                 c.keep_ptr("scope", std::make_shared<custream::ContextScope>(c.context()));
                 Stream& s = new_stream(c);
                 c.hold(s);
                 c.write_then_check(s);
               }});
  r.push_back({"CaptureScope", [](Cell& c) {
                 Stream& s = new_stream(c);
                 auto scope = std::make_shared<custream::CaptureScope>(s);
                 c.write_then_check(s);
                 // The stream's and context's handles go while the capture runs; then the
                 // scope ends it and the graph runs on the scope's stream, held.
                 c.after_drops = [scope](Cell& cell) mutable {
                   custream::Graph g = scope->end();
                   const Stream launch = scope->stream();
                   scope.reset();
                   cell.hold(launch);
                   g.launch(launch);
                 };
               }});
  return r;
}

struct ContextKindRow {
  const char* name;
  std::function<Context()> make;
};

std::vector<ContextKindRow> context_kinds(const Env& env) {
  std::vector<ContextKindRow> k;
  k.push_back({"primary", [] { return Device(0).primary_context(); }});
  if (env.created) k.push_back({"created", [] { return Context::create(Device(0)); }});
  if (env.green) {
    k.push_back(
        {"green", [] {
           // Destroyed by its last user, not kept for reuse: the matrix checks that it goes.
           return Context::create_green(Device(0).split_sms(1, 1).groups[0],
                                        custream::GreenReuse::none);
         }});
  }
  return k;
}

// ---------------------------------------------------------------------------------------
// Known defects: cells that fail until a fix merges. Still run, their violations printed;
// they do not fail the test. `row` is "object/context"; `order` a drop order as printed, or
// "*" for every order of the row. The lead removes the entries once the fixes merge.
struct KnownDefect {
  const char* row;
  const char* order;
  int item;
};
// Cells that fail by a defect not fixed yet (row, order or "*", the issue's item): still run
// and their violations printed, but not failing the test. Remove an entry when its fix lands.
const std::vector<KnownDefect> known_defects = {};

int known_item(const std::string& row, const std::string& order) {
  for (const KnownDefect& k : known_defects) {
    if (row == k.row && (std::string(k.order) == "*" || order == k.order)) return k.item;
  }
  return 0;
}

CUcontext current_context() {
  CUcontext c = nullptr;
  REQUIRE(custream::detail::api().cuCtxGetCurrent(&c) == CUDA_SUCCESS);
  return c;
}

// Runs one cell; returns its violations.
std::vector<std::string> run_cell(Env& env, const Row& row, const ContextKindRow& kind,
                                  const std::vector<std::size_t>& order, std::uint32_t value,
                                  std::string* order_text) {
  std::vector<std::string> v;
  const bool emu = custream_test::emulated();
  Device(0).make_current();
  const CUcontext before = current_context();
  const long live_before = emu ? custream_test::emu_live_objects() : 0;
  env.probe.reset(value);
  *env.probe.word = 0;
  (void)env.take_reports();
  long expect_runs = 0, expect_callbacks = 0;
  {
    Cell c{env, value, {}, {}, {}, {}, {}, 0, 0};
    const bool unloads = row.object.rfind("library", 0) == 0 || row.object.rfind("module", 0) == 0;
    g_hold_ms = std::string(kind.name) == "primary" && !unloads ? 1000 : 20;
    try {
      c.keep("context", kind.make());
      row.make(c);
    } catch (const std::exception& e) {
      v.push_back(std::string("making it threw: ") + e.what());
      for (auto& g : c.gates) g->open();
      return v;
    }
    std::string text;
    for (std::size_t i : order) {
      if (i < c.handles.size()) text += (text.empty() ? "" : ",") + c.handles[i].first;
    }
    *order_text = text;
    try {
      for (std::size_t i : order) {
        if (i < c.handles.size()) c.handles[i].second.reset();
      }
      if (c.after_drops) std::exchange(c.after_drops, nullptr)(c);
    } catch (const std::exception& e) {
      v.push_back(std::string("a drop or what follows threw: ") + e.what());
    }
    const bool threw = !v.empty();  // then the work may never have been enqueued
    for (auto& g : c.gates) g->open();
    for (auto& g : c.gates) {
      if (g->owned_context_may_wait() ? !g->let_go() : !g->held_until_opened()) {
        v.push_back(
            "a drop waited for the held work (the hold timed out): something was released "
            "while work still needed it");
      }
    }
    expect_runs = c.expect_runs;
    expect_callbacks = c.expect_callbacks;
    const bool done = eventually(
        [&] {
          return env.probe.runs.load() >= expect_runs && env.events.pending() == 0 &&
                 env.writes.pending() == 0;
        },
        threw ? 200ms : 10s);
    if (!done) v.push_back("the work did not complete");
    // A callback that takes nothing is not run after a failure (its error is reported).
    (void)eventually([&] { return env.probe.callbacks.load() >= expect_callbacks; }, 200ms);
    for (auto& f : c.futures) {
      if (f.wait_for(5s) != std::future_status::ready) {
        v.push_back("a future never became ready");
        continue;
      }
      try {
        f.get();
      } catch (const std::exception& e) {
        v.push_back(std::string("a future holds an error: ") + e.what());
      }
    }
    for (auto& f : c.fixtures) f.reset();  // in order
  }
  if (emu) {
    using WaitFn = int (*)(int);
    auto wait_idle = custream_test::emu_symbol<WaitFn>("custream_emu_wait_idle");
    auto wait_destructors = custream_test::emu_symbol<WaitFn>("custream_emu_wait_destructors");
    REQUIRE(wait_idle != nullptr);
    REQUIRE(wait_destructors != nullptr);
    if (wait_idle(10000) != 1 || wait_destructors(10000) != 1) v.push_back("emulator not idle");
  }
  Probe& p = env.probe;
  const auto say = [&](const char* what, long got, long want) {
    std::ostringstream o;
    o << what << ": " << got << ", expected " << want;
    v.push_back(o.str());
  };
  if (p.runs != expect_runs) say("host-function runs", p.runs, expect_runs);
  if (p.callbacks != expect_callbacks) say("completion callbacks", p.callbacks, expect_callbacks);
  if (p.failed_callbacks != 0) {
    v.push_back(std::string("a callback was given ") +
                custream::result_name(static_cast<CUresult>(p.last_failure.load())));
  }
  if (p.wrong_value != 0)
    say("payloads that ran before the work wrote its value", p.wrong_value, 0);
  // Every payload freed exactly once (moved-from shells included).
  if (!eventually([&] { return p.made.load() == p.gone.load(); })) {
    say("payloads alive (made - destroyed)", p.made - p.gone, 0);
  }
  if (p.made == 0) v.push_back("no payload was made");
  if (*p.word != value) say("the word", static_cast<long>(*p.word), value);
  for (const std::string& r : env.take_reports()) v.push_back("reported: " + r);
  if (current_context() != before) v.push_back("the current context changed");
  if (emu) {
    // Streams go with their worker threads: wait a little for the count to settle.
    if (!eventually([&] { return custream_test::emu_live_objects() == live_before; }, 2s)) {
      say("driver objects alive (emulator), beyond those before",
          custream_test::emu_live_objects() - live_before, 0);
    }
  }
  return v;
}

// All orders of 0..n-1.
std::vector<std::vector<std::size_t>> permutations(std::size_t n) {
  std::vector<std::size_t> order(n);
  for (std::size_t i = 0; i < n; ++i) order[i] = i;
  std::vector<std::vector<std::size_t>> all;
  do {
    all.push_back(order);
  } while (std::next_permutation(order.begin(), order.end()));
  return all;
}

// Runs one cell of the row in `kind`, its handles dropped in the order made, and returns how
// many handles it has (the context included). Its results are not judged: it makes what is
// made once per process or per device (engines' pools, the primary context's resources), so
// that the cells count only what they make themselves.
std::size_t warm_up(Env& env, const Row& row, const ContextKindRow& kind) {
  std::vector<std::size_t> order(16);  // more than any row has
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::string text;
  (void)run_cell(env, row, kind, order, 1, &text);
  return text.empty() ? 0 : static_cast<std::size_t>(std::count(text.begin(), text.end(), ',')) + 1;
}

}  // namespace

TEST_CASE(
    "the lifetime matrix: every object kind in every context kind, its handles dropped "
    "in every order while held work needs them",
    "[lifetime-matrix][gpu]") {
  REQUIRE_DRIVER();
  const auto& api = custream::detail::api();
  Env env;
  env.created = api.cuCtxCreate != nullptr && api.cuCtxDestroy != nullptr;
  env.green = api.cuGreenCtxCreate != nullptr && api.cuGreenCtxStreamCreate != nullptr &&
              api.cuStreamGetCtx_v2 != nullptr && api.cuDeviceGetDevResource != nullptr;
  env.libraries = api.cuLibraryLoadData != nullptr && api.cuKernelGetFunction != nullptr &&
                  api.cuLibraryGetKernelCount != nullptr;
  if (custream_test::emulated()) {
    auto reg = custream_test::emu_symbol<decltype(&custream_emu_register_kernel)>(
        "custream_emu_register_kernel");
    REQUIRE(reg != nullptr);
    REQUIRE(reg("matrix_add", cpu_add, nullptr, nullptr, 0) == 0);
  }
  Device(0).make_current();
  REQUIRE(api.cuMemHostAlloc(&env.host, sizeof(std::uint32_t),
                             CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP) == CUDA_SUCCESS);
  REQUIRE(api.cuMemHostGetDevicePointer(&env.word, env.host, 0) == CUDA_SUCCESS);
  env.probe.word = static_cast<volatile std::uint32_t*>(env.host);
  env.other = Stream(Device(0), StreamFlags::non_blocking);
  // Warm the engines up (their pools and threads are not the cells' objects).
  env.events.future(env.other).get();
  env.writes.future(env.other).get();

  auto old_release = custream::set_release_error_handler(
      [&env](const custream::ReleaseError& e) { env.report("release error: " + e.message()); });
  auto old_host =
      custream::set_host_function_error_handler([&env](const custream::HostFunctionError& e) {
        env.report("host-function error: " + e.message());
      });

  std::size_t cells = 0, failed = 0, known_failed = 0, known_passed = 0;
  std::uint32_t value = 100;
  std::vector<std::string> failures;
  std::ostringstream summary;
  for (const Row& row : rows()) {
    if (row.needs_libraries && !env.libraries) continue;
    for (const ContextKindRow& kind : context_kinds(env)) {
      const std::string name = row.object + "/" + kind.name;
      INFO("cell " << name);  // named in the report of a crash inside it
      const std::size_t n = warm_up(env, row, kind);
      const auto orders = permutations(n);
      std::size_t row_failed = 0;
      for (const auto& order : orders) {
        std::string order_text;
        const std::vector<std::string> v = run_cell(env, row, kind, order, ++value, &order_text);
        ++cells;
        const int item = known_item(name, order_text);
        if (v.empty()) {
          if (item != 0) ++known_passed;
          continue;
        }
        ++row_failed;
        std::ostringstream o;
        o << name << " [" << order_text << "]" << (item ? " (known defect " : "")
          << (item ? std::to_string(item) + ")" : "") << ":";
        for (const std::string& s : v) o << "\n    " << s;
        std::cout << "lifetime matrix: " << o.str() << "\n";
        if (item != 0) {
          ++known_failed;
        } else {
          ++failed;
          failures.push_back(o.str());
        }
      }
      summary << "  " << name << ": " << n << " handles, " << orders.size() << " orders, "
              << (row_failed == 0 ? std::string("ok") : std::to_string(row_failed) + " failed")
              << "\n";
    }
  }
  custream::set_release_error_handler(old_release);
  custream::set_host_function_error_handler(old_host);
  std::cout << "lifetime matrix: " << cells << " cells, " << failed << " failed, " << known_failed
            << " known defects failing, " << known_passed << " known-defect cells passing\n"
            << summary.str();
  for (const std::string& f : failures) FAIL_CHECK(f);
  CHECK(failed == 0);
  env.other.synchronize();
  CHECK(api.cuMemFreeHost(env.host) == CUDA_SUCCESS);
}

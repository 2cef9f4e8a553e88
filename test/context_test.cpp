// Contexts of every kind (primary, created, green): custream::Context, streams, events,
// modules, buffers, graphs and scopes in their own context, whatever is current. Design:
// docs/design/contexts.md.
#include "custream/context.hpp"

#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "custream/capture.hpp"
#include "custream/context_scope.hpp"
#include "custream/current_stream.hpp"
#include "custream/device.hpp"
#include "custream/device_buffer.hpp"
#include "custream/event.hpp"
#include "custream/external_stream.hpp"
#include "custream/graph.hpp"
#include "custream/host_function.hpp"
#include "custream/kernel.hpp"
#include "custream/module.hpp"
#include "custream/sm_resource.hpp"
#include "custream/stream.hpp"
#include "custream/stream_scope.hpp"
#include "emu_control.h"
#include "graph_support.hpp"
#include "test_support.hpp"

using custream::Context;
using custream::ContextKind;
using custream::ContextScope;
using custream::Device;
using custream::Event;
using custream::ExternalStream;
using custream::Graph;
using custream::Module;
using custream::Stream;
using custream::StreamFlags;
using custream_test::expect_error;

namespace {

constexpr const char* kPtx = R"(
.version 7.0
.target sm_70
.address_size 64

.visible .entry context_add_one(
  .param .u64 data
)
{
  .reg .b32 %r<3>;
  .reg .b64 %rd<3>;
  ld.param.u64 %rd1, [data];
  cvta.to.global.u64 %rd2, %rd1;
  ld.global.u32 %r1, [%rd2];
  add.s32 %r2, %r1, 1;
  st.global.u32 [%rd2], %r2;
  ret;
}
)";

void cpu_add_one(const custream_emu_kernel_launch* l) {
  int* data = nullptr;
  std::memcpy(&data, l->params[0], sizeof data);
  ++*data;
}

// The kernel's CPU implementation when the driver is the emulator (a GPU runs the PTX).
void register_add_one() {
  if (!custream_test::emulated()) return;
  auto reg = custream_test::emu_symbol<decltype(&custream_emu_register_kernel)>(
      "custream_emu_register_kernel");
  REQUIRE(reg != nullptr);
  REQUIRE(reg("context_add_one", cpu_add_one, nullptr, nullptr, 0) == 0);
}

CUcontext current() {
  CUcontext c = nullptr;
  REQUIRE(custream::detail::api().cuCtxGetCurrent(&c) == CUDA_SUCCESS);
  return c;
}

bool has_created_contexts() {
  const auto& api = custream::detail::api();
  return api.cuCtxCreate != nullptr && api.cuCtxDestroy != nullptr &&
         api.cuCtxPopCurrent != nullptr;
}

bool has_green_contexts() {
  const auto& api = custream::detail::api();
  return api.cuGreenCtxCreate != nullptr && api.cuGreenCtxStreamCreate != nullptr &&
         api.cuStreamGetCtx_v2 != nullptr && api.cuDeviceGetDevResource != nullptr;
}

// The result of destroying the context again (see kAlive).
std::string destroyed(CUcontext created) {
  return custream::result_name(custream::detail::api().cuCtxDestroy(created));
}
std::string destroyed(CUgreenCtx green) {
  return custream::result_name(custream::detail::api().cuGreenCtxDestroy(green));
}
// Whether the created context `c` is alive: asked of the emulator, which keeps destroyed
// handles answerable (a GPU may crash on them: there the tests use the objects instead).
bool alive(CUcontext c) {
  if (!custream_test::emulated()) return true;
  auto get_id =
      custream_test::emu_symbol<CUresult (*)(CUcontext, unsigned long long*)>("cuCtxGetId");
  REQUIRE(get_id != nullptr);
  unsigned long long id = 0;
  return get_id(c, &id) == CUDA_SUCCESS;
}

// Once destroyed, a second destroy fails: CUDA_ERROR_CONTEXT_IS_DESTROYED or, on the H200
// after the context had modules and memory, CUDA_ERROR_INVALID_CONTEXT; a live one succeeds.
const std::string kAlive = "CUDA_SUCCESS";

// A green context of the smallest group the device can make.
Context small_green_context(const Device& device = Device(0)) {
  const custream::SmSplit split = device.split_sms(1, 1);
  REQUIRE(split.groups.size() == 1);
  return Context::create_green(split.groups[0]);
}

// Runs every stream operation custream offers on `s` (a stream of any context) with whatever
// is current, checks the results, and that the current context never changed.
void exercise(const Stream& s, const Module& module) {
  const CUcontext before = current();
  custream::DeviceBuffer data(sizeof(int), s);  // stream-ordered, in the stream's context
  s.memset32(data.get(), 41, 1);
  module.kernel("context_add_one").launch(s, {1}, {1}, 0, data.get());
  int ran = 0;
  custream::launch_host_func(s, [&ran]() noexcept { ++ran; });
  Event e = s.record();
  Stream other(Device(s.device_id()), StreamFlags::non_blocking);  // the primary context
  other.wait_event(e);
  s.wait(other);
  // Captured with a host function and a kernel, instantiated, replayed twice.
  s.begin_capture();
  module.kernel("context_add_one").launch(s, {1}, {1}, 0, data.get());
  custream::launch_host_func(s, [&ran]() noexcept { ++ran; });
  Graph g = s.end_capture();
  g.launch(s);
  g.upload(s);
  g.launch(s);
  int host = 0;
  s.copy(&host, data.get(), sizeof host);
  s.synchronize();
  CHECK(host == 44);
  CHECK(ran == 3);
  CHECK(e.done());
  CHECK(current() == before);
}

}  // namespace

TEST_CASE("a device's primary context as a Context", "[context][gpu]") {
  REQUIRE_DRIVER();
  const Context p = Device(0).primary_context();
  CHECK(p.kind() == ContextKind::primary);
  CHECK(p.device_id() == 0);
  CHECK_FALSE(p.owned());
  CHECK(p.green_handle() == nullptr);
  CHECK(p == Context::wrap(p.handle()));
  CHECK(Context::wrap(p.handle()).kind() == ContextKind::primary);
  CHECK(p.to_string().find("primary, device 0") != std::string::npos);
  custream_test::on_fresh_thread([&] {
    CHECK_FALSE(Context::current());  // nothing current on a new thread
    ContextScope scope(p);
    CHECK(Context::current() == p);
    CHECK(Context::current().kind() == ContextKind::primary);
  });
  expect_error([] { ContextScope scope{Context()}; }, CUDA_ERROR_INVALID_CONTEXT,
               "empty custream::Context");
  expect_error([] { Stream s{Context()}; }, CUDA_ERROR_INVALID_CONTEXT, "custream::Stream");
  expect_error([] { Event e{Context()}; }, CUDA_ERROR_INVALID_CONTEXT, "custream::Event");
}

TEST_CASE("Context::create: owned, nothing current changes, destroyed with the last user",
          "[context][gpu]") {
  REQUIRE_DRIVER();
  if (!has_created_contexts()) CUSTREAM_SKIP("the driver has no cuCtxCreate");
  Device(0).make_current();
  const CUcontext primary = current();
  CUcontext handle = nullptr;
  {
    Context c = Context::create(Device(0));
    handle = c.handle();
    CHECK(current() == primary);  // the driver pushed it; custream popped it
    CHECK(c.kind() == ContextKind::created);
    CHECK(c.owned());
    CHECK(c.device_id() == 0);
    CHECK(c != Device(0).primary_context());
    const Context wrapped = Context::wrap(handle);
    CHECK(wrapped.kind() == ContextKind::created);
    CHECK_FALSE(wrapped.owned());
    Context copy = c;
    Context moved = std::move(c);
    CHECK_FALSE(c);  // moved from: empty in every field
    CHECK(c.device_id() == -1);
    CHECK(c.green_handle() == nullptr);
    moved = Context();
    Stream s(copy);  // still alive: the copy holds it
    s.synchronize();
    CHECK(alive(handle));
  }
  CHECK(destroyed(handle) != kAlive);
  CHECK(current() == primary);
}

TEST_CASE("each object made in an owned context keeps it alive, alone", "[context][gpu]") {
  REQUIRE_DRIVER();
  if (!has_created_contexts()) CUSTREAM_SKIP("the driver has no cuCtxCreate");
  register_add_one();
  Device(0).make_current();
  const CUcontext primary = current();
  custream::DeviceBuffer cell(sizeof(int), Device(0));
  const long live_before = custream_test::emulated() ? custream_test::emu_live_objects() : 0;
  CUcontext handle = nullptr;
  // Makes an owned context, hands it to `make` (which keeps what it makes), drops every
  // Context copy, then `use` must still work (the object keeps the context alive); after
  // `drop` the context is gone.
  const auto check = [&](const char* what, const auto& make, const auto& use, const auto& drop) {
    INFO(what);
    {
      const Context c = Context::create(Device(0));
      handle = c.handle();
      make(c);
    }
    CHECK(alive(handle));
    use();
    drop();
    CHECK(destroyed(handle) != kAlive);
    CHECK(current() == primary);
  };
  std::optional<Stream> s;
  check(
      "a stream", [&](const Context& c) { s.emplace(c); }, [&] { s->synchronize(); },
      [&] { s.reset(); });
  std::optional<Event> e;
  check(
      "an event", [&](const Context& c) { e.emplace(c); },
      [&] {
        Stream(Context::wrap(handle)).record(*e);
        e->synchronize();
      },
      [&] { e.reset(); });
  check(
      "an event a stream of it recorded",
      [&](const Context& c) {
        const Stream made(c, StreamFlags::non_blocking);
        e.emplace(made.record());
      },
      [&] { e->synchronize(); }, [&] { e.reset(); });
  std::optional<Graph> g;
  check(
      "a graph captured on a stream of it",
      [&](const Context& c) {
        const Stream made(c, StreamFlags::non_blocking);
        made.begin_capture();
        made.memset32(cell.get(), 1, 1);
        g.emplace(made.end_capture());
      },
      [&] {
        const Stream other(Context::wrap(handle), StreamFlags::non_blocking);
        g->launch(other);
        other.synchronize();
      },
      [&] { g.reset(); });
  std::optional<Module> m;
  check(
      "a module", [&](const Context& c) { m.emplace(Module::from_ptx(kPtx, c)); },
      [&] { CHECK(m->kernel("context_add_one").handle() != nullptr); }, [&] { m.reset(); });
  std::optional<custream::DeviceBuffer> b;
  check(
      "a buffer", [&](const Context& c) { b.emplace(64, c); },
      [&] {
        const Stream t(Context::wrap(handle));
        t.memset(b->get(), 0, 64);
        t.synchronize();  // before the buffer goes
      },
      [&] { b.reset(); });
  std::optional<ContextScope> scope;
  check(
      "a scope", [&](const Context& c) { scope.emplace(c); }, [&] { CHECK(current() == handle); },
      [&] { scope.reset(); });
  if (custream_test::emulated()) {  // streams are torn down by their worker threads
    CHECK(custream_test::eventually(
        [&] { return custream_test::emu_live_objects() == live_before; }));
  }
}

TEST_CASE("a StreamScope holding the last use of an owned context pops only that context",
          "[context][gpu]") {
  REQUIRE_DRIVER();
  if (!has_created_contexts()) CUSTREAM_SKIP("the driver has no cuCtxCreate");
  Device(0).make_current();
  const CUcontext primary = current();
  CUcontext handle = nullptr;
  {
    Stream s(Context::create(Device(0)));
    handle = s.context();
    custream::StreamScope scope(s);
    CHECK(current() == handle);
    s = Stream();  // the scope now holds the stream, and so the context
    CHECK(custream::current_stream().context() == handle);
  }
  CHECK(current() == primary);  // the context it pushed is popped, nothing more
  CHECK(destroyed(handle) != kAlive);
  // An exception leaving the scope restores the same way.
  const Stream s(Context::create(Device(0)));
  try {
    custream::StreamScope scope(s);
    throw std::runtime_error("leaving");
  } catch (const std::runtime_error&) {
  }
  CHECK(current() == primary);
  custream_test::on_fresh_thread([&] {  // nothing current before: nothing after
    {
      custream::StreamScope scope(s);
      CHECK(current() == s.context());
    }
    CHECK(current() == nullptr);
  });
}

TEST_CASE("a stream of a created context: every operation in its context, whatever is current",
          "[context][gpu]") {
  REQUIRE_DRIVER();
  if (!has_created_contexts()) CUSTREAM_SKIP("the driver has no cuCtxCreate");
  register_add_one();
  const Context created = Context::create(Device(0));
  const Stream s(created, StreamFlags::non_blocking);
  const Module module = Module::from_ptx(kPtx, created);
  SECTION("the primary context current") {
    Device(0).make_current();
    exercise(s, module);
  }
  SECTION("its own context current") {
    ContextScope scope(created);
    exercise(s, module);
  }
  SECTION("nothing current (a fresh thread)") {
    custream_test::on_fresh_thread([&] {
      exercise(s, module);
      CHECK(current() == nullptr);
    });
  }
  SECTION("wrapped as a foreign stream while the primary context is current") {
    Device(0).make_current();
    ExternalStream wrapped(s.handle());
    CHECK(wrapped.context() == created.handle());
    CHECK(wrapped.context_kind() == ContextKind::created);
    CHECK(wrapped.device_id() == 0);
    CHECK(wrapped.green_context() == nullptr);
    exercise(wrapped, module);
  }
  SECTION("a kernel of the primary context's module is refused, naming both contexts") {
    Device(0).make_current();
    const Module primary_module = Module::from_ptx(kPtx, 0);
    custream::DeviceBuffer data(sizeof(int), s);
    expect_error(
        [&] { primary_module.kernel("context_add_one").launch(s, {1}, {1}, 0, data.get()); },
        CUDA_ERROR_INVALID_HANDLE, "load the module into the stream's context");
    s.synchronize();
  }
}

TEST_CASE("events of another created context or another device: errors that name both",
          "[context][gpu]") {
  REQUIRE_DRIVER();
  if (!has_created_contexts()) CUSTREAM_SKIP("the driver has no cuCtxCreate");
  const Context created = Context::create(Device(0));
  const Stream s(created, StreamFlags::non_blocking);
  const Event primary_event(Device(0));
  expect_error([&] { s.record(primary_event); }, CUDA_ERROR_INVALID_HANDLE,
               "(primary); the stream's context is");
  s.wait_event(primary_event);  // waiting across contexts works
  if (Device::count() > 1) {
    const Stream other(Device(1), StreamFlags::non_blocking);
    expect_error([&] { other.record(primary_event); }, CUDA_ERROR_INVALID_HANDLE,
                 "the event belongs to device 0 and the stream to device 1");
    other.wait_event(primary_event);  // waiting across devices works
    other.synchronize();
  }
  s.synchronize();
}

TEST_CASE("an event of a created context records on the null stream in its own context",
          "[context][gpu]") {
  REQUIRE_DRIVER();
  if (!has_created_contexts()) CUSTREAM_SKIP("the driver has no cuCtxCreate");
  const Context created = Context::create(Device(0));
  Device(0).make_current();  // the null stream is the primary context's here
  Event e(created);
  e.record();  // with the event's context current for the call
  e.synchronize();
  CHECK(e.done());
  CHECK(current() == Device(0).primary_context().handle());
}

TEST_CASE("StreamScope with a stream of a created context makes that context current",
          "[context][gpu]") {
  REQUIRE_DRIVER();
  if (!has_created_contexts()) CUSTREAM_SKIP("the driver has no cuCtxCreate");
  const Context created = Context::create(Device(0));
  Stream s(created, StreamFlags::non_blocking);
  Device(0).make_current();
  const CUcontext primary = current();
  {
    custream::StreamScope scope(s);
    CHECK(current() == created.handle());
    CHECK(custream::current_stream() == s);
    CHECK(custream::current_stream(0) == s);
    CUdeviceptr raw = 0;  // raw work in the scope lands in the stream's context
    REQUIRE(custream::detail::api().cuMemAlloc(&raw, 16) == CUDA_SUCCESS);
    s.memset(raw, 1, 16);
    s.synchronize();
    REQUIRE(custream::detail::api().cuMemFree(raw) == CUDA_SUCCESS);
    {
      custream::StreamScope nested(s);  // pushed again, popped again
      CHECK(current() == created.handle());
    }
    CHECK(current() == created.handle());
  }
  CHECK(current() == primary);
  CHECK(custream::current_stream(0) != s);
  // A primary-context stream switches nothing.
  Stream p(Device(0));
  {
    custream::StreamScope scope(p);
    CHECK(current() == primary);
  }
}

TEST_CASE("SM resources: the device's SMs, splits, and their errors", "[context][green][gpu]") {
  REQUIRE_DRIVER();
  if (!has_green_contexts()) CUSTREAM_SKIP("green streams need a CUDA 12.5 driver");
  const Device d(0);
  const custream::SmResource all = d.sms();
  CHECK(all.sm_count() ==
        static_cast<unsigned>(d.attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)));
  CHECK(all.device_id() == 0);
  const unsigned possible = all.split_count(1);
  REQUIRE(possible >= 1);
  const custream::SmSplit split = d.split_sms(1);  // as many as fit
  CHECK(split.groups.size() == possible);
  const unsigned size = split.groups[0].sm_count();
  for (const auto& g : split.groups) CHECK(g.sm_count() == size);
  CHECK(size * split.groups.size() + split.remaining.sm_count() == all.sm_count());
  const custream::SmSplit two = d.split_sms(size + 1, 2);
  CHECK(two.groups.size() <= 2);
  CHECK(two.groups[0].sm_count() > size);
  CHECK(all.split_count(all.sm_count() + 1) == 0);
  expect_error([&] { (void)d.split_sms(all.sm_count() + 1); },
               CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION, "no group of that size fits");
  expect_error([&] { (void)split.groups[0].split(1); }, CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION,
               "cannot split again");
  CHECK(split.remaining.split_count(1) == 0);
  expect_error([] { (void)Context::create_green(std::vector<custream::SmResource>{}); },
               CUDA_ERROR_INVALID_VALUE, "no SM groups");
  expect_error([] { (void)Context::create_green(custream::SmResource()); },
               CUDA_ERROR_INVALID_VALUE, "empty");
  if (Device::count() > 1) {
    const auto a = Device(0).split_sms(1, 1).groups[0];
    const auto b = Device(1).split_sms(1, 1).groups[0];
    expect_error(
        [&] {
          (void)Context::create_green({a, b});
        },
        CUDA_ERROR_INVALID_VALUE, "another to device 0");
  }
}

TEST_CASE("a green context: owned, its SMs, streams and inference of its kind",
          "[context][green][gpu]") {
  REQUIRE_DRIVER();
  if (!has_green_contexts()) CUSTREAM_SKIP("green streams need a CUDA 12.5 driver");
  Device(0).make_current();
  const CUcontext primary = current();
  CUgreenCtx green = nullptr;
  {
    const custream::SmSplit split = Device(0).split_sms(1, 1);
    const Context g = Context::create_green(split.groups[0], custream::GreenReuse::none);
    green = g.green_handle();
    CHECK(current() == primary);
    CHECK(g.kind() == ContextKind::green);
    CHECK(g.owned());
    CHECK(green != nullptr);
    CHECK(g.handle() != primary);
    CHECK(g.device_id() == 0);
    CHECK(g.sm_count() == split.groups[0].sm_count());
    CHECK(Device(0).primary_context().sm_count() == Device(0).sms().sm_count());
    CHECK(Context::wrap(green) == g);
    CHECK(Context::wrap(green).kind() == ContextKind::green);
    CHECK(Context::wrap(g.handle()).kind() == ContextKind::green);  // asked with it current
    CHECK(current() == primary);
    {
      ContextScope scope(g);
      CHECK(Context::current() == g);
      CHECK(Context::current().green_handle() == green);
    }
    Stream s(g);  // green streams are always non-blocking
    CHECK(s.non_blocking());
    CHECK(s.context() == g.handle());
    CHECK(s.context_kind() == ContextKind::green);
    CHECK(s.green_context() == green);
    const ExternalStream wrapped(s.handle());
    CHECK(wrapped.context_kind() == ContextKind::green);
    CHECK(wrapped.context() == g.handle());
    CHECK(wrapped.device_id() == 0);
    CHECK(wrapped.green_context() == green);
    CHECK(current() == primary);
  }
  CHECK(destroyed(green) != kAlive);  // the last user destroyed it (GreenReuse::none)
  // The SMs left over, and several groups together, make green contexts too.
  const Device d(0);
  const custream::SmSplit quarter = d.split_sms(d.sms().sm_count() / 4, 1);
  const Context rest = Context::create_green(quarter.remaining);
  CHECK(rest.sm_count() == quarter.remaining.sm_count());
  const custream::SmSplit two = d.split_sms(1, 2);
  REQUIRE(two.groups.size() == 2);
  const Context both = Context::create_green(two.groups);
  CHECK(both.sm_count() == two.groups[0].sm_count() + two.groups[1].sm_count());
  Stream(rest).synchronize();
  Stream(both).synchronize();
}

TEST_CASE("a green-context stream: every operation, captured with a host function and replayed",
          "[context][green][gpu]") {
  REQUIRE_DRIVER();
  if (!has_green_contexts()) CUSTREAM_SKIP("green streams need a CUDA 12.5 driver");
  register_add_one();
  const Context g = small_green_context();
  const Stream s(g);
  // Green contexts share the primary context's modules.
  const Module primary_module = Module::from_ptx(kPtx, 0);
  SECTION("the primary context current") {
    Device(0).make_current();
    exercise(s, primary_module);
  }
  SECTION("its own context current, with a module loaded into it") {
    ContextScope scope(g);
    exercise(s, Module::from_ptx(kPtx, g));
  }
  SECTION("a created context current") {
    if (!has_created_contexts()) CUSTREAM_SKIP("no cuCtxCreate");
    const Context created = Context::create(Device(0));
    ContextScope scope(created);
    exercise(s, primary_module);
  }
  SECTION("wrapped as a foreign stream, from a fresh thread") {
    custream_test::on_fresh_thread([&] {
      const ExternalStream wrapped(s.handle());
      CHECK(wrapped.context_kind() == ContextKind::green);
      exercise(wrapped, primary_module);
      CHECK(current() == nullptr);
    });
  }
  SECTION("a StreamScope makes the green context current") {
    Device(0).make_current();
    {
      custream::StreamScope scope(s);
      CHECK(current() == g.handle());
    }
    CHECK(current() == Device(0).primary_context().handle());
  }
}

TEST_CASE("record and wait on a whole context", "[context][green][gpu]") {
  REQUIRE_DRIVER();
  if (!has_green_contexts()) CUSTREAM_SKIP("green streams need a CUDA 12.5 driver");
  const auto& api = custream::detail::api();
  if (api.cuCtxRecordEvent == nullptr) CUSTREAM_SKIP("the driver has no cuCtxRecordEvent");
  const Context g = small_green_context();
  const Stream gs(g);
  const Stream ps(Device(0), StreamFlags::non_blocking);
  int order = 0, seen_by_green = -1;
  // The primary stream's work, then the green context waits for it (every stream of it).
  custream::launch_host_func(ps, [&]() noexcept { order = 1; });
  Event done_primary(Device(0));
  Device(0).primary_context().record(done_primary);
  g.wait(done_primary);
  custream::launch_host_func(gs, [&]() noexcept { seen_by_green = order; });
  Event done_green(g);
  g.record(done_green);
  done_green.synchronize();
  CHECK(seen_by_green == 1);
  gs.synchronize();
  ps.synchronize();
  g.synchronize();
}

TEST_CASE("a green context on device 1 while device 0 is current", "[context][green][multi-gpu]") {
  REQUIRE_DRIVER();
  if (!has_green_contexts()) CUSTREAM_SKIP("green streams need a CUDA 12.5 driver");
  if (Device::count() < 2) CUSTREAM_SKIP("needs two devices");
  register_add_one();
  Device(0).make_current();
  const Context g = small_green_context(Device(1));
  CHECK(g.device_id() == 1);
  const Stream s(g);
  CHECK(s.device_id() == 1);
  const ExternalStream wrapped(s.handle());
  CHECK(wrapped.device_id() == 1);
  CHECK(wrapped.context_kind() == ContextKind::green);
  exercise(s, Module::from_ptx(kPtx, 1));
  CHECK(current() == Device(0).primary_context().handle());
  // A scope of it makes device 1 current inside (its green context is pushed).
  {
    custream::StreamScope scope(s);
    CHECK(Device::current().ordinal() == 1);
    CHECK(custream::current_stream() == s);
  }
  CHECK(Device::current().ordinal() == 0);
  // Mixing devices stays an error that names both: a primary-context stream of device 1.
  const Stream primary1(Device(1));
  expect_error([&] { custream::StreamScope scope(primary1); }, CUDA_ERROR_INVALID_DEVICE,
               "belongs to device 1 but device 0 is current");
}

TEST_CASE("a split asking for more groups than can exist makes as many as fit",
          "[context][green][gpu]") {
  REQUIRE_DRIVER();
  if (!has_green_contexts()) CUSTREAM_SKIP("green streams need a CUDA 12.5 driver");
  const Device d(0);
  const unsigned possible = d.sms().split_count(8);
  REQUIRE(possible >= 1);
  // The driver's contract is "at most nbGroups": custream asks for no more groups than the
  // device has SMs (each group has one at least), whatever the caller's count.
  for (const unsigned huge : {UINT_MAX, UINT_MAX / 2, d.sms().sm_count() + 1}) {
    INFO("groups " << huge);
    const custream::SmSplit split = d.split_sms(8, huge);
    CHECK(split.groups.size() == possible);
    const custream::SmSplit direct = d.sms().split(8, huge);
    CHECK(direct.groups.size() == possible);
    CHECK(split.groups.at(0).sm_count() * possible + split.remaining.sm_count() ==
          d.sms().sm_count());
  }
  CHECK(d.split_sms(8, 1).groups.size() == 1);  // fewer than fit: as many as asked for
}

namespace {
// What the emulator says the driver keeps of the green contexts it made (0 on a GPU).
long green_created() {
  auto f = custream_test::emu_symbol<decltype(&custream_emu_green_contexts_created)>(
      "custream_emu_green_contexts_created");
  return f != nullptr ? f() : 0;
}
long long green_bytes() {
  auto f = custream_test::emu_symbol<decltype(&custream_emu_green_context_bytes)>(
      "custream_emu_green_context_bytes");
  return f != nullptr ? f() : 0;
}
}  // namespace

TEST_CASE("churning green contexts of the same SM groups keeps the driver's memory flat",
          "[context][green][gpu]") {
  REQUIRE_DRIVER();
  if (!has_green_contexts()) CUSTREAM_SKIP("green streams need a CUDA 12.5 driver");
  if (!custream_test::emulated()) {
    CUSTREAM_SKIP("the emulator counts what the driver keeps; on a GPU run custream-green-churn");
  }
  const custream::SmSplit split = Device(0).split_sms(8, 2);
  REQUIRE(split.groups.size() == 2);
  const long created_before = green_created();
  const long long bytes_before = green_bytes();
  for (int i = 0; i < 10000; ++i) {  // a green context per request, two kinds of request
    const Context g = Context::create_green(split.groups[static_cast<size_t>(i % 2)]);
    if (i % 1000 == 0) Stream(g).synchronize();
  }
  INFO("green contexts the driver made: " << green_created() - created_before);
  CHECK(green_created() - created_before <= 2);  // one for each set of groups
  CHECK(green_bytes() - bytes_before <= 2 * (4ll << 20));
  Context::clear_green_cache();
}

// Kept, a green context still current in another thread would run that thread's work in the
// next user's context, silently (destroyed, the thread's next call fails loudly).
TEST_CASE("a green context made current in another thread is destroyed, not kept",
          "[context][green][gpu]") {
  REQUIRE_DRIVER();
  if (!has_green_contexts()) CUSTREAM_SKIP("green streams need a CUDA 12.5 driver");
  Context::clear_green_cache();
  const custream::SmSplit split = Device(0).split_sms(8);
  REQUIRE(!split.groups.empty());
  std::mutex m;
  std::condition_variable changed;
  bool current_there = false, finish = false;
  std::thread other;
  {
    const Context g = Context::create_green(split.groups[0]);
    other = std::thread([&, handle = g] {  // a copy: g's last user stays this thread's
      handle.make_current();
      std::unique_lock<std::mutex> lock(m);
      current_there = true;
      changed.notify_all();
      changed.wait(lock, [&] { return finish; });
    });
    std::unique_lock<std::mutex> lock(m);
    changed.wait(lock, [&] { return current_there; });
  }
  // The thread's copy is gone only when it ends: it holds g until then.
  {
    std::lock_guard<std::mutex> lock(m);
    finish = true;
  }
  changed.notify_all();
  other.join();  // its copy, the last user, went on that thread: kept (it was current there)
  CHECK(Context::green_cached_count() == 1);
  Context::clear_green_cache();
  {
    const Context g = Context::create_green(split.groups[0]);
    std::thread([&g] { g.make_current(); }).join();  // current in a thread that goes on
  }  // its last user goes here, on another thread than the one it was made current in
  CHECK(Context::green_cached_count() == 0);
  Device(0).make_current();
}

TEST_CASE("green-context reuse: drained, not current, bounded per device, opt-out",
          "[context][green][gpu]") {
  REQUIRE_DRIVER();
  if (!has_green_contexts()) CUSTREAM_SKIP("green streams need a CUDA 12.5 driver");
  CHECK(Context::green_cache_limit() == Context::default_green_cache_limit);
  Context::clear_green_cache();
  CHECK(Context::green_cached_count() == 0);
  const long live_before = custream_test::emulated() ? custream_test::emu_live_objects() : 0;
  const custream::SmSplit split = Device(0).split_sms(8);
  REQUIRE(split.groups.size() >= 4);
  Device(0).make_current();
  const CUcontext primary = current();
  CUgreenCtx first = nullptr;
  std::atomic<bool> finished{false};
  {
    const Context g = Context::create_green(split.groups[0]);
    first = g.green_handle();
    const Stream s(g);
    // Work of the last user still running when it goes: the cache waits for it.
    custream::launch_host_func(s, [&finished]() noexcept {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      finished = true;
    });
    g.make_current();
  }  // kept, after its work; it was current: popped (nothing current), as a destroyed one is
  // (The emulator's cuCtxSynchronize skips the work of destroyed streams, which the driver
  // waits for: there the drain cannot be seen this way.)
  if (!custream_test::emulated()) CHECK(finished);
  CHECK(current() == nullptr);
  CHECK(Context::green_cached_count() == 1);
  Device(0).make_current();
  const long created = green_created();
  {
    const Context again = Context::create_green(split.groups[0]);  // the same groups
    CHECK(again.green_handle() == first);
    CHECK(again.kind() == ContextKind::green);
    CHECK(again.owned());
    CHECK(Context::green_cached_count() == 0);  // taken out
    CHECK(again.sm_count() == split.groups[0].sm_count());
    const Stream s(again);
    Event e(again);
    again.record(e);
    e.synchronize();
    s.synchronize();
    CHECK(current() == primary);
    const Context other = Context::create_green(split.groups[1]);  // other SMs: not this one
    CHECK(other.green_handle() != first);
  }  // both kept; what was current stays
  CHECK(current() == primary);
  CHECK(Context::green_cached_count() == 2);
  if (custream_test::emulated()) CHECK(green_created() == created + 1);  // `other` only
  {
    // GreenReuse::none: never a kept one, destroyed by its last user.
    const Context fresh = Context::create_green(split.groups[0], custream::GreenReuse::none);
    CHECK(fresh.green_handle() != first);
    CHECK(Context::green_cached_count() == 2);
    first = fresh.green_handle();
  }
  CHECK(Context::green_cached_count() == 2);
  CHECK(destroyed(first) != kAlive);
  // At most the limit per device: the ones kept longest ago are destroyed first.
  Context::set_green_cache_limit(3);
  {
    std::vector<Context> four;
    for (size_t i = 0; i < 4; ++i) four.push_back(Context::create_green(split.groups[i]));
    CHECK(Context::green_cached_count() == 0);  // groups 0 and 1 taken again
    four.clear();  // given back in order 0, 1, 2, 3: 0 is evicted
  }
  CHECK(Context::green_cached_count() == 3);
  const long before_take = green_created();
  for (size_t i : {1, 2, 3}) (void)Context::create_green(split.groups[i]);  // kept: no new one
  CHECK(green_created() == before_take);
  (void)Context::create_green(split.groups[0]);  // evicted: made again (and kept, 1 evicted)
  if (custream_test::emulated()) CHECK(green_created() == before_take + 1);
  CHECK(Context::green_cached_count() == 3);
  Context::set_green_cache_limit(1);  // trims
  CHECK(Context::green_cached_count() == 1);
  Context::set_green_cache_limit(0);  // off: the last user destroys
  CHECK(Context::green_cached_count() == 0);
  (void)Context::create_green(split.groups[0]);
  CHECK(Context::green_cached_count() == 0);
  Context::set_green_cache_limit(Context::default_green_cache_limit);
  CHECK(Context::clear_green_cache() == 0);
  if (custream_test::emulated()) {
    CHECK(custream_test::emu_live_objects() == live_before);  // nothing kept, nothing leaked
  }
}

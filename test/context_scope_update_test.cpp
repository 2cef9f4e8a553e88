// ContextScope and the kernel-node calls that need a context current (docs/design/contexts.md,
// invariant 9): inside a scope of the node's context, updates and adds ask the driver nothing
// more, and the context a scope trusts is always current, whatever custream did inside it.
// Counts the emulator's calls, so on the emulator only.
#include <cstdint>

#include "add_one_support.hpp"
#include "custream/context.hpp"
#include "custream/context_scope.hpp"
#include "custream/device_buffer.hpp"
#include "custream/graph.hpp"
#include "custream/graph_builder.hpp"
#include "custream/release_error_handler.hpp"
#include "custream/stream_scope.hpp"
#include "emu_control.h"
#include "test_support.hpp"

using custream::DeviceBuffer;
using custream::Graph;
using custream::GraphBuilder;
using custream::GraphNode;
using custream::LaunchConfig;
using custream::Stream;
using namespace custream_test::add_one;

TEST_CASE("inside a ContextScope of their context, kernel updates and adds ask for no context",
          "[graph][graph-node-update][emu-only]") {
  REQUIRE_DRIVER();
  if (!custream_test::emulated()) CUSTREAM_SKIP("counts the emulator's calls");
  AddOneCase c;
  auto count_calls = custream_test::emu_symbol<void (*)(int)>("custream_emu_count_calls");
  auto calls = custream_test::emu_symbol<long (*)(const char*)>("custream_emu_call_count");
  DeviceBuffer a(kBytes);
  c.s.memset32(a.get(), 0, custream_test::kN);
  const LaunchConfig config{{1}, {64}};
  GraphBuilder builder = GraphBuilder::create();
  const custream::Context context = builder.context();
  const GraphNode k = builder.add_kernel({}, c.add_one, config, a.get(), 1u);
  Graph g = builder.instantiate();
  // The cuCtxGetCurrent and cuCtxSetCurrent calls `body` makes.
  struct Asked {
    long get = 0, set = 0;
  };
  auto asked = [&](auto body) {
    count_calls(1);
    body();
    const Asked n{calls("cuCtxGetCurrent"), calls("cuCtxSetCurrent")};
    count_calls(0);
    return n;
  };
  auto update = [&](unsigned n) { g.update_kernel(k, config, a.get(), n); };
  update(2);                                  // the node's kernel asked once (cached)
  CHECK(asked([&] { update(2); }).get >= 1);  // outside a scope: asked every time
  const custream::Context created = custream::Context::create(custream::Device(0));
  const Stream created_stream(created, custream::StreamFlags::non_blocking);
  {
    custream::ContextScope scope(context);
    GraphBuilder more(context);
    Asked n = asked([&] {
      for (unsigned i = 0; i < 3; ++i) update(i + 1);
      more.add_kernel({}, c.add_one, config, a.get(), 1u);
    });
    CHECK(n.get == 0);
    CHECK(n.set == 0);
    {  // an inner scope restores the outer one's context, which is trusted again
      custream::ContextScope inner(created);
    }
    CHECK(asked([&] { update(3); }).get == 0);
    // custream's own changes of the current context inside a scope: asked (and switched)
    // again until the scope ends.
    {
      custream::ContextScope again(context);
      created.make_current();
      n = asked([&] { update(3); });
      CHECK(n.get >= 1);
      CHECK(n.set == 2);  // the node's context, then `created` again
    }
    {
      custream::ContextScope again(context);
      custream::StreamScope pushed(created_stream);  // pushes `created`
      n = asked([&] { update(3); });
      CHECK(n.get >= 1);
      CHECK(n.set == 2);
    }
    // A scope inside that made nothing current, and a context made current and destroyed in
    // it: no context is current after, which the update must find out (a GPU crashes when it
    // trusts the scope's context instead).
    {
      custream::ContextScope same(context);
      const custream::Context doomed = custream::Context::create(custream::Device(0));
      doomed.make_current();
    }  // `doomed` destroyed while current: popped, nothing current
    CHECK(asked([&] { update(3); }).get >= 1);
    CHECK(asked([&] { update(3); }).get >= 1);  // still nothing trusted in this scope
    // Another thread is not inside this scope: it has no context current, which the update
    // makes current for the call (the emulator refuses the call otherwise, a GPU crashes).
    const auto other = custream_test::run_on_fresh_thread([&] { update(3); });
    CHECK(other.error.empty());
    CHECK(other.after == nullptr);
  }
  {
    // A StreamScope's pop after an update inside it made its node's context current and
    // restored the pushed one: the pushed context is no longer current once popped. A node of
    // that context updated next must not trust it (no context is current here).
    custream::ContextScope none(static_cast<CUcontext>(nullptr));
    const custream::Module in_created = custream::Module::from_ptx(kAddOnePtx, created);
    GraphBuilder created_builder(created);
    const GraphNode kc =
        created_builder.add_kernel({}, in_created.kernel("add_one"), config, a.get(), 1u);
    Graph gc = created_builder.instantiate();
    gc.update_kernel(kc, config, a.get(), 1u);  // its kernel asked once (cached)
    {
      custream::StreamScope pushed(created_stream);
      update(3);
    }
    const auto n = asked([&] { gc.update_kernel(kc, config, a.get(), 1u); });
    CHECK(n.get >= 1);
    CHECK(n.set == 2);  // `created` for the call, then none again
  }
  CHECK(asked([&] { update(1); }).get >= 1);  // the scope ended
  g.launch(c.s);
  const auto va = words(c.s, a);
  CHECK(va[0] == 1u);
  CHECK(va[1] == 0u);
}

TEST_CASE("a release-error handler's ContextScope during a module's unload trusts nothing after",
          "[graph][graph-node-update][emu-only]") {
  REQUIRE_DRIVER();
  if (!custream_test::emulated()) CUSTREAM_SKIP("injects a failed cuModuleUnload");
  AddOneCase c;
  auto fail_call =
      custream_test::emu_symbol<decltype(&custream_emu_fail_call)>("custream_emu_fail_call");
  const custream::Context created = custream::Context::create(custream::Device(0));
  const custream::Module m = custream::Module::from_ptx(kAddOnePtx, created);
  DeviceBuffer a(kBytes);
  const LaunchConfig config{{1}, {64}};
  GraphBuilder builder(created);
  const GraphNode k = builder.add_kernel({}, m.kernel("add_one"), config, a.get(), 1u);
  Graph g = builder.instantiate();
  g.update_kernel(k, config, a.get(), 1u);  // the node cached
  // A handler that looks at the current context: Context::current() opens a ContextScope of
  // it, here the module's context, which the unload made current.
  int reported = 0;
  auto previous = custream::set_release_error_handler([&](const custream::ReleaseError&) {
    ++reported;
    (void)custream::Context::current();
  });
  {
    custream::ContextScope none(static_cast<CUcontext>(nullptr));
    {
      const custream::Module other = custream::Module::from_ptx(kAddOnePtx, created);
      fail_call("cuModuleUnload", 1, CUDA_ERROR_UNKNOWN);
    }  // unloaded with `created` current, the handler run, then nothing current again
    CHECK(reported == 1);
    // `created` is not current: the update must make it so (the emulator refuses it otherwise;
    // a GPU crashes).
    CHECK_NOTHROW(g.update_kernel(k, config, a.get(), 2u));
  }
  custream::set_release_error_handler(std::move(previous));
}

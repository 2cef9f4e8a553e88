// Names of streams, events and contexts, and NVTX ranges of captures and graph launches, as a
// tool attached to NVTX sees them: test/nvtx/injection.cpp stands in for Nsight Systems
// (NVTX_INJECTION64_PATH, set by the meson test `nvtx`). Design: docs/design/streams.md,
// "Names".
#include <dlfcn.h>

#include <cstdlib>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "custream/capture_scope.hpp"
#include "custream/context.hpp"
#include "custream/context_scope.hpp"
#include "custream/device.hpp"
#include "custream/event.hpp"
#include "custream/external_stream.hpp"
#include "custream/graph.hpp"
#include "custream/host_function.hpp"
#include "custream/nvtx_range.hpp"
#include "custream/stream.hpp"
#include "test_support.hpp"

using custream::CaptureMode;
using custream::CaptureScope;
using custream::Context;
using custream::Device;
using custream::Event;
using custream::EventFlags;
using custream::ExternalStream;
using custream::Graph;
using custream::NvtxRange;
using custream::Stream;
using custream::StreamFlags;
using custream::StreamRef;
using custream_test::expect_error;

namespace {

// The injection library NVTX loaded (null before the first NVTX call: then it received nothing).
void* injection() {
  const char* path = std::getenv("NVTX_INJECTION64_PATH");
  return path != nullptr ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : nullptr;
}

// The NVTX calls the injection library received since the last clear(), one a line.
std::vector<std::string> received() {
  void* lib = injection();
  if (lib == nullptr) return {};
  auto log =
      reinterpret_cast<std::size_t (*)(char*, std::size_t)>(dlsym(lib, "custream_nvtx_test_log"));
  REQUIRE(log != nullptr);
  std::string text(log(nullptr, 0) + 1, '\0');
  log(&text[0], text.size());
  std::vector<std::string> lines;
  std::istringstream in(text.c_str());
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

void clear() {
  if (void* lib = injection()) {
    auto fn = reinterpret_cast<void (*)()>(dlsym(lib, "custream_nvtx_test_clear"));
    REQUIRE(fn != nullptr);
    fn();
  }
}

std::string pointer(const void* p) {
  char text[32];
  std::snprintf(text, sizeof text, "%p", p);
  return text;
}

// What the injection library records for a name of `what` (stream, event, context); nothing
// when custream was built without nvtx3.
std::vector<std::string> sent(std::vector<std::string> lines) {
  return NvtxRange::enabled() ? lines : std::vector<std::string>{};
}

// Skips without a driver; requires the injection library, loaded by one NVTX call (a named
// stream, made and dropped), and its log cleared.
bool ready() {
  if (const std::string why = custream_test::why_no_driver(); !why.empty()) {
    WARN("skipped: " << why);
    return false;
  }
  if (NvtxRange::enabled()) {
    REQUIRE(std::getenv("NVTX_INJECTION64_PATH") != nullptr);  // run it through `meson test`
    { NvtxRange first("load the injection library"); }
    REQUIRE(injection() != nullptr);
  }
  clear();
  return true;
}

}  // namespace

TEST_CASE("Named streams, events and contexts reach NVTX with their handles", "[nvtx][gpu]") {
  if (!ready()) return;
  Stream s = Stream::create(StreamFlags::none, 0, "copy-in");
  Event e(EventFlags::none, "batch done");
  Context c = Context::create(Device::current(), 0, "tenant A");
  Stream in_c(c, StreamFlags::non_blocking, 0, "tenant A work");
  Event e_in_c(c, EventFlags::none, "tenant A done");
  CHECK(received() == sent({"stream " + pointer(s.handle()) + " copy-in",
                            "event " + pointer(e.handle()) + " batch done",
                            "context " + pointer(c.handle()) + " tenant A",
                            "stream " + pointer(in_c.handle()) + " tenant A work",
                            "event " + pointer(e_in_c.handle()) + " tenant A done"}));
  // Read back, from copies too: a name is the object's.
  const Stream copy = s;
  const Event e_copy = e;
  const Context c_copy = c;
  CHECK(copy.name() == "copy-in");
  CHECK(e_copy.name() == "batch done");
  CHECK(c_copy.name() == "tenant A");
  CHECK(Stream(StreamRef(s)).name() == "copy-in");  // a view of the same CUstream

  clear();
  copy.set_name("h2d");  // renaming through a copy renames the stream
  e.set_name("batch 2 done");
  c.set_name("tenant B");
  CHECK(s.name() == "h2d");
  CHECK(e_copy.name() == "batch 2 done");
  CHECK(c_copy.name() == "tenant B");
  CHECK(received() == sent({"stream " + pointer(s.handle()) + " h2d",
                            "event " + pointer(e.handle()) + " batch 2 done",
                            "context " + pointer(c.handle()) + " tenant B"}));

  clear();
  s.set_name("");  // forgets the name; the tool is told (it was asked)
  CHECK(s.name().empty());
  CHECK(received() == sent({"stream " + pointer(s.handle()) + " "}));
}

TEST_CASE("Unnamed objects and wraps send nothing to NVTX", "[nvtx][gpu]") {
  if (!ready()) return;
  const auto& api = custream::detail::api();
  const Context primary = Device::current().primary_context();
  CUstream raw = nullptr;
  {
    const custream::ContextScope scope(primary.handle());
    REQUIRE(api.cuStreamCreate(&raw, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  }
  {
    Stream s;
    Stream created = Stream::create();
    Stream on_device(Device::current());
    Event e;
    Event timed(EventFlags::timing);
    Context c = Context::create(Device::current());
    Stream in_c(c);
    Event e_in_c(c);
    Event recorded = created.record();
    ExternalStream foreign(raw);
    Stream view{StreamRef(created)};
    Context wrapped = Context::wrap(c.handle());
    created.launch_host_func([] {});
    created.synchronize();
    CHECK(received().empty());
    for (const std::string& name :
         {created.name(), on_device.name(), foreign.name(), view.name(), e.name(), timed.name(),
          recorded.name(), e_in_c.name(), in_c.name(), c.name(), primary.name(), wrapped.name()}) {
      CHECK(name.empty());
    }
    // Asked: a foreign stream is named, and the name is read back through another wrap.
    foreign.set_name("theirs");
    CHECK(ExternalStream(raw).name() == "theirs");
    CHECK(received() == sent({"stream " + pointer(raw) + " theirs"}));
  }
  CHECK(api.cuStreamDestroy(raw) == CUDA_SUCCESS);
}

TEST_CASE("Special handles and empty values are refused a name", "[nvtx][gpu]") {
  if (!ready()) return;
  for (const Stream& special : {Stream::null(), Stream::legacy(), Stream::per_thread()}) {
    expect_error([&] { special.set_name("x"); }, CUDA_ERROR_INVALID_VALUE,
                 "without calling the driver or NVTX");
    CHECK(special.name().empty());
  }
  Event moved_from;
  Event other = std::move(moved_from);
  expect_error([&] { moved_from.set_name("x"); }, CUDA_ERROR_INVALID_HANDLE,
               "without calling the driver or NVTX");
  expect_error([&] { Context().set_name("x"); }, CUDA_ERROR_INVALID_CONTEXT);
  CHECK(Context().name().empty());
  CHECK(received().empty());
}

TEST_CASE("A created object's name goes with it", "[nvtx][gpu]") {
  if (!ready()) return;
  std::vector<CUstream> handles;
  for (int i = 0; i < 4; ++i) {  // the driver may hand a destroyed handle's value out again
    Stream s = Stream::create(StreamFlags::none, 0, "short-lived " + std::to_string(i));
    handles.push_back(s.handle());
  }
  for (int i = 0; i < 4; ++i) {
    Stream s = Stream::create();
    CHECK(s.name().empty());  // also when its handle value is a named, destroyed stream's
    Event e;
    CHECK(e.name().empty());
  }
}

TEST_CASE("Captures and graph launches carry NVTX ranges when asked", "[nvtx][gpu]") {
  if (!ready()) return;
  Stream s = Stream::create(StreamFlags::non_blocking);
  int runs = 0;
  Graph graph;
  {
    CaptureScope capture(s, CaptureMode::relaxed, "capture step");
    s.launch_host_func([&runs] { ++runs; });
    CHECK(received() == sent({"range_start 1 capture step"}));
    graph = capture.end();
    CHECK(received() == sent({"range_start 1 capture step", "range_end 1"}));
  }
  clear();
  graph.launch(s, "step 1");
  graph.launch(s);      // no range: nothing sent
  graph.launch(s, "");  // an empty range name: nothing sent
  s.synchronize();
  CHECK(runs == 3);
  CHECK(received() == sent({"range_start 1 step 1", "range_end 1"}));

  clear();
  {  // a scope that is not ended: the destructor ends the capture, then the range
    CaptureScope abandoned(s, CaptureMode::relaxed, "abandoned");
    s.launch_host_func([&runs] { ++runs; });
  }
  CHECK_FALSE(s.is_capturing());
  { CaptureScope unnamed(s); }
  CHECK(received() == sent({"range_start 1 abandoned", "range_end 1"}));

  clear();  // a capture refused: the range has ended when the constructor throws
  expect_error([] { CaptureScope refused(Stream::legacy(), CaptureMode::relaxed, "refused"); },
               CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CHECK(received() == sent({"range_start 1 refused", "range_end 1"}));

  clear();
  {
    NvtxRange outer("outer");
    CHECK(outer.active() == NvtxRange::enabled());
    NvtxRange moved(std::move(outer));
    CHECK_FALSE(outer.active());
    NvtxRange none("");
    CHECK_FALSE(none.active());
    moved.end();
    moved.end();  // once
    CHECK_FALSE(moved.active());
  }
  CHECK(received() == sent({"range_start 1 outer", "range_end 1"}));
}

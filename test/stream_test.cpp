// Streams: creation, special handles, identity, ordering; current streams and scopes are in
// current_stream_test.cpp. Runs on the emulator and on the GPU.
#include "custream/stream.hpp"

#include <cstring>
#include <sstream>
#include <string>
#include <type_traits>
#include <unordered_set>
#include <vector>

#include "custream/device_buffer.hpp"
#include "custream/device_scope.hpp"
#include "custream/event.hpp"
#include "driver.hpp"
#include "test_support.hpp"

using custream::Device;
using custream::DeviceScope;
using custream::Stream;
using custream_test::on_fresh_thread;

namespace {

int last_device() { return Device::count() - 1; }

}  // namespace

TEST_CASE("special handles: identity, equality, hash, ordering", "[unit][stream]") {
  CHECK(Stream::null().handle() == nullptr);
  CHECK(Stream::legacy().handle() == CU_STREAM_LEGACY);
  CHECK(Stream::per_thread().handle() == CU_STREAM_PER_THREAD);
  CHECK(Stream::null() == Stream());
  CHECK(Stream::null() != Stream::legacy());  // 0 and 1 are different handles, as in CuPy
  CHECK(Stream::per_thread() == Stream::per_thread());
  CHECK(std::hash<Stream>()(Stream::per_thread()) == std::hash<Stream>()(Stream::per_thread()));
  CHECK(std::hash<Stream>()(Stream::null()) != std::hash<Stream>()(Stream::legacy()));
  CHECK(Stream::null() < Stream::legacy());
  CHECK(Stream::legacy() < Stream::per_thread());
  for (const Stream& s : {Stream::null(), Stream::legacy(), Stream::per_thread()}) {
    CHECK(s.device_id() == -1);
    CHECK(s.context() == nullptr);
    CHECK(s.is_special());
  }
  std::ostringstream text;
  text << Stream::legacy();
  CHECK(text.str() == "<Stream 0x1 (device -1)>");
}

TEST_CASE("created streams are distinct, owned, and report device, flags and priority",
          "[gpu][stream]") {
  REQUIRE_DRIVER();
  on_fresh_thread([] {
    Stream a(custream::StreamFlags::none), b(custream::StreamFlags::non_blocking, -3);
    CHECK(a != b);
    CHECK(a.handle() != nullptr);
    CHECK(a.kind() == Stream::Kind::created);
    CHECK(a.device_id() == 0);  // nothing current: device 0
    CHECK(a.context() == Device(0).primary_context().handle());
    CHECK_FALSE(a.non_blocking());
    CHECK(b.non_blocking());
    CHECK(a.priority() == 0);
    CHECK(b.priority() == -3);
    Stream clamped(Device(last_device()), custream::StreamFlags::none,
                   -100);  // out of range: clamped by the driver
    CHECK(clamped.priority() == -5);
    CHECK(clamped.device_id() == last_device());
    Stream low(Device(0), custream::StreamFlags::none, 7);
    CHECK(low.priority() == 0);
    std::ostringstream text;
    text << a;
    CHECK(text.str() == "<Stream " + custream::detail::pointer_text(a.handle()) + " (device 0)>");
    std::unordered_set<Stream> set{a, b, a};
    CHECK(set.size() == 2);
    // Creation left no context behind.
    CUcontext c = reinterpret_cast<CUcontext>(1);
    REQUIRE(custream::detail::api().cuCtxGetCurrent(&c) == CUDA_SUCCESS);
    CHECK(c == nullptr);
  });
}

TEST_CASE("the last handle destroys a created stream", "[emu-only][stream]") {
  REQUIRE_DRIVER();
  if (!custream_test::emulated()) CUSTREAM_SKIP("counts live driver objects: emulator only");
  using custream_test::emu_live_objects;
  const long before = emu_live_objects();
  {
    Stream s(custream::StreamFlags::none);
    CHECK(emu_live_objects() == before + 1);
    Stream copy = s;
    { Stream moved = std::move(copy); }
    CHECK(emu_live_objects() == before + 1);  // copies and moves share the one stream
    s.use();
    Stream::null().use();
    CHECK(emu_live_objects() == before + 1);
  }
  CHECK(emu_live_objects() == before);
}

TEST_CASE("ordering through data: memset then copies on one stream", "[gpu][stream]") {
  REQUIRE_DRIVER();
  on_fresh_thread([] {
    Stream s(custream::StreamFlags::non_blocking);
    const std::size_t n = 1 << 20;
    custream::DeviceBuffer a(n, Device(0)), b(n, Device(0));
    std::vector<unsigned char> host(n, 0);
    for (int round = 1; round <= 5; ++round) {
      s.memset(a.get(), static_cast<unsigned char>(round), n);
      s.copy(b.get(), a.get(), n);
      s.copy(host.data(), b.get(), n);
      s.synchronize();
      CHECK(s.done());
      CHECK(host.front() == round);
      CHECK(host.back() == round);
    }
    std::vector<std::uint32_t> words(64, 7);
    s.copy(a.get(), words.data(), words.size() * 4);
    s.memset32(a.get() + 16, 0xdeadbeef, 2);
    std::vector<std::uint32_t> back(64);
    s.copy(back.data(), a.get(), back.size() * 4);
    s.synchronize();
    CHECK(back[3] == 7);
    CHECK(back[4] == 0xdeadbeef);
    CHECK(back[5] == 0xdeadbeef);
    CHECK(back[6] == 7);
  });
}

TEST_CASE("stream-ordered allocation", "[gpu][stream]") {
  REQUIRE_DRIVER();
  Stream s(Device(0), custream::StreamFlags::non_blocking);
  std::vector<int> host(256);
  {
    custream::DeviceBuffer buffer(host.size() * sizeof(int), s);
    CHECK(buffer.get() != 0);
    s.memset32(buffer.get(), 42, host.size());
    s.copy(host.data(), buffer.get(), host.size() * sizeof(int));
  }  // freed in stream order
  s.synchronize();
  CHECK(host[0] == 42);
  CHECK(host[255] == 42);
}

TEST_CASE("waiting on an event and on another stream orders work", "[gpu][stream]") {
  REQUIRE_DRIVER();
  Stream producer(Device(0), custream::StreamFlags::non_blocking),
      consumer(Device(0), custream::StreamFlags::non_blocking);
  const std::size_t n = 4 << 20;
  custream::DeviceBuffer big(n, Device(0)), copy(n, Device(0));
  std::vector<unsigned char> host(n);
  for (int round = 1; round <= 3; ++round) {
    producer.memset(big.get(), static_cast<unsigned char>(round * 10), n);
    if (round % 2) {
      consumer.wait_event(producer.record());
    } else {
      consumer.wait(producer);
    }
    consumer.copy(copy.get(), big.get(), n);
    consumer.copy(host.data(), copy.get(), n);
    consumer.synchronize();
    CHECK(host[n - 1] == round * 10);
  }
}

TEST_CASE("special handles work with or without a current context", "[gpu][stream]") {
  REQUIRE_DRIVER();
  on_fresh_thread([] {
    // No context current: the null stream means device 0's (custream makes it current for
    // the call and restores none).
    Stream::null().synchronize();
    CHECK(Stream::legacy().done());
    CHECK(Stream::per_thread().priority() == 0);
    CUcontext c = reinterpret_cast<CUcontext>(1);
    REQUIRE(custream::detail::api().cuCtxGetCurrent(&c) == CUDA_SUCCESS);
    CHECK(c == nullptr);
    DeviceScope scope(last_device());
    Stream::per_thread().synchronize();
    CHECK(Stream::null().done());
  });
}

// A literal cannot create a stream by accident: only StreamFlags (or a Device) can.
static_assert(!std::is_constructible_v<Stream, bool>);
static_assert(!std::is_constructible_v<Stream, int>);
static_assert(!std::is_constructible_v<Stream, int, int>);
static_assert(std::is_constructible_v<Stream, custream::StreamFlags>);
static_assert(std::is_constructible_v<Stream, custream::StreamFlags, int>);

TEST_CASE("Stream::create makes a stream; unknown StreamFlags bits are refused", "[gpu][stream]") {
  REQUIRE_DRIVER();
  const Stream made = Stream::create();
  CHECK(made.kind() == Stream::Kind::created);
  CHECK_FALSE(made.non_blocking());
  CHECK(Stream::create(custream::StreamFlags::non_blocking).non_blocking());
  CHECK(Stream().handle() == nullptr);  // the null stream: creates nothing
  try {
    Stream bad(static_cast<custream::StreamFlags>(6));
    FAIL("no throw");
  } catch (const custream::Error& e) {
    CHECK(e.result() == CUDA_ERROR_INVALID_VALUE);
    CHECK(std::string(e.what()).find("unknown StreamFlags bits 6") != std::string::npos);
  }
}

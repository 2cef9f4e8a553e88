// Streams: creation, special handles, identity, current streams and scopes, ordering.
// SPEC §7 "Stream" rows plus issue 4's additions. Runs on the emulator and on the GPU.
#include "custream/stream.hpp"

#include <atomic>
#include <cstring>
#include <sstream>
#include <thread>
#include <unordered_set>
#include <vector>

#include "custream/current_stream.hpp"
#include "custream/device_buffer.hpp"
#include "custream/device_scope.hpp"
#include "custream/event.hpp"
#include "custream/stream_scope.hpp"
#include "driver.hpp"
#include "test_support.hpp"

using custream::current_stream;
using custream::Device;
using custream::DeviceScope;
using custream::Stream;
using custream::StreamScope;

namespace {

// Runs `body` on a fresh thread (no current context, no current streams) and joins it.
template <typename F>
void on_fresh_thread(F body) {
  std::thread t(body);
  t.join();
}

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
    Stream a(false), b(true, -3);
    CHECK(a != b);
    CHECK(a.handle() != nullptr);
    CHECK(a.kind() == Stream::Kind::created);
    CHECK(a.device_id() == 0);  // nothing current: device 0
    CHECK(a.context() == Device(0).primary_context());
    CHECK_FALSE(a.non_blocking());
    CHECK(b.non_blocking());
    CHECK(a.priority() == 0);
    CHECK(b.priority() == -3);
    Stream clamped(Device(last_device()), false, -100);  // out of range: clamped by the driver
    CHECK(clamped.priority() == -5);
    CHECK(clamped.device_id() == last_device());
    Stream low(Device(0), false, 7);
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
    Stream s(false);
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
    Stream s(true);
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
  Stream s(Device(0), true);
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
  Stream producer(Device(0), true), consumer(Device(0), true);
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

TEST_CASE("current stream: default, use(), nested scopes restore", "[gpu][stream][current]") {
  REQUIRE_DRIVER();
  on_fresh_thread([] {
    CHECK(current_stream() == Stream::null());
    CHECK(current_stream(0) == Stream::null());
    Stream a(false), b(false), c(false);
    SECTION("use returns the stream and makes it current") {
      const Stream& used = a.use();
      CHECK(&used == &a);
      CHECK(current_stream() == a);
      CHECK(current_stream(0) == a);
    }
    SECTION("nested scopes set and restore, also a stream chosen with use() (CuPy #8377)") {
      a.use();
      {
        StreamScope outer(b);
        CHECK(current_stream() == b);
        {
          StreamScope inner(c);
          CHECK(current_stream() == c);
        }
        CHECK(current_stream() == b);
      }
      CHECK(current_stream() == a);
    }
    SECTION("a scope restores on an exception") {
      try {
        StreamScope scope(b);
        throw std::runtime_error("unwind");
      } catch (const std::runtime_error&) {
      }
      CHECK(current_stream() == Stream::null());
    }
    SECTION("out-of-range device throws") {
      CHECK_THROWS_AS(current_stream(Device::count()), custream::Error);
      CHECK_THROWS_AS(current_stream(-2), custream::Error);
    }
    Stream::null().use();
  });
}

TEST_CASE("a stream made current and dropped by the user stays valid while current",
          "[gpu][stream][current]") {
  REQUIRE_DRIVER();
  on_fresh_thread([] {
    CUstream raw = nullptr;
    {
      Stream s(true);
      raw = s.handle();
      s.use();
    }
    Stream current = current_stream();
    CHECK(current.handle() == raw);
    current.synchronize();  // still a valid stream
    CHECK(custream::detail::api().cuStreamQuery(raw) == CUDA_SUCCESS);
    Stream::null().use();  // now the thread drops it; `current` still holds it
    CHECK(custream::detail::api().cuStreamQuery(raw) == CUDA_SUCCESS);
  });
}

TEST_CASE("copies taken inside a scope keep the stream alive; use() inside a scope",
          "[gpu][stream][current]") {
  REQUIRE_DRIVER();
  on_fresh_thread([] {
    Stream kept;
    CUstream raw = nullptr;
    {
      Stream s(true);
      raw = s.handle();
      StreamScope scope(s);
      kept = current_stream();  // a reference of its own
    }
    CHECK(kept.handle() == raw);
    CHECK(custream::detail::api().cuStreamQuery(raw) == CUDA_SUCCESS);
    kept.synchronize();
    Stream a(false), b(false);
    a.use();
    {
      StreamScope scope(b);
      Stream c(false);
      c.use();  // replaces the scope's entry
      CHECK(current_stream() == c);
    }
    CHECK(current_stream() == a);
    Stream::null().use();
  });
}

TEST_CASE("per-device current streams", "[gpu][stream][current][multi]") {
  REQUIRE_DRIVER();
  if (Device::count() < 2) CUSTREAM_SKIP("needs 2 devices (the emulator has 2 by default)");
  on_fresh_thread([] {
    Stream s0(Device(0), false), s1(Device(1), false);
    DeviceScope d0(0);
    StreamScope scope0(s0);
    CHECK(current_stream() == s0);
    {
      DeviceScope d1(1);
      CHECK(current_stream() == Stream::null());  // device 1 still has its default
      CHECK(current_stream(0) == s0);             // device 0 keeps its own
      s1.use();
      CHECK(current_stream() == s1);
    }
    CHECK(current_stream() == s0);  // back on device 0, the scope's stream
    CHECK(current_stream(1) == s1);
    Stream::null().use();
    DeviceScope d1(1);
    Stream::null().use();
  });
}

TEST_CASE("a stream of one device made current on another throws, naming both",
          "[gpu][stream][current][multi]") {
  REQUIRE_DRIVER();
  if (Device::count() < 2) CUSTREAM_SKIP("needs 2 devices (the emulator has 2 by default)");
  on_fresh_thread([] {
    Stream s0(Device(0), false);
    DeviceScope d1(1);
    try {
      s0.use();
      FAIL("no throw");
    } catch (const custream::Error& e) {
      const std::string what = e.what();
      CHECK(what.find("belongs to device 0 but device 1 is current") != std::string::npos);
    }
    CHECK_THROWS_AS(StreamScope(s0), custream::Error);
    CHECK(current_stream() == Stream::null());
  });
}

TEST_CASE("a stream shared by threads stays valid in all of them; scopes are per thread",
          "[gpu][stream][current][threads]") {
  REQUIRE_DRIVER();
  std::vector<Stream> shared;
  for (int i = 0; i < 4; ++i) shared.emplace_back(Device(0), true);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([shared, t, &failures] {
      Device(0).make_current();
      for (int i = 0; i < 200; ++i) {
        const Stream& s = shared[(t + i) % shared.size()];
        StreamScope scope(s);
        if (current_stream() != s) failures++;
        Stream copy = current_stream();
        copy.record();
        if (i % 50 == 0) copy.synchronize();
        (void)copy.done();
      }
      if (current_stream() != Stream::null()) failures++;
      custream::detail::api().cuCtxSetCurrent(nullptr);
    });
  }
  shared.clear();  // the threads' copies keep the streams alive
  for (auto& t : threads) t.join();
  CHECK(failures == 0);
}

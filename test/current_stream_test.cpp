// The current stream: current_stream(), Stream::use() and StreamScope, per thread and per
// device. The last cases are safety fixes (each failed before
// its fix): the stream a scope made current stays alive while the user's variable goes. Runs
// on the emulator and on the GPU ([emu-only]: counts live driver objects).
#include "custream/current_stream.hpp"

#include <atomic>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "custream/device_scope.hpp"
#include "custream/event.hpp"
#include "custream/stream.hpp"
#include "custream/stream_scope.hpp"
#include "graph_support.hpp"

using custream::current_stream;
using custream::Device;
using custream::DeviceScope;
using custream::Stream;
using custream::StreamScope;
using custream_test::on_fresh_thread;
using custream_test::raw;

TEST_CASE("current stream: default, use(), nested scopes restore", "[gpu][stream][current]") {
  REQUIRE_DRIVER();
  on_fresh_thread([] {
    CHECK(current_stream() == Stream::null());
    CHECK(current_stream(0) == Stream::null());
    Stream a(custream::StreamFlags::none), b(custream::StreamFlags::none),
        c(custream::StreamFlags::none);
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
      Stream s(custream::StreamFlags::non_blocking);
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
      Stream s(custream::StreamFlags::non_blocking);
      raw = s.handle();
      StreamScope scope(s);
      kept = current_stream();  // a reference of its own
    }
    CHECK(kept.handle() == raw);
    CHECK(custream::detail::api().cuStreamQuery(raw) == CUDA_SUCCESS);
    kept.synchronize();
    Stream a(custream::StreamFlags::none), b(custream::StreamFlags::none);
    a.use();
    {
      StreamScope scope(b);
      Stream c(custream::StreamFlags::none);
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
    Stream s0(Device(0), custream::StreamFlags::none), s1(Device(1), custream::StreamFlags::none);
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
    Stream s0(Device(0), custream::StreamFlags::none);
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
  for (int i = 0; i < 4; ++i) shared.emplace_back(Device(0), custream::StreamFlags::non_blocking);
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

TEST_CASE("the current stream stays valid when the scoped variable is reassigned",
          "[gpu][safety][stream][current]") {
  REQUIRE_DRIVER();
  custream::Device(0).make_current();
  CUstream first = nullptr;
  {
    Stream s(custream::StreamFlags::non_blocking);
    first = s.handle();
    custream::StreamScope scope(s);
    s = Stream(custream::StreamFlags::non_blocking);  // drops the variable's reference to the
                                                      // scoped stream
    const Stream current = custream::current_stream();
    CHECK(current.handle() == first);
    CHECK(raw().cuStreamQuery(current.handle()) == CUDA_SUCCESS);  // not destroyed
    current.synchronize();
    s = Stream();  // and the variable's new stream goes too
    CHECK(custream::current_stream().handle() == first);
  }
  CHECK(custream::current_stream() == Stream::null());  // restored
}

TEST_CASE("the scoped stream is destroyed when the scope and the variable are gone",
          "[gpu][safety][stream][current][emu-only]") {
  REQUIRE_EMULATOR();
  custream::Device(0).make_current();
  (void)custream::current_stream();  // this thread's slots exist
  const long live = custream_test::emu_live_objects();
  {
    Stream s(custream::StreamFlags::non_blocking);
    custream::StreamScope scope(s);
    s = Stream();
    CHECK(custream_test::emu_live_objects() == live + 1);  // the scope keeps it
  }
  CHECK(custream_test::emu_live_objects() == live);
}

TEST_CASE("nested scopes of one stream survive its variable being dropped in the inner one",
          "[gpu][safety][stream][current][emu-only]") {
  REQUIRE_EMULATOR();
  custream::Device(0).make_current();
  (void)custream::current_stream();
  const long live = custream_test::emu_live_objects();
  CUstream handle = nullptr;
  {
    auto s = std::make_unique<Stream>(custream::StreamFlags::non_blocking);
    handle = s->handle();
    custream::StreamScope outer(*s);
    {
      custream::StreamScope inner(*s);
      s.reset();  // the only counted reference: it moves into the inner scope's entry
      CHECK(custream::current_stream().handle() == handle);
    }
    CHECK(custream::current_stream().handle() == handle);  // the outer entry keeps it
    CHECK(raw().cuStreamQuery(handle) == CUDA_SUCCESS);
    CHECK(custream_test::emu_live_objects() == live + 1);
  }
  CHECK(custream_test::emu_live_objects() == live);  // destroyed with the outer scope
  CHECK(custream::current_stream() == Stream::null());
}

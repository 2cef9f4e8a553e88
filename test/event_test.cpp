// Events: flags, record/synchronize/done, elapsed time and its errors, IPC.
#include "custream/event.hpp"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "custream/current_stream.hpp"
#include "custream/device_buffer.hpp"
#include "custream/device_scope.hpp"
#include "custream/stream.hpp"
#include "custream/stream_scope.hpp"
#include "driver.hpp"
#include "test_support.hpp"

extern char** environ;

using custream::Device;
using custream::Event;
using custream::EventFlags;
using custream::Stream;

namespace {
bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}
}  // namespace

TEST_CASE("interprocess with timing is refused before any driver call", "[unit][event]") {
  // Runs without a driver: the refusal comes first.
  try {
    Event e(EventFlags::interprocess | EventFlags::timing);
    FAIL("no throw");
  } catch (const custream::Error& e) {
    CHECK(e.result() == CUDA_ERROR_INVALID_VALUE);
    CHECK(contains(e.what(), "interprocess event cannot keep timing"));
  }
}

TEST_CASE("events: default flags, record, done, synchronize", "[gpu][event]") {
  REQUIRE_DRIVER();
  Event e(Device(0));
  CHECK(e.flags() == EventFlags::none);  // timing disabled by default
  CHECK(e.device_id() == 0);
  CHECK(e.done());  // never recorded: done
  Stream s(Device(0), custream::StreamFlags::non_blocking);
  custream::DeviceBuffer buffer(8 << 20, Device(0));
  s.memset(buffer.get(), 1, buffer.size());
  s.record(e);
  e.synchronize();
  CHECK(e.done());
  Event copy = e;
  CHECK(copy == e);
  Event recorded = s.record();
  CHECK(recorded != e);
  recorded.synchronize();
  CHECK(recorded.done());
}

TEST_CASE("Event::record() uses the current stream of the event's device", "[gpu][event]") {
  REQUIRE_DRIVER();
  std::thread([] {
    custream::DeviceScope device(0);
    Stream s(Device(0), custream::StreamFlags::non_blocking);
    custream::StreamScope scope(s);
    Event e(Device(0), EventFlags::timing);
    Event start(Device(0), EventFlags::timing);
    s.record(start);
    e.record();
    e.synchronize();
    CHECK(Event::elapsed_ms(start, e) >= 0.0f);  // both on s: valid interval
  }).join();
}

TEST_CASE("elapsed time between timing events", "[gpu][event]") {
  REQUIRE_DRIVER();
  Stream s(Device(0), custream::StreamFlags::non_blocking);
  Event start(Device(0), EventFlags::timing | EventFlags::blocking_sync);
  Event end(Device(0), EventFlags::timing);
  custream::DeviceBuffer buffer(32 << 20, Device(0));
  s.record(start);
  for (int i = 0; i < 4; ++i) s.memset(buffer.get(), static_cast<unsigned char>(i), buffer.size());
  s.record(end);
  end.synchronize();
  const float ms = Event::elapsed_ms(start, end);
  CHECK(ms >= 0.0f);
  CHECK(ms < 10000.0f);
  CHECK(Event::elapsed(start, end).count() == ms);
}

TEST_CASE("elapsed time errors say why", "[gpu][event]") {
  REQUIRE_DRIVER();
  Stream s(Device(0), custream::StreamFlags::non_blocking);
  SECTION("timing disabled") {
    Event a(Device(0)), b(Device(0));
    s.record(a);
    s.record(b);
    s.synchronize();
    try {
      (void)Event::elapsed_ms(a, b);
      FAIL("no throw");
    } catch (const custream::Error& e) {
      CHECK(contains(e.what(), "start event has timing disabled"));
      CHECK(contains(e.what(), "end event has timing disabled"));
      CHECK(e.call() == "cuEventElapsedTime");
    }
  }
  SECTION("never recorded") {
    Event a(Device(0), EventFlags::timing), b(Device(0), EventFlags::timing);
    s.record(a);
    s.synchronize();
    try {
      (void)Event::elapsed_ms(a, b);
      FAIL("no throw");
    } catch (const custream::Error& e) {
      CHECK(contains(e.what(), "end event was never recorded"));
      CHECK_FALSE(contains(e.what(), "start event"));
    }
  }
}

TEST_CASE("ipc_handle of a non-interprocess event is refused", "[gpu][event]") {
  REQUIRE_DRIVER();
  Event e(Device(0));
  try {
    (void)e.ipc_handle();
    FAIL("no throw");
  } catch (const custream::Error& err) {
    CHECK(err.result() == CUDA_ERROR_INVALID_VALUE);
    CHECK(contains(err.what(), "not created with EventFlags::interprocess"));
  }
}

// The child half of the IPC test: opens the event named by CUSTREAM_IPC_EVENT and waits.
TEST_CASE("ipc child", "[.ipc-child]") {
  const char* hex = std::getenv("CUSTREAM_IPC_EVENT");
  REQUIRE(hex != nullptr);
  CUipcEventHandle handle{};
  for (std::size_t i = 0; i < sizeof handle.reserved; ++i) {
    unsigned byte = 0;
    REQUIRE(std::sscanf(hex + 2 * i, "%2x", &byte) == 1);
    handle.reserved[i] = static_cast<char>(byte);
  }
  custream::DeviceScope scope(0);
  Event e = Event::open_ipc(handle);
  e.synchronize();
  CHECK(e.done());
  Stream s(Device(0), custream::StreamFlags::non_blocking);
  s.wait_event(e);
  s.synchronize();
}

TEST_CASE("an interprocess event is opened and waited on by another process",
          "[gpu][event][ipc][real-gpu]") {
  REQUIRE_REAL_GPU();  // the emulator lives inside one process
  Event e(Device(0), EventFlags::interprocess);
  Stream s(Device(0), custream::StreamFlags::non_blocking);
  custream::DeviceBuffer buffer(64 << 20, Device(0));
  s.memset(buffer.get(), 3, buffer.size());
  s.record(e);
  const CUipcEventHandle handle = e.ipc_handle();
  std::string hex;
  for (char c : handle.reserved) {
    char byte[3];
    std::snprintf(byte, sizeof byte, "%02x", static_cast<unsigned char>(c));
    hex += byte;
  }
  std::vector<std::string> env_strings{"CUSTREAM_IPC_EVENT=" + hex};
  for (char** v = environ; *v; ++v) env_strings.emplace_back(*v);
  std::vector<char*> envp;
  for (auto& v : env_strings) envp.push_back(v.data());
  envp.push_back(nullptr);
  std::string self = "/proc/self/exe", tag = "[.ipc-child]";
  char* argv[] = {self.data(), tag.data(), nullptr};
  pid_t pid = 0;
  REQUIRE(posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv, envp.data()) == 0);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

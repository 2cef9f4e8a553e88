// Helpers for the host-function, capture, graph and kernel tests.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "custream/detail/driver.hpp"
#include "custream/device_buffer.hpp"
#include "custream/stream.hpp"
#include "custream/testing.hpp"
#include "test_support.hpp"

namespace custream_test {

/// The number of 32-bit words in the buffers of the capture and graph tests.
constexpr std::size_t kN = 64;

/// The words of `b`, copied back on `s` (which is synchronized).
inline std::vector<std::uint32_t> read(const custream::Stream& s, const custream::DeviceBuffer& b) {
  std::vector<std::uint32_t> host(b.size() / sizeof(std::uint32_t));
  s.copy(host.data(), b.get(), b.size());
  s.synchronize();
  return host;
}

/// Counts the runs and destructions of a host-function payload.
struct Probe {
  std::atomic<int> runs{0};
  std::atomic<int> destroyed{0};
};

/// A move-only `void()` payload: each run counts, and the one object that still holds the
/// probe when destroyed counts one destruction (moved-from shells count nothing).
class Payload {
 public:
  explicit Payload(std::shared_ptr<Probe> probe) : probe_(std::move(probe)) {}
  Payload(Payload&&) noexcept = default;
  Payload& operator=(Payload&&) = delete;
  Payload(const Payload&) = delete;
  ~Payload() {
    if (probe_) probe_->destroyed.fetch_add(1);
  }
  void operator()() { probe_->runs.fetch_add(1); }

 private:
  std::shared_ptr<Probe> probe_;
};

/// Waits (up to 10 s) until `done()` is true; returns whether it became true. User-object
/// destructors run on a driver thread, some time after the last reference is dropped.
template <typename Pred>
bool eventually(Pred done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

/// The emulator's custream_emu_fail_call, or null on a real driver.
inline void emu_fail_call(const char* name, int nth, CUresult result) {
  auto fn = emu_symbol<void (*)(const char*, int, CUresult)>("custream_emu_fail_call");
  REQUIRE(fn != nullptr);
  fn(name, nth, result);
}

/// Clears pending emulator fault injections.
inline void emu_reset() {
  auto fn = emu_symbol<void (*)()>("custream_emu_reset");
  REQUIRE(fn != nullptr);
  fn();
}

/// Waits until the emulator is idle, its user-object destructors have returned, and custream's
/// releasing thread has released what they handed over, four times over: a release may destroy
/// more. False on a timeout, or without the emulator's controls. Never throws (destructors call
/// it).
inline bool emu_wait_idle() {
  auto idle = emu_symbol<int (*)(int)>("custream_emu_wait_idle");
  auto destructors = emu_symbol<int (*)(int)>("custream_emu_wait_destructors");
  if (idle == nullptr || destructors == nullptr) return false;
  bool ok = true;
  for (int round = 0; round < 4; ++round) {  // releases can chain (a keeper's, then a child's)
    ok = idle(10000) == 1 && destructors(10000) == 1 &&
         custream::testing::wait_for_releases(std::chrono::seconds(10)) && ok;
  }
  return ok && idle(10000) == 1;
}

/// Ends a fault-injection test: clears pending faults, waits until the emulator is idle and
/// checks that exactly `live` driver objects remain (nothing leaked, nothing freed twice).
inline void expect_emulator_back_to(long live) {
  emu_reset();
  CHECK(emu_wait_idle());
  CHECK(emu_live_objects() == live);
}

/// The driver's entry points, for "foreign code" in tests.
inline const custream::detail::DriverApi& raw() { return custream::detail::api(); }

}  // namespace custream_test

// Skips unless the driver adds nodes through cuGraphAddNode (CUDA 12.3).
#define REQUIRE_ADD_NODE()                                           \
  do {                                                               \
    REQUIRE_DRIVER();                                                \
    if (custream::detail::api().cuGraphAddNode == nullptr)           \
      CUSTREAM_SKIP("the driver has no cuGraphAddNode (CUDA 12.3)"); \
  } while (false)

/// Skips unless the driver is custream's emulator (fault injection).
#define REQUIRE_EMULATOR()                                                                   \
  do {                                                                                       \
    REQUIRE_DRIVER();                                                                        \
    if (!::custream_test::emulated()) CUSTREAM_SKIP("needs the emulator (fault injection)"); \
  } while (false)

// Typed memory: DeviceArray<T> (typed, bounds-checked copies and fills, stream-ordered
// allocation freed after the stream's work), PinnedArray<T> (mapped or not) and MemoryPool
// (a device's default pool). Runs on the emulator and on a GPU. Design: docs/design/memory.md.
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "custream/detail/driver.hpp"
#include "custream/device.hpp"
#include "custream/device_array.hpp"
#include "custream/host_function.hpp"
#include "custream/memory_pool.hpp"
#include "custream/pinned_array.hpp"
#include "custream/stream.hpp"
#include "test_support.hpp"

using custream::Device;
using custream::DeviceArray;
using custream::MemoryPool;
using custream::PinnedArray;
using custream::PinnedFlags;
using custream::Stream;
using custream::StreamFlags;

namespace {

// Holds a stream at a host function until opened (or 10 s have passed: then `timed_out`).
class Gate {
 public:
  explicit Gate(const custream::StreamRef& s) {
    custream::launch_host_func(s, [state = state_] {
      const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (!state->open.load()) {
        if (std::chrono::steady_clock::now() > limit) {
          state->timed_out = true;
          return;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    });
  }
  void open() { state_->open = true; }
  bool timed_out() const { return state_->timed_out.load(); }

 private:
  struct State {
    std::atomic<bool> open{false}, timed_out{false};
  };
  std::shared_ptr<State> state_ = std::make_shared<State>();
};

template <typename T>
std::vector<T> iota(std::size_t n, T first) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<T>(first + static_cast<T>(i));
  return v;
}

}  // namespace

TEST_CASE("DeviceArray: round trips through vector, std::array and PinnedArray",
          "[typed-memory][gpu]") {
  REQUIRE_DRIVER();
  const Stream s(Device(0), StreamFlags::non_blocking);
  DeviceArray<int> a(64, Device(0));
  CHECK(a.size() == 64);
  CHECK(a.bytes() == 64 * sizeof(int));
  CHECK(!a.empty());
  CHECK(a.get() != 0);

  const std::vector<int> in = iota<int>(64, 100);
  a.copy_from(s, in);
  std::vector<int> out(64, -1);
  a.copy_to(s, out);
  s.synchronize();
  CHECK(out == in);

  std::array<int, 64> arr{};
  for (std::size_t i = 0; i < arr.size(); ++i) arr[i] = static_cast<int>(i) * 3;
  a.copy_from(s, arr);
  std::array<int, 64> arr_out{};
  a.copy_to(s, arr_out);
  s.synchronize();
  CHECK(arr_out == arr);

  PinnedArray<int> pin(64);
  CHECK(pin.size() == 64);
  CHECK(pin[0] == 0);  // zeroed
  CHECK(pin[63] == 0);
  for (std::size_t i = 0; i < pin.size(); ++i) pin[i] = 7000 + static_cast<int>(i);
  a.copy_from(s, pin);
  PinnedArray<int> pin_out(64);
  a.copy_to(s, pin_out);
  s.synchronize();
  CHECK(std::vector<int>(pin_out.begin(), pin_out.end()) ==
        std::vector<int>(pin.begin(), pin.end()));
  CHECK(a.to_vector(s) == std::vector<int>(pin.begin(), pin.end()));

  // Pointers: a non-const one too (the container overloads must not take it).
  std::vector<int> again = iota<int>(64, -5);
  a.copy_from(s, again.data(), again.size());
  int* raw = out.data();
  a.copy_to(s, raw, out.size());
  s.synchronize();
  CHECK(out == again);
}

TEST_CASE("DeviceArray: copies at an offset", "[typed-memory][gpu]") {
  REQUIRE_DRIVER();
  const Stream s(Device(0), StreamFlags::non_blocking);
  DeviceArray<std::int32_t> a(8);
  a.fill(s, -1);
  const std::vector<std::int32_t> three{10, 11, 12};
  a.copy_from(s, three, 2);                // elements 2, 3, 4
  a.copy_from(s, three.data() + 2, 1, 7);  // the last element
  CHECK(a.to_vector(s) == std::vector<std::int32_t>{-1, -1, 10, 11, 12, -1, -1, 12});
  std::vector<std::int32_t> two(2, 0);
  a.copy_to(s, two, 3);
  std::int32_t last = 0;
  a.copy_to(s, &last, 1, 7);
  s.synchronize();
  CHECK(two == std::vector<std::int32_t>{11, 12});
  CHECK(last == 12);
  // A copy that ends exactly at the end fits; an offset at the end with no element too.
  a.copy_from(s, three, 5);
  a.copy_from(s, three.data(), 0, 8);
  CHECK(a.to_vector(s) == std::vector<std::int32_t>{-1, -1, 10, 11, 12, 10, 11, 12});
}

TEMPLATE_TEST_CASE("DeviceArray: fill for 1-, 2- and 4-byte elements", "[typed-memory][gpu]",
                   std::uint8_t, std::int16_t, std::uint16_t, std::int32_t, float) {
  REQUIRE_DRIVER();
  const Stream s(Device(0), StreamFlags::non_blocking);
  const TestType value = std::is_same_v<TestType, float>           ? TestType(-2.5f)
                         : std::is_same_v<TestType, std::int16_t>  ? TestType(-12345)
                         : std::is_same_v<TestType, std::uint16_t> ? TestType(0xbeef)
                         : std::is_same_v<TestType, std::uint8_t>  ? TestType(0xa5)
                                                                   : TestType(0x01020304);
  // An odd count, so that a fill of the wrong width shows at the end.
  DeviceArray<TestType> a(1001);
  const std::vector<TestType> zeros(1001, TestType(0));
  a.copy_from(s, zeros);
  a.fill(s, value);
  const std::vector<TestType> got = a.to_vector(s);
  CHECK(got == std::vector<TestType>(1001, value));
  // The bytes after the array are not touched: fill a prefix of a wider array's memory.
  DeviceArray<TestType> b(16);
  b.copy_from(s, zeros.data(), 16);
  b.fill(s, value);
  CHECK(b.to_vector(s) == std::vector<TestType>(16, value));
}

TEST_CASE("DeviceArray: a copy that does not fit is refused before the driver",
          "[typed-memory][gpu]") {
  REQUIRE_DRIVER();
  const Stream s(Device(0), StreamFlags::non_blocking);
  DeviceArray<float> a(4);
  const std::vector<float> four{1, 2, 3, 4};
  a.copy_from(s, four);
  s.synchronize();
  auto count_calls = custream_test::emu_symbol<void (*)(int)>("custream_emu_count_calls");
  auto calls = custream_test::emu_symbol<long (*)(const char*)>("custream_emu_call_count");
  if (count_calls) count_calls(1);
  const std::vector<float> five(5, 9.0f);
  custream_test::expect_error([&] { a.copy_from(s, five); }, CUDA_ERROR_INVALID_VALUE,
                              "5 elements at element 0 do not fit in its 4 elements");
  custream_test::expect_error([&] { a.copy_from(s, five.data(), 2, 3); }, CUDA_ERROR_INVALID_VALUE,
                              "2 elements at element 3 do not fit in its 4 elements");
  std::vector<float> out(3);
  custream_test::expect_error([&] { a.copy_to(s, out, 2); }, CUDA_ERROR_INVALID_VALUE,
                              "3 elements at element 2 do not fit");
  // An offset past the end, and one whose sum with the count wraps around.
  custream_test::expect_error([&] { a.copy_to(s, out.data(), 0, 5); }, CUDA_ERROR_INVALID_VALUE,
                              "0 elements at element 5");
  custream_test::expect_error(
      [&] { a.copy_to(s, out.data(), std::numeric_limits<std::size_t>::max(), 2); },
      CUDA_ERROR_INVALID_VALUE, "do not fit in its 4 elements");
  try {
    a.copy_from(s, five);
  } catch (const custream::Error& e) {
    const std::string text = e.what();
    CHECK(custream_test::contains_text(text, "custream::DeviceArray::copy_from") ==
          "custream::DeviceArray::copy_from");
    CHECK(custream_test::contains_text(text, "device array 0x") == "device array 0x");
    CHECK(custream_test::contains_text(text, "custream refused before calling the driver") ==
          "custream refused before calling the driver");
  }
  if (calls) {
    CHECK(calls("cuMemcpyHtoDAsync") == 0);
    CHECK(calls("cuMemcpyDtoHAsync") == 0);
    count_calls(0);
  }
  CHECK(a.to_vector(s) == std::vector<float>{1, 2, 3, 4});
}

TEST_CASE("DeviceArray: zero-count arrays", "[typed-memory][gpu]") {
  REQUIRE_DRIVER();
  const Stream s(Device(0), StreamFlags::non_blocking);
  DeviceArray<int> a(0);
  CHECK(a.empty());
  CHECK(a.size() == 0);
  CHECK(a.get() == 0);
  DeviceArray<int> b(0, s);
  CHECK(b.get() == 0);
  const std::vector<int> none;
  a.copy_from(s, none);
  std::vector<int> out;
  a.copy_to(s, out);
  a.fill(s, 5);
  b.fill(s, 5);
  CHECK(a.to_vector(s).empty());
  s.synchronize();
  // One element does not fit in none: the message says so (not an overflow).
  const std::vector<int> one{1};
  custream_test::expect_error([&] { a.copy_from(s, one); }, CUDA_ERROR_INVALID_VALUE,
                              "1 elements at element 0 do not fit in its 0 elements");
  // A count whose bytes overflow names the element size.
  custream_test::expect_error(
      [] { DeviceArray<int> huge(std::numeric_limits<std::size_t>::max() / 2); },
      CUDA_ERROR_INVALID_VALUE, "elements of 4 bytes overflow the address space");
}

TEST_CASE("DeviceArray: a moved-from array is empty", "[typed-memory][gpu]") {
  REQUIRE_DRIVER();
  const Stream s(Device(0), StreamFlags::non_blocking);
  DeviceArray<int> a(16);
  a.fill(s, 3);
  const CUdeviceptr p = a.get();
  DeviceArray<int> b(std::move(a));
  CHECK(b.get() == p);
  CHECK(b.size() == 16);
  CHECK(a.get() == 0);   // NOLINT(bugprone-use-after-move): what a moved-from array is
  CHECK(a.size() == 0);  // NOLINT(bugprone-use-after-move)
  CHECK(a.empty());      // NOLINT(bugprone-use-after-move)
  const std::vector<int> one{1};
  custream_test::expect_error([&] { a.copy_from(s, one); }, CUDA_ERROR_INVALID_VALUE,
                              "do not fit in its 0 elements");
  DeviceArray<int> c(4);
  c = std::move(b);
  CHECK(c.size() == 16);
  CHECK(b.size() == 0);  // NOLINT(bugprone-use-after-move)
  CHECK(c.to_vector(s) == std::vector<int>(16, 3));
}

TEST_CASE("DeviceArray: a stream-ordered array destroyed before its stream ran the work",
          "[typed-memory][gpu]") {
  REQUIRE_DRIVER();
  const Stream s(Device(0), StreamFlags::non_blocking);
  const MemoryPool pool = MemoryPool::device_default(Device(0));
  s.synchronize();
  const std::uint64_t used_before = pool.used_bytes();
  constexpr std::size_t n = 1 << 16;  // 256 KiB of float
  PinnedArray<float> in(n), out(n);
  const long live_before = custream_test::emulated() ? custream_test::emu_live_objects() : 0;
  for (std::size_t i = 0; i < n; ++i) in[i] = static_cast<float>(i) * 0.5f;
  Gate gate(s);
  {
    DeviceArray<float> a(n, s);
    CHECK(pool.used_bytes() >= used_before + n * sizeof(float));
    a.copy_from(s, in);
    a.fill(s, 0.0f);  // overwritten below: order shows in the data
    a.copy_from(s, in);
    a.copy_to(s, out);
  }                       // freed on s (cuMemFreeAsync), behind the held work
  CHECK(out[1] == 0.0f);  // nothing ran yet
  gate.open();
  s.synchronize();
  CHECK(!gate.timed_out());
  CHECK(std::vector<float>(out.begin(), out.end()) == std::vector<float>(in.begin(), in.end()));
  CHECK(pool.used_bytes() == used_before);
  if (custream_test::emulated()) CHECK(custream_test::emu_live_objects() == live_before);
}

TEST_CASE("PinnedArray: mapped memory has a device pointer a copy uses", "[typed-memory][gpu]") {
  REQUIRE_DRIVER();
  const Stream s(Device(0), StreamFlags::non_blocking);
  PinnedArray<std::uint32_t> mapped(256, PinnedFlags::mapped | PinnedFlags::portable);
  CHECK((mapped.flags() & PinnedFlags::mapped) == PinnedFlags::mapped);
  const CUdeviceptr d = mapped.device_pointer();
  REQUIRE(d != 0);
  DeviceArray<std::uint32_t> a(256);
  a.fill(s, 0xc0ffee00u);
  // A device-to-device copy into the mapped pointer writes the host memory.
  REQUIRE(custream::detail::api().cuMemcpyDtoDAsync(d, a.get(), a.bytes(), s.handle()) ==
          CUDA_SUCCESS);
  s.synchronize();
  CHECK(std::vector<std::uint32_t>(mapped.begin(), mapped.end()) ==
        std::vector<std::uint32_t>(256, 0xc0ffee00u));
  PinnedArray<std::uint32_t> empty_mapped(0, PinnedFlags::mapped);
  CHECK(empty_mapped.device_pointer() == 0);
  // Moved: the memory (and its device pointer) go with it.
  PinnedArray<std::uint32_t> moved(std::move(mapped));
  CHECK(moved.device_pointer() == d);
  CHECK(mapped.data() == nullptr);  // NOLINT(bugprone-use-after-move)
  CHECK(mapped.size() == 0);        // NOLINT(bugprone-use-after-move)
}

TEST_CASE("PinnedArray: device_pointer of memory that is not mapped is refused",
          "[typed-memory][gpu]") {
  REQUIRE_DRIVER();
  PinnedArray<float> plain(16);
  CHECK(plain.flags() == PinnedFlags::none);
  custream_test::expect_error([&] { (void)plain.device_pointer(); }, CUDA_ERROR_INVALID_VALUE,
                              "allocated without PinnedFlags::mapped (flags none)");
  PinnedArray<float> wc(16, PinnedFlags::write_combined);
  custream_test::expect_error([&] { (void)wc.device_pointer(); }, CUDA_ERROR_INVALID_VALUE,
                              "(flags write_combined)");
}

TEST_CASE("MemoryPool: a device's default pool, its threshold and used bytes",
          "[typed-memory][gpu]") {
  REQUIRE_DRIVER();
  const MemoryPool pool = MemoryPool::device_default(Device(0));
  CHECK(pool.handle() != nullptr);
  CHECK(pool.device_id() == 0);
  CHECK(MemoryPool::device_default(Device(0)) == pool);
  if (Device::count() > 1) CHECK(MemoryPool::device_default(Device(1)) != pool);
  const std::uint64_t threshold = pool.release_threshold();
  pool.set_release_threshold(64u << 20);
  CHECK(pool.release_threshold() == (64u << 20));

  const Stream s(Device(0), StreamFlags::non_blocking);
  s.synchronize();
  const std::uint64_t used = pool.used_bytes();
  {
    DeviceArray<char> a(4u << 20, s);
    s.synchronize();
    CHECK(pool.used_bytes() == used + (4u << 20));
    CHECK(pool.reserved_bytes() >= pool.used_bytes());
  }
  s.synchronize();
  CHECK(pool.used_bytes() == used);
  // Kept up to the threshold: at least the freed 4 MiB stay reserved.
  CHECK(pool.reserved_bytes() >= used + (4u << 20));
  pool.trim_to(0);
  if (used == 0) CHECK(pool.reserved_bytes() == 0);
  pool.set_release_threshold(threshold);
  CHECK(pool.release_threshold() == threshold);
}

TEST_CASE("DeviceArray::to_vector: a failed synchronize leaves the pending copy a live target",
          "[typed-memory][emu-only]") {
  auto fail_call =
      custream_test::emu_symbol<void (*)(const char*, int, CUresult)>("custream_emu_fail_call");
  if (!fail_call) CUSTREAM_SKIP("injects a failure on the emulator");
  const Stream s(Device(0), StreamFlags::non_blocking);
  DeviceArray<std::uint32_t> a(1 << 16);
  a.fill(s, 0x5a5a5a5au);
  s.synchronize();
  Gate gate(s);  // the copy waits behind it
  fail_call("cuStreamSynchronize", 1, CUDA_ERROR_UNKNOWN);
  custream_test::expect_error([&] { (void)a.to_vector(s); }, CUDA_ERROR_UNKNOWN,
                              "cuStreamSynchronize");
  // The stream still runs the copy into the vector's memory (AddressSanitizer reports a write
  // to freed memory if it was freed), then the host function that releases it.
  gate.open();
  s.synchronize();
  CHECK(!gate.timed_out());
  CHECK(a.to_vector(s) == std::vector<std::uint32_t>(1 << 16, 0x5a5a5a5au));
}

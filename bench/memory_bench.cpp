// The typed-memory cases of `custream bench` (docs/performance.md): a typed copy of 4 KiB
// between a PinnedArray and a DeviceArray, each way, against the raw cuMemcpyHtoDAsync /
// cuMemcpyDtoHAsync on the same memory and stream (timed parked: the enqueueing cost), and a
// 256 MiB copy each way, at the bandwidth of the raw copy. Device 0.
#include <chrono>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "bench_cases.hpp"
#include "custream/custream.hpp"
#include "custream/testing.hpp"

namespace custream_bench {
namespace {

constexpr std::size_t kSmall = 4096 / sizeof(float);                      // 4 KiB
constexpr std::size_t kLarge = (std::size_t{256} << 20) / sizeof(float);  // 256 MiB

/// What the memory cases share, made by the first that runs (never destroyed).
struct MemoryState {
  custream::Stream stream{custream::Device(0), custream::StreamFlags::non_blocking};
  custream::PinnedArray<float> small_host{kSmall};
  custream::DeviceArray<float> small_device{kSmall, custream::Device(0)};
};

MemoryState& state() {
  static MemoryState* s = [] {
    custream::Device(0).make_current();
    return new MemoryState;
  }();
  return *s;
}

/// The 256 MiB arrays: made when the large case runs, freed with it.
struct LargeState {
  custream::PinnedArray<float> host{kLarge};
  custream::DeviceArray<float> device{kLarge, custream::Device(0)};
};

/// GB/s of `copy` (bytes each time), from the best of 3 after one warm-up.
template <typename F>
double gbps(std::size_t bytes, F copy) {
  copy();
  double best = 1e300;
  for (int i = 0; i < 3; ++i) {
    const auto start = std::chrono::steady_clock::now();
    copy();
    best = std::min(
        best,
        std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count());
  }
  return static_cast<double>(bytes) / best;
}

}  // namespace

void add_memory_cases(std::vector<Case>& cases) {
  Case to_device{"typed copy host→device (4 KiB, pinned)",      {}, {}, {}, 256, 61, {},
                 "cuMemcpyHtoDAsync (same memory, same stream)"};
  to_device.prepare = [](Case& c) {
    MemoryState& st = state();
    const auto& api = custream::testing::driver();
    c.raw = [&api, s = st.stream.handle(), d = st.small_device.get(),
             h = st.small_host.data()](int n) {
      for (int i = 0; i < n; ++i) api.cuMemcpyHtoDAsync(d, h, kSmall * sizeof(float), s);
    };
    c.ours = [](int n) {
      MemoryState& st = state();
      for (int i = 0; i < n; ++i) st.small_device.copy_from(st.stream, st.small_host);
    };
    time_parked(c, st.stream.handle());
  };
  cases.push_back(std::move(to_device));

  Case to_host{"typed copy device→host (4 KiB, pinned)",      {}, {}, {}, 256, 61, {},
               "cuMemcpyDtoHAsync (same memory, same stream)"};
  to_host.prepare = [](Case& c) {
    MemoryState& st = state();
    const auto& api = custream::testing::driver();
    c.raw = [&api, s = st.stream.handle(), d = st.small_device.get(),
             h = st.small_host.data()](int n) {
      for (int i = 0; i < n; ++i) api.cuMemcpyDtoHAsync(h, d, kSmall * sizeof(float), s);
    };
    c.ours = [](int n) {
      MemoryState& st = state();
      for (int i = 0; i < n; ++i) st.small_device.copy_to(st.stream, st.small_host);
    };
    time_parked(c, st.stream.handle());
  };
  cases.push_back(std::move(to_host));

  // Bandwidth: one copy each way and a synchronize per iteration; custream within 2 % of raw.
  Case large{"typed copy 256 MiB pinned, GB/s",
             {},
             {},
             {Target::Kind::ratio, 0, 1.02},
             1,
             21,
             {},
             "cuMemcpyHtoDAsync + cuMemcpyDtoHAsync + cuStreamSynchronize"};
  large.prepare = [](Case& c) {
    MemoryState& st = state();
    auto large = std::make_shared<LargeState>();
    const auto& api = custream::testing::driver();
    const std::size_t bytes = kLarge * sizeof(float);
    c.raw = [&api, large, s = st.stream.handle(), bytes](int n) {
      for (int i = 0; i < n; ++i) {
        api.cuMemcpyHtoDAsync(large->device.get(), large->host.data(), bytes, s);
        api.cuMemcpyDtoHAsync(large->host.data(), large->device.get(), bytes, s);
        api.cuStreamSynchronize(s);
      }
    };
    c.ours = [large](int n) {
      MemoryState& st = state();
      for (int i = 0; i < n; ++i) {
        large->device.copy_from(st.stream, large->host);
        large->device.copy_to(st.stream, large->host);
        st.stream.synchronize();
      }
    };
    c.note = [&api, large, bytes](const Case&) {
      MemoryState& st = state();
      const CUstream s = st.stream.handle();
      const double raw_in = gbps(bytes, [&] {
        api.cuMemcpyHtoDAsync(large->device.get(), large->host.data(), bytes, s);
        api.cuStreamSynchronize(s);
      });
      const double ours_in = gbps(bytes, [&] {
        large->device.copy_from(st.stream, large->host);
        st.stream.synchronize();
      });
      const double raw_out = gbps(bytes, [&] {
        api.cuMemcpyDtoHAsync(large->host.data(), large->device.get(), bytes, s);
        api.cuStreamSynchronize(s);
      });
      const double ours_out = gbps(bytes, [&] {
        large->device.copy_to(st.stream, large->host);
        st.stream.synchronize();
      });
      char text[200];
      std::snprintf(text, sizeof text,
                    "host→device %.1f GB/s typed, %.1f raw; device→host %.1f GB/s typed, %.1f raw",
                    ours_in, raw_in, ours_out, raw_out);
      return std::string(text);
    };
  };
  cases.push_back(std::move(large));
}

}  // namespace custream_bench

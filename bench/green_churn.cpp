// What green contexts made and destroyed over and over cost the process: resident host memory
// (/proc/self/statm) and free device memory (cuMemGetInfo) before and after CYCLES cycles, for
// the raw driver (cuDevResourceGenerateDesc, cuGreenCtxCreate, cuGreenCtxDestroy) and for
// custream (Context::create_green of the same SM group, reused: docs/design/contexts.md,
// invariant 7). The driver keeps what every green context it creates costs, destroyed or not.
//
//   ./build/bench/custream-green-churn [CYCLES] [--raw|--custream]   (default: 1000, both)
//
// custream runs first (the driver's leak of the raw part cannot show in it). Exit status 1 when
// custream's growth is not flat: more than 8 MiB of device memory (two contexts' worth) or more
// than 32 MiB of resident memory over the cycles; 77 without green contexts; else 0. On the
// emulator (CUSTREAM_LIBCUDA=build/emulator/libcuda.so.1) device memory is what it models as kept
// (custream_emu_green_context_bytes).
#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "custream/custream.hpp"
#include "custream/testing.hpp"

namespace {

constexpr long long kMiB = 1ll << 20;
constexpr long long kFlatDevice = 8 * kMiB;
constexpr long long kFlatResident = 32 * kMiB;

long long resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  long long pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

/// Free device memory of the current context's device: cuMemGetInfo of the driver custream
/// loaded, or on the emulator 80 GiB less what it models as kept for green contexts.
long long free_device_bytes() {
  static void* driver = dlopen(custream::driver_info().library.c_str(), RTLD_NOW | RTLD_NOLOAD);
  using MemGetInfo = CUresult (*)(size_t*, size_t*);
  static auto mem_get_info =
      driver ? reinterpret_cast<MemGetInfo>(dlsym(driver, "cuMemGetInfo_v2")) : nullptr;
  static auto emu_bytes =
      driver ? reinterpret_cast<long long (*)()>(dlsym(driver, "custream_emu_green_context_bytes"))
             : nullptr;
  if (emu_bytes != nullptr) return (80ll << 30) - emu_bytes();
  size_t free = 0, total = 0;
  if (mem_get_info == nullptr || mem_get_info(&free, &total) != CUDA_SUCCESS) return -1;
  return static_cast<long long>(free);
}

struct Growth {
  long long resident = 0;
  long long device = 0;  // device memory lost (free before - free after)
};

template <typename Cycle>
Growth measure(const char* name, long cycles, Cycle cycle) {
  cycle();  // warm: the first context's one-time costs
  const long long rss0 = resident_bytes(), free0 = free_device_bytes();
  for (long i = 0; i < cycles; ++i) cycle();
  const long long rss1 = resident_bytes(), free1 = free_device_bytes();
  const Growth g{rss1 - rss0, free0 - free1};
  std::printf(
      "%-9s %6ld cycles: RSS %8.1f -> %8.1f MiB (%+8.1f), free device memory %9.1f -> %9.1f MiB "
      "(%+8.1f)\n",
      name, cycles, rss0 / double(kMiB), rss1 / double(kMiB), -g.resident / double(-kMiB),
      free0 / double(kMiB), free1 / double(kMiB), -g.device / double(kMiB));
  std::fflush(stdout);
  return g;
}

}  // namespace

int main(int argc, char** argv) {
  long cycles = 1000;
  bool raw = true, with_custream = true;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--raw") == 0) {
      with_custream = false;
    } else if (std::strcmp(argv[i], "--custream") == 0) {
      raw = false;
    } else {
      cycles = std::strtol(argv[i], nullptr, 10);
    }
  }
  const auto& api = custream::testing::driver();
  if (api.cuGreenCtxCreate == nullptr || api.cuDeviceGetDevResource == nullptr) {
    std::printf("SKIP: the driver has no green contexts\n");
    return 77;
  }
  const custream::Device device(0);
  device.make_current();
  const custream::SmSplit split = device.split_sms(8, 2);  // once, kept: the same groups each time
  std::printf("device 0: %u SMs, green contexts of %u SMs; driver %d\n", device.sms().sm_count(),
              split.groups.at(0).sm_count(), custream::driver_info().version);
  bool flat = true;
  if (with_custream) {
    const Growth g = measure("custream", cycles, [&] {
      const custream::Context c = custream::Context::create_green(split.groups[0]);
    });
    flat = g.device <= kFlatDevice && g.resident <= kFlatResident;
    // Whether a new split's group (other bytes, or the same) finds the kept context.
    CUgreenCtx kept = nullptr;
    { kept = custream::Context::create_green(split.groups[0]).green_handle(); }
    const custream::SmSplit again = device.split_sms(8, 2);
    const bool same = custream::Context::create_green(again.groups[0]).green_handle() == kept;
    std::printf("custream: a new split's group %s the kept context (its CUdevResource bytes %s)\n",
                same ? "reuses" : "does not reuse",
                std::memcmp(&again.groups[0].native(), &split.groups[0].native(),
                            sizeof(CUdevResource)) == 0
                    ? "are the same"
                    : "differ");
    custream::Context::clear_green_cache();
    std::printf("custream: %s (at most %lld MiB of device and %lld MiB of resident memory)\n",
                flat ? "flat" : "NOT FLAT", kFlatDevice / kMiB, kFlatResident / kMiB);
  }
  if (raw) {
    CUdevResource group = split.groups[0].native();
    measure("raw", cycles, [&] {
      CUdevResourceDesc desc = nullptr;
      CUgreenCtx green = nullptr;
      if (api.cuDevResourceGenerateDesc(&desc, &group, 1) != CUDA_SUCCESS ||
          api.cuGreenCtxCreate(&green, desc, device.handle(), CU_GREEN_CTX_DEFAULT_STREAM) !=
              CUDA_SUCCESS ||
          api.cuGreenCtxDestroy(green) != CUDA_SUCCESS) {
        std::printf("raw: a driver call failed\n");
        std::exit(2);
      }
    });
  }
  return flat ? 0 : 1;
}

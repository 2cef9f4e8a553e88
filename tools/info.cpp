// `custream info`: which driver library was loaded and from where, its version, and each device
// (ordinal, name, compute capability, memory, whether its primary context is active).
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "custream/custream.hpp"
#include "tool.hpp"

namespace custream_tool {

namespace {
// "132; green-context groups: 15 x 8, 8 x 16, 5 x 24, …" — for each group size the driver
// offers (its granularity, up to the whole device), how many groups fit.
std::string sm_splits(const custream::Device& d) {
  const int sms = d.attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  std::string text = std::to_string(sms);
  try {
    const custream::SmResource all = d.sms();
    std::string groups;
    unsigned last_size = 0;
    for (unsigned min = 1; min <= all.sm_count(); min = last_size + 1) {
      const custream::SmSplit one = all.split(min, 1);
      last_size = one.groups.at(0).sm_count();
      groups += (groups.empty() ? "" : ", ") + std::to_string(all.split_count(min)) + " x " +
                std::to_string(last_size);
    }
    text += "; green-context groups: " + groups;
  } catch (const custream::Error& e) {
    text += "; green contexts: not available (" + std::string(e.name()) + ")";
  }
  return text;
}
}  // namespace

bool driver_is_emulator() {
  if (!custream::driver_available()) return false;
  void* handle = dlopen(custream::driver_info().library.c_str(), RTLD_NOW | RTLD_NOLOAD);
  return handle != nullptr && dlsym(handle, "custream_emu_reset") != nullptr;
}

std::string driver_line() {
  const custream::DriverInfo& info = custream::driver_info();
  char version[64];
  std::snprintf(version, sizeof version, " (version %d = CUDA %d.%d)", info.version,
                info.version / 1000, info.version % 1000 / 10);
  std::string line = info.library + version;
  if (driver_is_emulator()) line += " - the CPU driver emulator, not a GPU";
  return line;
}

int info() {
  const custream::DriverInfo& driver = custream::driver_info();
  const char* env = std::getenv("CUSTREAM_LIBCUDA");
  std::printf("custream %s\n", custream::version().text);
  std::printf("driver library: %s\n", driver.library.c_str());
  std::printf("  chosen by:    %s\n",
              env != nullptr && *env != '\0'
                  ? ("$CUSTREAM_LIBCUDA=" + std::string(env)).c_str()
                  : "dlopen(\"libcuda.so.1\") (the dynamic loader's search path)");
  std::printf("  emulator:     %s\n",
              driver_is_emulator() ? "yes (custream's CPU driver emulator; no GPU is used)" : "no");
  std::printf("driver version: %d (CUDA %d.%d)\n", driver.version, driver.version / 1000,
              driver.version % 1000 / 10);
  const int count = custream::Device::count();
  std::printf("devices:        %d\n", count);
  for (int i = 0; i < count; ++i) {
    custream::Device d(i);
    const auto cc = d.compute_capability();
    std::printf("  %d: %s, compute capability %d.%d, %.1f GiB, primary context %s\n", i,
                d.name().c_str(), cc.major, cc.minor,
                static_cast<double>(d.total_memory()) / (1024.0 * 1024.0 * 1024.0),
                d.primary_context_active() ? "active" : "not active");
    std::printf("     SMs: %s\n", sm_splits(d).c_str());
  }
  return 0;
}

}  // namespace custream_tool

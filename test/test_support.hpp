// Helpers for tests that need a driver: the real one or the CPU emulator.
#pragma once

#include <dlfcn.h>

#include <string>

#include "catch_compat.hpp"
#include "custream/device.hpp"
#include "custream/driver.hpp"
#include "custream/error.hpp"

namespace custream_test {

/// Empty when a driver with at least one device is loaded, else why not.
inline std::string why_no_driver() {
  try {
    if (custream::Device::count() == 0) return "the driver reports no device";
    return {};
  } catch (const custream::Error& e) {
    return e.what();
  }
}

/// The emulator's control function `name` (test/emu/emu_control.h), or null when the loaded
/// driver is not custream's CPU emulator.
template <typename Fn>
Fn emu_symbol(const char* name) {
  if (!custream::driver_available()) return nullptr;
  void* handle = dlopen(custream::driver_info().library.c_str(), RTLD_NOW | RTLD_NOLOAD);
  return handle != nullptr ? reinterpret_cast<Fn>(dlsym(handle, name)) : nullptr;
}

/// True when the loaded driver is custream's CPU emulator (test/emu).
inline bool emulated() { return emu_symbol<void (*)()>("custream_emu_reset") != nullptr; }

/// The emulator's count of live driver objects (streams, events, graphs, allocations…).
inline long emu_live_objects() {
  auto fn = emu_symbol<long (*)()>("custream_emu_live_objects");
  REQUIRE(fn != nullptr);
  return fn();
}

}  // namespace custream_test

/// Skips the test case (and says why) unless a driver with a device is present: the real
/// one or the emulator.
#define REQUIRE_DRIVER()                                                                  \
  do {                                                                                    \
    const std::string why_ = ::custream_test::why_no_driver();                            \
    if (!why_.empty()) CUSTREAM_SKIP("needs a CUDA driver (real or emulated): " << why_); \
  } while (false)

/// Skips the test case unless a real GPU is present (kernels cannot run on the emulator).
#define REQUIRE_REAL_GPU()                                                                      \
  do {                                                                                          \
    REQUIRE_DRIVER();                                                                           \
    if (::custream_test::emulated()) CUSTREAM_SKIP("needs a real GPU; the driver is emulated"); \
  } while (false)

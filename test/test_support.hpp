// Helpers for tests that need a driver (the real one or the CPU emulator), and small ones every
// suite uses: expected errors, text checks, fresh threads, captured stderr.
#pragma once

#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>

#include "catch_compat.hpp"
#include "custream/device.hpp"
#include "custream/driver.hpp"
#include "custream/error.hpp"
#include "custream/testing.hpp"

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

/// The emulator's control function `name` (emulator/emu_control.h), or null when the loaded
/// driver is not custream's CPU emulator.
template <typename Fn>
Fn emu_symbol(const char* name) {
  return custream::testing::driver_symbol<Fn>(name);
}

/// True when the loaded driver is custream's CPU emulator (emulator).
inline bool emulated() { return emu_symbol<void (*)()>("custream_emu_reset") != nullptr; }

/// The emulator's count of live driver objects (streams, events, graphs, allocations…).
inline long emu_live_objects() {
  auto fn = emu_symbol<long (*)()>("custream_emu_live_objects");
  REQUIRE(fn != nullptr);
  return fn();
}

/// Expects `f` to throw custream::Error with `result`, its text containing `text` (when given).
inline void expect_error(const std::function<void()>& f, CUresult result,
                         const std::string& text = {}) {
  try {
    f();
    FAIL("no exception; expected " << custream::result_name(result));
  } catch (const custream::Error& e) {
    CHECK(e.name() == custream::result_name(result));
    if (!text.empty()) CHECK(std::string(e.what()).find(text) != std::string::npos);
  }
}

/// `needle` when `haystack` contains it, else all of `haystack`: compared with `needle`, a
/// failed check shows the whole text.
inline std::string contains_text(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos ? needle : haystack;
}

/// Runs `body` on a fresh thread (no current context, no current streams) and joins it.
template <typename F>
void on_fresh_thread(F body) {
  std::thread t(body);
  t.join();
}

/// What `body` run on a fresh thread saw and threw: the context current there when it began
/// and after it returned (null: none), and the text of what it threw (empty: nothing).
struct FreshThreadRun {
  CUcontext current = reinterpret_cast<CUcontext>(1);
  CUcontext after = reinterpret_cast<CUcontext>(1);
  std::string error;
};
template <typename F>
FreshThreadRun run_on_fresh_thread(F body) {
  FreshThreadRun run;
  on_fresh_thread([&] {
    (void)custream::testing::driver().cuCtxGetCurrent(&run.current);
    try {
      body();
    } catch (const std::exception& e) {
      run.error = e.what();
    }
    (void)custream::testing::driver().cuCtxGetCurrent(&run.after);
  });
  return run;
}

/// What `body` writes on stderr (file descriptor 2).
template <typename Body>
std::string captured_stderr(Body body) {
  char path[] = "/tmp/custream-stderr-XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  std::fflush(stderr);
  const int saved = dup(2);
  REQUIRE(dup2(fd, 2) == 2);
  body();
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  close(fd);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  unlink(path);
  return text.str();
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

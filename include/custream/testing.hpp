/// @file
/// Hooks for benchmarks and tests that compare custream with the raw driver call in the same
/// process: the driver entry points custream itself calls, the host-task pool's counters, and a
/// Completions' wake-up counts.
///
/// Not part of the application API and not included by custream/custream.hpp: include it
/// explicitly. What it names (custream::testing::DriverApi's fields, PoolStats' members) may
/// change with custream's internals, without notice between minor versions.
#pragma once

#include <dlfcn.h>

#include <chrono>
#include <cstddef>

#include "custream/completions.hpp"
#include "custream/detail/driver.hpp"
#include "custream/detail/host_task.hpp"
#include "custream/driver.hpp"

namespace custream::detail {
/// Waits until custream's releasing thread has run every release handed to it before the call
/// (lib/support/releaser.hpp); false when `timeout` passed first. Never throws.
bool wait_released(std::chrono::milliseconds timeout) noexcept;
}  // namespace custream::detail

/// Benchmark and test hooks: the raw driver custream calls, the host-task pool's state, and a
/// Completions' wake-up counts.
namespace custream::testing {

/// The table of driver entry points custream loaded (one function pointer per entry of
/// CUSTREAM_DRIVER_ENTRIES, named after the driver symbol: `cuStreamQuery`, `cuEventRecord`,
/// …). An optional entry the driver lacks is null.
using DriverApi = detail::DriverApi;

/// The loaded driver's entry-point table, loading the driver if needed (as any custream call
/// does). For the raw-driver side of a benchmark or test, so that both sides call the same
/// driver, through the same pointers, on the same handles.
/// @throws Error when there is no usable driver (the same error driver_info() throws).
inline const DriverApi& driver() { return detail::api(); }

/// A function the loaded driver library exports under `name` (dlsym on the library custream
/// loaded), or nullptr where it exports none or no driver can be loaded: e.g. the controls of
/// custream's CPU driver emulator (`<custream/emu_control.h>`: register a kernel's CPU
/// implementation, inject a fault), which a program that runs on a GPU or on the emulator finds
/// this way. Never throws.
template <typename Fn>
Fn driver_symbol(const char* name) noexcept {
  try {
    if (!driver_available()) return nullptr;
    void* handle = ::dlopen(driver_info().library.c_str(), RTLD_NOW | RTLD_NOLOAD);
    if (handle == nullptr) return nullptr;
    void* symbol = ::dlsym(handle, name);
    ::dlclose(handle);  // custream's own handle keeps the library loaded
    return reinterpret_cast<Fn>(symbol);
  } catch (...) {  // no memory for the library's path
    return nullptr;
  }
}

/// A snapshot of the host-task pool (the heap blocks behind Stream::launch_host_func and
/// add_callback): how many blocks it made and where the free ones are.
using PoolStats = detail::PoolStats;

/// The host-task pool's counters now. Takes the pool's mutex and walks its lists: a
/// diagnostic for tests and benchmarks, not for hot paths. Never throws.
inline PoolStats pool_stats() noexcept { return detail::pool_stats(); }

/// The pool's batch size: the most free blocks a thread takes at once, and the most freed
/// blocks it keeps before handing them back as one batch.
inline constexpr std::size_t pool_batch = detail::kPoolBatch;
/// How often a Completions' watcher slept and how often a registration woke it.
using CompletionWakes = detail::CompletionWakes;
/// The wake-up counts of `completions` now: a registration wakes a sleeping watcher with one
/// call, and the registrations after it, until the watcher runs, make none (so `wakes` never
/// exceeds `sleeps`). Takes the engine's mutex: a diagnostic. Never throws.
inline CompletionWakes completion_wakes(const Completions& completions) noexcept {
  return detail::completion_wakes(completions);
}
/// The id of the thread that watches `completions`' registrations (and runs their callbacks with
/// thread delivery). Never throws.
inline std::thread::id completion_thread(const Completions& completions) noexcept {
  return detail::completion_thread(completions);
}

/// Waits until custream has released what driver callbacks handed over to its releasing thread
/// (retired per-node update payloads and the keepers of executables, released there because the
/// driver refuses CUDA calls inside its callbacks). True when everything handed over before the
/// call is released, false when `timeout` passed first. Never throws.
inline bool wait_for_releases(std::chrono::milliseconds timeout) noexcept {
  return detail::wait_released(timeout);
}

}  // namespace custream::testing

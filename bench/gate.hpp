// A gate for parking a stream while enqueues are timed: a host function that spins until the
// gate opens. The enqueues are then measured without the driver's host-function thread running
// callbacks (and waking, and contending for the stream) and without the GPU draining the queue
// at the same time, which otherwise spreads batch means by ~15 % (docs/performance.md). One
// gate at a time.
#pragma once

#include <atomic>
#include <chrono>

#include "custream/testing.hpp"

namespace custream_bench {

namespace gate_detail {
inline std::atomic<bool> open{true};
inline std::atomic<bool> entered{false};

inline void CUDA_CB hold(void*) {
  entered.store(true, std::memory_order_release);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!open.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < deadline) {
  }
}
}  // namespace gate_detail

/// Makes the gate the stream's next host function and returns once a thread is in it; the gate
/// lets itself out after 10 s. Returns cuLaunchHostFunc's failure, or CUDA_ERROR_NOT_READY
/// when the host function did not start within 10 s (the gate is left open).
inline CUresult park(CUstream stream) {
  gate_detail::open.store(false);
  gate_detail::entered.store(false);
  const CUresult r =
      custream::testing::driver().cuLaunchHostFunc(stream, gate_detail::hold, nullptr);
  if (r != CUDA_SUCCESS) return r;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!gate_detail::entered.load(std::memory_order_acquire)) {
    if (std::chrono::steady_clock::now() > deadline) {
      gate_detail::open.store(true, std::memory_order_release);
      return CUDA_ERROR_NOT_READY;
    }
  }
  return r;
}

/// Lets the parked stream run on.
inline void open_gate() { gate_detail::open.store(true, std::memory_order_release); }

}  // namespace custream_bench

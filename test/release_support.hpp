// Collecting the reports of the release-error handler in tests, and a release that fails.
#pragma once

#include <mutex>
#include <utility>
#include <vector>

#include "custream/release_error_handler.hpp"
#include "custream/stream.hpp"
#include "graph_support.hpp"

namespace custream_test {

/// Collects the release errors reported while it lives; restores the previous handler.
class ReleaseReports {
 public:
  ReleaseReports()
      : previous_(custream::set_release_error_handler([this](const custream::ReleaseError& e) {
          std::lock_guard<std::mutex> lock(mutex_);
          seen_.push_back(e);
        })) {}
  ~ReleaseReports() { custream::set_release_error_handler(std::move(previous_)); }
  ReleaseReports(const ReleaseReports&) = delete;
  ReleaseReports& operator=(const ReleaseReports&) = delete;

  /// The reports so far.
  std::vector<custream::ReleaseError> seen() {
    std::lock_guard<std::mutex> lock(mutex_);
    return seen_;
  }

 private:
  std::mutex mutex_;
  std::vector<custream::ReleaseError> seen_;
  custream::ReleaseErrorHandler previous_;
};

/// Creates a stream and drops it with its cuStreamDestroy failing with `result` (injected on
/// the emulator); returns its handle, which the failure left alive.
inline CUstream drop_stream_failing_destroy(CUresult result) {
  custream::Stream s(custream::StreamFlags::non_blocking);
  emu_fail_call("cuStreamDestroy", 1, result);
  return s.handle();
}

}  // namespace custream_test

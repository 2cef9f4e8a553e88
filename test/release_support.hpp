// Collecting the reports of the release-error handler in tests.
#pragma once

#include <mutex>
#include <utility>
#include <vector>

#include "custream/release_error_handler.hpp"

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

}  // namespace custream_test

// Catch2 v2's main (v3 brings its own through catch2-with-main) and the closing-line listener.
#if CUSTREAM_CATCH2_MAJOR < 3
#define CATCH_CONFIG_MAIN
#endif
#include "catch_compat.hpp"

#include <atomic>
#include <cstdio>

namespace custream_test {
namespace {
std::atomic<int> g_skipped{0};
}

void note_skip() noexcept { g_skipped.fetch_add(1); }

#if CUSTREAM_CATCH2_MAJOR >= 3
using ListenerBase = Catch::EventListenerBase;
#else
using ListenerBase = Catch::TestEventListenerBase;
#endif

/// Prints "custream-tests: N passed, N failed, N skipped" after the run.
class SummaryListener : public ListenerBase {
 public:
  using ListenerBase::ListenerBase;
  void testRunEnded(const Catch::TestRunStats& stats) override {
    const auto& cases = stats.totals.testCases;
#if CUSTREAM_CATCH2_MAJOR >= 3
    const auto skipped = static_cast<unsigned long long>(cases.skipped);
    const auto passed = static_cast<unsigned long long>(cases.passed);
#else
    const auto skipped = static_cast<unsigned long long>(g_skipped.load());
    const auto passed = static_cast<unsigned long long>(cases.passed) - skipped;
#endif
    std::printf("custream-tests: %llu passed, %llu failed, %llu skipped\n", passed,
                static_cast<unsigned long long>(cases.failed), skipped);
    std::fflush(stdout);
  }
};

CATCH_REGISTER_LISTENER(SummaryListener)
}  // namespace custream_test

// Catch2 v2's main (v3 brings its own through catch2-with-main) and the closing-line listener.
#if CUSTREAM_CATCH2_MAJOR < 3
#define CATCH_CONFIG_MAIN
#endif
#include "catch_compat.hpp"

#include <errno.h>  // program_invocation_short_name

#include <atomic>
#include <cstdio>
#include <cstdlib>

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

/// Prints "<program>: N passed, N failed, N skipped" after the run (the program's own name,
/// e.g. "custream-tests" or "loader-tests"). A run in which every case was skipped exits 77,
/// so that `meson test` reports it as SKIP instead of OK.
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
    std::printf("%s: %llu passed, %llu failed, %llu skipped\n", program_invocation_short_name,
                passed, static_cast<unsigned long long>(cases.failed), skipped);
    std::fflush(stdout);
    if (skipped > 0 && passed == 0 && cases.failed == 0) std::_Exit(77);  // all skipped
  }
};

CATCH_REGISTER_LISTENER(SummaryListener)
}  // namespace custream_test

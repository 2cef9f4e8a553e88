// Catch2 v2's main (v3 brings its own through catch2-with-main) and the closing-line listener.
#if CUSTREAM_CATCH2_MAJOR < 3
#define CATCH_CONFIG_MAIN
#endif
#include "catch_compat.hpp"

#include <dlfcn.h>
#include <errno.h>  // program_invocation_short_name
#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace custream_test {
namespace {
std::atomic<int> g_skipped{0};
}

void note_skip() noexcept { g_skipped.fetch_add(1); }

namespace {
// A crash's backtrace on stderr, one frame a line: "crash frame N: <object>+0x<offset> <symbol>"
// (addr2line -e <object> <offset> names the line). Catch2 reports a fatal signal by the test's
// name only, then re-raises it to the handler installed before it: this one. Installed only
// where no handler is (a sanitizer's own stays in charge).
void on_fatal_signal(int sig) {
  void* frames[64];
  const int n = backtrace(frames, 64);
  char line[512];
  int len = std::snprintf(line, sizeof line, "%s: signal %d, backtrace of %d frames:\n",
                          program_invocation_short_name, sig, n);
  if (write(2, line, static_cast<size_t>(len)) < 0) _exit(128 + sig);
  for (int i = 0; i < n; ++i) {
    Dl_info d{};
    if (dladdr(frames[i], &d) != 0 && d.dli_fname != nullptr) {
      len = std::snprintf(line, sizeof line, "crash frame %d: %s+0x%lx %s\n", i, d.dli_fname,
                          static_cast<unsigned long>(static_cast<char*>(frames[i]) -
                                                     static_cast<char*>(d.dli_fbase)),
                          d.dli_sname != nullptr ? d.dli_sname : "");
    } else {
      len = std::snprintf(line, sizeof line, "crash frame %d: %p\n", i, frames[i]);
    }
    if (len > 0 &&
        write(2, line, static_cast<size_t>(len) < sizeof line ? len : sizeof line - 1) < 0)
      break;
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

const bool g_backtrace_installed = [] {
  for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE}) {
    struct sigaction old {};
    if (sigaction(sig, nullptr, &old) != 0 || old.sa_handler != SIG_DFL) continue;
    struct sigaction sa {};
    sa.sa_handler = on_fatal_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, nullptr);
  }
  return true;
}();
}  // namespace

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

// One header for Catch2 v3 (catch2-with-main) and Debian's Catch2 2.13. The build passes
// CUSTREAM_CATCH2_MAJOR. CUSTREAM_SKIP(message) skips the running test case on both (v3's
// SKIP; on v2 a counted warning and a return), and both print one closing line
// "<program>: N passed, N failed, N skipped" (catch_compat.cpp; an all-skipped run exits 77).
#pragma once

#if CUSTREAM_CATCH2_MAJOR >= 3
#include <catch2/catch_all.hpp>
#else
#include <catch2/catch.hpp>
#endif

namespace custream_test {
/// Counts a skipped test case (Catch2 v2 has no skip of its own).
void note_skip() noexcept;
}  // namespace custream_test

#if CUSTREAM_CATCH2_MAJOR >= 3
#define CUSTREAM_SKIP(message) SKIP(message)
#else
#define CUSTREAM_SKIP(message)    \
  do {                            \
    ::custream_test::note_skip(); \
    WARN("SKIPPED: " << message); \
    return;                       \
  } while (false)
#endif

// The benchmark case families (bench/*_bench.cpp) and the suite that runs them: one piece of
// code behind `custream bench` (tools/main.cpp).
#pragma once

#include <string>
#include <vector>

#include "harness.hpp"

namespace custream_bench {

/// Streams, events, devices, current streams and scopes (docs/performance.md). Device 0.
void add_stream_cases(std::vector<Case>& cases);

/// Host functions, graph launch, kernel launch, and capture + instantiate + first launch of a
/// 1,000-kernel graph (docs/performance.md). Device 0. The kernel cases are added as skipped,
/// with the reason, where the driver cannot load modules (the CPU emulator).
void add_graph_cases(std::vector<Case>& cases);

/// What `custream bench` was asked for.
struct SuiteOptions {
  std::string csv;     ///< write the numbers here (empty: no CSV)
  std::string filter;  ///< run only cases whose name contains this (empty: all)
  bool quick = false;  ///< smoke run: few pairs, targets shown but not enforced
  bool list = false;   ///< print the case names and targets, run nothing
  int pairs = 0;       ///< A B B A pairs for every case (0: each case's own count)
};

/// Runs the suite on device 0: a progress line per case on stderr, then the table on stdout
/// and the CSV. Returns the exit status: 0 when every case that ran met its target (always
/// in a quick run), 1 otherwise or when the CSV cannot be written.
/// @throws custream::Error when the driver fails while setting up.
int run_suite(const SuiteOptions& options);

}  // namespace custream_bench

// The benchmark case families; each adds its cases (bench/*_bench.cpp).
#pragma once

#include <vector>

#include "harness.hpp"

namespace custream_bench {

/// Streams, events, devices, current streams and scopes (SPEC §6, issue 4).
void add_stream_cases(std::vector<Case>& cases);

}  // namespace custream_bench

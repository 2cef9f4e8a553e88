// Internal access to the loaded driver (what inline hot paths need is in
// custream/detail/driver.hpp, the call layer in custream/detail/call.hpp).
// Design: docs/design/loading.md.
#pragma once

#include <cstddef>
#include <string>

#include "custream/detail/call.hpp"
#include "custream/detail/driver.hpp"
#include "error.hpp"

namespace custream::detail {

/// "12.5" for 12050: a driver version as CUDA names it.
std::string version_text(int version);

/// The table of entries, in CUSTREAM_DRIVER_ENTRIES order.
const DriverEntry* driver_entries(std::size_t* count) noexcept;

}  // namespace custream::detail

// The library owner's unload and registration (invariants 1 and 5 of docs/design/libraries.md;
// the registry and the graphs' holds: support/held_code.cpp), and the cache's image hash.
#include <algorithm>
#include <cstring>
#include <mutex>

#include "driver.hpp"
#include "library.hpp"

namespace custream::detail {

std::uint64_t hash_bytes(const void* data, std::size_t bytes) noexcept {
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint64_t h = 0x9E3779B97F4A7C15ull ^ (bytes * 0xff51afd7ed558ccdull);
  std::size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    std::uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 0xff51afd7ed558ccdull;
    h ^= h >> 29;
  }
  std::uint64_t tail = 0;
  std::memcpy(&tail, p + i, bytes - i);
  h = (h ^ tail) * 0xc4ceb9fe1a85ec53ull;
  return h ^ (h >> 32);
}

LibraryOwner::~LibraryOwner() {
  unregister_code(this);
  if (library != nullptr) release_call<&DriverApi::cuLibraryUnload>("library", library, library);
}
template struct Refs<LibraryOwner>;

std::string jit_log_text(const LibraryOwner& owner) {
  if (owner.jit_error_log.empty()) return {};
  return "; JIT error log:\n" + owner.jit_error_log;
}

}  // namespace custream::detail

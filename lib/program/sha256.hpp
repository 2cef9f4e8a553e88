// SHA-256 (FIPS 180-4), for the compile cache's keys and entry checksums. Internal.
// Design: docs/design/jit.md (invariant 3).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace custream::detail {

/// Incremental SHA-256.
class Sha256 {
 public:
  using Digest = std::array<std::uint8_t, 32>;

  /// Appends bytes.
  void update(const void* data, std::size_t bytes) noexcept;
  /// Appends text.
  void update(std::string_view text) noexcept { update(text.data(), text.size()); }
  /// Appends the length (8 bytes, little-endian) and then the text: fields so written cannot
  /// run into each other ("ab"+"c" and "a"+"bc" hash differently).
  void field(std::string_view text) noexcept;
  /// The digest; the object must not be updated afterwards.
  Digest finish() noexcept;

  /// The digest of `text` in one call.
  static Digest of(std::string_view text) noexcept;
  /// Lower-case hexadecimal.
  static std::string hex(const Digest& digest);

 private:
  void block(const std::uint8_t* p) noexcept;

  std::uint32_t state_[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                             0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  std::uint8_t buffer_[64] = {};
  std::size_t buffered_ = 0;
  std::uint64_t total_ = 0;
};

}  // namespace custream::detail

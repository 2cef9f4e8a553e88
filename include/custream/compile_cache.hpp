/// @file
/// custream::CompileCache: compiled code kept on disk across processes.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "custream/library.hpp"

namespace custream {

/// What a CompileCache has done in this process (all its copies together).
struct CompileCacheStats {
  std::uint64_t hits = 0;            ///< entries found valid and used
  std::uint64_t misses = 0;          ///< lookups with no entry
  std::uint64_t rejected = 0;        ///< entries found corrupt or truncated (then rewritten)
  std::uint64_t stores = 0;          ///< entries written
  std::uint64_t evictions = 0;       ///< entries removed to stay under the size cap
  std::uint64_t write_failures = 0;  ///< entries that could not be written (read-only, full)
};

/// A directory of compiled code, shared by every process that uses it: one file per entry,
/// named by its key (the SHA-256 of everything that changes the output, in hexadecimal).
///
/// An entry is written whole or not at all (a temporary file in the same directory, fsync,
/// rename), so processes compiling the same code at once never see a torn file; its header
/// (magic, format version, key, payload length, payload SHA-256) is checked on every read, and
/// an entry that fails the check (corrupt, truncated, another format) is never used: the
/// lookup misses, and the next store replaces it. The directory is kept under a size cap:
/// after a store, the least recently used entries (oldest modification time; a hit touches
/// its entry) are removed until the total fits. When the directory cannot be made or written
/// (read-only, disk full), the code is still compiled and used; one line on stderr per
/// process says so. Copies share their statistics. Thread-safe.
class CompileCache {
 public:
  /// The default size cap: 256 MiB.
  static constexpr std::uint64_t default_max_bytes = 256ull << 20;
  /// The entry format; part of every key.
  static constexpr std::uint32_t format_version = 1;

  /// The cache in `directory` (made, with its parents, at the first store), at most
  /// `max_bytes` of entries.
  explicit CompileCache(std::string directory, std::uint64_t max_bytes = default_max_bytes);
  /// A cache that is off: every lookup misses, nothing is written.
  static CompileCache off();
  /// The cache the environment names: $CUSTREAM_CACHE_DIR ("off" or "0": off), else
  /// $XDG_CACHE_HOME/custream, else $HOME/.cache/custream (off when none is set);
  /// $CUSTREAM_CACHE_MAX_BYTES sets the cap.
  static CompileCache from_environment();
  /// The process-wide cache Program uses unless given another: from_environment(), read once.
  static const CompileCache& process_default();

  /// False for a cache that is off.
  bool enabled() const noexcept;
  /// The directory ("" when off).
  const std::string& directory() const noexcept;
  /// The size cap.
  std::uint64_t max_bytes() const noexcept;
  /// The path of the entry for `key`.
  std::string entry_path(const std::string& key) const;

  /// The key of `parts` (each a field: length and bytes) with the format version:
  /// 64 hexadecimal digits.
  static std::string key_of(std::initializer_list<std::string_view> parts);

  /// The payload stored under `key`, checked; nullopt when there is none or it fails the check
  /// (corrupt or truncated: counted in stats().rejected). A hit touches the entry.
  std::optional<std::string> find(const std::string& key) const;
  /// Stores `payload` under `key` atomically, then evicts down to the cap. Returns false, and
  /// warns once per process, when it cannot be written. Never throws for file-system errors.
  bool store(const std::string& key, std::string_view payload) const;

  /// For images a tool produced itself: the Library of the image stored under the key of
  /// `caller_key` (which must name everything that changes the image); on a miss, `produce()`
  /// makes the image (cubin, fatbin, or PTX with its NUL), which is stored and loaded.
  /// @throws what produce() or Library::from_image throws.
  Library library(std::string_view caller_key, const std::function<std::string()>& produce) const;

  /// What this cache (and its copies) did in this process.
  CompileCacheStats stats() const noexcept;

 private:
  struct State;
  CompileCache() = default;
  std::shared_ptr<State> state_;
};

}  // namespace custream

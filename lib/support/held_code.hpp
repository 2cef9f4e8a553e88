// The code a graph may launch, held while the graph lives: loaded libraries and modules.
// Internal. Design: docs/design/libraries.md (invariant 5), docs/design/modules.md (invariant 7).
//
// Contract: every library and module owner is in its registry from load to its destructor. A
// launch through custream stamps the owner with the capture epoch (two relaxed loads and a
// compare); a raw handle handed out marks it exposed. A graph custream instantiates holds, by
// reference, every owner stamped since its capture began (every one ever launched for a capture
// custream did not begin) and every exposed one, so no code it may launch is unloaded before
// it is destroyed (or, for what an update gave its executable, replaced: graphs.md U9).
// Holding never resurrects an owner whose last reference is gone.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

#include "shared.hpp"

namespace custream::detail {

/// What a graph needs to know of a loaded library or module (the owner derives from it).
struct LaunchedCode : Counted {
  /// How many graphs hold it (Library::unload refuses while any does).
  std::atomic<long> graphs{0};
  /// The capture epoch of its last launch through custream.
  std::atomic<std::uint64_t> launched{0};
  /// Whether a raw handle of its code was handed out: then any graph may launch it, and every
  /// graph holds it.
  std::atomic<bool> exposed{false};
};

/// The capture epoch: raised before every capture custream begins.
extern std::atomic<std::uint64_t> g_capture_epoch;
/// "Every library or module launched at all": the epoch of a graph whose capture custream did
/// not begin.
inline constexpr std::uint64_t kAnyCapture = 1;

/// Raises the capture epoch and returns the new one (before a capture begins).
std::uint64_t next_capture_epoch() noexcept;

/// Raises `code`'s launch stamp to `epoch`.
void stamp_launch(LaunchedCode& code, std::uint64_t epoch) noexcept;

/// Records a launch of `code`: two relaxed loads and a compare, and a store once per capture
/// epoch.
inline void note_launch(LaunchedCode& code) noexcept {
  const std::uint64_t epoch = g_capture_epoch.load(std::memory_order_relaxed);
  if (code.launched.load(std::memory_order_relaxed) < epoch) stamp_launch(code, epoch);
}

/// Records that a raw handle of `code` was handed out.
inline void note_exposed(LaunchedCode& code) noexcept {
  if (!code.exposed.load(std::memory_order_relaxed)) {
    code.exposed.store(true, std::memory_order_relaxed);
  }
}

/// Every loaded owner of one kind, so that a graph can hold those it may launch. Guarded by its
/// mutex: written at load and in the owner's destructor, read when custream instantiates a
/// graph, never on a launch.
template <typename Owner>
struct CodeRegistry {
  std::mutex mutex;
  std::vector<Owner*> owners;
};

struct LibraryOwner;
struct ModuleOwner;
/// The one registry of each kind (never destroyed: owners may outlive static destruction).
template <typename Owner>
CodeRegistry<Owner>& code_registry();
/// Adds `owner` to its registry. @throws std::bad_alloc.
template <typename Owner>
void register_code(Owner* owner);
/// Forgets `owner`; the caller holds `r`'s mutex.
template <typename Owner>
void unregister_code_locked(CodeRegistry<Owner>& r, Owner* owner) noexcept;
/// Forgets `owner`, taking its registry's mutex (an owner's destructor).
template <typename Owner>
void unregister_code(Owner* owner) noexcept;

/// The libraries and modules a graph may launch, held while the graph (and its executable)
/// lives: those launched through custream since its capture began, and those whose raw handles
/// were handed out. Filled when custream instantiates or updates it; never copied.
class GraphCode {
 public:
  GraphCode() = default;
  GraphCode(const GraphCode&) = delete;
  GraphCode& operator=(const GraphCode&) = delete;
  /// Drops every reference (the last one unloads). Never throws.
  ~GraphCode();

  /// Holds every loaded library and module launched at capture epoch `since` or later, or
  /// exposed. @throws std::bad_alloc (what was held by then stays held).
  void hold_since(std::uint64_t since);
  /// Holds `other`'s code too: inline nothing when `other` holds none (a graph update from a
  /// graph without kernels of libraries or modules pays one comparison, no call).
  void hold(const GraphCode& other) {
    if (!other.libraries_.empty() || !other.modules_.empty()) hold_more(other);
  }
  /// Holds `owner` too (a library a kernel node launches); the caller holds a reference.
  /// @throws std::bad_alloc.
  void hold(LibraryOwner* owner);
  /// Whether this holds what `other` holds, in the same order (inline: two empty ones compare
  /// their sizes only).
  bool same_as(const GraphCode& other) const noexcept {
    if (libraries_.size() != other.libraries_.size() || modules_.size() != other.modules_.size())
      return false;
    return (libraries_.empty() && modules_.empty()) || same_as_held(other);
  }
  /// Exchanges what this and `other` hold. Never throws.
  void swap(GraphCode& other) noexcept {
    libraries_.swap(other.libraries_);
    modules_.swap(other.modules_);
  }
  /// How many libraries are held.
  std::size_t libraries() const noexcept { return libraries_.size(); }
  /// How many modules are held.
  std::size_t modules() const noexcept { return modules_.size(); }

 private:
  void hold_more(const GraphCode& other);                    // hold() for a non-empty `other`
  bool same_as_held(const GraphCode& other) const noexcept;  // same_as() when not empty
  std::vector<LibraryOwner*> libraries_;
  std::vector<ModuleOwner*> modules_;
};

}  // namespace custream::detail

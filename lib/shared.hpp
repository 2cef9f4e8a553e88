// The reference counts behind detail::Shared<Owner> (custream/detail/shared.hpp). Internal.
// Design: docs/design/handles.md.
#pragma once

#include <atomic>
#include <type_traits>

#include "custream/detail/shared.hpp"

namespace custream::detail {

/// The count an owner starts with. An owner type derives from it (or has a `refs` member
/// like it) and releases its driver handle in its destructor, which never throws.
struct Counted {
  Counted() = default;
  Counted(const Counted&) = delete;  // an owner is one object: never copied
  Counted& operator=(const Counted&) = delete;
  std::atomic<long> refs{1};
};

/// True when `Owner` has `static bool take_release(Owner*) noexcept`: a release it may
/// absorb instead of dropping the count (a stream's borrowed current-stream entry).
template <typename Owner, typename = void>
inline constexpr bool has_release_hook = false;
template <typename Owner>
inline constexpr bool has_release_hook<Owner, std::void_t<decltype(Owner::take_release(nullptr))>> =
    true;

template <typename Owner>
void Refs<Owner>::retain(Owner* owner) noexcept {
  owner->refs.fetch_add(1, std::memory_order_relaxed);
}

template <typename Owner>
void Refs<Owner>::release(Owner* owner) noexcept {
  if constexpr (has_release_hook<Owner>) {
    if (Owner::take_release(owner)) return;
  }
  if (owner->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete owner;
}

/// Every owner: its file instantiates Refs<Owner> (`template struct Refs<EventOwner>;`), and
/// no other file does (the owner may be incomplete there).
struct StreamOwner;
struct EventOwner;
struct GraphOwner;
struct ModuleOwner;
struct ContextOwner;
struct LibraryOwner;
struct BuilderOwner;
extern template struct Refs<StreamOwner>;
extern template struct Refs<EventOwner>;
extern template struct Refs<GraphOwner>;
extern template struct Refs<ModuleOwner>;
extern template struct Refs<ContextOwner>;
extern template struct Refs<LibraryOwner>;
extern template struct Refs<BuilderOwner>;

}  // namespace custream::detail

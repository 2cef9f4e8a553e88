// The reference counts behind detail::Shared<Owner> (custream/detail/shared.hpp). Internal.
// Design: docs/design/handles.md.
#pragma once

#include <atomic>

#include "custream/detail/shared.hpp"

namespace custream::detail {

/// The count an owner starts with. An owner type derives from it (or has a `refs` member
/// like it) and releases its driver handle in its destructor, which never throws. Each owner's
/// file defines Refs<Owner> with the two functions below:
///   template <> void Refs<EventOwner>::retain(EventOwner* o) noexcept { count_up(o); }
///   template <> void Refs<EventOwner>::release(EventOwner* o) noexcept { count_down(o); }
struct Counted {
  std::atomic<long> refs{1};
};

/// Adds a reference.
template <typename Owner>
void count_up(Owner* owner) noexcept {
  owner->refs.fetch_add(1, std::memory_order_relaxed);
}

/// Drops a reference; the last one deletes the owner (whose destructor releases the handle).
template <typename Owner>
void count_down(Owner* owner) noexcept {
  if (owner->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete owner;
}

}  // namespace custream::detail

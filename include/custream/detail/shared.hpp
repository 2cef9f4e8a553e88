// Shared ownership of a driver handle: the one reference-counted handle of custream (streams,
// events, graphs, modules). Internal: not part of custream's API. Design:
// docs/design/handles.md.
#pragma once

#include <utility>

namespace custream::detail {

/// The reference count of an owner type, defined in lib/ for each owner (Owner is complete
/// only there): retain() adds a reference, release() drops one and destroys the owner, which
/// releases its driver handle, with the last.
template <typename Owner>
struct Refs {
  static void retain(Owner* owner) noexcept;
  static void release(Owner* owner) noexcept;
};

/// One counted reference to an `Owner` (or none). Copying adds a reference, moving takes it
/// over (the source is left empty), destruction drops it. The owner's count starts at one, the
/// reference that the Shared made from it takes over.
template <typename Owner>
class Shared {
 public:
  constexpr Shared() noexcept = default;
  /// Takes over the owner's first reference.
  explicit Shared(Owner* adopted) noexcept : owner_(adopted) {}
  Shared(const Shared& other) noexcept : owner_(other.owner_) {
    if (owner_ != nullptr) Refs<Owner>::retain(owner_);
  }
  Shared(Shared&& other) noexcept : owner_(std::exchange(other.owner_, nullptr)) {}
  Shared& operator=(const Shared& other) noexcept {
    Shared(other).swap(*this);
    return *this;
  }
  Shared& operator=(Shared&& other) noexcept {
    Shared(std::move(other)).swap(*this);
    return *this;
  }
  ~Shared() {
    if (owner_ != nullptr) Refs<Owner>::release(owner_);
  }

  /// The owner (null when empty).
  Owner* get() const noexcept { return owner_; }
  /// Gives up the reference without dropping it (the caller accounts for it).
  Owner* detach() noexcept { return std::exchange(owner_, nullptr); }
  void swap(Shared& other) noexcept { std::swap(owner_, other.owner_); }
  explicit operator bool() const noexcept { return owner_ != nullptr; }

 private:
  Owner* owner_ = nullptr;
};

/// A value that a move leaves as `Empty` (a handle a moved-from object no longer has), so the
/// classes holding one can default their moves.
template <typename T, T Empty = T{}>
class MovedFrom {
 public:
  constexpr MovedFrom() noexcept = default;
  constexpr MovedFrom(T value) noexcept : value_(value) {}  // NOLINT: converts like a T
  constexpr MovedFrom(const MovedFrom&) noexcept = default;
  constexpr MovedFrom(MovedFrom&& other) noexcept : value_(std::exchange(other.value_, Empty)) {}
  constexpr MovedFrom& operator=(const MovedFrom&) noexcept = default;
  constexpr MovedFrom& operator=(MovedFrom&& other) noexcept {
    if (this != &other) value_ = std::exchange(other.value_, Empty);
    return *this;
  }
  constexpr operator T() const noexcept { return value_; }  // NOLINT: reads like a T
  /// The pointee, when T is a pointer.
  constexpr T operator->() const noexcept { return value_; }

 private:
  T value_ = Empty;
};

}  // namespace custream::detail

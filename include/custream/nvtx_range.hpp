/// @file
/// custream::NvtxRange: an NVTX range (a named span of time in Nsight Systems) as an RAII value.
#pragma once

#include <cstdint>
#include <string_view>
#include <utility>

namespace custream {

/// An NVTX range in the default domain (nvtxRangeStartA … nvtxRangeEnd): Nsight Systems shows
/// it on the thread's timeline and projects it onto the GPU work the CUDA calls inside it
/// enqueue. Start/end ranges, not push/pop: the range may end in another thread than it began.
///
/// A range with an empty name is no range at all: nothing is sent to NVTX, and such an
/// NvtxRange costs nothing. When custream was built without the toolkit's nvtx3 headers
/// (enabled() is false) no range is ever sent. With no tool attached, NVTX makes each call a
/// no-op after its first.
///
/// Graph::launch(StreamRef, std::string_view) and CaptureScope take a range name and use one.
///
/// @code
/// { custream::NvtxRange step("step 12"); graph.launch(stream); }  // the range ends here
/// @endcode
class NvtxRange {
 public:
  /// No range.
  NvtxRange() noexcept = default;
  /// Starts a range named `name` (nvtxRangeStartA); an empty `name` starts none.
  /// @throws std::bad_alloc (the name is copied to end it with a NUL).
  explicit NvtxRange(std::string_view name);
  /// Takes over `other`'s range; `other` ends nothing.
  NvtxRange(NvtxRange&& other) noexcept
      : id_(other.id_), active_(std::exchange(other.active_, false)) {}
  /// Ends this range, then takes over `other`'s.
  NvtxRange& operator=(NvtxRange&& other) noexcept {
    if (this != &other) {
      end();
      id_ = other.id_;
      active_ = std::exchange(other.active_, false);
    }
    return *this;
  }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
  /// Ends the range unless end() did. Never throws.
  ~NvtxRange() { end(); }

  /// Ends the range now (nvtxRangeEnd); nothing when none is open. Never throws.
  void end() noexcept {
    if (active_) end_range();
  }
  /// True while a range this value started is open.
  bool active() const noexcept { return active_; }

  /// True when custream was built with the toolkit's nvtx3 headers, so names and ranges reach
  /// a tool (Nsight Systems) that is attached; else custream keeps names but sends nothing.
  static bool enabled() noexcept;

 private:
  void end_range() noexcept;

  std::uint64_t id_ = 0;  // nvtxRangeId_t (0 from NVTX with no tool attached)
  bool active_ = false;
};

}  // namespace custream

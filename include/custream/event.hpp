/// @file
/// custream::Event: a CUDA event as a value handle.
#pragma once

#include "custream/detail/cuda.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "custream/context.hpp"
#include "custream/detail/shared.hpp"
#include "custream/device.hpp"
#include "custream/stream_ref.hpp"

namespace custream {

/// Event creation flags; combine with `|`.
enum class EventFlags : unsigned {
  none = 0,           ///< timing disabled, spin on synchronize (the default)
  blocking_sync = 1,  ///< CU_EVENT_BLOCKING_SYNC: synchronize() sleeps instead of spinning
  timing = 2,         ///< keep timestamps (recording costs ~8× more; off by default)
  interprocess = 4,   ///< CU_EVENT_INTERPROCESS: shareable through ipc_handle()
};
/// Both flag sets.
constexpr EventFlags operator|(EventFlags a, EventFlags b) noexcept {
  return static_cast<EventFlags>(static_cast<unsigned>(a) | static_cast<unsigned>(b));
}
/// The flags in both.
constexpr EventFlags operator&(EventFlags a, EventFlags b) noexcept {
  return static_cast<EventFlags>(static_cast<unsigned>(a) & static_cast<unsigned>(b));
}

namespace detail {
/// Shared ownership of a CUevent: the last Event referring to it destroys it.
struct EventOwner {
  explicit EventOwner(CUevent e) noexcept : event(e) {}
  ~EventOwner();  ///< destroys the CUevent (never throws)
  std::atomic<long> refs{1};
  std::atomic<bool> recorded{false};  ///< some copy recorded it (for elapsed-time errors)
  std::atomic<bool> named{false};     ///< named: its name is forgotten when it is destroyed
  CUevent event = nullptr;
  CUcontext context = nullptr;  ///< the context it was made in
  Context keep;                 ///< an owned context it was made in, kept alive
};
}  // namespace detail

/// A CUDA event. Copies share one CUevent, destroyed with the last copy.
///
/// Timing is disabled by default (CCCL and PyTorch do the same; CuPy does not): recording a
/// timing event costs the driver about eight times more.
class Event {
 public:
  /// Creates an event on the current device. Interprocess events must not keep timing.
  /// @throws Error (CUDA_ERROR_INVALID_VALUE) for interprocess|timing or bits outside
  /// EventFlags, before any driver call; Error on a driver failure.
  explicit Event(EventFlags flags = EventFlags::none);
  /// Creates an event on the current device named `name` (see set_name(); empty: none, and
  /// no NVTX call). @throws as Event(EventFlags).
  explicit Event(EventFlags flags, std::string_view name);
  /// Creates an event on `device`, in its primary context; see Event(EventFlags).
  explicit Event(Device device, EventFlags flags = EventFlags::none);
  /// Creates an event on `device`, in its primary context, named `name`; see
  /// Event(EventFlags, std::string_view).
  explicit Event(Device device, EventFlags flags, std::string_view name);
  /// Creates an event in `context` (any kind), which the event keeps alive when custream owns
  /// it. The calling thread's current context is left as it was. An event of a created
  /// context can be recorded only on streams of that context; events of a device's primary
  /// and green contexts mix freely. @throws as Event(EventFlags); Error
  /// (CUDA_ERROR_INVALID_CONTEXT) for an empty Context.
  explicit Event(const Context& context, EventFlags flags = EventFlags::none);
  /// Creates an event in `context` named `name`; see Event(const Context&, EventFlags) and
  /// Event(EventFlags, std::string_view).
  explicit Event(const Context& context, EventFlags flags, std::string_view name);

  /// Opens an event another process exported with ipc_handle(), on the current device.
  /// @throws Error on a driver failure.
  static Event open_ipc(const CUipcEventHandle& handle);

  /// Another reference to the same CUevent.
  Event(const Event& other) noexcept = default;
  /// Takes over `other`'s reference; `other` becomes empty.
  Event(Event&& other) noexcept = default;
  /// Refers to `other`'s CUevent instead (dropping this reference).
  Event& operator=(const Event& other) noexcept = default;
  /// Takes over `other`'s reference (dropping this one); `other` becomes empty.
  Event& operator=(Event&& other) noexcept = default;
  /// Drops this reference; destroys the CUevent with the last one.
  ~Event() = default;

  /// The CUevent.
  CUevent handle() const noexcept { return handle_; }
  /// The device it was created on.
  int device_id() const noexcept { return device_; }
  /// The context it was made in (null when empty).
  CUcontext context() const noexcept { return owner_ ? owner_.get()->context : nullptr; }
  /// The flags it was created with.
  EventFlags flags() const noexcept { return flags_; }

  /// Names the event for Nsight Systems: custream keeps `name` (name() reads it back, from
  /// every copy) and sends it to NVTX (nvtxNameCuEventA) when built with the toolkit's nvtx3
  /// (NvtxRange::enabled()). An empty `name` forgets the kept name. The name is forgotten when
  /// the CUevent is destroyed.
  /// @throws Error (CUDA_ERROR_INVALID_HANDLE, refused without calling the driver or NVTX) for
  /// an empty Event.
  void set_name(std::string_view name) const;
  /// The name set_name() or creation gave the event; empty when none.
  /// @throws std::bad_alloc.
  std::string name() const;

  /// Records the event on the current stream of its device. When that is a special handle
  /// (the null stream by default), it is recorded with the context the event was made in
  /// current, not whatever context is current in this thread. @throws Error on failure.
  void record();
  /// Records the event on `stream`. @throws Error on failure (naming the stream).
  void record(StreamRef stream) { stream.record(*this); }
  /// Waits until the recorded work is done. @throws Error on failure.
  void synchronize() const;
  /// True when the recorded work is done (or it was never recorded); false only on
  /// CUDA_ERROR_NOT_READY. @throws Error for any other error.
  bool done() const;

  /// The time between `start` and `end` (cuEventElapsedTime), in milliseconds.
  /// @throws Error saying which event had timing disabled, was never recorded, or is not
  /// done yet (CUDA_ERROR_NOT_READY), or the driver's error.
  static float elapsed_ms(const Event& start, const Event& end);
  /// elapsed_ms() as a std::chrono duration.
  static std::chrono::duration<float, std::milli> elapsed(const Event& start, const Event& end) {
    return std::chrono::duration<float, std::milli>(elapsed_ms(start, end));
  }

  /// The handle another process can open with open_ipc() (interprocess events only).
  /// @throws Error (CUDA_ERROR_INVALID_VALUE) when the event is not interprocess; Error on
  /// a driver failure.
  CUipcEventHandle ipc_handle() const;

  /// Same CUevent.
  friend bool operator==(const Event& a, const Event& b) noexcept { return a.handle_ == b.handle_; }
  /// Different CUevents.
  friend bool operator!=(const Event& a, const Event& b) noexcept { return !(a == b); }

 private:
  friend class StreamRef;
  friend class Stream;
  friend class Context;
  /// Opens or creates the event in `context` (null: `device`'s primary context) with
  /// `create` (given the address of the handle to fill) and owns it.
  template <typename Create>
  Event(int device, CUcontext context, EventFlags flags, Create create);
  /// A new event of `device` made in `context` (null: the device's primary context): what
  /// StreamRef::record() makes for a stream of any context.
  static Event in_context(int device, CUcontext context, EventFlags flags);
  void mark_recorded() const noexcept {
    detail::EventOwner* owner = owner_.get();
    if (owner != nullptr && !owner->recorded.load(std::memory_order_relaxed)) {
      owner->recorded.store(true, std::memory_order_relaxed);
    }
  }
  bool was_recorded() const noexcept {
    return owner_ && owner_.get()->recorded.load(std::memory_order_relaxed);
  }

  detail::MovedFrom<CUevent> handle_;
  int device_ = -1;
  EventFlags flags_ = EventFlags::none;
  detail::Shared<detail::EventOwner> owner_;
};

}  // namespace custream

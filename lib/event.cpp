// custream::Event.
//
// Design note — invariants:
//  1. An Event is {handle, device, flags, owner}; copies share the owner, whose last release
//     destroys the CUevent (cuEventDestroy needs no current context).
//  2. The owner (detail::EventOwner, event.hpp) remembers whether any copy recorded the
//     event, so elapsed-time errors can say "never recorded" instead of the driver's bare
//     CUDA_ERROR_INVALID_HANDLE.
//  3. An event belongs to the context it was made in (its device's primary context): the
//     driver refuses to record it on another context's stream. Event::record() with no stream
//     therefore records a special handle with that context current, never in whatever
//     context the calling thread has current.
//  4. The owner is allocated before the CUevent is created, so no failure leaks a handle.
#include "custream/event.hpp"

#include <atomic>
#include <cstdint>
#include <memory>

#include "context.hpp"
#include "custream/context_scope.hpp"
#include "custream/current_stream.hpp"
#include "custream/error.hpp"
#include "custream/stream.hpp"

namespace custream {
namespace detail {

void retain(EventOwner* owner) noexcept {
  if (owner != nullptr) owner->refs.fetch_add(1, std::memory_order_relaxed);
}

void release(EventOwner* owner) noexcept {
  if (owner == nullptr || owner->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  // Loaded and never unloaded; CUDA_ERROR_DEINITIALIZED at exit leaves nothing to do.
  report_release_failure(g_loaded.load(std::memory_order_acquire)->api.cuEventDestroy(owner->event),
                         "cuEventDestroy", "event", owner->event);
  delete owner;
}

}  // namespace detail

namespace {

std::string event_text(CUevent e, int device) {
  return "event " + detail::pointer_text(e) + " (device " + std::to_string(device) + ")";
}

unsigned driver_flags(EventFlags flags) {
  unsigned f = 0;
  if ((flags & EventFlags::blocking_sync) != EventFlags::none) f |= CU_EVENT_BLOCKING_SYNC;
  if ((flags & EventFlags::timing) == EventFlags::none) f |= CU_EVENT_DISABLE_TIMING;
  if ((flags & EventFlags::interprocess) != EventFlags::none) f |= CU_EVENT_INTERPROCESS;
  return f;
}

}  // namespace

namespace {
// Refuses unknown bits and interprocess|timing before any driver call; returns `flags`.
EventFlags checked(EventFlags flags) {
  constexpr unsigned kKnown = static_cast<unsigned>(EventFlags::blocking_sync | EventFlags::timing |
                                                    EventFlags::interprocess);
  if (const unsigned unknown = static_cast<unsigned>(flags) & ~kKnown; unknown != 0) {
    throw Error(
        CUDA_ERROR_INVALID_VALUE, "custream::Event", {},
        "unknown EventFlags bits " +
            detail::pointer_text(reinterpret_cast<void*>(static_cast<std::uintptr_t>(unknown))) +
            " (known: blocking_sync, timing, interprocess)");
  }
  if ((flags & EventFlags::interprocess) != EventFlags::none &&
      (flags & EventFlags::timing) != EventFlags::none) {
    throw Error(CUDA_ERROR_INVALID_VALUE, "custream::Event", {},
                "an interprocess event cannot keep timing; drop EventFlags::timing");
  }
  return flags;
}
}  // namespace

Event::Event(EventFlags flags) : Event((checked(flags), Device::current()), flags) {}

Event::Event(Device device, EventFlags flags) : device_(device.ordinal()), flags_(checked(flags)) {
  const detail::Loaded& l = detail::loaded();
  ContextScope scope(detail::primary_context(l, device_));
  auto owner = std::make_unique<detail::EventOwner>();  // before the handle: nothing to leak
  if (CUresult r = l.api.cuEventCreate(&handle_, driver_flags(flags)); r != CUDA_SUCCESS) {
    detail::throw_device_error(r, "cuEventCreate", device_);
  }
  owner_ = owner.release();
  owner_->event = handle_;
}

Event::Event(CUevent handle, int device, EventFlags flags, detail::EventOwner* owner) noexcept
    : handle_(handle), device_(device), flags_(flags), owner_(owner) {
  owner_->event = handle;
}

Event Event::open_ipc(const CUipcEventHandle& handle) {
  const detail::Loaded& l = detail::loaded();
  auto open = detail::require(l.api.cuIpcOpenEventHandle, "cuIpcOpenEventHandle");
  const int device = detail::current_device_ordinal(l);
  ContextScope scope(detail::primary_context(l, device));
  auto owner = std::make_unique<detail::EventOwner>();  // before the handle: nothing to leak
  CUevent event = nullptr;
  if (CUresult r = open(&event, handle); r != CUDA_SUCCESS) {
    detail::throw_device_error(r, "cuIpcOpenEventHandle", device);
  }
  return Event(event, device, EventFlags::interprocess, owner.release());
}

Event::Event(const Event& other) noexcept
    : handle_(other.handle_), device_(other.device_), flags_(other.flags_), owner_(other.owner_) {
  detail::retain(owner_);
}

Event::Event(Event&& other) noexcept
    : handle_(other.handle_), device_(other.device_), flags_(other.flags_), owner_(other.owner_) {
  other.owner_ = nullptr;
  other.handle_ = nullptr;
}

Event& Event::operator=(const Event& other) noexcept {
  if (this != &other) {
    detail::retain(other.owner_);
    detail::release(owner_);
    handle_ = other.handle_;
    device_ = other.device_;
    flags_ = other.flags_;
    owner_ = other.owner_;
  }
  return *this;
}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    detail::release(owner_);
    handle_ = other.handle_;
    device_ = other.device_;
    flags_ = other.flags_;
    owner_ = other.owner_;
    other.owner_ = nullptr;
    other.handle_ = nullptr;
  }
  return *this;
}

void Event::record() {
  const Stream stream = current_stream(device_);
  if (!stream.is_special()) return record(stream);
  // A special handle means "the current context", which may be another device's: record in
  // the context this event was made in (invariant 3).
  ContextScope scope(detail::primary_context(detail::loaded(), device_));
  record(stream);
}

void Event::record(const Stream& stream) { stream.record(*this); }

void Event::synchronize() const {
  if (CUresult r = detail::api().cuEventSynchronize(handle_); r != CUDA_SUCCESS) {
    detail::throw_error(r, "cuEventSynchronize", event_text(handle_, device_));
  }
}

bool Event::done() const {
  CUresult r = detail::api().cuEventQuery(handle_);
  if (r == CUDA_SUCCESS) return true;
  if (r == CUDA_ERROR_NOT_READY) return false;
  detail::throw_error(r, "cuEventQuery", event_text(handle_, device_));
}

float Event::elapsed_ms(const Event& start, const Event& end) {
  float ms = 0;
  CUresult r = detail::api().cuEventElapsedTime(&ms, start.handle_, end.handle_);
  if (r == CUDA_SUCCESS) return ms;
  std::string why;
  for (const Event* e : {&start, &end}) {
    const char* which = e == &start ? "start" : "end";
    if ((e->flags_ & EventFlags::timing) == EventFlags::none) {
      why += std::string(why.empty() ? "" : "; ") + "the " + which +
             " event has timing disabled (create it with EventFlags::timing)";
    } else if (!e->was_recorded()) {
      why += std::string(why.empty() ? "" : "; ") + "the " + which + " event was never recorded";
    }
  }
  if (why.empty() && r == CUDA_ERROR_NOT_READY) why = "an event has not completed yet";
  detail::throw_error(
      r, "cuEventElapsedTime",
      event_text(start.handle_, start.device_) + " -> " + event_text(end.handle_, end.device_),
      why);
}

CUipcEventHandle Event::ipc_handle() const {
  if ((flags_ & EventFlags::interprocess) == EventFlags::none) {
    throw Error(CUDA_ERROR_INVALID_VALUE, "cuIpcGetEventHandle", event_text(handle_, device_),
                "the event was not created with EventFlags::interprocess");
  }
  const detail::Loaded& l = detail::loaded();
  auto get = detail::require(l.api.cuIpcGetEventHandle, "cuIpcGetEventHandle");
  ContextScope scope(detail::primary_context(l, device_));  // the driver needs one current
  CUipcEventHandle handle{};
  if (CUresult r = get(&handle, handle_); r != CUDA_SUCCESS) {
    detail::throw_error(r, "cuIpcGetEventHandle", event_text(handle_, device_));
  }
  return handle;
}

}  // namespace custream

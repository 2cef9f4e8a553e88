// custream::Event. Design: docs/design/events.md.
#include "custream/event.hpp"

#include <atomic>
#include <cstdint>
#include <memory>

#include "context.hpp"
#include "custream/context_scope.hpp"
#include "custream/current_stream.hpp"
#include "custream/error.hpp"
#include "custream/stream.hpp"
#include "event.hpp"
#include "nvtx.hpp"
#include "shared.hpp"

namespace custream {
namespace detail {

EventOwner::~EventOwner() {
  if (event == nullptr) return;
  if (named.load(std::memory_order_relaxed)) forget_name(Named::event, event);
  release_call<&DriverApi::cuEventDestroy>("event", event, event);
}
template struct Refs<EventOwner>;

}  // namespace detail

using detail::DriverApi;

namespace {

detail::Subject event_subject(CUevent e, int device) {
  return {detail::Subject::What::event, e, device};
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
    detail::throw_error(
        CUDA_ERROR_INVALID_VALUE, "custream::Event", {},
        "unknown EventFlags bits " +
            detail::pointer_text(reinterpret_cast<void*>(static_cast<std::uintptr_t>(unknown))) +
            " (known: blocking_sync, timing, interprocess)");
  }
  if ((flags & EventFlags::interprocess) != EventFlags::none &&
      (flags & EventFlags::timing) != EventFlags::none) {
    detail::throw_error(CUDA_ERROR_INVALID_VALUE, "custream::Event", {},
                        "an interprocess event cannot keep timing; drop EventFlags::timing");
  }
  return flags;
}
}  // namespace

template <typename Create>
Event::Event(int device, CUcontext context, EventFlags flags, Create create)
    : device_(device), flags_(flags) {
  if (context == nullptr) context = detail::primary_context(detail::loaded(), device);
  ContextScope scope(context);
  auto owner = std::make_unique<detail::EventOwner>(nullptr);  // first: nothing to leak
  CUevent event = nullptr;
  create(&event);
  owner->event = event;
  owner->context = context;
  handle_ = event;
  owner_ = detail::Shared<detail::EventOwner>(owner.release());
  detail::forget_stale_name(detail::Named::event, event);  // streams.md, invariant 5
}

Event::Event(EventFlags flags) : Event(flags, std::string_view()) {}

Event::Event(EventFlags flags, std::string_view name)
    : Event((checked(flags), Device::current()), flags, name) {}

Event::Event(Device device, EventFlags flags) : Event(device, flags, std::string_view()) {}

Event::Event(Device device, EventFlags flags, std::string_view name)
    : Event(in_context(device.ordinal(), nullptr, checked(flags))) {
  if (!name.empty()) set_name(name);
}

Event::Event(const Context& context, EventFlags flags)
    : Event(context, flags, std::string_view()) {}

Event::Event(const Context& context, EventFlags flags, std::string_view name)
    : Event(in_context(detail::nonempty(context, "custream::Event").device_id(), context.handle(),
                       checked(flags))) {
  if (context.owned()) owner_.get()->keep = context;
  if (!name.empty()) set_name(name);
}

void Event::set_name(std::string_view name) const {
  if (!owner_) {
    detail::throw_error(
        CUDA_ERROR_INVALID_HANDLE, "custream::Event::set_name", {},
        "custream refused it without calling the driver or NVTX: the Event is empty "
        "(moved from)");
  }
  owner_.get()->named.store(true, std::memory_order_relaxed);  // forgotten when destroyed
  detail::set_name(detail::Named::event, handle_, name);
}

std::string Event::name() const {
  return owner_ ? detail::name_of(detail::Named::event, handle_) : std::string();
}

Event Event::in_context(int device, CUcontext context, EventFlags flags) {
  return Event(device, context, flags, [&](CUevent* event) {
    detail::call<&DriverApi::cuEventCreate>(detail::device_subject(device), event,
                                            driver_flags(flags));
  });
}

Event Event::open_ipc(const CUipcEventHandle& handle) {
  const detail::Loaded& l = detail::loaded();
  detail::entry<&DriverApi::cuIpcOpenEventHandle>(l.api);  // an older driver: say so first
  const int device = detail::current_device_ordinal(l);
  return Event(device, nullptr, EventFlags::interprocess, [&](CUevent* event) {
    detail::call<&DriverApi::cuIpcOpenEventHandle>(detail::device_subject(device), event, handle);
  });
}

void Event::record() {
  const Stream stream = current_stream(device_);
  if (!stream.is_special()) return record(stream);
  // A special handle means "the current context", which may be another device's or another
  // context of this device: record in the context this event was made in (invariant 3).
  ContextScope scope(owner_ ? owner_.get()->context
                            : detail::primary_context(detail::loaded(), device_));
  record(stream);
}

void Event::synchronize() const {
  detail::call<&DriverApi::cuEventSynchronize>(event_subject(handle_, device_), handle_);
}

bool Event::done() const {
  const CUresult r = detail::try_call<&DriverApi::cuEventQuery>(static_cast<CUevent>(handle_));
  if (r == CUDA_SUCCESS) return true;
  if (r == CUDA_ERROR_NOT_READY) return false;
  detail::fail<&DriverApi::cuEventQuery>(r, event_subject(handle_, device_));
}

float Event::elapsed_ms(const Event& start, const Event& end) {
  float ms = 0;
  const CUresult r = detail::try_call<&DriverApi::cuEventElapsedTime>(
      &ms, static_cast<CUevent>(start.handle_), static_cast<CUevent>(end.handle_));
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
  detail::throw_error(r, detail::EntryInfo<&DriverApi::cuEventElapsedTime>::name,
                      detail::subject_text(event_subject(start.handle_, start.device_)) + " -> " +
                          detail::subject_text(event_subject(end.handle_, end.device_)),
                      why);
}

CUipcEventHandle Event::ipc_handle() const {
  if ((flags_ & EventFlags::interprocess) == EventFlags::none) {
    detail::throw_error(CUDA_ERROR_INVALID_VALUE,
                        detail::EntryInfo<&DriverApi::cuIpcGetEventHandle>::name,
                        detail::subject_text(event_subject(handle_, device_)),
                        "the event was not created with EventFlags::interprocess");
  }
  const detail::Loaded& l = detail::loaded();
  detail::entry<&DriverApi::cuIpcGetEventHandle>(l.api);  // an older driver: say so first
  ContextScope scope(owner_ ? owner_.get()->context       // the driver needs one current
                            : detail::primary_context(l, device_));
  CUipcEventHandle handle{};
  detail::call<&DriverApi::cuIpcGetEventHandle>(event_subject(handle_, device_), &handle,
                                                static_cast<CUevent>(handle_));
  return handle;
}

namespace detail {
std::string event_text(const Event& event) {
  std::string text = subject_text(event_subject(event.handle(), event.device_id()));
  if (const CUcontext c = event.context(); c != nullptr) {
    const int known = known_primary_device(loaded(), c);
    text += " of context " + pointer_text(c) + (known >= 0 ? " (primary)" : "");
  }
  return text;
}
}  // namespace detail

}  // namespace custream

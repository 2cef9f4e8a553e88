// The members of custream::StreamRef and custream::Stream that forward to the features above
// streams: events (record, wait), capture, host functions and graphs. They live here, above
// both, so that streams (stream.cpp) depend on no feature: the one rule for members that
// cross entities (docs/design/streams.md, invariant 8).
#include <optional>
#include <string>

#include "context.hpp"
#include "custream/capture.hpp"
#include "custream/context_scope.hpp"
#include "custream/event.hpp"
#include "custream/graph.hpp"
#include "custream/host_function.hpp"
#include "event.hpp"
#include "stream.hpp"

namespace custream {

using detail::DriverApi;

// --- StreamRef: events ---

Event StreamRef::record() const {
  // In the stream's own context: an event of another context (e.g. the primary one, for a
  // stream of a created context) cannot be recorded on it (docs/design/events.md, 5).
  Event event = device_ >= 0 ? Event::in_context(device_, context_, EventFlags::none)
                             : Event(Device::current());
  record(event);
  return event;
}

void StreamRef::record_failed(const Event& event, CUresult first) const {
  std::optional<ContextScope> scope;
  CUresult r = first;
  if (detail::retry_special(first, is_special(), scope)) {
    r = detail::try_call<&DriverApi::cuEventRecord>(event.handle(), handle_);
  }
  if (r == CUDA_SUCCESS) return;
  std::string why = detail::event_text(event);
  if (device_ >= 0 && event.device_id() != device_) {
    why += ": the event belongs to device " + std::to_string(event.device_id()) +
           " and the stream to device " + std::to_string(device_) +
           "; record it on a stream of its own device (waiting across devices works)";
  } else if (context_ != nullptr && event.context() != nullptr && event.context() != context_) {
    why += "; the stream's context is " + detail::pointer_text(context_) + " (" +
           custream::to_string(context_kind_) +
           "): the event was made in another context, and a created context shares no events "
           "with others (make the event in the stream's context, e.g. with record())";
  }
  detail::throw_stream_error(r, detail::EntryInfo<&DriverApi::cuEventRecord>::name, *this,
                             std::move(why));
}

void StreamRef::wait(StreamRef other) const { wait_event(other.record()); }

// --- Stream: the CuPy-shaped members (custream/host_function.hpp, custream/capture.hpp) ---

void Stream::add_callback(CUstreamCallback fn, void* arg) const {
  custream::add_callback(*this, fn, arg);
}
void Stream::begin_capture() const { custream::begin_capture(*this); }
void Stream::begin_capture(CaptureMode mode) const { custream::begin_capture(*this, mode); }
Graph Stream::end_capture() const { return end_capture(InstantiateFlags::upload); }
Graph Stream::end_capture(InstantiateFlags flags) const {
  Graph graph = custream::end_capture(*this, flags);
  if (owner_ && owner_.get()->context) graph.keep_context(owner_.get()->context);
  return graph;
}

Event Stream::record() const {
  Event event = StreamRef::record();
  if (owner_ && owner_.get()->context) event.owner_.get()->keep = owner_.get()->context;
  return event;
}
bool Stream::is_capturing() const { return custream::is_capturing(*this); }
CaptureInfo Stream::capture_info() const noexcept { return custream::capture_info(*this); }
unsigned long long Stream::capture_id() const { return custream::capture_id(*this); }

}  // namespace custream

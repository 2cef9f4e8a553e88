// custream::StreamRef, custream::Stream and ExternalStream. Design: docs/design/streams.md.
#include "stream.hpp"

#include <memory>
#include <optional>
#include <ostream>

#include "context.hpp"
#include "custream/capture.hpp"
#include "custream/context_scope.hpp"
#include "custream/error.hpp"
#include "custream/event.hpp"
#include "custream/host_function.hpp"

namespace custream {
namespace detail {

// A StreamScope of this thread borrows this stream: the dropped reference moves into its
// entry instead (streams.md, invariant 4).
bool StreamOwner::take_release(StreamOwner* owner) noexcept {
  if (Stream* slots = t_current_streams) {
    for (int i = 0; i < t_current_count; ++i) {
      if (slots[i].owner_.get() == owner && slots[i].borrowed_) {
        slots[i].borrowed_ = false;
        return true;
      }
    }
  }
  return false;
}
template struct Refs<StreamOwner>;

namespace {
Subject stream_subject(const StreamRef& s) noexcept {
  return {Subject::What::stream, s.handle(), s.device_id()};
}

// Throws instead of a capture-unsafe query on a capturing stream (streams.md, invariant 3).
// For a special handle with no current context it asks under the current device's primary
// context, kept in `scope` for the query that follows.
void refuse_while_capturing(const StreamRef& s, const char* call,
                            std::optional<ContextScope>& scope) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  if (CUresult r =
          on_stream<&DriverApi::cuStreamIsCapturing>(s.is_special(), scope, s.handle(), &status);
      r != CUDA_SUCCESS) {
    throw_stream_error(r, "cuStreamIsCapturing", s);
  }
  if (status != CU_STREAM_CAPTURE_STATUS_NONE) {
    throw Error(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, call, subject_text(stream_subject(s)),
                "custream refused it without calling the driver: the stream is capturing, and "
                "the driver would refuse the query and invalidate the capture");
  }
}

// Calls the entry on `s` with the special-handle retry; throws naming it and the stream.
template <auto Field, typename... Args>
void on(const StreamRef& s, std::optional<ContextScope>& scope, Args... args) {
  if (CUresult r = on_stream<Field>(s.is_special(), scope, args...); r != CUDA_SUCCESS) {
    throw_stream_error(r, EntryInfo<Field>::name, s);
  }
}
template <auto Field, typename... Args>
void on(const StreamRef& s, Args... args) {
  std::optional<ContextScope> scope;
  on<Field>(s, scope, args...);
}
}  // namespace
}  // namespace detail

using detail::DriverApi;

// --- StreamRef ---

StreamRef StreamRef::wrap(CUstream handle, int device_id) {
  StreamRef ref(handle);
  ref.kind_ = Kind::external;
  if (device_id != -1) {  // an explicit id: in range first, before any inference
    const int count = detail::loaded().device_count;
    if (static_cast<unsigned>(device_id) >= static_cast<unsigned>(count)) {
      detail::throw_bad_ordinal(device_id, count, "custream::ExternalStream");
    }
  }
  if (ref.is_special()) {
    if (device_id == -1) return ref;
    throw Error(CUDA_ERROR_INVALID_VALUE, "custream::ExternalStream", ref.to_string(),
                "a special handle (0, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD) has no device of "
                "its own: it is the current context's at each use, so device " +
                    std::to_string(device_id) +
                    " cannot be checked or kept; pass -1, and make the device current "
                    "(custream::DeviceScope) where the stream is used");
  }
  // Infer once, capture-safely (streams.md, invariant 3).
  const DriverApi& api = detail::api();
  const detail::Subject subject{detail::Subject::What::stream, handle, device_id};
  CUgreenCtx green = nullptr;
  if (api.cuStreamGetCtx_v2 != nullptr) {
    if (CUresult r = api.cuStreamGetCtx_v2(handle, &ref.context_, &green); r != CUDA_SUCCESS) {
      detail::fail<&DriverApi::cuStreamGetCtx_v2>(r, subject);
    }
  } else if (CUresult r = api.cuStreamGetCtx(handle, &ref.context_); r != CUDA_SUCCESS) {
    detail::fail<&DriverApi::cuStreamGetCtx>(r, subject);
  }
  // For a green-context stream the driver names the device's primary context and the green
  // context: keep the green context's own CUcontext, the one to make current for it.
  ref.device_ = detail::device_of_context(ref.context_);
  if (green != nullptr) {
    detail::call<&DriverApi::cuCtxFromGreenCtx>(subject, &ref.context_, green);
    ref.context_kind_ = ContextKind::green;
  } else {
    ref.context_kind_ = detail::context_kind(detail::loaded(), ref.context_, ref.device_);
  }
  if (device_id != -1 && device_id != ref.device_) {
    throw Error(CUDA_ERROR_INVALID_DEVICE, "custream::ExternalStream",
                "stream " + detail::pointer_text(handle),
                "it was given device " + std::to_string(device_id) + " but belongs to device " +
                    std::to_string(ref.device_) + " (cuStreamGetCtx)");
  }
  return ref;
}

CUgreenCtx StreamRef::green_context() const {
  if (context_kind_ != ContextKind::green) return nullptr;
  CUcontext context = nullptr;
  CUgreenCtx green = nullptr;
  detail::on<&DriverApi::cuStreamGetCtx_v2>(*this, handle_, &context, &green);
  return green;
}

int StreamRef::priority() const {
  int value = 0;
  detail::on<&DriverApi::cuStreamGetPriority>(*this, handle_, &value);
  return value;
}

bool StreamRef::non_blocking() const {
  if (kind_ == Kind::created) return non_blocking_;
  std::optional<ContextScope> scope;
  detail::refuse_while_capturing(*this, "custream::StreamRef::non_blocking", scope);
  unsigned flags = 0;
  detail::on<&DriverApi::cuStreamGetFlags>(*this, scope, handle_, &flags);
  return (flags & CU_STREAM_NON_BLOCKING) != 0;
}

unsigned long long StreamRef::id() const {
  detail::entry<&DriverApi::cuStreamGetId>(detail::api());  // an older driver: say so first
  std::optional<ContextScope> scope;
  detail::refuse_while_capturing(*this, "custream::StreamRef::id", scope);
  unsigned long long value = 0;
  detail::on<&DriverApi::cuStreamGetId>(*this, scope, handle_, &value);
  return value;
}

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
    r = detail::api().cuEventRecord(event.handle(), handle_);
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
  detail::throw_stream_error(r, "cuEventRecord", *this, std::move(why));
}

void StreamRef::wait(StreamRef other) const { wait_event(other.record()); }

void StreamRef::memset(CUdeviceptr dst, unsigned char value, std::size_t count) const {
  detail::on<&DriverApi::cuMemsetD8Async>(*this, dst, value, count, handle_);
}

void StreamRef::memset32(CUdeviceptr dst, std::uint32_t value, std::size_t count) const {
  detail::on<&DriverApi::cuMemsetD32Async>(*this, dst, static_cast<unsigned>(value), count,
                                           handle_);
}

void StreamRef::copy(CUdeviceptr dst, CUdeviceptr src, std::size_t bytes) const {
  detail::on<&DriverApi::cuMemcpyAsync>(*this, dst, src, bytes, handle_);
}

void StreamRef::copy(CUdeviceptr dst, const void* src, std::size_t bytes) const {
  detail::on<&DriverApi::cuMemcpyHtoDAsync>(*this, dst, src, bytes, handle_);
}

void StreamRef::copy(void* dst, CUdeviceptr src, std::size_t bytes) const {
  detail::on<&DriverApi::cuMemcpyDtoHAsync>(*this, dst, src, bytes, handle_);
}

std::string StreamRef::to_string() const {
  return std::string(kind_ == Kind::external ? "<ExternalStream " : "<Stream ") +
         detail::pointer_text(handle_) + " (device " + std::to_string(device_) + ")>";
}

std::ostream& operator<<(std::ostream& out, const StreamRef& stream) {
  return out << stream.to_string();
}

// --- Stream ---

Stream::Stream(StreamFlags flags, int priority) : Stream(flags, priority, {}) {}

Stream::Stream(StreamFlags flags, int priority, std::string_view name)
    : Stream(Device::current(), flags, priority, name) {}

Stream::Stream(Device device, StreamFlags flags, int priority)
    : Stream(device, flags, priority, {}) {}

Stream::Stream(Device device, StreamFlags flags, int priority, std::string_view name)
    : Stream(device.primary_context(), flags, priority, name) {}

Stream::Stream(const Context& context, StreamFlags flags, int priority)
    : Stream(context, flags, priority, {}) {}

Stream::Stream(const Context& context, StreamFlags stream_flags, int priority,
               std::string_view name) {
  if ((static_cast<unsigned>(stream_flags) & ~static_cast<unsigned>(StreamFlags::non_blocking)) !=
      0) {
    throw Error(CUDA_ERROR_INVALID_VALUE, "custream::Stream", {},
                "unknown StreamFlags bits " + std::to_string(static_cast<unsigned>(stream_flags)) +
                    " (known: non_blocking)");
  }
  detail::nonempty(context, "custream::Stream");
  const bool green = context.kind() == ContextKind::green;
  const bool non_blocking = green || stream_flags == StreamFlags::non_blocking;
  const unsigned flags = non_blocking ? CU_STREAM_NON_BLOCKING : CU_STREAM_DEFAULT;
  const int ordinal = context.device_id();
  const detail::Subject subject{detail::Subject::What::context, context.handle(), ordinal};
  auto owner = std::make_unique<detail::StreamOwner>();  // first: a failure leaks no handle
  CUstream handle = nullptr;
  if (green) {  // no context switch: the driver takes the green context
    if (CUresult r = detail::try_call<&DriverApi::cuGreenCtxStreamCreate>(
            &handle, context.green_handle(), flags, priority);
        r != CUDA_SUCCESS) {
      detail::fail<&DriverApi::cuGreenCtxStreamCreate>(r, subject,
                                                       "green context, flags " +
                                                           std::to_string(flags) + ", priority " +
                                                           std::to_string(priority));
    }
  } else {
    ContextScope scope(context.handle());
    if (CUresult r =
            detail::try_call<&DriverApi::cuStreamCreateWithPriority>(&handle, flags, priority);
        r != CUDA_SUCCESS) {
      detail::fail<&DriverApi::cuStreamCreateWithPriority>(
          r, subject,
          std::string(custream::to_string(context.kind())) + " context, flags " +
              std::to_string(flags) + ", priority " + std::to_string(priority));
    }
  }
  owner->destroy = handle;
  if (context.owned()) owner->context = context;
  owner_ = detail::Shared<detail::StreamOwner>(owner.release());
  StreamRef::operator=(
      StreamRef(handle, context.handle(), ordinal, Kind::created, non_blocking, context.kind()));
  detail::forget_stale_name(detail::Named::stream, handle);  // streams.md, invariant 5
  if (!name.empty()) set_name(name);
}

void Stream::set_name(std::string_view name) const {
  if (is_special()) {
    throw Error(CUDA_ERROR_INVALID_VALUE, "custream::Stream::set_name", to_string(),
                "custream refused it without calling the driver or NVTX: a special handle (0, "
                "CU_STREAM_LEGACY, CU_STREAM_PER_THREAD) is no one stream; name a stream "
                "custream created or wrapped");
  }
  // Flagged first: a created stream's name is forgotten when it is destroyed (streams.md,
  // invariant 5).
  if (owner_ && owner_.get()->destroy != nullptr) {
    owner_.get()->named.store(true, std::memory_order_relaxed);
  }
  detail::set_name(detail::Named::stream, handle(), name);
}

std::string Stream::name() const {
  if (is_special()) return {};
  return detail::name_of(detail::Named::stream, handle());
}

void Stream::keep(std::shared_ptr<void> keep_alive) {
  auto owner = std::make_unique<detail::StreamOwner>();
  owner->keep_alive = std::move(keep_alive);
  owner_ = detail::Shared<detail::StreamOwner>(owner.release());
}

int Stream::device_for_use_slow(CUresult r, CUcontext context, const char* call) const {
  if (r != CUDA_SUCCESS) detail::throw_error(r, "cuCtxGetCurrent");
  const int current = detail::device_of_current(detail::loaded(), context);
  if (is_special() || current == device_id()) return current;
  throw Error(CUDA_ERROR_INVALID_DEVICE, call, detail::subject_text(detail::stream_subject(*this)),
              "the stream belongs to device " + std::to_string(device_id()) + " but device " +
                  std::to_string(current) + " is current");
}

const Stream& Stream::use() const {
  detail::current_slot(device_for_use("custream::Stream::use")) = *this;
  return *this;
}

// The forwarders of the CuPy-shaped members (custream/host_function.hpp, custream/capture.hpp).

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

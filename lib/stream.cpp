// custream::StreamRef, custream::Stream and ExternalStream: the streams themselves. Their
// members that forward to features above streams (events, capture, host functions, graphs)
// are in stream_features.cpp; this file includes no feature header. Design:
// docs/design/streams.md.
#include "stream.hpp"

#include <memory>
#include <optional>
#include <ostream>

#include "context.hpp"
#include "custream/context_scope.hpp"
#include "custream/error.hpp"

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
// Throws instead of a capture-unsafe query on a capturing stream (streams.md, invariant 3).
// For a special handle with no current context it asks under the current device's primary
// context, kept in `scope` for the query that follows.
void refuse_while_capturing(const StreamRef& s, const char* call,
                            std::optional<ContextScope>& scope) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  if (CUresult r =
          on_stream<&DriverApi::cuStreamIsCapturing>(s.is_special(), scope, s.handle(), &status);
      r != CUDA_SUCCESS) {
    throw_stream_error(r, EntryInfo<&DriverApi::cuStreamIsCapturing>::name, s);
  }
  if (status != CU_STREAM_CAPTURE_STATUS_NONE) {
    throw_error(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, call, subject_text(stream_subject(s)),
                "custream refused it without calling the driver: the stream is capturing, and "
                "the driver would refuse the query and invalidate the capture");
  }
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
    detail::throw_error(
        CUDA_ERROR_INVALID_VALUE, "custream::ExternalStream", ref.to_string(),
        "a special handle (0, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD) has no device of "
        "its own: it is the current context's at each use, so device " +
            std::to_string(device_id) +
            " cannot be checked or kept; pass -1, and make the device current "
            "(custream::DeviceScope) where the stream is used");
  }
  // Infer once, capture-safely (streams.md, invariant 3).
  const detail::Subject subject{detail::Subject::What::stream, handle, device_id};
  CUgreenCtx green = nullptr;
  if (detail::api().cuStreamGetCtx_v2 != nullptr) {
    detail::call<&DriverApi::cuStreamGetCtx_v2>(subject, handle, &ref.context_, &green);
  } else {
    detail::call<&DriverApi::cuStreamGetCtx>(subject, handle, &ref.context_);
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
    detail::throw_error(CUDA_ERROR_INVALID_DEVICE, "custream::ExternalStream",
                        "stream " + detail::pointer_text(handle),
                        "it was given device " + std::to_string(device_id) +
                            " but belongs to device " + std::to_string(ref.device_) + " (" +
                            detail::EntryInfo<&DriverApi::cuStreamGetCtx>::name + ")");
  }
  return ref;
}

CUgreenCtx StreamRef::green_context() const {
  if (context_kind_ != ContextKind::green) return nullptr;
  CUcontext context = nullptr;
  CUgreenCtx green = nullptr;
  detail::stream_call<&DriverApi::cuStreamGetCtx_v2>(*this, handle_, &context, &green);
  return green;
}

int StreamRef::priority() const {
  int value = 0;
  detail::stream_call<&DriverApi::cuStreamGetPriority>(*this, handle_, &value);
  return value;
}

bool StreamRef::non_blocking() const {
  if (kind_ == Kind::created) return non_blocking_;
  std::optional<ContextScope> scope;
  detail::refuse_while_capturing(*this, "custream::StreamRef::non_blocking", scope);
  unsigned flags = 0;
  detail::stream_call<&DriverApi::cuStreamGetFlags>(*this, scope, handle_, &flags);
  return (flags & CU_STREAM_NON_BLOCKING) != 0;
}

unsigned long long StreamRef::id() const {
  detail::entry<&DriverApi::cuStreamGetId>(detail::api());  // an older driver: say so first
  std::optional<ContextScope> scope;
  detail::refuse_while_capturing(*this, "custream::StreamRef::id", scope);
  unsigned long long value = 0;
  detail::stream_call<&DriverApi::cuStreamGetId>(*this, scope, handle_, &value);
  return value;
}

void StreamRef::memset(CUdeviceptr dst, unsigned char value, std::size_t count) const {
  detail::stream_call<&DriverApi::cuMemsetD8Async>(*this, dst, value, count, handle_);
}

void StreamRef::memset32(CUdeviceptr dst, std::uint32_t value, std::size_t count) const {
  detail::stream_call<&DriverApi::cuMemsetD32Async>(*this, dst, static_cast<unsigned>(value), count,
                                                    handle_);
}

void StreamRef::copy(CUdeviceptr dst, CUdeviceptr src, std::size_t bytes) const {
  detail::stream_call<&DriverApi::cuMemcpyAsync>(*this, dst, src, bytes, handle_);
}

void StreamRef::copy(CUdeviceptr dst, const void* src, std::size_t bytes) const {
  detail::stream_call<&DriverApi::cuMemcpyHtoDAsync>(*this, dst, src, bytes, handle_);
}

void StreamRef::copy(void* dst, CUdeviceptr src, std::size_t bytes) const {
  detail::stream_call<&DriverApi::cuMemcpyDtoHAsync>(*this, dst, src, bytes, handle_);
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
    detail::throw_error(CUDA_ERROR_INVALID_VALUE, "custream::Stream", {},
                        "unknown StreamFlags bits " +
                            std::to_string(static_cast<unsigned>(stream_flags)) +
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
    detail::throw_error(
        CUDA_ERROR_INVALID_VALUE, "custream::Stream::set_name", to_string(),
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
  if (r != CUDA_SUCCESS) detail::fail<&DriverApi::cuCtxGetCurrent>(r, {});
  const int current = detail::device_of_current(detail::loaded(), context);
  if (is_special() || current == device_id()) return current;
  detail::throw_error(CUDA_ERROR_INVALID_DEVICE, call,
                      detail::subject_text(detail::stream_subject(*this)),
                      "the stream belongs to device " + std::to_string(device_id()) +
                          " but device " + std::to_string(current) + " is current");
}

const Stream& Stream::use() const {
  detail::current_slot(device_for_use("custream::Stream::use")) = *this;
  return *this;
}

}  // namespace custream

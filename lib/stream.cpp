// custream::Stream and ExternalStream. Invariants: stream.hpp.
#include "stream.hpp"

#include <memory>
#include <ostream>

#include "context.hpp"
#include "custream/context_scope.hpp"
#include "custream/error.hpp"
#include "custream/event.hpp"
#include "custream/external_stream.hpp"

namespace custream {
namespace detail {

void retain(StreamOwner* owner) noexcept {
  if (owner != nullptr) owner->refs.fetch_add(1, std::memory_order_relaxed);
}

void release(StreamOwner* owner) noexcept {
  if (owner == nullptr) return;
  // A StreamScope of this thread borrows this stream: the reference moves there (invariant 4).
  if (Stream* slots = t_current_streams) {
    for (int i = 0; i < t_current_count; ++i) {
      if (slots[i].owner_ == owner && slots[i].borrowed_) {
        slots[i].borrowed_ = false;
        return;
      }
    }
  }
  if (owner->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  if (owner->destroy != nullptr) {
    // The driver is loaded (the stream was created through it) and never unloaded. A failure
    // goes to the release-error handler, except CUDA_ERROR_DEINITIALIZED at exit (invariant 2).
    report_release_failure(
        g_loaded.load(std::memory_order_acquire)->api.cuStreamDestroy(owner->destroy),
        "cuStreamDestroy", "stream", owner->destroy);
  }
  delete owner;
}

}  // namespace detail

namespace {

constexpr const char* kind_name(Stream::Kind kind) {
  return kind == Stream::Kind::external ? "ExternalStream" : "Stream";
}

}  // namespace

Stream::Stream(bool non_blocking, int priority)
    : Stream(Device::current(), non_blocking, priority) {}

Stream::Stream(Device device, bool non_blocking, int priority)
    : device_(device.ordinal()), kind_(Kind::created), non_blocking_(non_blocking) {
  const detail::Loaded& l = detail::loaded();
  context_ = detail::primary_context(l, device_);
  ContextScope scope(context_);
  const unsigned flags = non_blocking ? CU_STREAM_NON_BLOCKING : CU_STREAM_DEFAULT;
  auto owner = std::make_unique<detail::StreamOwner>();  // first: a failure leaks no handle
  if (CUresult r = l.api.cuStreamCreateWithPriority(&handle_, flags, priority); r != CUDA_SUCCESS) {
    detail::throw_error(
        r, "cuStreamCreateWithPriority", "device " + std::to_string(device_),
        "flags " + std::to_string(flags) + ", priority " + std::to_string(priority));
  }
  owner_ = owner.release();
  owner_->destroy = handle_;
}

Stream::Stream(CUstream handle, int device_id, std::shared_ptr<void> keep_alive)
    : handle_(handle), kind_(Kind::external) {
  if (device_id != -1) {  // an explicit id: in range first, before any inference
    const int count = detail::loaded().device_count;
    if (static_cast<unsigned>(device_id) >= static_cast<unsigned>(count)) {
      detail::throw_bad_ordinal(device_id, count, "custream::ExternalStream");
    }
  }
  if (is_special() && device_id != -1) {
    throw Error(CUDA_ERROR_INVALID_VALUE, "custream::ExternalStream", to_string(),
                "a special handle (0, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD) has no device of "
                "its own: it is the current context's at each use, so device " +
                    std::to_string(device_id) +
                    " cannot be checked or kept; pass -1, and make the device current "
                    "(custream::DeviceScope) where the stream is used");
  }
  if (!is_special()) {
    // Infer once, capture-safely (invariant 3).
    const detail::Loaded& l = detail::loaded();
    CUresult r;
    if (l.api.cuStreamGetCtx_v2 != nullptr) {
      CUgreenCtx green = nullptr;
      r = l.api.cuStreamGetCtx_v2(handle, &context_, &green);
    } else {
      r = l.api.cuStreamGetCtx(handle, &context_);
    }
    if (r != CUDA_SUCCESS) detail::throw_stream_error(r, "cuStreamGetCtx", handle, device_id);
    device_ = detail::device_of_context(context_);
    if (device_id != -1 && device_id != device_) {
      throw Error(CUDA_ERROR_INVALID_DEVICE, "custream::ExternalStream",
                  "stream " + detail::pointer_text(handle),
                  "it was given device " + std::to_string(device_id) + " but belongs to device " +
                      std::to_string(device_) + " (cuStreamGetCtx)");
    }
  }
  if (keep_alive) {
    owner_ = new detail::StreamOwner;
    owner_->keep_alive = std::move(keep_alive);
  }
}

template <typename Call>
CUresult Stream::on_stream(Call call) const {
  std::optional<ContextScope> scope;
  return detail::retry_on_current_device(call(), is_special(), scope, call);
}

CUresult Stream::retry_or_fail(CUresult first, Op op, CUevent event) const {
  const detail::DriverApi& api = detail::api();
  CUstream h = handle_;
  auto call = [&] {
    switch (op) {
      case Op::synchronize:
        return api.cuStreamSynchronize(h);
      case Op::query:
        return api.cuStreamQuery(h);
      case Op::record:
        return api.cuEventRecord(event, h);
      case Op::wait_event:
        break;
    }
    return api.cuStreamWaitEvent(h, event, 0);
  };
  std::optional<ContextScope> scope;
  const CUresult r = detail::retry_on_current_device(first, is_special(), scope, call);
  if (r == CUDA_SUCCESS || (r == CUDA_ERROR_NOT_READY && op == Op::query)) return r;
  constexpr const char* kNames[] = {"cuStreamSynchronize", "cuStreamQuery", "cuEventRecord",
                                    "cuStreamWaitEvent"};
  fail(r, kNames[static_cast<int>(op)]);
}

void Stream::fail(CUresult result, const char* call) const {
  std::string detail;
  if (result == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED ||
      result == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT) {
    detail =
        "the call is not allowed while the stream (or the legacy stream it depends on) "
        "captures; the driver has now invalidated that capture";
  }
  detail::throw_error(result, call, to_string(), std::move(detail));
}

int Stream::priority() const {
  int value = 0;
  CUstream h = handle_;
  const auto& api = detail::api();
  if (CUresult r = on_stream([&] { return api.cuStreamGetPriority(h, &value); });
      r != CUDA_SUCCESS) {
    fail(r, "cuStreamGetPriority");
  }
  return value;
}

namespace {
// Throws instead of a capture-unsafe query on a capturing stream (invariant 3), and unless `s`
// is known not to be capturing. For a special handle with no current context it asks under the
// current device's primary context, kept in `scope` for the query that follows.
void refuse_while_capturing(const Stream& s, const char* call, std::optional<ContextScope>& scope) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  const detail::DriverApi& api = detail::api();
  const CUstream h = s.handle();
  auto query = [&] { return api.cuStreamIsCapturing(h, &status); };
  const CUresult r = detail::retry_on_current_device(query(), s.is_special(), scope, query);
  if (r != CUDA_SUCCESS) detail::throw_error(r, "cuStreamIsCapturing", s.to_string());
  if (status != CU_STREAM_CAPTURE_STATUS_NONE) {
    throw Error(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, call, s.to_string(),
                "custream refused it: the stream is capturing, and the driver would invalidate "
                "the capture");
  }
}
}  // namespace

bool Stream::non_blocking() const {
  if (kind_ == Kind::created) return non_blocking_;
  std::optional<ContextScope> scope;
  refuse_while_capturing(*this, "cuStreamGetFlags", scope);
  unsigned flags = 0;
  CUstream h = handle_;
  const auto& api = detail::api();
  if (CUresult r = on_stream([&] { return api.cuStreamGetFlags(h, &flags); }); r != CUDA_SUCCESS) {
    fail(r, "cuStreamGetFlags");
  }
  return (flags & CU_STREAM_NON_BLOCKING) != 0;
}

unsigned long long Stream::id() const {
  auto get_id = detail::require(detail::api().cuStreamGetId, "cuStreamGetId");
  std::optional<ContextScope> scope;
  refuse_while_capturing(*this, "cuStreamGetId", scope);
  unsigned long long value = 0;
  CUstream h = handle_;
  if (CUresult r = on_stream([&] { return get_id(h, &value); }); r != CUDA_SUCCESS) {
    fail(r, "cuStreamGetId");
  }
  return value;
}

Event Stream::record() const {
  Event event(device_ >= 0 ? Device(device_) : Device::current());
  record(event);
  return event;
}

void Stream::wait(const Stream& other) const { wait_event(other.record()); }

void Stream::memset(CUdeviceptr dst, unsigned char value, std::size_t count) const {
  CUstream h = handle_;
  const auto& api = detail::api();
  if (CUresult r = on_stream([&] { return api.cuMemsetD8Async(dst, value, count, h); });
      r != CUDA_SUCCESS) {
    fail(r, "cuMemsetD8Async");
  }
}

void Stream::memset32(CUdeviceptr dst, std::uint32_t value, std::size_t count) const {
  CUstream h = handle_;
  const auto& api = detail::api();
  if (CUresult r = on_stream([&] { return api.cuMemsetD32Async(dst, value, count, h); });
      r != CUDA_SUCCESS) {
    fail(r, "cuMemsetD32Async");
  }
}

void Stream::copy(CUdeviceptr dst, CUdeviceptr src, std::size_t bytes) const {
  CUstream h = handle_;
  const auto& api = detail::api();
  if (CUresult r = on_stream([&] { return api.cuMemcpyAsync(dst, src, bytes, h); });
      r != CUDA_SUCCESS) {
    fail(r, "cuMemcpyAsync");
  }
}

void Stream::copy(CUdeviceptr dst, const void* src, std::size_t bytes) const {
  CUstream h = handle_;
  const auto& api = detail::api();
  if (CUresult r = on_stream([&] { return api.cuMemcpyHtoDAsync(dst, src, bytes, h); });
      r != CUDA_SUCCESS) {
    fail(r, "cuMemcpyHtoDAsync");
  }
}

void Stream::copy(void* dst, CUdeviceptr src, std::size_t bytes) const {
  CUstream h = handle_;
  const auto& api = detail::api();
  if (CUresult r = on_stream([&] { return api.cuMemcpyDtoHAsync(dst, src, bytes, h); });
      r != CUDA_SUCCESS) {
    fail(r, "cuMemcpyDtoHAsync");
  }
}

std::string Stream::to_string() const {
  return std::string("<") + kind_name(kind_) + " " + detail::pointer_text(handle_) + " (device " +
         std::to_string(device_) + ")>";
}

std::ostream& operator<<(std::ostream& out, const Stream& stream) {
  return out << stream.to_string();
}

}  // namespace custream

/// @file
/// custream::StreamRef: a non-owning view of a CUDA stream, with the one-call operations.
#pragma once

#include "custream/detail/cuda.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "custream/context.hpp"
#include "custream/detail/call.hpp"

namespace custream {

class Event;
class StreamRef;

namespace detail {
template <auto Field, typename... Args>
CUresult stream_call_failed(const StreamRef& s, CUresult first, CUresult allowed, Args... args);
template <auto Field, typename... Args>
void stream_call(const StreamRef& s, Args... args);
template <auto Field, typename... Args>
void stream_call(const StreamRef& s, std::optional<ContextScope>& scope, Args... args);

/// True for a non-owning stream view of another library with the shape of CCCL's
/// `cuda::stream_ref` (CUDA 13's <cuda/stream_ref>): a class whose `value_type` is the stream
/// handle, made from a handle, handing it back with `get()`; never a custream type.
template <typename T, typename = void>
inline constexpr bool is_foreign_stream_view = false;
template <typename T>
inline constexpr bool is_foreign_stream_view<
    T, std::void_t<typename T::value_type, decltype(std::declval<const T&>().get())>> =
    std::is_class_v<T>&& std::is_same_v<typename T::value_type, CUstream>&&
        std::is_same_v<decltype(std::declval<const T&>().get()), CUstream>&&
            std::is_nothrow_constructible_v<T, CUstream> &&
    !std::is_base_of_v<StreamRef, T>;
}  // namespace detail

/// A non-owning view of a CUDA stream: its handle, context, device and kind. Trivially
/// copyable (three words); copying it never keeps the stream alive, so it must not outlive
/// the stream it views. Every custream::Stream is a StreamRef (Stream = ownership + StreamRef),
/// so functions that only use a stream take a StreamRef and accept a Stream as it is.
///
/// `device_id()` is the stream's device; it is -1 for the special handles 0 (null),
/// CU_STREAM_LEGACY and CU_STREAM_PER_THREAD, whose device is whatever context is current
/// when they are used.
///
/// The hot paths (synchronize, done, record, wait_event) issue exactly one driver call and
/// switch no context. For a special handle used with no context current, a call the driver
/// refuses with CUDA_ERROR_INVALID_CONTEXT is made once more with the current device's
/// primary context current (that failure is the only case that pays for it).
class StreamRef {
 public:
  /// What a stream handle is.
  enum class Kind : std::uint8_t {
    special,   ///< 0, CU_STREAM_LEGACY or CU_STREAM_PER_THREAD: never destroyed, device -1
    created,   ///< created (and owned) by a custream::Stream
    external,  ///< a foreign stream, never destroyed by custream (ExternalStream, wrap())
  };

  /// The null stream (handle 0): the legacy default stream of the current context.
  constexpr StreamRef() noexcept = default;
  /// The null stream (0). Its device is the current one at each use.
  static StreamRef null() noexcept { return StreamRef(); }
  /// CU_STREAM_LEGACY (1), the legacy default stream.
  static StreamRef legacy() noexcept { return StreamRef(CU_STREAM_LEGACY); }
  /// CU_STREAM_PER_THREAD (2), the calling thread's per-thread default stream.
  static StreamRef per_thread() noexcept { return StreamRef(CU_STREAM_PER_THREAD); }

  /// A view of a stream somebody else created, with ExternalStream's rules: with
  /// `device_id == -1` the device and context are inferred once with cuStreamGetCtx (safe
  /// while the stream captures); an explicit id must be a device ordinal and is checked
  /// against the inferred device; the special handles 0, 1 and 2 take no explicit id.
  /// @throws Error as ExternalStream's constructor.
  static StreamRef wrap(CUstream handle, int device_id = -1);

  /// A view of the stream that CCCL's `cuda::stream_ref` (or a view type of the same shape)
  /// refers to: wrap(view.get(), device_id). @throws as wrap(CUstream, int).
  template <typename View, typename = std::enable_if_t<detail::is_foreign_stream_view<View>>>
  static StreamRef wrap(const View& view, int device_id = -1) {
    return wrap(view.get(), device_id);
  }

  /// The same stream as CCCL's `cuda::stream_ref` (CUDA 13's <cuda/stream_ref>) or a view
  /// type of the same shape, so a custream stream can be passed where one is taken. Like this
  /// view, it owns nothing.
  template <typename View, typename = std::enable_if_t<detail::is_foreign_stream_view<View>>>
  operator View() const noexcept {  // NOLINT: converts implicitly, as cudaStream_t does
    return View(handle_);
  }

  /// The CUstream (also usable as a cudaStream_t).
  CUstream handle() const noexcept { return handle_; }
  /// The device ordinal, or -1 for a special handle.
  int device_id() const noexcept { return device_; }
  /// The stream's context, or null for a special handle. For a stream of a green context it
  /// is the CUcontext the driver converts the green context to (cuCtxFromGreenCtx), the one
  /// custream makes current for work in that context.
  CUcontext context() const noexcept { return context_; }
  /// What kind of context the stream belongs to (primary for a special handle). Known without
  /// a driver call: from the Context a custream::Stream was created in, or inferred once when
  /// a foreign stream is wrapped.
  ContextKind context_kind() const noexcept { return context_kind_; }
  /// The stream's green context (cuStreamGetCtx_v2, capture-safe), or null when the stream is
  /// not of a green context (then without a driver call).
  /// @throws Error on a driver failure.
  CUgreenCtx green_context() const;
  /// What the handle is.
  Kind kind() const noexcept { return kind_; }
  /// True for the special handles 0, 1 and 2 (also when wrapped).
  bool is_special() const noexcept {
    return reinterpret_cast<std::uintptr_t>(handle_) <=
           reinterpret_cast<std::uintptr_t>(CU_STREAM_PER_THREAD);
  }

  /// The priority, as clamped by the driver (cuStreamGetPriority; capture-safe).
  /// @throws Error on a driver failure.
  int priority() const;
  /// True when created with CU_STREAM_NON_BLOCKING. Known without a driver call for streams
  /// a custream::Stream created; for others cuStreamGetFlags is asked, but never while the
  /// stream captures (the driver would invalidate the capture): that throws instead.
  /// @throws Error on a driver failure or while a foreign stream captures.
  bool non_blocking() const;
  /// The driver's unique stream id (cuStreamGetId, driver >= 12.0); refused like
  /// non_blocking() while the stream captures.
  /// @throws Error on a driver failure, while capturing, or with an older driver.
  unsigned long long id() const;

  /// Waits until all work on the stream is done (cuStreamSynchronize).
  /// @throws Error naming the stream and device on failure.
  void synchronize() const {
    detail::stream_call<&detail::DriverApi::cuStreamSynchronize>(*this, handle_);
  }
  /// True when all work is done; false only on CUDA_ERROR_NOT_READY.
  /// @throws Error for any other error (a dead GPU does not look busy forever).
  bool done() const {
    const CUresult r = detail::api().cuStreamQuery(handle_);  // raw: hot path, one call
    if (r == CUDA_SUCCESS) return true;
    if (r == CUDA_ERROR_NOT_READY) return false;
    return detail::stream_call_failed<&detail::DriverApi::cuStreamQuery>(
               *this, r, CUDA_ERROR_NOT_READY, handle_) == CUDA_SUCCESS;
  }

  /// Records a new event (timing disabled) on the stream and returns it. The event is made in
  /// the stream's own context (for a wrapped stream of a context the application created,
  /// that context), so it can be recorded again on streams of that context only.
  /// @throws Error on a driver failure.
  Event record() const;
  /// Records `event` on the stream (cuEventRecord) and returns it. Needs
  /// custream/event.hpp, which anyone holding an Event has included.
  /// @throws Error on a driver failure.
  template <typename E, typename = std::enable_if_t<std::is_same_v<E, Event>>>
  const E& record(const E& event) const {
    const CUresult r = detail::api().cuEventRecord(event.handle(), handle_);  // raw: hot path
    if (r != CUDA_SUCCESS) record_failed(event, r);
    event.mark_recorded();
    return event;
  }
  /// Makes later work on this stream wait for `event` (cuStreamWaitEvent).
  /// @throws Error on a driver failure.
  template <typename E, typename = std::enable_if_t<std::is_same_v<E, Event>>>
  void wait_event(const E& event) const {
    detail::stream_call<&detail::DriverApi::cuStreamWaitEvent>(*this, handle_, event.handle(), 0u);
  }
  /// Makes later work on this stream wait for the work enqueued so far on `other`.
  /// @throws Error on a driver failure.
  void wait(StreamRef other) const;

  /// Enqueues a memset of `count` bytes at `dst` to `value` (cuMemsetD8Async).
  /// @throws Error on a driver failure.
  void memset(CUdeviceptr dst, unsigned char value, std::size_t count) const;
  /// Enqueues a memset of `count` 32-bit words at `dst` to `value` (cuMemsetD32Async).
  /// @throws Error on a driver failure.
  void memset32(CUdeviceptr dst, std::uint32_t value, std::size_t count) const;
  /// Enqueues a copy of `bytes` bytes (cuMemcpyAsync; unified addressing decides the
  /// direction, so device and host pointers both work).
  /// @throws Error on a driver failure.
  void copy(CUdeviceptr dst, CUdeviceptr src, std::size_t bytes) const;
  /// Enqueues a host-to-device copy (cuMemcpyHtoDAsync). @throws Error on a driver failure.
  void copy(CUdeviceptr dst, const void* src, std::size_t bytes) const;
  /// Enqueues a device-to-host copy (cuMemcpyDtoHAsync). @throws Error on a driver failure.
  void copy(void* dst, CUdeviceptr src, std::size_t bytes) const;

  /// "<Stream 0x7f… (device 0)>" (created, or a special handle) or
  /// "<ExternalStream 0x… (device 0)>" (foreign).
  std::string to_string() const;

  /// Same handle.
  friend bool operator==(const StreamRef& a, const StreamRef& b) noexcept {
    return a.handle_ == b.handle_;
  }
  /// Different handles.
  friend bool operator!=(const StreamRef& a, const StreamRef& b) noexcept { return !(a == b); }
  /// Orders by handle value.
  friend bool operator<(const StreamRef& a, const StreamRef& b) noexcept {
    return std::less<CUstream>()(a.handle_, b.handle_);
  }
  /// Orders by handle value.
  friend bool operator>(const StreamRef& a, const StreamRef& b) noexcept { return b < a; }
  /// Orders by handle value.
  friend bool operator<=(const StreamRef& a, const StreamRef& b) noexcept { return !(b < a); }
  /// Orders by handle value.
  friend bool operator>=(const StreamRef& a, const StreamRef& b) noexcept { return !(a < b); }

 private:
  friend class Stream;
  /// A special handle (0, 1 or 2).
  explicit StreamRef(CUstream special) noexcept : handle_(special) {}
  /// The cold path of record(event): the special-handle retry, else Error naming the stream,
  /// the event, and both devices and contexts when they differ.
  [[gnu::cold]] void record_failed(const Event& event, CUresult first) const;
  /// A view with everything known.
  StreamRef(CUstream handle, CUcontext context, int device, Kind kind, bool non_blocking,
            ContextKind context_kind) noexcept
      : handle_(handle),
        context_(context),
        device_(device),
        kind_(kind),
        non_blocking_(non_blocking),
        context_kind_(context_kind) {}

  CUstream handle_ = nullptr;
  CUcontext context_ = nullptr;
  int device_ = -1;
  Kind kind_ = Kind::special;
  bool non_blocking_ = false;  // streams a custream::Stream created only
  ContextKind context_kind_ = ContextKind::primary;
  // Named padding: the view is 24 bytes of data, copied as whole words (with tail padding,
  // GCC copied 22 bytes with overlapping moves, and a copy of a Stream from the
  // current-stream slots paid a store-forwarding stall: 0.8 -> 6 ns).
  std::uint8_t reserved_ = 0;
};

/// Writes to_string().
std::ostream& operator<<(std::ostream& out, const StreamRef& stream);

namespace detail {

/// The cold path of a stream call whose first attempt gave `first`: the special-handle retry
/// (retry_special), then the result when it is CUDA_SUCCESS or `allowed`, else Error naming
/// the entry and the stream.
template <auto Field, typename... Args>
[[gnu::cold, gnu::noinline]] CUresult stream_call_failed(const StreamRef& s, CUresult first,
                                                         CUresult allowed, Args... args) {
  std::optional<ContextScope> scope;
  CUresult r = first;
  if (retry_special(first, s.is_special(), scope)) r = try_call<Field>(args...);
  if (r == CUDA_SUCCESS || r == allowed) return r;
  throw_stream_error(r, EntryInfo<Field>::name, s);
}

/// Calls the entry on stream `s` (the throwing twin of on_stream): one driver call, and the
/// cold path above on failure. @throws Error naming the entry and the stream.
template <auto Field, typename... Args>
void stream_call(const StreamRef& s, Args... args) {
  const CUresult r = entry<Field>(api())(args...);
  if (r != CUDA_SUCCESS) stream_call_failed<Field>(s, r, CUDA_SUCCESS, args...);
}

/// Calls the entry on stream `s` with the special-handle retry, keeping the context the retry
/// made current in `scope` for the calls that follow in the same operation.
/// @throws Error naming the entry and the stream.
template <auto Field, typename... Args>
void stream_call(const StreamRef& s, std::optional<ContextScope>& scope, Args... args) {
  if (const CUresult r = on_stream<Field>(s.is_special(), scope, args...); r != CUDA_SUCCESS) {
    throw_stream_error(r, EntryInfo<Field>::name, s);
  }
}

}  // namespace detail
}  // namespace custream

/// Hashes by handle value, like CuPy.
template <>
struct std::hash<custream::StreamRef> {
  /// The hash of the handle.
  std::size_t operator()(const custream::StreamRef& s) const noexcept {
    return std::hash<CUstream>()(s.handle());
  }
};

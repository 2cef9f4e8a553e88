/// @file
/// custream::Stream: a CUDA stream as a cheap value handle (CuPy's `Stream`).
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>

#include "custream/capture_info.hpp"
#include "custream/capture_mode.hpp"
#include "custream/detail/driver.hpp"
#include "custream/detail/host_task.hpp"
#include "custream/device.hpp"
#include "custream/instantiate_flags.hpp"

namespace custream {

class Event;
class Graph;

namespace detail {
/// Shared ownership of a stream custream created (or of a wrapper's keep-alive owner).
struct StreamOwner;
/// Drops one reference (non-null owner); destroys the stream with the last one.
void release(StreamOwner* owner) noexcept;
/// Adds one reference (non-null owner).
void retain(StreamOwner* owner) noexcept;
}  // namespace detail

/// A CUDA stream handle.
///
/// Streams custream creates are owned: the last Stream referring to one destroys it (a stream
/// that is current in some thread is referred to by that thread, so it stays alive). Wrapped
/// foreign streams (ExternalStream) and the special handles never destroy their CUstream;
/// copying one of those costs no atomic operation and no allocation.
///
/// `device_id()` is the stream's device, known from creation or inferred once when wrapping;
/// it is -1 for the special handles 0 (null), 1 (legacy) and 2 (per-thread), whose device is
/// whatever context is current when they are used.
///
/// Hot-path calls (record, wait_event, done, synchronize) issue exactly one driver call and
/// switch no context.
class Stream {
 public:
  /// What a stream handle is.
  enum class Kind : std::uint8_t {
    special,   ///< 0, CU_STREAM_LEGACY or CU_STREAM_PER_THREAD: never destroyed, device -1
    created,   ///< created (and owned) by custream
    external,  ///< wrapped foreign stream, never destroyed (ExternalStream)
  };

  /// The null stream (handle 0): the legacy default stream of the current context.
  Stream() noexcept = default;

  /// Creates a stream on the current device (Device::current()).
  /// @param non_blocking  CU_STREAM_NON_BLOCKING: no implicit synchronisation with the
  ///                      legacy default stream.
  /// @param priority      lower is higher priority; the driver clamps it to its range
  ///                      (priority() reads back the clamped value).
  /// @throws Error when creation fails (naming the device).
  explicit Stream(bool non_blocking, int priority = 0);
  /// Creates a stream on `device`; see Stream(bool, int).
  explicit Stream(Device device, bool non_blocking = false, int priority = 0);

  /// The null stream (0). Its device is the current one at each use.
  static Stream null() noexcept { return Stream(); }
  /// CU_STREAM_LEGACY (1), the legacy default stream.
  static Stream legacy() noexcept { return Stream(CU_STREAM_LEGACY); }
  /// CU_STREAM_PER_THREAD (2), the calling thread's per-thread default stream.
  static Stream per_thread() noexcept { return Stream(CU_STREAM_PER_THREAD); }

  /// Another handle to the same stream (one atomic increment for an owned stream, nothing for
  /// the others).
  Stream(const Stream& other) noexcept
      : handle_(other.handle_),
        context_(other.context_),
        device_(other.device_),
        kind_(other.kind_),
        non_blocking_(other.non_blocking_),
        owner_(other.owner_) {
    if (owner_ != nullptr) detail::retain(owner_);
  }
  /// Takes over `other`'s reference.
  Stream(Stream&& other) noexcept
      : handle_(other.handle_),
        context_(other.context_),
        device_(other.device_),
        kind_(other.kind_),
        non_blocking_(other.non_blocking_),
        borrowed_(other.borrowed_),
        owner_(other.owner_) {
    other.owner_ = nullptr;
  }
  /// Refers to `other`'s stream instead.
  Stream& operator=(const Stream& other) noexcept {
    if (other.owner_ != nullptr) detail::retain(other.owner_);
    drop();
    assign(other);
    borrowed_ = false;
    return *this;
  }
  /// Takes over `other`'s reference.
  Stream& operator=(Stream&& other) noexcept {
    if (this != &other) {
      drop();
      assign(other);
      borrowed_ = other.borrowed_;
      other.owner_ = nullptr;
    }
    return *this;
  }
  /// Drops this reference; destroys the CUstream when it was the last one to a created stream.
  ~Stream() { drop(); }

  /// The CUstream (also usable as a cudaStream_t).
  CUstream handle() const noexcept { return handle_; }
  /// The device ordinal, or -1 for a special handle.
  int device_id() const noexcept { return device_; }
  /// The stream's context, or null for a special handle.
  CUcontext context() const noexcept { return context_; }
  /// What the handle is.
  Kind kind() const noexcept { return kind_; }
  /// True for the special handles 0, 1 and 2 (also when wrapped by ExternalStream).
  bool is_special() const noexcept {
    return reinterpret_cast<std::uintptr_t>(handle_) <=
           reinterpret_cast<std::uintptr_t>(CU_STREAM_PER_THREAD);
  }

  /// The priority, as clamped by the driver (cuStreamGetPriority; capture-safe).
  /// @throws Error on a driver failure.
  int priority() const;
  /// True when created with CU_STREAM_NON_BLOCKING. Known without a driver call for created
  /// streams; for others cuStreamGetFlags is asked, but never while the stream captures (the
  /// driver would invalidate the capture): that throws instead.
  /// @throws Error on a driver failure or while a wrapped stream captures.
  bool non_blocking() const;
  /// The driver's unique stream id (cuStreamGetId, driver >= 12.0); refused like
  /// non_blocking() while the stream captures.
  /// @throws Error on a driver failure, while capturing, or with an older driver.
  unsigned long long id() const;

  /// Waits until all work on the stream is done (cuStreamSynchronize).
  /// @throws Error naming the stream and device on failure.
  void synchronize() const {
    const CUresult r = detail::api().cuStreamSynchronize(handle_);
    if (r != CUDA_SUCCESS) retry_or_fail(r, Op::synchronize, nullptr);
  }
  /// True when all work is done; false only on CUDA_ERROR_NOT_READY.
  /// @throws Error for any other error (a dead GPU does not look busy forever).
  bool done() const {
    const CUresult r = detail::api().cuStreamQuery(handle_);
    if (r == CUDA_SUCCESS) return true;
    if (r == CUDA_ERROR_NOT_READY) return false;
    return retry_or_fail(r, Op::query, nullptr) == CUDA_SUCCESS;
  }

  /// Records a new event (timing disabled) on the stream and returns it.
  /// @throws Error on a driver failure.
  Event record() const;
  /// Records `event` on the stream and returns it.
  /// @throws Error on a driver failure.
  const Event& record(const Event& event) const;  // inline, in event.hpp
  /// Makes later work on this stream wait for `event` (cuStreamWaitEvent).
  /// @throws Error on a driver failure.
  void wait_event(const Event& event) const;  // inline, in event.hpp
  /// Makes later work on this stream wait for the work enqueued so far on `other`.
  /// @throws Error on a driver failure.
  void wait(const Stream& other) const;

  /// Makes this stream the current stream of its device in this thread and returns it
  /// (CuPy's `use()`). A special handle becomes current for the current device.
  /// @throws Error when the stream's device is not the current device (naming both).
  const Stream& use() const;

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

  // --- Host functions, callbacks and capture (lib/host_function.cpp, lib/capture.cpp) ---

  /// Enqueues `f()` to run on the host, in stream order, on the driver's host-function
  /// thread (cuLaunchHostFunc). `f` is moved to the heap first (one allocation), except a
  /// small plain callable (below).
  ///
  /// Not capturing: `f` runs once and is destroyed right after it ran. Capturing (this
  /// stream began the capture, or was joined into another stream's capture through an
  /// event, or the capture was begun by code that is not custream): `f` becomes a host node
  /// of the capture graph, runs on every replay, and is destroyed exactly once, when the
  /// graph and every executable made from it are gone (it is owned by a CUDA user object
  /// that the capture graph holds).
  ///
  /// `f` must not call the driver and must not own the last reference to a custream
  /// Stream, Event or Graph (its destructor runs on a driver thread, where destroying them
  /// would call the driver). An exception escaping `f` is caught on the driver thread and
  /// handed to the host-function error handler (host_function_error_handler.hpp).
  ///
  /// Costs one capture check (cuStreamIsCapturing; cuStreamGetCaptureInfo for the graph only
  /// while capturing) and one cuLaunchHostFunc.
  ///
  /// A small plain callable skips all of that: when `f` is trivially copyable and trivially
  /// destructible without padding, no larger than a pointer, and callable as const and
  /// noexcept (detail::fits_in_pointer; e.g. `[ctx]() noexcept { ctx->done(); }` with a
  /// pointer `ctx`; not a `mutable` lambda), its bytes travel as the driver's `userData`.
  /// No allocation and no capture check: there is nothing to free, and a captured node
  /// carries its own copy, valid on every replay. The cost is the raw call's. Each run
  /// re-creates `f` from those bytes: the changes a `mutable` data member would see do not
  /// carry over from one run to the next, and `this` differs between runs. On the special
  /// handles 0, 1 and 2 such a callable takes the heap path, whose capture check refuses a
  /// launch on the legacy stream while another stream captures (the driver would invalidate
  /// that capture).
  /// @throws Error when a driver call fails (naming it and this stream; on an invalidated
  /// capture CUDA_ERROR_STREAM_CAPTURE_INVALIDATED). `f` is destroyed then, and nothing
  /// stays enqueued.
  template <typename F, typename = detail::enable_if_host_function<F>>
  void launch_host_func(F&& f) const {
    using T = std::decay_t<F>;
    if constexpr (detail::fits_in_pointer<T>) {
      if (!is_special()) {  // also ExternalStream(0), ExternalStream(CU_STREAM_LEGACY)
        launch_host_func(&detail::run_in_pointer<T>, detail::to_pointer<T>(f));
        return;
      }
    }
    launch_host_task(new detail::HostFunctionTask<T>(std::forward<F>(f)));
  }
  /// Enqueues `fn(arg)` (cuLaunchHostFunc, one driver call and nothing else). While
  /// capturing it becomes a host node that runs on every replay: `arg` must then stay
  /// valid as long as the graph and its executables (the caller owns it).
  /// @throws Error on a driver failure.
  void launch_host_func(CUhostFn fn, void* arg) const {
    const CUresult r = detail::api().cuLaunchHostFunc(handle_, fn, arg);
    if (r != CUDA_SUCCESS) host_func_failed(r, fn, arg);
  }

  /// Enqueues `f(stream, status)` in stream order (cuStreamAddCallback); `stream` is a
  /// non-owning view of this stream (copying it does not keep the stream alive) and
  /// `status` the driver's status. Lifetime, threading and exceptions as for
  /// launch_host_func(F&&).
  ///
  /// While this stream captures (the driver would refuse cuStreamAddCallback and invalidate
  /// the capture) the callback is captured as a host node instead, like
  /// launch_host_func(F&&): it runs on every replay with status CUDA_SUCCESS, and the capture
  /// stays valid.
  /// @throws Error on a driver failure (`f` is destroyed then).
  template <typename F, typename = detail::enable_if_stream_callback<F, Stream>>
  void add_callback(F&& f) const {
    add_callback_task(new detail::StreamCallbackTask<std::decay_t<F>>(std::forward<F>(f)));
  }
  /// Enqueues `fn(handle(), status, arg)` in stream order (cuStreamAddCallback). While this
  /// stream captures it is captured as a host node (status CUDA_SUCCESS, `arg` owned by the
  /// caller and needed as long as the graph and its executables), never passed to the
  /// driver's cuStreamAddCallback, which would invalidate the capture.
  /// @throws Error on a driver failure.
  void add_callback(CUstreamCallback fn, void* arg) const;

  /// Begins capturing this stream's work into a graph (cuStreamBeginCapture). The null and
  /// legacy streams (handles 0 and 1) cannot capture: they are refused before the driver is
  /// called. CU_STREAM_PER_THREAD (2) can.
  /// @throws Error (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) for handle 0 or 1; Error on a
  /// driver failure (e.g. CUDA_ERROR_ILLEGAL_STATE when already capturing).
  void begin_capture(CaptureMode mode = CaptureMode::relaxed) const;
  /// Ends the capture this stream began (cuStreamEndCapture) and instantiates the graph
  /// with `flags` (by default uploaded on this stream, so the first launch costs what a
  /// repeat launch costs). Afterwards the stream has left capture mode, also on failure.
  /// @throws Error naming the driver's error: CUDA_ERROR_ILLEGAL_STATE (not capturing),
  /// CUDA_ERROR_STREAM_CAPTURE_UNMATCHED (a joined stream, not the origin),
  /// CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, CUDA_ERROR_STREAM_CAPTURE_UNJOINED; an
  /// instantiation failure (GraphInstantiateError). Nothing leaks on failure.
  Graph end_capture(InstantiateFlags flags = InstantiateFlags::upload) const;
  /// True while capturing (also as a stream joined into another stream's capture).
  /// Capture-safe (cuStreamGetCaptureInfo).
  /// @throws Error (CUDA_ERROR_STREAM_CAPTURE_INVALIDATED) when the capture was
  /// invalidated; Error on a driver failure.
  bool is_capturing() const;
  /// The capture status and id, never throwing: a failed query reports its result.
  CaptureInfo capture_info() const noexcept;
  /// The id of the active or invalidated capture, 0 when not capturing.
  /// @throws Error on a driver failure.
  unsigned long long capture_id() const;

 private:
  friend Stream detail::stream_view(const detail::HostTask& task) noexcept;
  friend void detail::release(detail::StreamOwner* owner) noexcept;
  /// Enqueues `task` as a host function; owns it from the call on (destroys it on failure).
  /// Inline fast path (lib/host_function.cpp, invariant 2): one capture check and the
  /// launch; capturing, failures and a driver not loaded yet go to the cold paths.
  void launch_host_task(detail::HostTask* task) const {
    describe(*task);
    const detail::Loaded* l = detail::g_loaded.load(std::memory_order_acquire);
    if (l == nullptr) return enqueue_host_task(task);
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    const CUresult capturing = l->api.cuStreamIsCapturing(handle_, &status);
    CUresult launched = CUDA_SUCCESS;
    if (capturing == CUDA_SUCCESS && status == CU_STREAM_CAPTURE_STATUS_NONE) {
      launched = l->api.cuLaunchHostFunc(handle_, &detail::run_host_task_once, task);
      if (launched == CUDA_SUCCESS) return;  // the trampoline frees it after running it
    }
    host_task_not_launched(task, capturing, status, launched);
  }
  /// launch_host_task before the driver is loaded: loads it (or throws), then enqueues.
  /// Owns `task`.
  [[gnu::cold]] void enqueue_host_task(detail::HostTask* task) const;
  /// Where launch_host_task's fast path stopped: the capture check failed (`capturing`) or
  /// found a capture (`status`), or the launch failed (`launched`). Captures `task`, retries
  /// a special handle with the current device's context, or throws. Owns `task`.
  [[gnu::cold]] void host_task_not_launched(detail::HostTask* task, CUresult capturing,
                                            CUstreamCaptureStatus status, CUresult launched) const;
  /// Enqueues `task` as a callback (or a host node while capturing); owns it likewise.
  void add_callback_task(detail::HostTask* task) const;
  /// Slow path of launch_host_func(fn, arg): the special-handle retry, or the error.
  [[gnu::cold]] void host_func_failed(CUresult r, CUhostFn fn, void* arg) const;
  /// Fills `task`'s non-owning view of this stream.
  void describe(detail::HostTask& task) const noexcept {
    task.stream = handle_;
    task.context = context_;
    task.device = device_;
    task.kind = static_cast<unsigned char>(kind_);
    task.non_blocking = non_blocking_;
  }

 public:
  /// "<Stream 0x7f… (device 0)>" (created, or null/legacy/per_thread()) or
  /// "<ExternalStream 0x1 (device -1)>" (wrapped).
  std::string to_string() const;

  /// Same handle.
  friend bool operator==(const Stream& a, const Stream& b) noexcept {
    return a.handle_ == b.handle_;
  }
  /// Different handles.
  friend bool operator!=(const Stream& a, const Stream& b) noexcept { return !(a == b); }
  /// Orders by handle value.
  friend bool operator<(const Stream& a, const Stream& b) noexcept {
    return std::less<CUstream>()(a.handle_, b.handle_);
  }
  /// Orders by handle value.
  friend bool operator>(const Stream& a, const Stream& b) noexcept { return b < a; }
  /// Orders by handle value.
  friend bool operator<=(const Stream& a, const Stream& b) noexcept { return !(b < a); }
  /// Orders by handle value.
  friend bool operator>=(const Stream& a, const Stream& b) noexcept { return !(a < b); }

 protected:
  /// A special handle (0, 1 or 2).
  explicit Stream(CUstream special) noexcept : handle_(special) {}
  /// Wraps `handle` without owning it; see ExternalStream.
  Stream(CUstream handle, int device_id, std::shared_ptr<void> keep_alive);

 private:
  friend class StreamScope;
  /// The device whose current stream this becomes: its own, or the current device for a
  /// special handle. @throws Error when the stream's device is not current.
  int device_for_use(const char* call) const {
    CUcontext current = nullptr;
    const CUresult r = detail::api().cuCtxGetCurrent(&current);
    if (r == CUDA_SUCCESS && current != nullptr && current == context_) return device_;
    return device_for_use_slow(r, current, call);
  }
  [[gnu::cold]] int device_for_use_slow(CUresult r, CUcontext current, const char* call) const;
  /// Refers to `other`'s stream without counting a reference (a StreamScope's slot entry).
  /// If a counted reference to it is dropped in this thread while the entry is borrowed (the
  /// scoped variable reassigned), detail::release() moves that reference into the entry.
  void borrow(const Stream& other) noexcept {
    drop();
    assign(other);
    borrowed_ = true;
  }
  /// Becomes `previous` again (a StreamScope's exit). When this entry holds a counted
  /// reference that moved in while `previous` borrows the same stream (nested scopes of one
  /// stream), the reference stays, now `previous`'s.
  void restore(Stream&& previous) noexcept {
    if (owner_ != nullptr && owner_ == previous.owner_ && !borrowed_ && previous.borrowed_) {
      previous.borrowed_ = false;
      borrowed_ = true;  // not released by the assignment below: it passes on
    }
    *this = std::move(previous);
  }
  /// Runs `call` on the stream; for a special handle with no current context, once more
  /// with the current device's primary context (only on that failure: hot paths pay nothing).
  template <typename Call>
  CUresult on_stream(Call call) const;
  [[noreturn]] void fail(CUresult result, const char* call) const;

  /// The hot-path calls whose failure retry_or_fail() handles.
  enum class Op : std::uint8_t { synchronize, query, record, wait_event };
  /// Slow path of the inline hot paths after `first` failed: for a special handle with no
  /// current context, the call once more with the current device's primary context current;
  /// returns CUDA_SUCCESS or CUDA_ERROR_NOT_READY (query only) and throws otherwise.
  [[gnu::cold]] CUresult retry_or_fail(CUresult first, Op op, CUevent event) const;
  void assign(const Stream& other) noexcept {
    handle_ = other.handle_;
    context_ = other.context_;
    device_ = other.device_;
    kind_ = other.kind_;
    non_blocking_ = other.non_blocking_;
    owner_ = other.owner_;
  }
  void drop() noexcept {
    if (owner_ != nullptr && !borrowed_) detail::release(owner_);
  }

  CUstream handle_ = nullptr;
  CUcontext context_ = nullptr;
  int device_ = -1;
  Kind kind_ = Kind::special;
  bool non_blocking_ = false;  // created streams only
  bool borrowed_ = false;      // a StreamScope's slot entry: owner_ not counted (yet)
  detail::StreamOwner* owner_ = nullptr;
};

/// Writes to_string().
std::ostream& operator<<(std::ostream& out, const Stream& stream);

}  // namespace custream

/// Hashes by handle value, like CuPy.
template <>
struct std::hash<custream::Stream> {
  /// The hash of the handle.
  std::size_t operator()(const custream::Stream& s) const noexcept {
    return std::hash<CUstream>()(s.handle());
  }
};

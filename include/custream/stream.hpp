/// @file
/// custream::Stream: a CUDA stream as a cheap value handle (CuPy's `Stream`).
#pragma once

#include "custream/detail/cuda.hpp"

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "custream/detail/shared.hpp"
#include "custream/device.hpp"
#include "custream/stream_flags.hpp"
#include "custream/stream_ref.hpp"

namespace custream {

class Graph;
struct CaptureInfo;
enum class CaptureMode : int;
enum class InstantiateFlags : unsigned long long;

namespace detail {
/// Shared ownership of a stream custream created (or of a wrapper's keep-alive owner).
struct StreamOwner;
/// Defined in custream/host_function.hpp: Stream's host-function members forward to it.
struct HostFunctions;
}  // namespace detail

/// A CUDA stream handle: a StreamRef plus ownership.
///
/// Streams custream creates are owned: the last Stream referring to one destroys it (a stream
/// that is current in some thread is referred to by that thread, so it stays alive). Wrapped
/// foreign streams (ExternalStream) and the special handles never destroy their CUstream;
/// copying one of those costs no atomic operation and no allocation.
///
/// Everything a StreamRef offers works on a Stream (synchronize, done, record, wait_event,
/// memset, copy, …), and a Stream converts to a StreamRef where a function takes one. The
/// capture and host-function members below forward to the functions of
/// custream/capture.hpp and custream/host_function.hpp (include those to use them).
class Stream : public StreamRef {
 public:
  /// The null stream (handle 0): the legacy default stream of the current context. Unlike
  /// CuPy's `Stream()` this creates nothing (a value needs an empty state); create a stream
  /// with Stream::create() or Stream(StreamFlags).
  Stream() noexcept = default;

  /// Creates a stream on the current device (Device::current()), as CuPy's `Stream()` does.
  /// @param flags     StreamFlags::non_blocking: no implicit synchronisation with the legacy
  ///                  default stream.
  /// @param priority  lower is higher priority; the driver clamps it to its range
  ///                  (priority() reads back the clamped value).
  /// @param name      a name for Nsight Systems (see set_name()); empty (the default): none,
  ///                  and no NVTX call.
  /// @throws Error when creation fails (naming the device).
  static Stream create(StreamFlags flags = StreamFlags::none, int priority = 0,
                       std::string_view name = {}) {
    return Stream(flags, priority, name);
  }
  /// Creates a stream on the current device; see create().
  explicit Stream(StreamFlags flags, int priority = 0);
  /// Creates a stream on the current device named `name`; see create().
  explicit Stream(StreamFlags flags, int priority, std::string_view name);
  /// Creates a stream on `device`, in its primary context; see create().
  explicit Stream(Device device, StreamFlags flags = StreamFlags::none, int priority = 0);
  /// Creates a stream on `device`, in its primary context, named `name`; see create().
  explicit Stream(Device device, StreamFlags flags, int priority, std::string_view name);
  /// Creates a stream in `context` (any kind; see custream/context.hpp), which the stream
  /// keeps alive when custream owns it. A stream of a green context is made with
  /// cuGreenCtxStreamCreate and is always non-blocking (the driver allows no other kind).
  /// The calling thread's current context is left as it was.
  /// @throws Error (CUDA_ERROR_INVALID_CONTEXT) for an empty Context; Error when creation
  /// fails (naming the context and device).
  explicit Stream(const Context& context, StreamFlags flags = StreamFlags::none, int priority = 0);
  /// Creates a stream in `context` named `name` (see set_name(); empty: none, and no NVTX
  /// call). @throws as Stream(const Context&, StreamFlags, int).
  explicit Stream(const Context& context, StreamFlags flags, int priority, std::string_view name);
  /// A Stream that views `ref` without owning it: it never destroys the stream and does not
  /// keep it alive (as an ExternalStream without a keep-alive, but with no driver call).
  explicit Stream(StreamRef ref) noexcept : StreamRef(ref) {}

  /// The null stream (0). Its device is the current one at each use.
  static Stream null() noexcept { return Stream(); }
  /// CU_STREAM_LEGACY (1), the legacy default stream.
  static Stream legacy() noexcept { return Stream(StreamRef::legacy()); }
  /// CU_STREAM_PER_THREAD (2), the calling thread's per-thread default stream.
  static Stream per_thread() noexcept { return Stream(StreamRef::per_thread()); }

  /// Another handle to the same stream (one atomic increment for an owned stream, nothing for
  /// the others).
  Stream(const Stream& other) noexcept : StreamRef(other), owner_(other.owner_) {}
  /// Takes over `other`'s reference.
  Stream(Stream&& other) noexcept
      : StreamRef(other), owner_(std::move(other.owner_)), borrowed_(other.borrowed_) {
    other.borrowed_ = false;
  }
  /// Refers to `other`'s stream instead.
  Stream& operator=(const Stream& other) noexcept {
    if (this != &other) *this = Stream(other);
    return *this;
  }
  /// Takes over `other`'s reference.
  Stream& operator=(Stream&& other) noexcept {
    if (this != &other) {
      forget_borrowed();
      StreamRef::operator=(other);
      owner_ = std::move(other.owner_);
      borrowed_ = std::exchange(other.borrowed_, false);
    }
    return *this;
  }
  /// Drops this reference; destroys the CUstream when it was the last one to a created stream.
  ~Stream() { forget_borrowed(); }

  /// Makes this stream the current stream of its device in this thread and returns it
  /// (CuPy's `use()`). A special handle becomes current for the current device.
  /// @throws Error when the stream's device is not the current device (naming both).
  const Stream& use() const;

  /// Names the stream for Nsight Systems: custream keeps `name` (name() reads it back, from
  /// every handle to this CUstream) and sends it to NVTX (nvtxNameCuStreamA) when built with
  /// the toolkit's nvtx3 (NvtxRange::enabled()). An empty `name` forgets the kept name. A
  /// name is the stream's, not this value's: copies, ExternalStream wraps and Stream(StreamRef)
  /// views of the same CUstream share it. Wrapping a stream never names it; this does, also
  /// for a foreign stream. A created stream's name is forgotten when it is destroyed; a foreign
  /// stream's is kept until named again (custream cannot see its end; a stream custream
  /// creates later with the same handle value starts unnamed).
  /// @throws Error (CUDA_ERROR_INVALID_VALUE, refused without calling the driver or NVTX) for
  /// a special handle (0, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD), which is no one stream.
  void set_name(std::string_view name) const;
  /// The name set_name() or creation gave this CUstream; empty when none.
  /// @throws std::bad_alloc.
  std::string name() const;

  // --- Host functions (custream/host_function.hpp) ---

  /// launch_host_func(*this, f): enqueues `f()` to run on the host in stream order; see
  /// custream::launch_host_func(const StreamRef&, F&&) in custream/host_function.hpp (include
  /// it).
  template <typename F, typename H = detail::HostFunctions,
            typename = std::enable_if_t<std::is_invocable_v<std::decay_t<F>&>>>
  void launch_host_func(F&& f) const {
    H::launch(*this, std::forward<F>(f));
  }
  /// launch_host_func(*this, fn, arg): enqueues `fn(arg)` (one cuLaunchHostFunc; while
  /// capturing a host node, and `arg` must live as long as the graph); see
  /// custream/host_function.hpp. @throws Error on a driver failure.
  void launch_host_func(CUhostFn fn, void* arg) const {
    detail::stream_call<&detail::DriverApi::cuLaunchHostFunc>(*this, handle(), fn, arg);
  }
  /// add_callback(*this, f): enqueues `f(stream, status)` in stream order; see
  /// custream::add_callback(StreamRef, F&&) in custream/host_function.hpp (include it).
  template <typename F, typename H = detail::HostFunctions>
  void add_callback(F&& f) const {
    H::add_callback(*this, std::forward<F>(f));
  }
  /// add_callback(*this, fn, arg): enqueues `fn(handle(), status, arg)`; see
  /// custream/host_function.hpp. @throws Error on a driver failure.
  void add_callback(CUstreamCallback fn, void* arg) const;

  /// Records a new event on the stream and returns it, as StreamRef::record(); the event also
  /// keeps this stream's owned context (Stream(const Context&)) alive.
  /// @throws Error on a driver failure.
  Event record() const;
  using StreamRef::record;  // record(event)

  // --- Capture (custream/capture.hpp) ---

  /// begin_capture(*this, CaptureMode::relaxed); see custream/capture.hpp.
  void begin_capture() const;
  /// begin_capture(*this, mode): begins capturing this stream's work into a graph.
  /// @throws as custream::begin_capture.
  void begin_capture(CaptureMode mode) const;
  /// end_capture(*this, InstantiateFlags::upload); see custream/capture.hpp (Graph is in
  /// custream/graph.hpp).
  Graph end_capture() const;
  /// end_capture(*this, flags): ends the capture this stream began and instantiates the graph,
  /// which also keeps this stream's owned context (Stream(const Context&)) alive.
  /// @throws as custream::end_capture.
  Graph end_capture(InstantiateFlags flags) const;
  /// is_capturing(*this). @throws as custream::is_capturing.
  bool is_capturing() const;
  /// capture_info(*this); never throws.
  CaptureInfo capture_info() const noexcept;
  /// capture_id(*this). @throws as custream::capture_id.
  unsigned long long capture_id() const;

 protected:
  /// Views `ref` and keeps `keep_alive` (the caller's owner of the handle) as long as the
  /// last copy; see ExternalStream.
  Stream(StreamRef ref, std::shared_ptr<void> keep_alive) : StreamRef(ref) {
    if (keep_alive) keep(std::move(keep_alive));
  }

 private:
  friend class StreamScope;
  friend struct detail::StreamOwner;
  /// The device whose current stream this becomes: its own, or the current device for a
  /// special handle. @throws Error when the stream's device is not current.
  int device_for_use(const char* call) const {
    CUcontext current = nullptr;
    const CUresult r = detail::api().cuCtxGetCurrent(&current);  // raw: hot path, one call
    if (r == CUDA_SUCCESS && current != nullptr && current == context()) return device_id();
    return device_for_use_slow(r, current, call);
  }
  [[gnu::cold]] int device_for_use_slow(CUresult r, CUcontext current, const char* call) const;
  /// Owns `keep_alive` (a wrapper's keep-alive owner) for as long as the last copy.
  void keep(std::shared_ptr<void> keep_alive);
  /// Refers to `other`'s stream without counting a reference (a StreamScope's slot entry).
  /// If a counted reference to it is dropped in this thread while the entry is borrowed (the
  /// scoped variable reassigned), the release moves that reference into the entry.
  void borrow(const Stream& other) noexcept {
    *this = Stream();
    StreamRef::operator=(other);
    owner_ = detail::Shared<detail::StreamOwner>(other.owner_.get());
    borrowed_ = owner_.get() != nullptr;
  }
  /// Becomes `previous` again (a StreamScope's exit). When this entry holds a counted
  /// reference that moved in while `previous` borrows the same stream (nested scopes of one
  /// stream), the reference stays, now `previous`'s.
  void restore(Stream&& previous) noexcept {
    if (owner_ && owner_.get() == previous.owner_.get() && !borrowed_ && previous.borrowed_) {
      previous.borrowed_ = false;
      borrowed_ = true;  // not released by the assignment below: it passes on
    }
    *this = std::move(previous);
  }
  /// A borrowed entry holds no counted reference: give the pointer up uncounted.
  void forget_borrowed() noexcept {
    if (borrowed_) owner_.detach();
    borrowed_ = false;
  }

  detail::Shared<detail::StreamOwner> owner_;  // created streams and keep-alive wrappers
  bool borrowed_ = false;  // a StreamScope's slot entry: owner_ not counted (yet)
};

}  // namespace custream

/// Hashes by handle value, like CuPy.
template <>
struct std::hash<custream::Stream> {
  /// The hash of the handle.
  std::size_t operator()(const custream::Stream& s) const noexcept {
    return std::hash<CUstream>()(s.handle());
  }
};

/// @file
/// custream::Context: a CUDA context of any kind (primary, created, green) as a value handle.
#pragma once

#include "custream/detail/cuda.hpp"

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

#include "custream/detail/shared.hpp"

namespace custream {

class Device;
class Event;
class SmResource;

/// What kind of CUDA context a Context (or a stream's context) is.
enum class ContextKind : std::uint8_t {
  primary,  ///< a device's primary context (what the runtime API and custream use by default)
  created,  ///< a context made with cuCtxCreate (by custream or by the application)
  green,    ///< a green context (cuGreenCtxCreate, CUDA 12.4+; its streams 12.5+): a share of SMs
};

/// "primary", "created" or "green".
const char* to_string(ContextKind kind) noexcept;

/// What becomes of a green context Context::create_green made when its last user goes.
///
/// The driver keeps host and device memory for every green context it creates and never gives
/// it back (about 1.7 MB of host and 4 MiB of device memory a context, measured on an H100 with
/// driver 580), so a program that makes a green context per request runs out. Reusing one of
/// the same SM groups costs the driver nothing.
enum class GreenReuse : std::uint8_t {
  /// Drained and kept for a later create_green of the same SM groups (the default): see
  /// Context::create_green for the policy.
  cached,
  /// Destroyed (cuGreenCtxDestroy); create_green makes a new one, never taking a kept one.
  none,
};

namespace detail {
/// Shared ownership of a context custream created (cuCtxCreate or cuGreenCtxCreate).
struct ContextOwner;
}  // namespace detail

/// A CUDA context of one of the three kinds, knowing its device. A cheap value: copies of an
/// owned context (Context::create, Context::create_green) share it, and the last copy destroys
/// it; streams, events, modules and scopes made from an owned context hold a copy, so the
/// context cannot be destroyed while they live. Wrapped contexts (Context::wrap, primary
/// contexts) are never destroyed by custream, and copying them costs no atomic operation.
///
/// For a green context, handle() is the CUcontext the driver converts it to
/// (cuCtxFromGreenCtx): the one to make current, and green_handle() is the CUgreenCtx.
///
/// Nothing here changes the calling thread's current context, except make_current() and
/// ContextScope.
class Context {
 public:
  /// No context.
  Context() noexcept = default;

  /// Creates a context on `device` (cuCtxCreate) with the driver's `flags` (CU_CTX_SCHED_*,
  /// CU_CTX_MAP_HOST, …), owned by the returned value. The calling thread's current context is
  /// left as it was (the driver pushes the new context; custream pops it).
  /// @throws Error naming the device and flags when the driver refuses.
  static Context create(const Device& device, unsigned flags = 0);
  /// create(device, flags), named `name` (see set_name(); empty: none, and no NVTX call).
  /// @throws as create(const Device&, unsigned).
  static Context create(const Device& device, unsigned flags, std::string_view name);
  /// A green context of SM groups of one device, owned by the returned value; see
  /// Device::split_sms(). Needs a driver of CUDA 12.4 or newer and a GPU that supports green
  /// contexts.
  ///
  /// With GreenReuse::cached (the default), a green context of exactly these groups (the same
  /// device, the same CUdevResource bytes in the same order: keep the SmSplit and pass its
  /// groups again) that custream keeps is handed out, with no driver call; else a new one is
  /// made (cuDevResourceGenerateDesc, cuGreenCtxCreate). When its last user goes, custream makes
  /// it current, waits for its work (cuCtxSynchronize), restores what was current (nothing, when
  /// it was this context: it is popped) and keeps it: the next user gets a context with no
  /// work of the last one's pending and custream's streams of it gone (streams the application
  /// made itself on green_handle() must be destroyed before the last Context goes, as cuda.h
  /// asks before cuGreenCtxDestroy). At most green_cache_limit() contexts are kept per device;
  /// beyond it, the one kept longest ago is destroyed. A context whose draining fails is
  /// destroyed instead (the failure goes to the release-error handler). With GreenReuse::none
  /// the last user destroys it (cuGreenCtxDestroy).
  /// @throws Error (CUDA_ERROR_INVALID_VALUE) for no groups or groups of different devices;
  /// Error naming the minimum driver when the driver lacks green contexts; Error on a driver
  /// failure.
  static Context create_green(const std::vector<SmResource>& sms,
                              GreenReuse reuse = GreenReuse::cached);
  /// create_green(sms, reuse), named `name` (see set_name(); empty: none, and no NVTX call).
  /// A kept context handed out again starts unnamed in custream (a tool may still show the
  /// name NVTX was last given for it). @throws as create_green(sms, reuse).
  static Context create_green(const std::vector<SmResource>& sms, GreenReuse reuse,
                              std::string_view name);
  /// create_green({sms}, reuse).
  static Context create_green(const SmResource& sms, GreenReuse reuse = GreenReuse::cached);
  /// create_green({sms}, reuse, name).
  static Context create_green(const SmResource& sms, GreenReuse reuse, std::string_view name);

  /// The most green contexts kept for reuse per device when nobody owns them (GreenReuse).
  static constexpr std::size_t default_green_cache_limit = 8;
  /// How many unowned green contexts custream keeps per device (default_green_cache_limit
  /// unless set). Never throws.
  static std::size_t green_cache_limit() noexcept;
  /// Sets how many unowned green contexts custream keeps per device, destroying the ones kept
  /// longest ago beyond it; 0 keeps none (every green context is then destroyed by its last
  /// user, as with GreenReuse::none). A failed destroy goes to the release-error handler.
  static void set_green_cache_limit(std::size_t per_device) noexcept;
  /// How many unowned green contexts custream keeps now, of every device. Never throws.
  static std::size_t green_cached_count() noexcept;
  /// Destroys every green context custream keeps for reuse (cuGreenCtxDestroy; a failure goes
  /// to the release-error handler) and returns how many there were. Green contexts still owned
  /// are not affected (they are kept when their last user goes, as before).
  static std::size_t clear_green_cache() noexcept;

  /// A non-owning Context of `context` (made by somebody else): its device from the driver,
  /// kind primary when it is its device's primary context, green when the driver converted it
  /// from a green context (asked with it current for a moment, through cuStreamGetCtx_v2:
  /// driver 12.5 or newer; an older driver's converted context is reported as created), else
  /// created. @throws Error (CUDA_ERROR_INVALID_CONTEXT) for a null context; Error
  /// on a driver failure.
  static Context wrap(CUcontext context);
  /// A non-owning Context of a green context made by somebody else.
  /// @throws Error (CUDA_ERROR_INVALID_CONTEXT) for null; Error naming the minimum driver
  /// when the driver lacks green contexts; Error on a driver failure.
  static Context wrap(CUgreenCtx green);
  /// The calling thread's current context (wrapped). An empty Context when none is current.
  /// @throws Error on a driver failure.
  static Context current();

  /// The CUcontext (for a green context, the converted one); null when empty.
  CUcontext handle() const noexcept { return handle_; }
  /// The CUgreenCtx of a green context, else null.
  CUgreenCtx green_handle() const noexcept { return green_; }
  /// The device ordinal, -1 when empty.
  int device_id() const noexcept { return device_; }
  /// What kind of context it is.
  ContextKind kind() const noexcept { return kind_; }
  /// True when custream created it and destroys it with the last copy.
  bool owned() const noexcept { return static_cast<bool>(owner_); }
  /// True unless empty.
  explicit operator bool() const noexcept { return handle_ != nullptr; }

  /// The number of SMs the context may use (cuCtxGetDevResource; for a green context its
  /// partition, else the whole device). Needs CUDA 12.4. @throws Error on a driver failure.
  unsigned sm_count() const;
  /// Records `event` to complete when all work submitted so far to the context's streams is
  /// done (cuGreenCtxRecordEvent / cuCtxRecordEvent, CUDA 12.4 / 12.5). Not for use while a
  /// stream of the context captures. @throws Error on a driver failure.
  void record(const Event& event) const;
  /// Makes all work submitted later to the context's streams wait for `event`
  /// (cuGreenCtxWaitEvent / cuCtxWaitEvent). @throws Error on a driver failure.
  void wait(const Event& event) const;
  /// Waits until all work of the context is done (cuCtxSynchronize with it current; the
  /// previous context is restored). @throws Error on a driver failure.
  void synchronize() const;
  /// Makes the context current in this thread (cuCtxSetCurrent). Prefer ContextScope, which
  /// also keeps an owned context alive and restores what was current. A green context made
  /// current this way in another thread than the one its last user goes on is destroyed, not
  /// kept for reuse (GreenReuse): it may still be current there. @throws Error on a driver
  /// failure.
  void make_current() const;

  /// Names the context for Nsight Systems: custream keeps `name` (name() reads it back, from
  /// every Context of this CUcontext) and sends it to NVTX (nvtxNameCuContextA, with handle();
  /// for a green context the converted CUcontext) when built with the toolkit's nvtx3
  /// (NvtxRange::enabled()). An empty `name` forgets the kept name. Wrapping a context never
  /// names it; this does, also for a primary or foreign context, whose name custream keeps
  /// until it is named again (custream cannot see its end). An owned context's name is
  /// forgotten when its last user goes.
  /// @throws Error (CUDA_ERROR_INVALID_CONTEXT, refused without calling the driver or NVTX) for
  /// an empty Context.
  void set_name(std::string_view name) const;
  /// The name set_name() or creation gave this CUcontext; empty when none.
  /// @throws std::bad_alloc.
  std::string name() const;

  /// "<Context 0x… (green, device 0)>".
  std::string to_string() const;

  /// Same CUcontext.
  friend bool operator==(const Context& a, const Context& b) noexcept {
    return a.handle_ == b.handle_;
  }
  /// Different CUcontexts.
  friend bool operator!=(const Context& a, const Context& b) noexcept { return !(a == b); }

 private:
  friend class Device;
  Context(CUcontext handle, CUgreenCtx green, int device, ContextKind kind) noexcept
      : handle_(handle), green_(green), device_(device), kind_(kind) {}

  detail::MovedFrom<CUcontext> handle_;
  detail::MovedFrom<CUgreenCtx> green_;
  detail::MovedFrom<int, -1> device_;
  ContextKind kind_ = ContextKind::primary;
  detail::Shared<detail::ContextOwner> owner_;
};

/// Writes to_string().
std::ostream& operator<<(std::ostream& out, const Context& context);

}  // namespace custream

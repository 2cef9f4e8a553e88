// Primary contexts, the context→device lookup and ContextScope. Design:
// docs/design/contexts.md.
#include "context.hpp"

#include <pthread.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <ostream>
#include <string>
#include <vector>

#include "custream/context_scope.hpp"
#include "custream/device.hpp"
#include "custream/error.hpp"
#include "custream/event.hpp"
#include "custream/sm_resource.hpp"
#include "event.hpp"
#include "fork_safe.hpp"
#include "nvtx.hpp"

namespace custream::detail {

CUcontext retain_primary_context(const Loaded& l, int ordinal) {
  DeviceSlot& slot = l.devices[ordinal];
  std::lock_guard<std::mutex> lock(slot.retain_mutex);  // per device
  if (CUcontext c = slot.primary.load(std::memory_order_acquire)) return c;
  CUcontext c = nullptr;
  call<&DriverApi::cuDevicePrimaryCtxRetain>(device_subject(ordinal), &c, slot.device);
  // Never released: other threads may hold it, and releasing at exit could run after the
  // driver is gone.
  slot.primary.store(c, std::memory_order_release);
  return c;
}

namespace {
int ordinal_of(const Loaded& l, CUdevice device) {
  for (int i = 0; i < l.device_count; ++i) {
    if (l.devices[i].device == device) return i;
  }
  detail::throw_error(CUDA_ERROR_INVALID_DEVICE, "custream::detail::device_of_context", {},
                      "the driver reported CUdevice " + std::to_string(device) +
                          ", which cuDeviceGet did not list");
}
}  // namespace

int device_of_context(CUcontext context) {
  const Loaded& l = loaded();
  if (const int ordinal = known_primary_device(l, context); ordinal >= 0) return ordinal;
  CUdevice device = 0;
  if (l.api.cuCtxGetDevice_v2 != nullptr) {
    call<&DriverApi::cuCtxGetDevice_v2>(context_subject(context), &device, context);
  } else {
    ContextScope scope(context);
    call<&DriverApi::cuCtxGetDevice>(context_subject(context), &device);
  }
  return ordinal_of(l, device);
}

// How many ContextScopes are open in this thread (contexts.md, invariant 9).
namespace {
thread_local int t_scope_depth __attribute__((tls_model("initial-exec"))) = 0;
}  // namespace

void scoped_context_enter(CUcontext context) noexcept {
  ++t_scope_depth;
  t_scoped_context = context;
}

void scoped_context_leave(bool switched, CUcontext restored, bool ok) noexcept {
  // A scope ended on another thread than it began on leaves nothing to trust here.
  t_scope_depth = t_scope_depth > 0 ? t_scope_depth - 1 : 0;
  if (t_scope_depth == 0) {
    t_scoped_context = nullptr;  // outside every scope, raw calls may change what is current
  } else if (switched) {
    t_scoped_context = ok ? restored : nullptr;  // what it restored is current (or unknown)
  }
  // Otherwise the scope changed nothing: what custream made current inside it cleared the
  // value (scoped_context_forget), and what another scope restored there is still current.
}

int current_device_ordinal(const Loaded& l) {
  CUcontext context = nullptr;
  call<&DriverApi::cuCtxGetCurrent>({}, &context);
  return device_of_current(l, context);
}

CUcontext current_primary_context() {
  const Loaded& l = loaded();
  return primary_context(l, current_device_ordinal(l));
}

}  // namespace custream::detail

namespace custream {

ContextScope::ContextScope(const Context& context)
    : kept_(detail::nonempty(context, "custream::ContextScope")) {
  using detail::DriverApi;
  detail::call<&DriverApi::cuCtxGetCurrent>({}, &previous_);
  if (previous_ != context.handle()) {
    detail::call<&DriverApi::cuCtxSetCurrent>(
        {detail::Subject::What::context, context.handle(), context.device_id()}, context.handle());
    switched_ = true;
  }
  detail::scoped_context_enter(context.handle());
}

ContextScope::ContextScope(CUcontext context) {
  using detail::DriverApi;
  detail::call<&DriverApi::cuCtxGetCurrent>({}, &previous_);
  if (previous_ != context) {
    detail::call<&DriverApi::cuCtxSetCurrent>(detail::context_subject(context), context);
    switched_ = true;
  }
  detail::scoped_context_enter(context);
}

ContextScope::~ContextScope() {
  // The driver is loaded (the constructor succeeded) and never unloaded. A failure leaves the
  // wrong context current: the release-error handler hears of it (except
  // CUDA_ERROR_DEINITIALIZED during teardown, when there is nothing left to restore).
  bool restored = true;
  if (switched_) {
    restored = detail::release_call<&detail::DriverApi::cuCtxSetCurrent>(
                   "context (restoring it)", previous_, previous_) == CUDA_SUCCESS;
  }
  detail::scoped_context_leave(switched_, previous_, restored);
}

}  // namespace custream

namespace custream {

using detail::DriverApi;

// --- Context (contexts.md, invariants 3-6) ---

namespace detail {

namespace {

// --- The green-context cache (invariant 7) ---

/// A green context no Context owns, kept for a create_green of the same SM groups.
struct KeptGreen {
  int device = -1;
  std::vector<CUdevResource> groups;
  CUgreenCtx green = nullptr;
  CUcontext converted = nullptr;
};

/// The kept green contexts of every device, oldest first, at most `limit` per device. Never
/// destroyed: what it keeps at exit goes with the process, as the primary contexts do.
struct GreenCache {
  std::mutex mutex;
  std::vector<KeptGreen> kept;
  std::size_t limit = Context::default_green_cache_limit;
};

GreenCache& green_cache();
std::mutex& green_cache_mutex() { return green_cache().mutex; }
GreenCache& green_cache() {
  static auto* cache = [] {
    auto* made = new GreenCache;  // never destroyed: contexts may go back at exit
    guard_across_fork<green_cache_mutex>();
    return made;
  }();
  return *cache;
}

bool same_groups(const std::vector<CUdevResource>& a, const std::vector<CUdevResource>& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(),
                                            [](const CUdevResource& x, const CUdevResource& y) {
                                              return std::memcmp(&x, &y, sizeof x) == 0;
                                            });
}

void destroy_kept(const KeptGreen& k) noexcept {
  release_call<&DriverApi::cuGreenCtxDestroy>("green context (evicted from the cache)", k.green,
                                              k.green);
}

// Keeps at most `limit` of `device`'s contexts (of every device, each, when device < 0), moving
// the oldest beyond it to `out` (lock held).
void trim(GreenCache& cache, int device, std::size_t limit, std::vector<KeptGreen>& out) {
  if (device < 0) {
    std::vector<int> devices;
    for (const KeptGreen& k : cache.kept) {
      if (std::find(devices.begin(), devices.end(), k.device) == devices.end()) {
        devices.push_back(k.device);
      }
    }
    for (const int d : devices) trim(cache, d, limit, out);
    return;
  }
  auto count = static_cast<std::size_t>(
      std::count_if(cache.kept.begin(), cache.kept.end(),
                    [device](const KeptGreen& k) { return k.device == device; }));
  for (auto it = cache.kept.begin(); it != cache.kept.end() && count > limit;) {
    if (it->device != device) {
      ++it;
      continue;
    }
    out.push_back(std::move(*it));
    it = cache.kept.erase(it);
    --count;
  }
}

// Makes the converted context current (unless it is), waits for its work, and leaves
// `previous` current again (nothing when `previous` was the context itself: it is popped, as a
// destroyed one is). `is_current` says whether the context is current when this returns.
// True when all of it succeeded.
bool drain(CUgreenCtx green, CUcontext converted, CUcontext previous, bool& is_current) noexcept {
  if (!is_current) {
    if (release_call<&DriverApi::cuCtxSetCurrent>("green context (draining it for reuse)", green,
                                                  converted) != CUDA_SUCCESS) {
      return false;
    }
    is_current = true;
  }
  const bool done = release_call<&DriverApi::cuCtxSynchronize>(
                        "green context (draining it for reuse)", green) == CUDA_SUCCESS;
  const CUcontext after = previous == converted ? nullptr : previous;
  if (release_call<&DriverApi::cuCtxSetCurrent>("context (restoring it)", after, after) !=
      CUDA_SUCCESS) {
    return false;
  }
  is_current = false;
  return done;
}

// Puts a drained green context in the cache, evicting its device's oldest beyond the limit.
// False when it could not be kept (no room for the entry).
bool keep(KeptGreen k) noexcept {
  std::vector<KeptGreen> evicted;
  try {
    GreenCache& cache = green_cache();
    std::lock_guard<std::mutex> lock(cache.mutex);
    const int device = k.device;
    // Room for every entry trim() will evict (more than one where an earlier trim could not
    // run), so that nothing below throws once `k` is in the cache.
    const auto of_device = static_cast<std::size_t>(
        std::count_if(cache.kept.begin(), cache.kept.end(),
                      [device](const KeptGreen& e) { return e.device == device; }));
    evicted.reserve(of_device + 1 > cache.limit ? of_device + 1 - cache.limit : 0);
    cache.kept.push_back(std::move(k));  // nothing changed when this throws
    trim(cache, device, cache.limit, evicted);
  } catch (...) {  // std::bad_alloc: destroyed instead
    return false;
  }
  for (const KeptGreen& e : evicted) destroy_kept(e);  // outside the lock: it may wait
  return true;
}

}  // namespace

ContextOwner::~ContextOwner() {
  // Destroying a current context changes what is current, and so may a drain (with what a
  // release-error handler does meanwhile): nothing trusted from here on, nor after.
  scoped_context_forget();
  struct ForgetAfter {
    ~ForgetAfter() { scoped_context_forget(); }
  } forget_after;
  if (named.load(std::memory_order_relaxed)) {  // streams.md, invariant 5
    forget_name(Named::context, green != nullptr ? converted : created);
  }
  if (green == nullptr) {
    if (created != nullptr) release_call<&DriverApi::cuCtxDestroy>("context", created, created);
    return;
  }
  CUcontext current = nullptr;
  const bool known = converted != nullptr && release_call<&DriverApi::cuCtxGetCurrent>(
                                                 "green context", green, &current) == CUDA_SUCCESS;
  bool is_current = known && current == converted;
  // A reusable one is drained (its work done, not current here) and kept (invariant 7); one
  // that cannot be is destroyed.
  const std::uintptr_t by = made_current_by.load();
  const bool elsewhere = by != 0 && by != static_cast<std::uintptr_t>(::pthread_self());
  if (reuse && !elsewhere && known && Context::green_cache_limit() > 0 &&
      drain(green, converted, current, is_current)) {
    KeptGreen k;
    k.device = device;
    k.groups = std::move(groups);
    k.green = green;
    k.converted = converted;
    if (keep(std::move(k))) return;
  }
  // The driver leaves a destroyed green context current, a dangling handle that aborts the
  // process when made current again (measured on the H200): pop it, as cuCtxDestroy pops a
  // created context (invariant 5).
  release_call<&DriverApi::cuGreenCtxDestroy>("green context", green, green);
  if (is_current) {
    release_call<&DriverApi::cuCtxSetCurrent>("context (popping it)", converted,
                                              static_cast<CUcontext>(nullptr));
  }
}
template struct Refs<ContextOwner>;

namespace {
Subject subject_of(CUcontext context, int device) noexcept {
  return {Subject::What::context, context, device};
}

}  // namespace

const Context& nonempty(const Context& context, const char* call) {
  if (!context) {
    detail::throw_error(CUDA_ERROR_INVALID_CONTEXT, call, "empty custream::Context",
                        "the Context holds no context (default-constructed or moved from)");
  }
  return context;
}

// Primary or created, for a context of `device` that is not green (invariant 3): the primary
// context is retained for the comparison only when it is active (retaining an inactive one
// would create it, a large allocation on the device).
ContextKind context_kind(const Loaded& l, CUcontext context, int device) {
  CUcontext primary = l.devices[device].primary.load(std::memory_order_acquire);
  if (primary == nullptr) {
    unsigned flags = 0;
    int active = 0;
    call<&DriverApi::cuDevicePrimaryCtxGetState>(device_subject(device), l.devices[device].device,
                                                 &flags, &active);
    if (active == 0) return ContextKind::created;
    primary = primary_context(l, device);
  }
  return primary == context ? ContextKind::primary : ContextKind::created;
}

}  // namespace detail

const char* to_string(ContextKind kind) noexcept {
  switch (kind) {
    case ContextKind::primary:
      return "primary";
    case ContextKind::created:
      return "created";
    case ContextKind::green:
      return "green";
  }
  return "unknown";
}

namespace {
// `c`, just made (or taken from the green cache) by custream: a stale name of its handle is
// forgotten and `name`, when given, set (streams.md, invariant 5).
Context named(Context c, std::string_view name) {
  detail::forget_stale_name(detail::Named::context, c.handle());
  if (!name.empty()) c.set_name(name);
  return c;
}
}  // namespace

Context Context::create(const Device& device, unsigned flags) {
  return create(device, flags, std::string_view());
}

Context Context::create(const Device& device, unsigned flags, std::string_view name) {
  const detail::Loaded& l = detail::loaded();
  detail::entry<&DriverApi::cuCtxCreate>(l.api);  // an older driver: say so first
  detail::entry<&DriverApi::cuCtxPopCurrent>(l.api);
  auto owner = std::make_unique<detail::ContextOwner>();  // first: a failure leaks nothing
  CUcontext context = nullptr;
  if (CUresult r = detail::try_call<&DriverApi::cuCtxCreate>(&context, flags, device.handle());
      r != CUDA_SUCCESS) {
    detail::fail<&DriverApi::cuCtxCreate>(r, detail::device_subject(device.ordinal()),
                                          "flags " + std::to_string(flags));
  }
  owner->created = context;  // destroyed with the owner from here on
  // The driver pushed it: pop it, so that what was current stays current (invariant 4).
  CUcontext popped = nullptr;
  detail::call<&DriverApi::cuCtxPopCurrent>(detail::subject_of(context, device.ordinal()), &popped);
  Context c(context, nullptr, device.ordinal(), ContextKind::created);
  c.owner_ = detail::Shared<detail::ContextOwner>(owner.release());
  return named(std::move(c), name);
}

Context Context::create_green(const SmResource& sms, GreenReuse reuse) {
  return create_green(std::vector<SmResource>{sms}, reuse, std::string_view());
}

Context Context::create_green(const std::vector<SmResource>& sms, GreenReuse reuse) {
  return create_green(sms, reuse, std::string_view());
}

Context Context::create_green(const SmResource& sms, GreenReuse reuse, std::string_view name) {
  return create_green(std::vector<SmResource>{sms}, reuse, name);
}

namespace {
// A kept green context of `device` with these groups, the newest, taken out of the cache; else
// an empty KeptGreen. No driver call.
detail::KeptGreen take_green(int device, const std::vector<CUdevResource>& groups) {
  detail::GreenCache& cache = detail::green_cache();
  std::lock_guard<std::mutex> lock(cache.mutex);
  for (auto it = cache.kept.rbegin(); it != cache.kept.rend(); ++it) {
    if (it->device == device && detail::same_groups(it->groups, groups)) {
      detail::KeptGreen k = std::move(*it);
      cache.kept.erase(std::next(it).base());
      return k;
    }
  }
  return {};
}
}  // namespace

namespace {
// The driver's descriptions of `sms`: one device's non-empty groups, else Error.
std::vector<CUdevResource> group_resources(const std::vector<SmResource>& sms) {
  if (sms.empty()) {
    detail::throw_error(CUDA_ERROR_INVALID_VALUE, "custream::Context::create_green", {},
                        "no SM groups given (split them with Device::split_sms)");
  }
  const int device = sms.front().device_id();
  std::vector<CUdevResource> resources;
  for (const SmResource& group : sms) {
    if (group.device_id() != device || group.sm_count() == 0) {
      detail::throw_error(CUDA_ERROR_INVALID_VALUE, "custream::Context::create_green",
                          detail::subject_text(detail::device_subject(device)),
                          group.sm_count() == 0
                              ? std::string("an SM group is empty")
                              : "an SM group belongs to device " +
                                    std::to_string(group.device_id()) + ", another to device " +
                                    std::to_string(device) +
                                    "; a green context has the SMs of one device");
    }
    resources.push_back(group.native());
  }
  return resources;
}
}  // namespace

Context Context::create_green(const std::vector<SmResource>& sms, GreenReuse reuse,
                              std::string_view name) {
  std::vector<CUdevResource> resources = group_resources(sms);
  const int device = sms.front().device_id();
  auto owner = std::make_unique<detail::ContextOwner>();  // first: a failure leaks nothing
  owner->device = device;
  owner->reuse = reuse == GreenReuse::cached;
  if (owner->reuse) {
    detail::KeptGreen kept = take_green(device, resources);
    if (kept.green != nullptr) {  // drained when it was kept: nothing of its last user's left
      owner->green = kept.green;
      owner->converted = kept.converted;
      owner->groups = std::move(kept.groups);
      Context c(kept.converted, kept.green, device, ContextKind::green);
      c.owner_ = detail::Shared<detail::ContextOwner>(owner.release());
      return named(std::move(c), name);
    }
  }
  const detail::Loaded& l = detail::loaded();
  const detail::Subject subject = detail::device_subject(device);
  CUdevResourceDesc desc = nullptr;
  if (CUresult r = detail::try_call<&DriverApi::cuDevResourceGenerateDesc>(
          &desc, resources.data(), static_cast<unsigned>(resources.size()));
      r != CUDA_SUCCESS) {
    detail::fail<&DriverApi::cuDevResourceGenerateDesc>(
        r, subject, std::to_string(resources.size()) + " SM group(s)");
  }
  CUgreenCtx green = nullptr;
  if (CUresult r = detail::try_call<&DriverApi::cuGreenCtxCreate>(
          &green, desc, l.devices[device].device, unsigned{CU_GREEN_CTX_DEFAULT_STREAM});
      r != CUDA_SUCCESS) {
    owner->reuse = false;
    detail::fail<&DriverApi::cuGreenCtxCreate>(r, subject);
  }
  owner->green = green;  // destroyed (or kept) with the owner from here on
  CUcontext context = nullptr;
  if (CUresult r = detail::try_call<&DriverApi::cuCtxFromGreenCtx>(&context, green);
      r != CUDA_SUCCESS) {
    owner->reuse = false;  // not converted: destroyed, never kept
    detail::fail<&DriverApi::cuCtxFromGreenCtx>(r, subject);
  }
  owner->converted = context;
  if (owner->reuse) owner->groups = std::move(resources);
  Context c(context, green, device, ContextKind::green);
  c.owner_ = detail::Shared<detail::ContextOwner>(owner.release());
  return named(std::move(c), name);
}

void Context::set_name(std::string_view name) const {
  detail::nonempty(*this, "custream::Context::set_name");
  // Flagged first: an owned context's name is forgotten when it goes (streams.md, invariant 5).
  if (owner_) owner_.get()->named.store(true, std::memory_order_relaxed);
  detail::set_name(detail::Named::context, handle_, name);
}

std::string Context::name() const {
  return handle_ != nullptr ? detail::name_of(detail::Named::context, handle_) : std::string();
}

std::size_t Context::green_cache_limit() noexcept {
  detail::GreenCache& cache = detail::green_cache();
  std::lock_guard<std::mutex> lock(cache.mutex);
  return cache.limit;
}

void Context::set_green_cache_limit(std::size_t per_device) noexcept {
  std::vector<detail::KeptGreen> evicted;
  {
    detail::GreenCache& cache = detail::green_cache();
    std::lock_guard<std::mutex> lock(cache.mutex);
    cache.limit = per_device;
    try {
      detail::trim(cache, -1, per_device, evicted);
    } catch (...) {  // std::bad_alloc moving one out: the rest stays until the next trim
    }
  }
  for (const detail::KeptGreen& e : evicted) detail::destroy_kept(e);
}

std::size_t Context::green_cached_count() noexcept {
  detail::GreenCache& cache = detail::green_cache();
  std::lock_guard<std::mutex> lock(cache.mutex);
  return cache.kept.size();
}

std::size_t Context::clear_green_cache() noexcept {
  std::vector<detail::KeptGreen> evicted;
  {
    detail::GreenCache& cache = detail::green_cache();
    std::lock_guard<std::mutex> lock(cache.mutex);
    evicted.swap(cache.kept);
  }
  for (const detail::KeptGreen& e : evicted) detail::destroy_kept(e);
  return evicted.size();
}

Context Context::wrap(CUcontext context) {
  if (context == nullptr) {
    detail::throw_error(CUDA_ERROR_INVALID_CONTEXT, "custream::Context::wrap", {},
                        "the CUcontext is null");
  }
  const detail::Loaded& l = detail::loaded();
  if (const int d = detail::known_primary_device(l, context); d >= 0) {
    return Context(context, nullptr, d, ContextKind::primary);
  }
  if (l.api.cuStreamGetCtx_v2 != nullptr) {  // a converted green context: ask with it current
    ContextScope scope(context);
    CUcontext parent = nullptr;
    CUgreenCtx green = nullptr;
    detail::call<&DriverApi::cuStreamGetCtx_v2>({detail::Subject::What::context, context, -1},
                                                static_cast<CUstream>(nullptr), &parent, &green);
    if (green != nullptr) {
      return Context(context, green, detail::device_of_context(parent), ContextKind::green);
    }
  }
  const int device = detail::device_of_context(context);
  return Context(context, nullptr, device, detail::context_kind(l, context, device));
}

Context Context::wrap(CUgreenCtx green) {
  if (green == nullptr) {
    detail::throw_error(CUDA_ERROR_INVALID_CONTEXT, "custream::Context::wrap", {},
                        "the CUgreenCtx is null");
  }
  CUcontext context = nullptr;
  detail::call<&DriverApi::cuCtxFromGreenCtx>({detail::Subject::What::context, green, -1}, &context,
                                              green);
  return Context(context, green, detail::device_of_context(context), ContextKind::green);
}

Context Context::current() {
  CUcontext context = nullptr;
  detail::call<&DriverApi::cuCtxGetCurrent>({}, &context);
  return context == nullptr ? Context() : wrap(context);
}

unsigned Context::sm_count() const {
  detail::nonempty(*this, "custream::Context::sm_count");
  CUdevResource resource{};
  detail::call<&DriverApi::cuCtxGetDevResource>(detail::subject_of(handle_, device_), handle_,
                                                &resource, CU_DEV_RESOURCE_TYPE_SM);
  return resource.sm.smCount;
}

void Context::record(const Event& event) const {
  detail::nonempty(*this, "custream::Context::record");
  const CUresult r = green_ != nullptr ? detail::try_call<&DriverApi::cuGreenCtxRecordEvent>(
                                             static_cast<CUgreenCtx>(green_), event.handle())
                                       : detail::try_call<&DriverApi::cuCtxRecordEvent>(
                                             static_cast<CUcontext>(handle_), event.handle());
  if (r != CUDA_SUCCESS) {
    detail::throw_error(r,
                        green_ != nullptr
                            ? detail::EntryInfo<&DriverApi::cuGreenCtxRecordEvent>::name
                            : detail::EntryInfo<&DriverApi::cuCtxRecordEvent>::name,
                        to_string(), detail::event_text(event));
  }
  event.mark_recorded();
}

void Context::wait(const Event& event) const {
  detail::nonempty(*this, "custream::Context::wait");
  const CUresult r = green_ != nullptr ? detail::try_call<&DriverApi::cuGreenCtxWaitEvent>(
                                             static_cast<CUgreenCtx>(green_), event.handle())
                                       : detail::try_call<&DriverApi::cuCtxWaitEvent>(
                                             static_cast<CUcontext>(handle_), event.handle());
  if (r != CUDA_SUCCESS) {
    detail::throw_error(r,
                        green_ != nullptr ? detail::EntryInfo<&DriverApi::cuGreenCtxWaitEvent>::name
                                          : detail::EntryInfo<&DriverApi::cuCtxWaitEvent>::name,
                        to_string(), detail::event_text(event));
  }
}

void Context::synchronize() const {
  detail::nonempty(*this, "custream::Context::synchronize");
  ContextScope scope(*this);
  detail::call<&DriverApi::cuCtxSynchronize>(detail::subject_of(handle_, device_));
}

void Context::make_current() const {
  detail::nonempty(*this, "custream::Context::make_current");
  // Which thread it may stay current in: its last user, going on another, destroys it rather
  // than hand it to a new one (invariant 7).
  if (owner_ && kind_ == ContextKind::green) {
    std::atomic<std::uintptr_t>& by = owner_.get()->made_current_by;
    const auto self = static_cast<std::uintptr_t>(::pthread_self());
    std::uintptr_t expected = 0;
    if (!by.compare_exchange_strong(expected, self) && expected != self) {
      by.store(detail::ContextOwner::kMadeCurrentByMany);
    }
  }
  detail::call<&DriverApi::cuCtxSetCurrent>(detail::subject_of(handle_, device_),
                                            static_cast<CUcontext>(handle_));
  detail::scoped_context_forget();  // an open ContextScope's context is no longer current
}

std::string Context::to_string() const {
  if (handle_ == nullptr) return "<Context (empty)>";
  return std::string("<Context ") + detail::pointer_text(handle_) + " (" +
         custream::to_string(kind_) + ", device " + std::to_string(device_) + ")>";
}

std::ostream& operator<<(std::ostream& out, const Context& context) {
  return out << context.to_string();
}

}  // namespace custream

// custream::Library and custream::LibraryKernel: context-independent loading (CUlibrary,
// CUkernel), the content-addressed cache, per-context functions. Design:
// docs/design/libraries.md.
#include "custream/library.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <list>
#include <mutex>
#include <optional>
#include <string>

#include "context.hpp"
#include "custream/context.hpp"
#include "custream/context_scope.hpp"
#include "custream/device.hpp"
#include "custream/error.hpp"
#include "custream/library_kernel.hpp"
#include "driver.hpp"
#include "launch.hpp"
#include "library.hpp"
#include "module.hpp"

namespace custream {
namespace detail {

std::uint64_t hash_bytes(const void* data, std::size_t bytes) noexcept {
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint64_t h = 0x9E3779B97F4A7C15ull ^ (bytes * 0xff51afd7ed558ccdull);
  std::size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    std::uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 0xff51afd7ed558ccdull;
    h ^= h >> 29;
  }
  std::uint64_t tail = 0;
  std::memcpy(&tail, p + i, bytes - i);
  h = (h ^ tail) * 0xc4ceb9fe1a85ec53ull;
  return h ^ (h >> 32);
}

namespace {

// Every loaded library, so that a graph can hold those it may launch (invariant 5). Guarded by
// one mutex: written when a library is loaded or unloaded, read when custream instantiates a
// graph, never on a launch.
struct Registry {
  std::mutex mutex;
  std::vector<LibraryOwner*> owners;
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: owners may outlive static destruction
  return *r;
}

void register_owner(LibraryOwner* owner) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.owners.push_back(owner);
}

// Forgets `owner`; the caller holds the registry's mutex.
void unregister_locked(Registry& r, LibraryOwner* owner) noexcept {
  const auto it = std::find(r.owners.begin(), r.owners.end(), owner);
  if (it == r.owners.end()) return;
  *it = r.owners.back();
  r.owners.pop_back();
}

// Adds a reference to `owner` unless its last one is already gone (it is being destroyed and
// waits for the registry's mutex to unregister itself).
bool try_retain(LibraryOwner* owner) noexcept {
  long refs = owner->refs.load(std::memory_order_relaxed);
  while (refs > 0) {
    if (owner->refs.compare_exchange_weak(refs, refs + 1, std::memory_order_relaxed)) return true;
  }
  return false;
}

}  // namespace

std::atomic<std::uint64_t> g_capture_epoch{kAnyCapture};

std::uint64_t next_capture_epoch() noexcept {
  return g_capture_epoch.fetch_add(1, std::memory_order_relaxed) + 1;
}

void stamp_launch(LibraryOwner& owner, std::uint64_t epoch) noexcept {
  std::uint64_t stamp = owner.launched.load(std::memory_order_relaxed);
  while (stamp < epoch &&  // never lowered: a racing older launch must not hide a newer one
         !owner.launched.compare_exchange_weak(stamp, epoch, std::memory_order_relaxed)) {
  }
}

LibraryOwner::~LibraryOwner() {
  Registry& r = registry();
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    unregister_locked(r, this);
  }
  if (library != nullptr) release_call<&DriverApi::cuLibraryUnload>("library", library, library);
}
template struct Refs<LibraryOwner>;

void GraphLibraries::add(LibraryOwner* owner) {
  owner->graphs.fetch_add(1, std::memory_order_relaxed);
  held_.push_back(owner);
}

void GraphLibraries::hold_since(std::uint64_t since) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  held_.reserve(held_.size() + r.owners.size());  // nothing below throws
  for (LibraryOwner* owner : r.owners) {
    if (!owner->exposed.load(std::memory_order_relaxed) &&
        owner->launched.load(std::memory_order_relaxed) < since) {
      continue;
    }
    if (std::find(held_.begin(), held_.end(), owner) != held_.end()) continue;
    if (try_retain(owner)) add(owner);
  }
}

void GraphLibraries::hold(const GraphLibraries& other) {
  for (LibraryOwner* owner : other.held_) {
    if (std::find(held_.begin(), held_.end(), owner) != held_.end()) continue;
    held_.reserve(held_.size() + 1);
    Refs<LibraryOwner>::retain(owner);  // `other` holds one: it cannot be the last
    add(owner);
  }
}

GraphLibraries::~GraphLibraries() {
  for (LibraryOwner* owner : held_) {
    owner->graphs.fetch_sub(1, std::memory_order_relaxed);
    Refs<LibraryOwner>::release(owner);  // the last unloads it
  }
}

namespace {

Subject library_subject(CUlibrary library) noexcept {
  return {Subject::What::library, library, -1};
}

std::unique_ptr<KernelState> make_state(LibraryOwner& owner, CUkernel kernel, std::string name,
                                        int devices) {
  auto state = std::make_unique<KernelState>();
  state->kernel = kernel;
  state->name = std::move(name);
  state->primary = std::make_unique<std::atomic<CUfunction>[]>(devices > 0 ? devices : 1);
  for (int i = 0; i < devices; ++i) state->primary[i].store(nullptr, std::memory_order_relaxed);
  state->bind(&owner);
  return state;
}

// Every kernel of `owner`'s library, with its name (invariant 2).
void enumerate(LibraryOwner& owner, const Loaded& l) {
  if (l.api.cuLibraryGetKernelCount == nullptr || l.api.cuLibraryEnumerateKernels == nullptr ||
      l.api.cuKernelGetName == nullptr) {
    return;  // an older driver: looked up by name on first use
  }
  const Subject subject = library_subject(owner.library);
  unsigned count = 0;
  call<&DriverApi::cuLibraryGetKernelCount>(subject, &count, owner.library);
  std::vector<CUkernel> kernels(count);
  if (count > 0) {
    call<&DriverApi::cuLibraryEnumerateKernels>(subject, kernels.data(), count, owner.library);
  }
  for (CUkernel k : kernels) {
    const char* name = nullptr;
    call<&DriverApi::cuKernelGetName>(subject, &name, k);
    owner.kernels.push_back(make_state(owner, k, name != nullptr ? name : "", l.device_count));
    owner.names.push_back(owner.kernels.back()->name);
    owner.by_name.emplace(owner.names.back(), owner.kernels.back().get());
  }
  owner.enumerated = true;
}

// --- The content-addressed cache (invariant 4) ---

constexpr std::size_t kCacheEntries = 64;
constexpr std::size_t kCacheBytes = std::size_t{256} << 20;

struct CacheEntry {
  std::uint64_t hash;
  std::string image;
  Library library;
};

struct Cache {
  std::mutex mutex;
  std::list<CacheEntry> entries;  // most recently used first
  std::size_t bytes = 0;
};

Cache& cache() {
  static Cache* c = new Cache;  // never destroyed: no unload after the driver is gone
  return *c;
}

}  // namespace
}  // namespace detail

using detail::DriverApi;

// --- Library ---

Library Library::load(const void* image, std::size_t bytes, LibraryCache use_cache,
                      const char* what) {
  const detail::Loaded& l = detail::loaded();
  detail::entry<&DriverApi::cuLibraryLoadData>(l.api);  // an older driver: say so first
  std::uint64_t hash = 0;
  if (use_cache == LibraryCache::use) {
    hash = detail::hash_bytes(image, bytes);  // a hit also compares every byte
    detail::Cache& c = detail::cache();
    std::lock_guard<std::mutex> lock(c.mutex);
    for (auto it = c.entries.begin(); it != c.entries.end(); ++it) {
      if (it->hash == hash && it->image.size() == bytes &&
          std::memcmp(it->image.data(), image, bytes) == 0) {
        c.entries.splice(c.entries.begin(), c.entries, it);  // most recently used
        return it->library;
      }
    }
  }
  detail::JitLogs logs;
  auto owner = std::make_unique<detail::LibraryOwner>();  // first: a failure leaks nothing
  if (CUresult r = l.api.cuLibraryLoadData(&owner->library, image, logs.options, logs.values,
                                           logs.count, nullptr, nullptr, 0u);
      r != CUDA_SUCCESS) {
    owner->library = nullptr;
    detail::fail<&DriverApi::cuLibraryLoadData>(r, {}, logs.failure(what));
  }
  detail::enumerate(*owner, l);         // a failure unloads it (the owner)
  detail::register_owner(owner.get());  // invariant 5; the owner's destructor unregisters it
  Library library;
  library.owner_ = detail::Shared<detail::LibraryOwner>(owner.release());
  if (use_cache == LibraryCache::use) {
    detail::Cache& c = detail::cache();
    std::lock_guard<std::mutex> lock(c.mutex);
    c.entries.push_front({hash, std::string(static_cast<const char*>(image), bytes), library});
    c.bytes += bytes;
    while (c.entries.size() > detail::kCacheEntries ||
           (c.bytes > detail::kCacheBytes && c.entries.size() > 1)) {
      c.bytes -= c.entries.back().image.size();
      c.entries.pop_back();
    }
  }
  return library;
}

Library Library::from_ptx(std::string_view ptx, LibraryCache cache) {
  const std::string text(ptx);  // the driver needs it NUL-terminated
  return load(text.c_str(), text.size() + 1, cache, "PTX text");
}

Library Library::from_image(const void* image, std::size_t bytes, LibraryCache cache) {
  if (image == nullptr || bytes == 0) {
    throw Error(CUDA_ERROR_INVALID_VALUE, "custream::Library::from_image", {},
                image == nullptr ? "the image is null" : "the image is empty");
  }
  return load(image, bytes, cache, "a library image");
}

Library Library::from_file(const std::string& path, LibraryCache cache) {
  const std::string bytes = detail::read_image_file(path, "custream::Library::from_file");
  return load(bytes.data(), bytes.size(), cache, ("file " + path).c_str());
}

void Library::clear_cache() noexcept {
  std::list<detail::CacheEntry> dropped;  // unloaded outside the lock
  {
    detail::Cache& c = detail::cache();
    std::lock_guard<std::mutex> lock(c.mutex);
    dropped.swap(c.entries);
    c.bytes = 0;
  }
}

std::size_t Library::cached_count() noexcept {
  detail::Cache& c = detail::cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  return c.entries.size();
}

namespace {
[[noreturn, gnu::cold]] void refuse_empty(const char* call) {
  throw Error(CUDA_ERROR_INVALID_HANDLE, call, "empty custream::Library",
              "the Library holds no library (default-constructed or moved from)");
}

[[noreturn, gnu::cold]] void refuse_unload(CUlibrary library, long graphs, long others) {
  std::string why;
  if (graphs > 0) {
    why = std::to_string(graphs) +
          " graph(s) custream instantiated may still launch its kernels (destroy them first)";
  }
  if (others > 0) {
    why += (why.empty() ? "" : "; ") + std::to_string(others) +
           " other reference(s) (copies of the Library or LibraryKernels taken from it) still use "
           "it";
  }
  throw Error(CUDA_ERROR_NOT_PERMITTED, "cuLibraryUnload",
              "library " + detail::pointer_text(library),
              why + "; custream refused to unload it (it stays loaded until the last goes)");
}
}  // namespace

void Library::unload() {
  if (!owner_) refuse_empty("cuLibraryUnload");
  detail::LibraryOwner* owner = owner_.get();
  Library cached;  // the cache's reference, dropped after the locks (not the last)
  {
    // The cache first, then the registry (the order every path takes): while both are held no
    // new reference can appear, since only the cache and a graph's instantiation hand one out
    // from nothing.
    detail::Cache& c = detail::cache();
    std::lock_guard<std::mutex> cache_lock(c.mutex);
    auto entry = std::find_if(c.entries.begin(), c.entries.end(),
                              [&](const detail::CacheEntry& e) { return e.library == *this; });
    detail::Registry& r = detail::registry();
    std::lock_guard<std::mutex> registry_lock(r.mutex);
    const long graphs = owner->graphs.load(std::memory_order_relaxed);
    const long others = owner->refs.load(std::memory_order_relaxed) - 1 - graphs -
                        (entry != c.entries.end() ? 1 : 0);
    if (graphs > 0 || others > 0) refuse_unload(owner->library, graphs, others);
    detail::call<&DriverApi::cuLibraryUnload>(detail::library_subject(owner->library),
                                              owner->library);
    owner->library = nullptr;  // unloaded: the owner's destructor has nothing left to do
    detail::unregister_locked(r, owner);
    if (entry != c.entries.end()) {
      cached = std::move(entry->library);
      c.bytes -= entry->image.size();
      c.entries.erase(entry);
    }
  }
  owner_ = {};
}

CUlibrary Library::handle() const noexcept {
  if (!owner_) return nullptr;
  detail::note_exposed(*owner_.get());  // its kernels may now be launched raw (invariant 5)
  return owner_.get()->library;
}

const std::vector<std::string>& Library::kernel_names() const {
  if (!owner_) refuse_empty("custream::Library::kernel_names");
  detail::LibraryOwner& owner = *owner_.get();
  if (!owner.enumerated) {
    detail::entry<&DriverApi::cuLibraryGetKernelCount>(detail::api());  // names the driver
  }
  return owner.names;
}

Library Library::uncounted(detail::LibraryOwner* owner) noexcept {
  Library library;
  library.owner_ = detail::Shared<detail::LibraryOwner>(owner);  // adopts no reference
  return library;
}

LibraryKernel Library::kernel(const std::string& name) && {
  return static_cast<const Library&>(*this).kernel(name);
}

const LibraryKernel& Library::kernel(const std::string& name) const& {
  if (!owner_) refuse_empty("cuLibraryGetKernel");
  detail::LibraryOwner& owner = *owner_.get();
  if (owner.enumerated) {  // immutable since the load: no lock (invariant 2)
    if (auto it = owner.by_name.find(name); it != owner.by_name.end()) {
      return it->second->handle;
    }
    std::string known;
    for (const std::string& n : owner.names) known += (known.empty() ? "" : ", ") + n;
    throw Error(CUDA_ERROR_NOT_FOUND, "cuLibraryGetKernel",
                "kernel \"" + name + "\" in library " + detail::pointer_text(owner.library),
                "the library's kernels: " + (known.empty() ? std::string("none") : known));
  }
  std::lock_guard<std::mutex> lock(owner.lazy_mutex);
  auto& slot = owner.lazy[name];
  if (!slot) {
    CUkernel k = nullptr;
    if (CUresult r =
            detail::try_call<&DriverApi::cuLibraryGetKernel>(&k, owner.library, name.c_str());
        r != CUDA_SUCCESS) {
      owner.lazy.erase(name);
      detail::fail<&DriverApi::cuLibraryGetKernel>(r, detail::library_subject(owner.library),
                                                   "kernel \"" + name + "\"");
    }
    slot = detail::make_state(owner, k, name, detail::loaded().device_count);
  }
  return slot->handle;
}

void Library::preload(const Context& context) const {
  if (!owner_) refuse_empty("custream::Library::preload");
  detail::LibraryOwner& owner = *owner_.get();
  if (!owner.enumerated) {
    detail::entry<&DriverApi::cuLibraryGetKernelCount>(detail::api());  // names the driver
  }
  for (const auto& state : owner.kernels) {
    (void)state->handle.resolve(context);
  }
}

void Library::preload(const Device& device) const { preload(device.primary_context()); }

LibraryGlobal Library::global(const std::string& name, const Context& context) const {
  if (!owner_) refuse_empty("cuLibraryGetGlobal");
  ContextScope scope(detail::nonempty(context, "custream::Library::global"));
  LibraryGlobal g;
  if (CUresult r = detail::try_call<&DriverApi::cuLibraryGetGlobal>(
          &g.address, &g.bytes, owner_.get()->library, name.c_str());
      r != CUDA_SUCCESS) {
    detail::fail<&DriverApi::cuLibraryGetGlobal>(
        r, detail::library_subject(owner_.get()->library),
        "variable \"" + name + "\" in the " + to_string(context.kind()) + " context " +
            detail::pointer_text(context.handle()) + " (device " +
            std::to_string(context.device_id()) + ")");
  }
  return g;
}

LibraryGlobal Library::managed(const std::string& name) const {
  if (!owner_) refuse_empty("cuLibraryGetManaged");
  LibraryGlobal g;
  if (CUresult r = detail::try_call<&DriverApi::cuLibraryGetManaged>(
          &g.address, &g.bytes, owner_.get()->library, name.c_str());
      r != CUDA_SUCCESS) {
    detail::fail<&DriverApi::cuLibraryGetManaged>(r, detail::library_subject(owner_.get()->library),
                                                  "managed variable \"" + name + "\"");
  }
  return g;
}

// --- LibraryKernel ---

namespace detail {

void load_param_sizes(KernelState& state, const StreamRef& stream) {
  std::lock_guard<std::mutex> lock(state.params_mutex);
  if (state.params.load(std::memory_order_relaxed) != KernelState::Params::unasked) return;
  const DriverApi& api = detail::api();
  if (api.cuKernelGetParamInfo == nullptr) {  // CUDA 12.4
    state.params.store(KernelState::Params::unknown, std::memory_order_release);
    return;
  }
  // The driver asks for a current context (the stream's; the current one for a special handle).
  std::optional<ContextScope> scope;
  if (!stream.is_special()) scope.emplace(stream.context());  // as launch.cpp's queries
  std::vector<std::size_t> sizes;
  for (;;) {
    std::size_t offset = 0, size = 0;
    const CUresult r = api.cuKernelGetParamInfo(state.kernel, sizes.size(), &offset, &size);
    if (r == CUDA_ERROR_INVALID_VALUE) break;  // past the last parameter
    if (r == CUDA_ERROR_NOT_SUPPORTED) {       // an image the driver cannot tell of
      state.params.store(KernelState::Params::unknown, std::memory_order_release);
      return;
    }
    if (r != CUDA_SUCCESS) {
      fail<&DriverApi::cuKernelGetParamInfo>(
          r, {Subject::What::stream, stream.handle(), stream.device_id()},
          "parameter " + std::to_string(sizes.size()) + " of kernel \"" + state.name + "\"");
    }
    sizes.push_back(size);
  }
  state.param_sizes = std::move(sizes);
  state.params.store(KernelState::Params::known, std::memory_order_release);
}

[[noreturn, gnu::cold]] void refuse_arguments(const KernelState& state, std::string why) {
  std::string layout;
  for (std::size_t i = 0; i < state.param_sizes.size(); ++i) {
    layout += (i == 0 ? "" : ", ") + std::to_string(state.param_sizes[i]);
  }
  throw Error(CUDA_ERROR_INVALID_VALUE, "cuLaunchKernel", "kernel \"" + state.name + "\"",
              std::move(why) + "; its parameters take " +
                  (layout.empty() ? std::string("no bytes") : layout + " bytes") +
                  " (custream refused the launch without calling the driver)");
}

void check_arguments(const KernelState& state, const std::size_t* sizes, std::size_t count) {
  const std::vector<std::size_t>& expected = state.param_sizes;
  if (count != expected.size()) {
    refuse_arguments(state, "the kernel has " + std::to_string(expected.size()) +
                                " parameter(s), the launch gave " + std::to_string(count) +
                                " argument(s)");
  }
  for (std::size_t i = 0; i < count; ++i) {
    if (sizes[i] != expected[i]) {
      refuse_arguments(state, "argument " + std::to_string(i) + " has " + std::to_string(sizes[i]) +
                                  " bytes, parameter " + std::to_string(i) + " takes " +
                                  std::to_string(expected[i]));
    }
  }
}

}  // namespace detail

const std::string& LibraryKernel::name() const noexcept {
  static const std::string none;
  return state_ != nullptr ? state_->name : none;
}

CUkernel LibraryKernel::kernel_or_null() const noexcept {
  return state_ != nullptr ? state_->kernel : nullptr;
}

CUkernel LibraryKernel::handle() const noexcept {
  if (state_ == nullptr) return nullptr;
  detail::note_exposed(*library_.owner_.get());  // may now be launched raw (invariant 5)
  return state_->kernel;
}

Library LibraryKernel::library() const noexcept { return library_; }

namespace {
[[noreturn, gnu::cold]] void refuse_empty_kernel(const char* call) {
  throw Error(CUDA_ERROR_INVALID_HANDLE, call, "empty custream::LibraryKernel",
              "the LibraryKernel holds no kernel");
}
}  // namespace

CUfunction LibraryKernel::function(const Context& context) const {
  if (state_ == nullptr) refuse_empty_kernel("cuKernelGetFunction");
  detail::note_exposed(*library_.owner_.get());  // may now be launched raw (invariant 5)
  return resolve(context);
}

CUfunction LibraryKernel::resolve(const Context& context) const {
  const bool primary = context.kind() == ContextKind::primary;
  std::atomic<CUfunction>* slot = primary ? &state_->primary[context.device_id()] : nullptr;
  if (slot != nullptr) {
    if (CUfunction f = slot->load(std::memory_order_acquire)) return f;
  }
  // Resolved in the context (invariant 3): cuKernelGetFunction loads the kernel there.
  ContextScope scope(detail::nonempty(context, "custream::LibraryKernel::function"));
  CUfunction f = nullptr;
  if (CUresult r = detail::try_call<&DriverApi::cuKernelGetFunction>(&f, state_->kernel);
      r != CUDA_SUCCESS) {
    detail::fail<&DriverApi::cuKernelGetFunction>(
        r, {detail::Subject::What::context, context.handle(), context.device_id()},
        "kernel \"" + state_->name + "\" (" + to_string(context.kind()) + " context)");
  }
  if (slot != nullptr) slot->store(f, std::memory_order_release);  // the same f every time
  return f;
}

CUfunction LibraryKernel::function_for(const StreamRef& stream) const {
  if (state_ == nullptr) refuse_empty_kernel("cuLaunchKernel");
  const int device = stream.device_id();
  if (device >= 0 && stream.context_kind() == ContextKind::primary) {
    if (CUfunction f = state_->primary[device].load(std::memory_order_acquire)) return f;  // 3
    return resolve(Device(device).primary_context());
  }
  // A special handle means the current context's stream: the driver resolves a CUkernel
  // passed as the function in the current context.
  if (stream.is_special()) return reinterpret_cast<CUfunction>(state_->kernel);
  return resolve(Context::wrap(stream.context()));
}

void LibraryKernel::check(const StreamRef& stream, const std::size_t* sizes,
                          std::size_t count) const {
  auto params = state_->params.load(std::memory_order_acquire);
  if (params == detail::KernelState::Params::unasked) {
    detail::load_param_sizes(*state_, stream);
    params = state_->params.load(std::memory_order_acquire);
  }
  if (params == detail::KernelState::Params::known) detail::check_arguments(*state_, sizes, count);
}

CUfunction LibraryKernel::prepare(const StreamRef& stream, const std::size_t* sizes,
                                  std::size_t count) const {
  const CUfunction f = function_for(stream);
  if (sizes != nullptr) check(stream, sizes, count);  // invariant 6
  detail::note_launch(*library_.owner_.get());        // invariant 5
  return f;
}

void LibraryKernel::launch_checked(const StreamRef& stream, Dim3 grid, Dim3 block,
                                   std::size_t shared_bytes, void** params,
                                   const std::size_t* sizes, std::size_t count) const {
  const CUfunction f = prepare(stream, sizes, count);
  const CUresult r = detail::api().cuLaunchKernel(f, grid.x, grid.y, grid.z, block.x, block.y,
                                                  block.z, static_cast<unsigned>(shared_bytes),
                                                  stream.handle(), params, nullptr);
  if (r != CUDA_SUCCESS) {
    detail::throw_stream_error(r, "cuLaunchKernel", stream,
                               "library kernel \"" + state_->name + "\", grid " +
                                   detail::dims_text(grid) + ", block " + detail::dims_text(block) +
                                   ", " + std::to_string(shared_bytes) + " bytes of shared memory");
  }
}

void LibraryKernel::launch_checked(const StreamRef& stream, const LaunchConfig& config,
                                   void** params, const std::size_t* sizes,
                                   std::size_t count) const {
  const CUfunction f = prepare(stream, sizes, count);
  detail::launch_with_config(f, stream, config, params, state_->name);
}

void LibraryKernel::launch_raw(const StreamRef& stream, Dim3 grid, Dim3 block,
                               std::size_t shared_bytes, void** params) const {
  launch_checked(stream, grid, block, shared_bytes, params, nullptr, 0);
}

void LibraryKernel::launch_raw(const StreamRef& stream, const LaunchConfig& config,
                               void** params) const {
  launch_checked(stream, config, params, nullptr, 0);
}

int LibraryKernel::attribute(CUfunction_attribute attribute, int device) const {
  const Device d(device);
  int value = 0;
  if (CUresult r = detail::try_call<&DriverApi::cuKernelGetAttribute>(&value, attribute,
                                                                      kernel_or_null(), d.handle());
      r != CUDA_SUCCESS) {
    detail::fail<&DriverApi::cuKernelGetAttribute>(
        r, detail::device_subject(device),
        "kernel \"" + name() + "\", attribute " + std::to_string(static_cast<int>(attribute)));
  }
  return value;
}

void LibraryKernel::set_attribute(CUfunction_attribute attribute, int value, int device) const {
  const Device d(device);
  if (CUresult r = detail::try_call<&DriverApi::cuKernelSetAttribute>(attribute, value,
                                                                      kernel_or_null(), d.handle());
      r != CUDA_SUCCESS) {
    detail::fail<&DriverApi::cuKernelSetAttribute>(r, detail::device_subject(device),
                                                   "kernel \"" + name() + "\", attribute " +
                                                       std::to_string(static_cast<int>(attribute)) +
                                                       " = " + std::to_string(value));
  }
}

}  // namespace custream

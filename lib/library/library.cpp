// custream::Library: context-independent loading (CUlibrary, CUkernel), kernels by name, the
// JIT logs of lazy loads, unloading. Design: docs/design/libraries.md.
#include "custream/library.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <list>
#include <mutex>
#include <string>
#include <system_error>

#include "context.hpp"
#include "custream/context.hpp"
#include "custream/context_scope.hpp"
#include "custream/device.hpp"
#include "custream/error.hpp"
#include "custream/library_kernel.hpp"
#include "driver.hpp"
#include "library.hpp"
#include "module.hpp"

namespace custream {
namespace detail {

namespace {

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

// Keeps the JIT's logs of a load that succeeded (invariant 8).
void keep_jit_logs(LibraryOwner& owner, JitLogs& logs) {
  logs.error[sizeof logs.error - 1] = '\0';
  logs.info[sizeof logs.info - 1] = '\0';
  owner.jit_error_log = logs.error;
  owner.jit_info_log = logs.info;
}

}  // namespace
}  // namespace detail

using detail::DriverApi;

// --- Library ---

Library Library::load(const void* image, std::size_t bytes, LibraryCache use_cache,
                      const char* what) {
  const detail::Loaded& l = detail::loaded();
  detail::entry<&DriverApi::cuLibraryLoadData>(l.api);  // an older driver: say so first
  if (use_cache == LibraryCache::bypass) return load_new(l, image, bytes, what, nullptr);
  return detail::cached_load(
      image, bytes, [&](bool* cacheable) { return load_new(l, image, bytes, what, cacheable); });
}

Library Library::load_new(const detail::Loaded& l, const void* image, std::size_t bytes,
                          const char* what, bool* cacheable) {
  (void)bytes;  // the driver reads the image's own size
  detail::JitLogs logs;
  auto owner = std::make_unique<detail::LibraryOwner>();  // first: a failure leaks nothing
  if (CUresult r = detail::try_call<&DriverApi::cuLibraryLoadData>(
          &owner->library, image, logs.options, logs.values, logs.count, nullptr, nullptr, 0u);
      r != CUDA_SUCCESS) {
    owner->library = nullptr;
    detail::fail<&DriverApi::cuLibraryLoadData>(r, {}, logs.failure(what));
  }
  detail::keep_jit_logs(*owner, logs);  // invariant 8; a failure unloads it (the owner)
  detail::enumerate(*owner, l);
  detail::register_code(owner.get());  // invariant 5; the owner's destructor unregisters it
  if (cacheable != nullptr) *cacheable = !owner->broken();  // invariant 8
  Library library;
  library.owner_ = detail::Shared<detail::LibraryOwner>(owner.release());
  return library;
}

Library Library::from_ptx(std::string_view ptx, LibraryCache cache) {
  const std::string text(ptx);  // the driver needs it NUL-terminated
  return load(text.c_str(), text.size() + 1, cache, "PTX text");
}

Library Library::from_image(const void* image, std::size_t bytes, LibraryCache cache) {
  if (image == nullptr || bytes == 0) {
    detail::throw_error(CUDA_ERROR_INVALID_VALUE, "custream::Library::from_image", {},
                        image == nullptr ? "the image is null" : "the image is empty");
  }
  return load(image, bytes, cache, "a library image");
}

Library Library::from_file(const std::string& path, LibraryCache cache) {
  const std::string bytes = detail::read_image_file(path, "custream::Library::from_file");
  return load(bytes.data(), bytes.size(), cache, ("file " + path).c_str());
}

namespace {
[[noreturn, gnu::cold]] void refuse_empty(const char* call) {
  detail::throw_error(CUDA_ERROR_INVALID_HANDLE, call, "empty custream::Library",
                      "the Library holds no library (default-constructed or moved from)");
}

// Throws the error of a kernel lookup that missed in an enumerated library: the driver's own
// error for an image that did not compile (its first failing use, invariant 8), else
// CUDA_ERROR_NOT_FOUND listing the kernels; the JIT error log appended when the load wrote one.
[[noreturn, gnu::cold]] void refuse_kernel(const detail::LibraryOwner& owner,
                                           const std::string& name) {
  const std::string what = "kernel \"" + name + "\"";
  if (owner.broken()) {
    CUkernel k = nullptr;
    if (CUresult r =
            detail::try_call<&DriverApi::cuLibraryGetKernel>(&k, owner.library, name.c_str());
        r != CUDA_SUCCESS) {
      detail::fail<&DriverApi::cuLibraryGetKernel>(r, detail::library_subject(owner.library),
                                                   what + detail::jit_log_text(owner));
    }
  }
  std::string known;
  for (const std::string& n : owner.names) known += (known.empty() ? "" : ", ") + n;
  detail::throw_error(CUDA_ERROR_NOT_FOUND, detail::EntryInfo<&DriverApi::cuLibraryGetKernel>::name,
                      what + " in library " + detail::pointer_text(owner.library),
                      "the library's kernels: " + (known.empty() ? std::string("none") : known) +
                          detail::jit_log_text(owner));
}

// Throws the error of preloading a library whose image did not compile (invariant 8).
[[noreturn, gnu::cold]] void refuse_broken(const detail::LibraryOwner& owner, const char* call) {
  detail::throw_error(CUDA_ERROR_INVALID_IMAGE, call,
                      "library " + detail::pointer_text(owner.library),
                      "its image did not compile when the driver loaded it (lazily), so it has no "
                      "kernels (custream refused without calling the driver)" +
                          detail::jit_log_text(owner));
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
  detail::throw_error(
      CUDA_ERROR_NOT_PERMITTED, detail::EntryInfo<&DriverApi::cuLibraryUnload>::name,
      "library " + detail::pointer_text(library),
      why + "; custream refused to unload it (it stays loaded until the last goes)");
}
}  // namespace

void Library::unload() {
  if (!owner_) refuse_empty(detail::EntryInfo<&DriverApi::cuLibraryUnload>::name);
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
    detail::unregister_code_locked(r, owner);
    if (entry != c.entries.end()) {
      cached = std::move(entry->library);
      c.bytes -= entry->image.size();
      c.entries.erase(entry);
    }
  }
  owner_ = {};
}

const std::string& Library::jit_error_log() const noexcept {
  static const std::string none;
  return owner_ ? owner_.get()->jit_error_log : none;
}

const std::string& Library::jit_info_log() const noexcept {
  static const std::string none;
  return owner_ ? owner_.get()->jit_info_log : none;
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
  if (!owner_) refuse_empty(detail::EntryInfo<&DriverApi::cuLibraryGetKernel>::name);
  detail::LibraryOwner& owner = *owner_.get();
  if (owner.enumerated) {  // immutable since the load: no lock (invariant 2)
    if (auto it = owner.by_name.find(name); it != owner.by_name.end()) {
      return it->second->handle;
    }
    refuse_kernel(owner, name);
  }
  std::lock_guard<std::mutex> lock(owner.lazy_mutex);
  auto& slot = owner.lazy[name];
  if (!slot) {
    CUkernel k = nullptr;
    if (CUresult r =
            detail::try_call<&DriverApi::cuLibraryGetKernel>(&k, owner.library, name.c_str());
        r != CUDA_SUCCESS) {
      owner.lazy.erase(name);
      detail::fail<&DriverApi::cuLibraryGetKernel>(
          r, detail::library_subject(owner.library),
          "kernel \"" + name + "\"" + detail::jit_log_text(owner));
    }
    slot = detail::make_state(owner, k, name, detail::loaded().device_count);
  }
  return slot->handle;
}

void Library::preload(const Context& context) const {
  if (!owner_) refuse_empty("custream::Library::preload");
  detail::nonempty(context, "custream::Library::preload");  // before any kernel reads it
  detail::LibraryOwner& owner = *owner_.get();
  if (owner.broken()) refuse_broken(owner, "custream::Library::preload");
  if (!owner.enumerated) {
    detail::entry<&DriverApi::cuLibraryGetKernelCount>(detail::api());  // names the driver
  }
  for (const auto& state : owner.kernels) {
    (void)state->handle.resolve(context);
  }
}

void Library::preload(const Device& device) const { preload(device.primary_context()); }

LibraryGlobal Library::global(const std::string& name, const Context& context) const {
  if (!owner_) refuse_empty(detail::EntryInfo<&DriverApi::cuLibraryGetGlobal>::name);
  ContextScope scope(detail::nonempty(context, "custream::Library::global"));
  LibraryGlobal g;
  if (CUresult r = detail::try_call<&DriverApi::cuLibraryGetGlobal>(
          &g.address, &g.bytes, owner_.get()->library, name.c_str());
      r != CUDA_SUCCESS) {
    detail::fail<&DriverApi::cuLibraryGetGlobal>(
        r, detail::library_subject(owner_.get()->library),
        "variable \"" + name + "\" in the " + to_string(context.kind()) + " context " +
            detail::pointer_text(context.handle()) + " (device " +
            std::to_string(context.device_id()) + ")" + detail::jit_log_text(*owner_.get()));
  }
  return g;
}

LibraryGlobal Library::managed(const std::string& name) const {
  if (!owner_) refuse_empty(detail::EntryInfo<&DriverApi::cuLibraryGetManaged>::name);
  LibraryGlobal g;
  if (CUresult r = detail::try_call<&DriverApi::cuLibraryGetManaged>(
          &g.address, &g.bytes, owner_.get()->library, name.c_str());
      r != CUDA_SUCCESS) {
    detail::fail<&DriverApi::cuLibraryGetManaged>(
        r, detail::library_subject(owner_.get()->library),
        "managed variable \"" + name + "\"" + detail::jit_log_text(*owner_.get()));
  }
  return g;
}

// --- LibraryKernel ---
}  // namespace custream

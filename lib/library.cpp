// custream::Library and custream::LibraryKernel: context-independent loading (CUlibrary,
// CUkernel), the content-addressed cache, per-context functions. Design:
// docs/design/libraries.md.
#include "custream/library.hpp"

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <list>
#include <mutex>
#include <string>

#include "context.hpp"
#include "custream/context.hpp"
#include "custream/context_scope.hpp"
#include "custream/device.hpp"
#include "custream/error.hpp"
#include "custream/library_kernel.hpp"
#include "driver.hpp"
#include "library.hpp"

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

LibraryOwner::~LibraryOwner() {
  if (library != nullptr) release_call<&DriverApi::cuLibraryUnload>("library", library, library);
}
template struct Refs<LibraryOwner>;

namespace {

Subject library_subject(CUlibrary library) noexcept {
  return {Subject::What::library, library, -1};
}

std::unique_ptr<KernelState> make_state(CUkernel kernel, std::string name, int devices) {
  auto state = std::make_unique<KernelState>();
  state->kernel = kernel;
  state->name = std::move(name);
  state->primary = std::make_unique<std::atomic<CUfunction>[]>(devices > 0 ? devices : 1);
  for (int i = 0; i < devices; ++i) state->primary[i].store(nullptr, std::memory_order_relaxed);
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
    owner.kernels.push_back(make_state(k, name != nullptr ? name : "", l.device_count));
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
  char error_log[8192] = {};
  char info_log[4096] = {};
  CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                            CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES};
  void* values[] = {
      error_log, reinterpret_cast<void*>(static_cast<std::uintptr_t>(sizeof error_log)), info_log,
      reinterpret_cast<void*>(static_cast<std::uintptr_t>(sizeof info_log))};
  auto owner = std::make_unique<detail::LibraryOwner>();  // first: a failure leaks nothing
  if (CUresult r = l.api.cuLibraryLoadData(&owner->library, image, options, values, 4u, nullptr,
                                           nullptr, 0u);
      r != CUDA_SUCCESS) {
    owner->library = nullptr;
    error_log[sizeof error_log - 1] = '\0';
    std::string detail = std::string("loading ") + what;
    if (error_log[0] != '\0') detail += "; JIT error log:\n" + std::string(error_log);
    detail::fail<&DriverApi::cuLibraryLoadData>(r, {}, std::move(detail));
  }
  detail::enumerate(*owner, l);  // a failure unloads it (the owner)
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
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw Error(CUDA_ERROR_FILE_NOT_FOUND, "custream::Library::from_file", path,
                "cannot open the file");
  }
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) {
    throw Error(CUDA_ERROR_FILE_NOT_FOUND, "custream::Library::from_file", path,
                "cannot read the file");
  }
  bytes.push_back('\0');  // PTX files need the terminator; images ignore it
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

CUlibrary Library::handle() const noexcept { return owner_ ? owner_.get()->library : nullptr; }

namespace {
[[noreturn, gnu::cold]] void refuse_empty(const char* call) {
  throw Error(CUDA_ERROR_INVALID_HANDLE, call, "empty custream::Library",
              "the Library holds no library (default-constructed or moved from)");
}
}  // namespace

const std::vector<std::string>& Library::kernel_names() const {
  if (!owner_) refuse_empty("custream::Library::kernel_names");
  detail::LibraryOwner& owner = *owner_.get();
  if (!owner.enumerated) {
    detail::entry<&DriverApi::cuLibraryGetKernelCount>(detail::api());  // names the driver
  }
  return owner.names;
}

LibraryKernel Library::kernel(const std::string& name) const {
  if (!owner_) refuse_empty("cuLibraryGetKernel");
  detail::LibraryOwner& owner = *owner_.get();
  if (owner.enumerated) {  // immutable since the load: no lock (invariant 2)
    if (auto it = owner.by_name.find(name); it != owner.by_name.end()) {
      return LibraryKernel(it->second, it->second->kernel, *this);
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
    slot = detail::make_state(k, name, detail::loaded().device_count);
  }
  return LibraryKernel(slot.get(), slot->kernel, *this);
}

void Library::preload(const Context& context) const {
  if (!owner_) refuse_empty("custream::Library::preload");
  detail::LibraryOwner& owner = *owner_.get();
  if (!owner.enumerated) {
    detail::entry<&DriverApi::cuLibraryGetKernelCount>(detail::api());  // names the driver
  }
  for (const auto& state : owner.kernels) {
    (void)LibraryKernel(state.get(), state->kernel, *this).function(context);
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

const std::string& LibraryKernel::name() const noexcept {
  static const std::string none;
  return state_ != nullptr ? state_->name : none;
}

Library LibraryKernel::library() const noexcept { return library_; }

CUfunction LibraryKernel::function(const Context& context) const {
  if (state_ == nullptr) {
    throw Error(CUDA_ERROR_INVALID_HANDLE, "cuKernelGetFunction", "empty custream::LibraryKernel",
                "the LibraryKernel holds no kernel");
  }
  const bool primary = context.kind() == ContextKind::primary;
  std::atomic<CUfunction>* slot = primary ? &state_->primary[context.device_id()] : nullptr;
  if (slot != nullptr) {
    if (CUfunction f = slot->load(std::memory_order_acquire)) return f;
  }
  // Resolved in the context (invariant 3): cuKernelGetFunction loads the kernel there.
  ContextScope scope(detail::nonempty(context, "custream::LibraryKernel::function"));
  CUfunction f = nullptr;
  if (CUresult r = detail::try_call<&DriverApi::cuKernelGetFunction>(&f, kernel_);
      r != CUDA_SUCCESS) {
    detail::fail<&DriverApi::cuKernelGetFunction>(
        r, {detail::Subject::What::context, context.handle(), context.device_id()},
        "kernel \"" + state_->name + "\" (" + to_string(context.kind()) + " context)");
  }
  if (slot != nullptr) slot->store(f, std::memory_order_release);  // the same f every time
  return f;
}

CUfunction LibraryKernel::function_for(const StreamRef& stream) const {
  if (state_ == nullptr) {
    throw Error(CUDA_ERROR_INVALID_HANDLE, "cuLaunchKernel", "empty custream::LibraryKernel",
                "the LibraryKernel holds no kernel");
  }
  // A special handle means the current context's stream: the driver resolves a CUkernel
  // passed as the function in the current context.
  if (stream.is_special()) return reinterpret_cast<CUfunction>(kernel_);
  if (stream.context_kind() == ContextKind::primary) {
    return function(Device(stream.device_id()).primary_context());
  }
  return function(Context::wrap(stream.context()));
}

void LibraryKernel::launch_raw(const StreamRef& stream, Dim3 grid, Dim3 block,
                               std::size_t shared_bytes, void** params) const {
  CUfunction f = nullptr;
  const int device = stream.device_id();
  if (device >= 0 && stream.context_kind() == ContextKind::primary && state_ != nullptr) {
    f = state_->primary[device].load(std::memory_order_acquire);  // invariant 3
  }
  if (f == nullptr) f = function_for(stream);
  const CUresult r = detail::api().cuLaunchKernel(f, grid.x, grid.y, grid.z, block.x, block.y,
                                                  block.z, static_cast<unsigned>(shared_bytes),
                                                  stream.handle(), params, nullptr);
  if (r != CUDA_SUCCESS) {
    auto dims = [](Dim3 d) {
      return std::to_string(d.x) + "x" + std::to_string(d.y) + "x" + std::to_string(d.z);
    };
    detail::throw_stream_error(r, "cuLaunchKernel", stream,
                               "library kernel \"" + state_->name + "\", grid " + dims(grid) +
                                   ", block " + dims(block) + ", " + std::to_string(shared_bytes) +
                                   " bytes of shared memory");
  }
}

int LibraryKernel::attribute(CUfunction_attribute attribute, int device) const {
  const Device d(device);
  int value = 0;
  if (CUresult r = detail::try_call<&DriverApi::cuKernelGetAttribute>(&value, attribute, kernel_,
                                                                      d.handle());
      r != CUDA_SUCCESS) {
    detail::fail<&DriverApi::cuKernelGetAttribute>(
        r, detail::device_subject(device),
        "kernel \"" + name() + "\", attribute " + std::to_string(static_cast<int>(attribute)));
  }
  return value;
}

void LibraryKernel::set_attribute(CUfunction_attribute attribute, int value, int device) const {
  const Device d(device);
  if (CUresult r =
          detail::try_call<&DriverApi::cuKernelSetAttribute>(attribute, value, kernel_, d.handle());
      r != CUDA_SUCCESS) {
    detail::fail<&DriverApi::cuKernelSetAttribute>(r, detail::device_subject(device),
                                                   "kernel \"" + name() + "\", attribute " +
                                                       std::to_string(static_cast<int>(attribute)) +
                                                       " = " + std::to_string(value));
  }
}

}  // namespace custream

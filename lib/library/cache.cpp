// The content-addressed cache of loaded library images: one load per image, also when threads
// race to load it first, and unloads of what it drops that leave every capture as it is
// (invariant 4 of docs/design/libraries.md).
#include <algorithm>
#include <cstring>
#include <list>
#include <mutex>

#include "custream/library.hpp"
#include "driver.hpp"
#include "library.hpp"

namespace custream {
namespace detail {

namespace {

constexpr std::size_t kCacheEntries = 64;
constexpr std::size_t kCacheBytes = std::size_t{256} << 20;

bool same_image(std::uint64_t hash, std::size_t bytes, const void* image, std::uint64_t h,
                std::size_t b, const void* other) noexcept {
  return hash == h && bytes == b && std::memcmp(image, other, bytes) == 0;
}

// The cached library of the image, made the most recently used; empty when none (mutex held).
Library find_locked(Cache& c, std::uint64_t hash, const void* image, std::size_t bytes) {
  for (auto it = c.entries.begin(); it != c.entries.end(); ++it) {
    if (same_image(hash, bytes, image, it->hash, it->image.size(), it->image.data())) {
      c.entries.splice(c.entries.begin(), c.entries, it);  // most recently used
      return it->library;
    }
  }
  return {};
}

// The thread's stream capture mode, relaxed while it lives (cuThreadExchangeStreamCaptureMode):
// a library unloaded meanwhile neither invalidates a global capture of another thread nor is
// refused (the driver allows cuLibraryUnload in relaxed mode). A failure to relax or to restore
// is reported to the release-error handler; a driver without capture modes (before 10.1) needs
// neither.
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode() noexcept {
    if (api().cuThreadExchangeStreamCaptureMode == nullptr) return;
    relaxed_ = release_call<&DriverApi::cuThreadExchangeStreamCaptureMode>(
                   "the thread's capture mode (relaxing it to unload what the library cache "
                   "dropped)",
                   nullptr, &mode_) == CUDA_SUCCESS;
  }
  ~RelaxedCaptureMode() {
    if (!relaxed_) return;
    release_call<&DriverApi::cuThreadExchangeStreamCaptureMode>(
        "the thread's capture mode (restoring it after the library cache's unloads)", nullptr,
        &mode_);
  }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  CUstreamCaptureMode mode_ = CU_STREAM_CAPTURE_MODE_RELAXED;
  bool relaxed_ = false;
};

// Ends `pending`: its library (empty: the load threw) goes to the threads waiting for it, and
// `entry` (none, or one node: the library to cache) into the cache, evicting the least
// recently used into `evicted` (mutex not held; nothing here throws).
void finish(Cache& c, const std::shared_ptr<PendingLoad>& pending, const Library& library,
            std::list<CacheEntry>& entry, std::list<CacheEntry>& evicted) noexcept {
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    if (!entry.empty()) {
      c.bytes += entry.front().image.size();
      c.entries.splice(c.entries.begin(), entry);
      while (c.entries.size() > kCacheEntries || (c.bytes > kCacheBytes && c.entries.size() > 1)) {
        c.bytes -= c.entries.back().image.size();
        evicted.splice(evicted.end(), c.entries, std::prev(c.entries.end()));
      }
    }
    c.pending.erase(std::find(c.pending.begin(), c.pending.end(), pending));
    pending->library = library;  // a reference count: never the last, never an unload
    pending->done = true;
  }
  c.loaded.notify_all();
}

}  // namespace

Cache& cache() {
  static Cache* c = new Cache;  // never destroyed: no unload after the driver is gone
  return *c;
}

void drop_entries(std::list<CacheEntry>& dropped) noexcept {
  if (dropped.empty()) return;
  RelaxedCaptureMode relaxed;
  dropped.clear();  // the last reference to a library unloads it
}

Library cached_load(const void* image, std::size_t bytes,
                    const std::function<Library(bool*)>& load) {
  const std::uint64_t hash = hash_bytes(image, bytes);  // a hit also compares every byte
  Cache& c = cache();
  std::shared_ptr<PendingLoad> mine;
  {
    std::unique_lock<std::mutex> lock(c.mutex);
    for (;;) {
      if (Library hit = find_locked(c, hash, image, bytes)) return hit;
      const auto other = std::find_if(c.pending.begin(), c.pending.end(), [&](const auto& p) {
        return same_image(hash, bytes, image, p->hash, p->bytes, p->image);
      });
      if (other == c.pending.end()) break;
      const std::shared_ptr<PendingLoad> first = *other;  // its loader loads the same bytes
      c.loaded.wait(lock, [&] { return first->done; });
      if (first->library) return first->library;  // cached, or broken and not cached
      // That load threw: look again, and load if no other thread does by now.
    }
    mine = std::make_shared<PendingLoad>();  // the first load of these bytes: this thread's
    mine->hash = hash, mine->image = image, mine->bytes = bytes;
    c.pending.reserve(c.pending.size() + 1);
    c.pending.push_back(mine);
  }
  std::list<CacheEntry> entry, evicted;
  Library library;
  try {
    bool cacheable = false;
    library = load(&cacheable);
    if (cacheable) {
      entry.push_back({hash, std::string(static_cast<const char*>(image), bytes), library});
    }
  } catch (...) {
    finish(c, mine, {}, entry, evicted);  // the waiting threads look again
    throw;
  }
  finish(c, mine, library, entry, evicted);
  drop_entries(evicted);
  return library;
}

}  // namespace detail

void Library::clear_cache() noexcept {
  std::list<detail::CacheEntry> dropped;  // unloaded outside the lock
  {
    detail::Cache& c = detail::cache();
    std::lock_guard<std::mutex> lock(c.mutex);
    dropped.swap(c.entries);
    c.bytes = 0;
  }
  detail::drop_entries(dropped);
}

std::size_t Library::cached_count() noexcept {
  detail::Cache& c = detail::cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  return c.entries.size();
}

}  // namespace custream

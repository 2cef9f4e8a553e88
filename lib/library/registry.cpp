// The registry of loaded libraries, the owner's unload, and the libraries graphs hold (invariants
// 1 and 5 of docs/design/libraries.md).
#include <algorithm>
#include <cstring>
#include <mutex>

#include "driver.hpp"
#include "library.hpp"

namespace custream::detail {

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

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: owners may outlive static destruction
  return *r;
}

void register_owner(LibraryOwner* owner) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.owners.push_back(owner);
}

void unregister_locked(Registry& r, LibraryOwner* owner) noexcept {
  const auto it = std::find(r.owners.begin(), r.owners.end(), owner);
  if (it == r.owners.end()) return;
  *it = r.owners.back();
  r.owners.pop_back();
}

namespace {

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

std::string jit_log_text(const LibraryOwner& owner) {
  if (owner.jit_error_log.empty()) return {};
  return "; JIT error log:\n" + owner.jit_error_log;
}

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

void GraphLibraries::hold(LibraryOwner* owner) {
  if (std::find(held_.begin(), held_.end(), owner) != held_.end()) return;
  held_.reserve(held_.size() + 1);
  Refs<LibraryOwner>::retain(owner);  // the caller holds one: it cannot be the last
  add(owner);
}

GraphLibraries::~GraphLibraries() {
  for (LibraryOwner* owner : held_) {
    owner->graphs.fetch_sub(1, std::memory_order_relaxed);
    Refs<LibraryOwner>::release(owner);  // the last unloads it
  }
}

}  // namespace custream::detail

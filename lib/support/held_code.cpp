// The code graphs hold: the capture epoch, the registries of loaded libraries and modules, and
// GraphCode. Contract on top of held_code.hpp.
#include "held_code.hpp"

#include <algorithm>

#include "library.hpp"
#include "module.hpp"

namespace custream::detail {

std::atomic<std::uint64_t> g_capture_epoch{kAnyCapture};

std::uint64_t next_capture_epoch() noexcept {
  return g_capture_epoch.fetch_add(1, std::memory_order_relaxed) + 1;
}

void stamp_launch(LaunchedCode& code, std::uint64_t epoch) noexcept {
  std::uint64_t stamp = code.launched.load(std::memory_order_relaxed);
  while (stamp < epoch &&  // never lowered: a racing older launch must not hide a newer one
         !code.launched.compare_exchange_weak(stamp, epoch, std::memory_order_relaxed)) {
  }
}

template <typename Owner>
CodeRegistry<Owner>& code_registry() {
  static auto* r = new CodeRegistry<Owner>;  // never destroyed: owners may outlive statics
  return *r;
}

template <typename Owner>
void register_code(Owner* owner) {
  CodeRegistry<Owner>& r = code_registry<Owner>();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.owners.push_back(owner);
}

template <typename Owner>
void unregister_code_locked(CodeRegistry<Owner>& r, Owner* owner) noexcept {
  const auto it = std::find(r.owners.begin(), r.owners.end(), owner);
  if (it == r.owners.end()) return;
  *it = r.owners.back();
  r.owners.pop_back();
}

template <typename Owner>
void unregister_code(Owner* owner) noexcept {
  CodeRegistry<Owner>& r = code_registry<Owner>();
  std::lock_guard<std::mutex> lock(r.mutex);
  unregister_code_locked(r, owner);
}

template CodeRegistry<LibraryOwner>& code_registry<LibraryOwner>();
template CodeRegistry<ModuleOwner>& code_registry<ModuleOwner>();
template void register_code<LibraryOwner>(LibraryOwner*);
template void register_code<ModuleOwner>(ModuleOwner*);
template void unregister_code_locked<LibraryOwner>(CodeRegistry<LibraryOwner>&,
                                                   LibraryOwner*) noexcept;
template void unregister_code_locked<ModuleOwner>(CodeRegistry<ModuleOwner>&,
                                                  ModuleOwner*) noexcept;
template void unregister_code<LibraryOwner>(LibraryOwner*) noexcept;
template void unregister_code<ModuleOwner>(ModuleOwner*) noexcept;

namespace {

// Adds a reference to `owner` unless its last one is already gone (it is being destroyed and
// waits for its registry's mutex to unregister itself).
bool try_retain(LaunchedCode* owner) noexcept {
  long refs = owner->refs.load(std::memory_order_relaxed);
  while (refs > 0) {
    if (owner->refs.compare_exchange_weak(refs, refs + 1, std::memory_order_relaxed)) return true;
  }
  return false;
}

// Adds `owner`, a reference already taken, to `held`, which has room.
template <typename Owner>
void add(std::vector<Owner*>& held, Owner* owner) noexcept {
  owner->graphs.fetch_add(1, std::memory_order_relaxed);
  held.push_back(owner);
}

template <typename Owner>
void hold_registered_since(std::vector<Owner*>& held, std::uint64_t since) {
  CodeRegistry<Owner>& r = code_registry<Owner>();
  std::lock_guard<std::mutex> lock(r.mutex);
  held.reserve(held.size() + r.owners.size());  // nothing below throws
  for (Owner* owner : r.owners) {
    if (!owner->exposed.load(std::memory_order_relaxed) &&
        owner->launched.load(std::memory_order_relaxed) < since) {
      continue;
    }
    if (std::find(held.begin(), held.end(), owner) != held.end()) continue;
    if (try_retain(owner)) add(held, owner);
  }
}

// Holds `owner` too; the caller holds a reference, so it cannot be the last.
template <typename Owner>
void hold_one(std::vector<Owner*>& held, Owner* owner) {
  if (std::find(held.begin(), held.end(), owner) != held.end()) return;
  held.reserve(held.size() + 1);
  Refs<Owner>::retain(owner);
  add(held, owner);
}

template <typename Owner>
void release_all(const std::vector<Owner*>& held) noexcept {
  for (Owner* owner : held) {
    owner->graphs.fetch_sub(1, std::memory_order_relaxed);
    Refs<Owner>::release(owner);  // the last unloads it
  }
}

}  // namespace

void GraphCode::hold_since(std::uint64_t since) {
  hold_registered_since(libraries_, since);
  hold_registered_since(modules_, since);
}

void GraphCode::hold_more(const GraphCode& other) {
  for (LibraryOwner* owner : other.libraries_) hold_one(libraries_, owner);
  for (ModuleOwner* owner : other.modules_) hold_one(modules_, owner);
}

void GraphCode::hold(LibraryOwner* owner) { hold_one(libraries_, owner); }

bool GraphCode::same_as_held(const GraphCode& other) const noexcept {
  return libraries_ == other.libraries_ && modules_ == other.modules_;
}

GraphCode::~GraphCode() {
  release_all(libraries_);
  release_all(modules_);
}

}  // namespace custream::detail

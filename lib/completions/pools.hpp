// Pools for the marks of registrations (events, written words): a process-wide free list
// that threads take from and give back to a batch at a time, each thread's cache of it, and
// the initial-exec thread-local slot the caches hang from. Internal to the completion engine.
//
// Contract: an item is in exactly one place (the pool, one thread's cache, or a pending
// registration). A thread's cache goes back to the pool when the thread ends; after that, the
// thread's ThreadLocal<>::get() is nullptr and it uses the pool directly. The pool's mutex is
// taken once per batch (invariant 3), and held by the forking thread across fork() (15).
// Design: docs/design/completions.md.
#pragma once

#include <algorithm>
#include <cstddef>
#include <mutex>
#include <utility>
#include <vector>

#include "fork_safe.hpp"

#pragma GCC visibility push(hidden)
namespace custream::detail {

/// A process-wide free list of T, taken from and given back to a batch at a time.
template <typename T>
class BatchPool {
 public:
  static constexpr std::size_t kBatch = 64;
  /// Moves up to `batch` free items to `out`. @throws std::bad_alloc, std::system_error.
  void refill(std::vector<T>& out, std::size_t batch = kBatch) {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::size_t n = std::min(free_.size(), batch);
    out.insert(out.end(), free_.end() - static_cast<std::ptrdiff_t>(n), free_.end());
    free_.resize(free_.size() - n);
  }
  /// Moves the last `n` items of `items` here; out of memory, `items` keeps them.
  void give_back(std::vector<T>& items, std::size_t n) noexcept {
    try {
      std::lock_guard<std::mutex> lock(mutex_);
      free_.insert(free_.end(), items.end() - static_cast<std::ptrdiff_t>(n), items.end());
      items.resize(items.size() - n);
    } catch (...) {
    }
  }
  /// fork() (invariant 15): held by the forking thread across it; made anew in the child.
  void lock_for_fork() { mutex_.lock(); }
  void unlock_after_fork(bool child) noexcept { release_after_fork(mutex_, child); }
  /// Moves `item` here; out of memory, it leaks (nothing dangles).
  void give_back_one(T item) noexcept {
    try {
      std::lock_guard<std::mutex> lock(mutex_);
      free_.push_back(item);
    } catch (...) {
    }
  }

 private:
  std::mutex mutex_;
  std::vector<T> free_;
};

/// A thread's cache of a pool's items; what is left goes back to the pool when the thread ends.
template <typename T>
struct ThreadCache {
  BatchPool<T>* pool = nullptr;
  std::vector<T> free;
  ThreadCache() = default;
  explicit ThreadCache(BatchPool<T>* p) noexcept : pool(p) {}
  // Moved (a vector of caches grows), never copied: each item is held by one cache.
  ThreadCache(ThreadCache&& other) noexcept : pool(other.pool), free(std::move(other.free)) {
    other.free.clear();
  }
  ThreadCache& operator=(ThreadCache&&) = delete;
  ThreadCache(const ThreadCache&) = delete;
  ThreadCache& operator=(const ThreadCache&) = delete;
  ~ThreadCache() {
    if (pool != nullptr) pool->give_back(free, free.size());
  }
  /// An item from the cache, refilled from the pool, else from `make()`.
  template <typename Make>
  T take(Make&& make) {
    if (free.empty()) pool->refill(free);
    if (free.empty()) return make();
    const T item = free.back();
    free.pop_back();
    return item;
  }
};

/// An item of `pool` for a thread whose caches are gone (it is ending): one from the pool,
/// else `make()`.
template <typename T, typename Make>
T take_uncached(BatchPool<T>& pool, Make&& make) {
  std::vector<T> one;
  pool.refill(one, 1);
  return one.empty() ? make() : one.front();
}

/// A thread's own T, made by `make()` on the thread's first call and destroyed when the thread
/// ends, reached through an initial-exec TLS pointer: no __tls_get_addr call from the shared
/// library on a registration (invariant 3). nullptr once it is destroyed (a thread-local object
/// made before it, registering from its destructor): callers use the shared pools then.
template <typename T, T (*make)()>
class ThreadLocal {
 public:
  static T* get() {
    if (T* const p = fast_) return p;
    return make_slot();
  }

 private:
  struct Slot {
    T value;
    explicit Slot(T v) : value(std::move(v)) {}
    ~Slot() {
      fast_ = nullptr;
      closed_ = true;
    }
  };
  [[gnu::noinline]] static T* make_slot() {
    if (closed_) return nullptr;
    thread_local Slot slot(make());
    fast_ = &slot.value;
    return fast_;
  }
  static thread_local T* fast_ __attribute__((tls_model("initial-exec")));
  static thread_local bool closed_ __attribute__((tls_model("initial-exec")));
};
template <typename T, T (*make)()>
thread_local T* ThreadLocal<T, make>::fast_ __attribute__((tls_model("initial-exec"))) = nullptr;
template <typename T, T (*make)()>
thread_local bool ThreadLocal<T, make>::closed_ __attribute__((tls_model("initial-exec"))) = false;

}  // namespace custream::detail
#pragma GCC visibility pop

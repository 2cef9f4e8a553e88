// The host-task pool: recycled blocks for detail::HostTask payloads (invariants 7 and 8 of
// lib/host_function.cpp).
#include <atomic>
#include <cstddef>
#include <mutex>
#include <new>
#include <vector>

#include "custream/detail/host_task.hpp"

namespace custream::detail {

namespace {

static_assert(sizeof(PoolBlock) <= HostTask::kPooledBytes);

constexpr std::size_t kLine = 64;
constexpr std::size_t kSlabBlocks = 32;
constexpr std::size_t kSlabBytes = kSlabBlocks * HostTask::kPooledBytes;
static_assert(HostTask::kPooledBytes % kLine == 0, "blocks are whole cache lines (invariant 8)");

// Under AddressSanitizer every task is a plain allocation (invariant 7): a pool would hand a
// freed block to the next task, so a use after free would read a live task instead of being
// reported.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kPooled = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kPooled = false;
#else
constexpr bool kPooled = true;
#endif
#else
constexpr bool kPooled = true;
#endif

void* plain_block() { return ::operator new(HostTask::kPooledBytes, std::align_val_t(kLine)); }

// Single blocks freed by any thread (the driver's host-function thread, mostly): a lock-free
// stack that is only ever pushed to, and emptied whole with one exchange under g_mutex (no
// pop, so no ABA problem).
std::atomic<PoolBlock*> g_returned{nullptr};

void push_returned(PoolBlock* block) noexcept {
  PoolBlock* head = g_returned.load(std::memory_order_relaxed);
  do {
    block->next = head;
  } while (!g_returned.compare_exchange_weak(head, block, std::memory_order_release,
                                             std::memory_order_relaxed));
}

// A list of at most kPoolBatch blocks, null-terminated.
struct Batch {
  PoolBlock* first = nullptr;
  PoolBlock* last = nullptr;
  std::size_t count = 0;
};

// Full batches ready for a refill. Leaked: no static destructor (a late host function may
// free a block at exit).
struct Shared {
  std::mutex mutex;
  std::vector<Batch> batches;  // guarded by mutex
};
Shared& shared() {
  static Shared* s = new Shared;
  return *s;
}

std::atomic<std::size_t> g_slabs{0};

// A new slab of kSlabBlocks line-aligned blocks, linked in address order (never freed).
Batch new_slab() {
  auto* slab = static_cast<unsigned char*>(::operator new(kSlabBytes, std::align_val_t(kLine)));
  g_slabs.fetch_add(1, std::memory_order_relaxed);
  Batch b;
  for (std::size_t i = kSlabBlocks; i-- > 0;) {
    auto* block = reinterpret_cast<PoolBlock*>(slab + i * HostTask::kPooledBytes);
    block->next = b.first;
    if (b.first == nullptr) b.last = block;
    b.first = block;
  }
  b.count = kSlabBlocks;
  return b;
}

// Cuts `list` into batches of at most kPoolBatch blocks, appended to `out`. Each block is
// walked once per trip through g_returned: O(1) per freed block.
void cut_into_batches(PoolBlock* list, std::vector<Batch>& out) {
  while (list != nullptr) {
    Batch b;
    b.first = list;
    while (list != nullptr && b.count < kPoolBatch) {
      b.last = list;
      list = list->next;
      ++b.count;
    }
    b.last->next = nullptr;
    out.push_back(b);
  }
}

// One batch for a refill: a stored one, else the freed blocks cut into batches, else a slab.
Batch take_batch() {
  Shared& s = shared();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.batches.empty()) {
    cut_into_batches(g_returned.exchange(nullptr, std::memory_order_acquire), s.batches);
  }
  if (s.batches.empty()) return new_slab();
  Batch b = s.batches.back();
  s.batches.pop_back();
  return b;
}

// Set when this thread's list has been given back (thread exit): refills then take one
// plain block, which joins the pool when freed.
thread_local bool t_pool_closed __attribute__((tls_model("initial-exec"))) = false;

// Gives this thread's list back when the thread ends; registered on first refill. The list
// holds at most kPoolBatch blocks, so this walks at most that many.
struct ThreadBlocks {
  ~ThreadBlocks() {
    t_pool_closed = true;
    PoolBlock* first = t_pool_free;
    t_pool_free = nullptr;
    if (first == nullptr) return;
    Batch b;
    b.first = first;
    for (PoolBlock* p = first; p != nullptr; p = p->next) {
      b.last = p;
      ++b.count;
    }
    Shared& s = shared();
    std::lock_guard<std::mutex> lock(s.mutex);
    s.batches.push_back(b);
  }
};

}  // namespace

thread_local PoolBlock* t_pool_free __attribute__((tls_model("initial-exec"))) = nullptr;

void* pool_refill() {
  if (!kPooled || t_pool_closed) return plain_block();
  static thread_local ThreadBlocks owner;  // registers the thread-exit hand-back
  (void)&owner;
  const Batch b = take_batch();
  t_pool_free = b.first->next;
  if (t_pool_free != nullptr) prefetch_for_write(t_pool_free);
  return b.first;
}

void HostTask::operator delete(void* p, std::size_t size) noexcept {
  if (p == nullptr) return;
  if (size > kPooledBytes) {
    ::operator delete(p);
  } else if (!kPooled) {
    ::operator delete(p, std::align_val_t(kLine));
  } else {
    push_returned(static_cast<PoolBlock*>(p));
  }
}

PoolStats pool_stats() noexcept {
  PoolStats stats;
  stats.pooled = kPooled;
  for (PoolBlock* p = t_pool_free; p != nullptr; p = p->next) ++stats.thread_held;
  Shared& s = shared();
  std::lock_guard<std::mutex> lock(s.mutex);  // no exchange of g_returned meanwhile
  for (const Batch& b : s.batches) stats.shared += b.count;
  for (PoolBlock* p = g_returned.load(std::memory_order_acquire); p != nullptr; p = p->next) {
    ++stats.shared;
  }
  stats.slabs = g_slabs.load(std::memory_order_relaxed);
  return stats;
}

}  // namespace custream::detail

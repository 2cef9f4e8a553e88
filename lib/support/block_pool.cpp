// The block pool: recycled 128-byte blocks for every task one thread makes and another frees
// (host functions' HostTask payloads, completion tasks, futures). Contract: block_pool.hpp.
// Design: docs/design/host_functions.md, invariants 7 and 8.
//
// Where a free block can be (each block is in exactly one place at a time):
//  - an allocating thread's list (t_pool_free): null-terminated, only that thread touches it,
//    fewer than kPoolBatch blocks (a refill takes one batch and returns one block of it);
//  - a freeing thread's partial batch (t_freed, t_freed_count): null-terminated, only that
//    thread touches it, fewer than kPoolBatch blocks (the kPoolBatch-th free pushes it);
//  - g_batches: whole batches no thread holds, a lock-free stack whose links and counts live
//    in each batch's first block (BatchHead), so storing a batch never allocates. Any thread
//    pushes (CAS, release): a freeing thread whose partial batch is full, an ending thread
//    with its list and its partial batch, a late free as a batch of one. Only refills pop,
//    one batch each, one at a time under PoolShared::mutex: the head a popper read cannot be
//    popped by anyone else before its CAS, so it cannot leave and come back (no ABA problem).
// Nothing walks a list except an ending thread (its own list, fewer than kPoolBatch blocks)
// and pool_stats(); every other step is O(1) and touches no block but the one it moves or
// the first block of a batch. Slabs (one batch each) are carved, under PoolShared::mutex, from
// 1 MiB anonymous mappings and never freed.
#include "block_pool.hpp"

#include <sys/mman.h>

#include <atomic>
#include <cstddef>
#include <mutex>
#include <new>

#include "custream/completions.hpp"
#include "custream/detail/host_task.hpp"
#include "fork_safe.hpp"

namespace custream::detail {

namespace {

static_assert(sizeof(PoolBlock) <= kPoolBlockBytes);
static_assert(kPoolBlockBytes == kPoolBlockBytes && kTaskBlock == kPoolBlockBytes,
              "host tasks and completion tasks share one pool of blocks");

constexpr std::size_t kLine = 64;
constexpr std::size_t kSlabBlocks = kPoolBatch;  // a new slab is one batch
constexpr std::size_t kSlabBytes = kSlabBlocks * kPoolBlockBytes;
// Slabs are carved from mappings of their own, not from malloc: slabs are never freed, and
// malloc'd ones would sit between the program's (and the driver's) own allocations and keep
// malloc from giving those back when they are freed. A mapping's pages become resident only
// as its slabs are used.
constexpr std::size_t kChunkSlabs = 128;  // 1 MiB
constexpr std::size_t kChunkBytes = kChunkSlabs * kSlabBytes;
static_assert(kPoolBlockBytes % kLine == 0, "blocks are whole cache lines (invariant 8)");

// Under AddressSanitizer every task is a plain allocation (invariant 7): a pool would hand a
// freed block to the next task, so a use after free would read a live task instead of being
// reported. This is decided where the library is built: t_pool_free then stays empty, and
// the inline pop in HostTask::operator new always ends in pool_refill.
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

// A stored batch: created in the storage of the batch's first block. `list` is that block
// (its `next` goes on along the batch, null-terminated).
struct BatchHead {
  PoolBlock list;
  BatchHead* next_batch;
  std::size_t count;
};
static_assert(sizeof(BatchHead) <= kPoolBlockBytes);
static_assert(offsetof(BatchHead, list) == 0);

std::atomic<BatchHead*> g_batches{nullptr};

std::atomic<std::size_t> g_slabs{0};
std::atomic<std::size_t> g_plain_blocks{0};
std::atomic<std::size_t> g_exit_handbacks{0};
std::atomic<std::size_t> g_exit_returned{0};

// Pushes the null-terminated list `first` of `count` blocks as one batch. Lock-free, never
// blocks, never allocates.
void push_batch(PoolBlock* first, std::size_t count) noexcept {
  PoolBlock* rest = first->next;
  auto* head = ::new (static_cast<void*>(first)) BatchHead{PoolBlock{rest}, nullptr, count};
  BatchHead* top = g_batches.load(std::memory_order_relaxed);
  do {
    head->next_batch = top;
  } while (!g_batches.compare_exchange_weak(top, head, std::memory_order_release,
                                            std::memory_order_relaxed));
}

struct ThreadRecord;

// The refills' mutex and the registry of threads that hold partial batches (for
// pool_stats()). Never destroyed: no static destructor (a late host function may free a
// block, or a late thread end give its lists back, during exit), and constant-initialized,
// so reaching it cannot allocate or throw.
struct PoolShared {
  std::mutex mutex;                 // one popper at a time; guards the rest
  ThreadRecord* threads = nullptr;  // the open threads
  unsigned char* chunk = nullptr;   // the unused rest of the newest mapping
  std::size_t chunk_slabs = 0;      // slabs left in it
};
union SharedStorage {
  constexpr SharedStorage() : value() {}
  ~SharedStorage() {}  // leaves `value` alone
  PoolShared value;
};
SharedStorage g_shared;
PoolShared& shared() noexcept { return g_shared.value; }
// fork(): the refills' mutex is held by the forking thread across it, and made anew in the
// child (completions.md, invariant 15).
std::mutex& pool_mutex() { return shared().mutex; }

// A new slab's storage, from the newest mapping or a new one. Caller holds the mutex.
unsigned char* carve_slab(PoolShared& s) {
  if (s.chunk_slabs == 0) {
    void* p =
        ::mmap(nullptr, kChunkBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    s.chunk = static_cast<unsigned char*>(p);  // page-aligned, so blocks are line-aligned
    s.chunk_slabs = kChunkSlabs;
  }
  unsigned char* slab = s.chunk;
  s.chunk += kSlabBytes;
  --s.chunk_slabs;
  g_slabs.fetch_add(1, std::memory_order_relaxed);
  return slab;
}

// A new slab of kSlabBlocks blocks, linked in address order (never freed).
PoolBlock* link_slab(unsigned char* slab) noexcept {
  PoolBlock* first = nullptr;
  for (std::size_t i = kSlabBlocks; i-- > 0;) {
    first = ::new (static_cast<void*>(slab + i * kPoolBlockBytes)) PoolBlock{first};
  }
  return first;
}

// One batch for a refill: a shared one, else a new slab. @throws std::bad_alloc.
PoolBlock* take_batch() {
  unsigned char* slab = nullptr;
  {
    PoolShared& s = shared();
    std::lock_guard<std::mutex> lock(s.mutex);
    BatchHead* top = g_batches.load(std::memory_order_acquire);
    while (top != nullptr &&
           !g_batches.compare_exchange_weak(top, top->next_batch, std::memory_order_acquire,
                                            std::memory_order_acquire)) {
    }
    if (top != nullptr) return &top->list;  // the BatchHead's storage is a block again
    slab = carve_slab(s);
  }
  return link_slab(slab);  // outside the mutex
}

void* plain_block() {
  void* p = ::operator new(kPoolBlockBytes, std::align_val_t(kLine));
  if (kPooled) g_plain_blocks.fetch_add(1, std::memory_order_relaxed);  // joins when freed
  return p;
}

// This thread's part in the pool: none yet, open (its ThreadRecord is registered and will
// give its lists back when the thread ends), or closed (it has ended: a refill then gets a
// plain block, which joins the pool when freed; a free goes straight back as a batch of one).
enum class ThreadState : unsigned char { kNone, kOpen, kClosed };
thread_local ThreadState t_state __attribute__((tls_model("initial-exec"))) = ThreadState::kNone;

// This thread's partial batch of freed blocks. The count is atomic only so that
// pool_stats() may read it from another thread (relaxed: a plain load and store).
thread_local PoolBlock* t_freed __attribute__((tls_model("initial-exec"))) = nullptr;
thread_local std::atomic<std::size_t> t_freed_count __attribute__((tls_model("initial-exec"))){0};

// Gives this thread's list and partial batch back when the thread ends: at most two pushes,
// and a walk of fewer than kPoolBatch blocks to count its list. Never allocates. Registered
// by the thread's first refill or first free.
struct ThreadRecord {
  ThreadRecord() noexcept {
    PoolShared& s = shared();
    std::lock_guard<std::mutex> lock(s.mutex);
    next = s.threads;
    if (next != nullptr) next->prev = this;
    s.threads = this;
  }
  ThreadRecord(const ThreadRecord&) = delete;
  ThreadRecord& operator=(const ThreadRecord&) = delete;
  ~ThreadRecord() {
    t_state = ThreadState::kClosed;
    if (PoolBlock* first = t_pool_free) {
      t_pool_free = nullptr;
      std::size_t count = 0;
      for (PoolBlock* p = first; p != nullptr; p = p->next) ++count;
      g_exit_handbacks.fetch_add(1, std::memory_order_relaxed);
      g_exit_returned.fetch_add(count, std::memory_order_relaxed);
      push_batch(first, count);
    }
    if (PoolBlock* first = t_freed) {
      t_freed = nullptr;
      push_batch(first, t_freed_count.load(std::memory_order_relaxed));
      t_freed_count.store(0, std::memory_order_relaxed);
    }
    PoolShared& s = shared();
    std::lock_guard<std::mutex> lock(s.mutex);
    (prev != nullptr ? prev->next : s.threads) = next;
    if (next != nullptr) next->prev = prev;
  }

  const std::atomic<std::size_t>* freed_count = &t_freed_count;
  ThreadRecord* prev = nullptr;  // guarded by PoolShared::mutex
  ThreadRecord* next = nullptr;  // guarded by PoolShared::mutex
};

// Registers this thread's ThreadRecord (its thread-exit hand-back).
[[gnu::noinline]] void open_thread() noexcept {
  guard_across_fork<&pool_mutex>();
  static thread_local ThreadRecord record;
  (void)&record;
  t_state = ThreadState::kOpen;
}

}  // namespace

thread_local PoolBlock* t_pool_free __attribute__((tls_model("initial-exec"))) = nullptr;

void* pool_refill() {
  if (!kPooled || t_state == ThreadState::kClosed) return plain_block();
  if (t_state == ThreadState::kNone) open_thread();
  PoolBlock* batch = take_batch();
  t_pool_free = batch->next;
  if (t_pool_free != nullptr) prefetch_for_write(t_pool_free);
  return batch;
}

void HostTask::operator delete(void* p, std::size_t size) noexcept {
  if (p == nullptr) return;
  if (size > kPooledBytes) {
    ::operator delete(p);
    return;
  }
  give_pool_block(p);
}

void* allocate_task_block() {
  void* const block = take_pool_block();
  // A completion task fills both lines of its block: the second line of the next one is asked
  // for too, so that taking it from the watcher's cache overlaps this registration's driver
  // calls (completions.md, invariant 8).
  if (PoolBlock* const next = t_pool_free) prefetch_for_write(reinterpret_cast<char*>(next) + 64);
  return block;
}

void free_task_block(void* block) noexcept { give_pool_block(block); }

void give_pool_block(void* p) noexcept {
  if (!kPooled) {
    ::operator delete(p, std::align_val_t(kLine));
    return;
  }
  auto* block = static_cast<PoolBlock*>(p);
  std::size_t count = t_freed_count.load(std::memory_order_relaxed);
  if (count == 0 && t_state != ThreadState::kOpen) {
    if (t_state == ThreadState::kClosed) {
      block->next = nullptr;
      push_batch(block, 1);
      return;
    }
    open_thread();
  }
  block->next = t_freed;
  if (++count == kPoolBatch) {
    push_batch(block, count);
    block = nullptr;
    count = 0;
  }
  t_freed = block;
  t_freed_count.store(count, std::memory_order_relaxed);
}

PoolStats pool_stats() noexcept {
  PoolStats stats;
  stats.pooled = kPooled;
  for (PoolBlock* p = t_pool_free; p != nullptr; p = p->next) ++stats.thread_held;
  {
    PoolShared& s = shared();
    std::lock_guard<std::mutex> lock(s.mutex);  // no batch is popped meanwhile
    // Batches below the head stay put: pushes only add above it.
    for (BatchHead* b = g_batches.load(std::memory_order_acquire); b != nullptr;
         b = b->next_batch) {
      stats.shared += b->count;
    }
    for (ThreadRecord* r = s.threads; r != nullptr; r = r->next) {
      stats.freeing += r->freed_count->load(std::memory_order_relaxed);
    }
  }
  stats.slabs = g_slabs.load(std::memory_order_relaxed);
  stats.blocks = stats.slabs * kSlabBlocks + g_plain_blocks.load(std::memory_order_relaxed);
  stats.exit_handbacks = g_exit_handbacks.load(std::memory_order_relaxed);
  stats.exit_returned = g_exit_returned.load(std::memory_order_relaxed);
  return stats;
}

}  // namespace custream::detail

// The host-task pool: recycled blocks for detail::HostTask payloads (invariants 7 and 8 of
// lib/host_function.cpp).
#include <atomic>
#include <new>

#include "custream/detail/host_task.hpp"

namespace custream::detail {

namespace {

static_assert(sizeof(PoolBlock) <= HostTask::kPooledBytes);

constexpr std::size_t kLine = 64;
constexpr std::size_t kSlabBlocks = 32;
constexpr std::size_t kSlabBytes = kSlabBlocks * HostTask::kPooledBytes;
static_assert(HostTask::kPooledBytes % kLine == 0, "blocks are whole cache lines (invariant 8)");

std::atomic<PoolBlock*> g_returned{nullptr};

void push_returned(PoolBlock* first, PoolBlock* last) noexcept {
  PoolBlock* head = g_returned.load(std::memory_order_relaxed);
  do {
    last->next = head;
  } while (!g_returned.compare_exchange_weak(head, first, std::memory_order_release,
                                             std::memory_order_relaxed));
}

// Set when this thread's list has been given back (thread exit): refills then take one
// block instead of a list nobody would give back.
thread_local bool t_pool_closed __attribute__((tls_model("initial-exec"))) = false;

// Gives this thread's list back when the thread ends; registered on first refill.
struct ThreadBlocks {
  ~ThreadBlocks() {
    t_pool_closed = true;
    if (PoolBlock* first = t_pool_free) {
      PoolBlock* last = first;
      while (last->next != nullptr) last = last->next;
      t_pool_free = nullptr;
      push_returned(first, last);
    }
  }
};

// A new slab of kSlabBlocks line-aligned blocks, linked in address order (never freed).
PoolBlock* new_slab() {
  auto* slab = static_cast<unsigned char*>(::operator new(kSlabBytes, std::align_val_t(kLine)));
  PoolBlock* first = nullptr;
  for (std::size_t i = kSlabBlocks; i-- > 0;) {
    auto* block = reinterpret_cast<PoolBlock*>(slab + i * HostTask::kPooledBytes);
    block->next = first;
    first = block;
  }
  return first;
}

}  // namespace

thread_local PoolBlock* t_pool_free __attribute__((tls_model("initial-exec"))) = nullptr;

void* pool_refill() {
  if (t_pool_closed) return ::operator new(HostTask::kPooledBytes, std::align_val_t(kLine));
  static thread_local ThreadBlocks owner;  // registers the thread-exit flush
  (void)&owner;
  PoolBlock* list = g_returned.exchange(nullptr, std::memory_order_acquire);
  if (list == nullptr) list = new_slab();
  t_pool_free = list->next;
  if (t_pool_free != nullptr) prefetch_for_write(t_pool_free);
  return list;
}

void HostTask::operator delete(void* p, std::size_t size) noexcept {
  if (p == nullptr) return;
  if (size > kPooledBytes) {
    ::operator delete(p);
    return;
  }
  auto* b = static_cast<PoolBlock*>(p);
  push_returned(b, b);
}

}  // namespace custream::detail

/// @file
/// Internal: the pool of 128-byte blocks for tasks that one thread makes and another frees
/// (host functions, completion tasks, futures). What inline code compiled into applications
/// needs of it (HostTask::operator new); the rest is lib/support/block_pool.cpp. Not part of
/// the public API. Design: docs/design/host_functions.md, invariants 7 and 8.
#pragma once

#include <cstddef>

namespace custream::detail {

/// Asks for the cache line at `p` in a writable state, without waiting for it.
inline void prefetch_for_write(const void* p) noexcept {
#if defined(__x86_64__)
  // PREFETCHW (executed as a NOP by x86-64 processors without it); GCC emits it for
  // __builtin_prefetch only with -mprfchw, and a read prefetch leaves the line shared.
  asm volatile("prefetchw %0" : : "m"(*static_cast<const char*>(p)));
#else
  __builtin_prefetch(p, 1, 3);
#endif
}

/// The size of a pooled block: two cache lines.
inline constexpr std::size_t kPoolBlockBytes = 128;

/// A free block of the pool.
struct PoolBlock {
  PoolBlock* next;
};
/// This thread's free blocks (fewer than kPoolBatch). Initial-exec TLS: no __tls_get_addr
/// call, also from a shared libcustream.
extern thread_local PoolBlock* t_pool_free __attribute__((tls_model("initial-exec")));
/// Refills this thread's list with one batch of at most kPoolBatch blocks (freed ones, or a
/// new slab) and returns one block. @throws std::bad_alloc.
[[gnu::cold]] void* pool_refill();
/// The most blocks a refill hands a thread, and the most a freeing thread keeps before it
/// gives them back as one batch (invariant 7).
inline constexpr std::size_t kPoolBatch = 64;

/// A block of kPoolBlockBytes from this thread's list (inline), else from pool_refill(); the
/// next block of the list is asked for with intent to write. @throws std::bad_alloc.
inline void* take_pool_block() {
  PoolBlock* block = t_pool_free;
  if (block == nullptr) return pool_refill();
  PoolBlock* next = block->next;
  t_pool_free = next;
  if (next != nullptr) prefetch_for_write(next);
  return block;
}

/// What the pool holds (for tests and diagnostics).
struct PoolStats {
  std::size_t thread_held = 0;     ///< blocks in the calling thread's list
  std::size_t freeing = 0;         ///< freed blocks in threads' partial batches, all threads
  std::size_t shared = 0;          ///< free blocks in whole batches no thread holds
  std::size_t slabs = 0;           ///< slabs allocated so far (never freed)
  std::size_t blocks = 0;          ///< blocks the pool has made (slabs, plain late ones)
  std::size_t exit_handbacks = 0;  ///< threads that gave their list back when they ended
  std::size_t exit_returned = 0;   ///< blocks those threads walked and gave back, in all
  bool pooled = true;              ///< false under AddressSanitizer: every task is plain new/delete
};
/// A snapshot of the pool. Walks this thread's list, the shared
/// batches and the threads' records under the pool's mutex: a diagnostic, not for hot paths.
/// Never throws.
PoolStats pool_stats() noexcept;

}  // namespace custream::detail

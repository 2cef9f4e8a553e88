// The block pool's side that only the library calls: giving a block back. The inline take
// and the pool's layout are custream/detail/block_pool.hpp; the pool is
// lib/support/block_pool.cpp. Design: docs/design/host_functions.md, invariants 7 and 8.
//
// Contract: every task of at most kPoolBlockBytes that one thread makes and another may free
// (a host function's HostTask, a completion's task, a future's) comes from take_pool_block()
// (or allocate_task_block(), which is it plus a prefetch) and goes back through
// give_pool_block(), on any thread, at any time (also while the thread ends, or after its
// pool state is gone). Blocks are never given back to the system. Under AddressSanitizer
// every block is a plain aligned allocation, so that a use after free is reported.
#pragma once

#include "custream/detail/block_pool.hpp"

namespace custream::detail {

/// Gives a block of take_pool_block() back: to this thread's partial batch, a whole batch at
/// a time to the shared stack. Never blocks on a lock, never allocates, never throws.
void give_pool_block(void* block) noexcept;

}  // namespace custream::detail

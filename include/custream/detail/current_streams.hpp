// This thread's current stream per device, as the inline current_stream() and StreamScope
// need it. Internal. Design: docs/design/streams.md, invariant 4.
#pragma once

#include "custream/stream.hpp"

namespace custream::detail {

/// This thread's current streams, one per device; null until first use. Initial-exec TLS: a
/// direct %fs-relative load, no __tls_get_addr call, also from a shared libcustream.
extern thread_local Stream* t_current_streams __attribute__((tls_model("initial-exec")));
/// The number of slots in t_current_streams (the device count; 0 until first use).
extern thread_local int t_current_count __attribute__((tls_model("initial-exec")));

/// Allocates this thread's array (slow path of current_slot).
[[gnu::cold]] Stream* init_current_streams();

/// This thread's current-stream slot for device `ordinal` (must be valid).
inline Stream& current_slot(int ordinal) {
  Stream* slots = t_current_streams;
  if (slots == nullptr) slots = init_current_streams();
  return slots[ordinal];
}

/// Pushes `context` (of device `device`) for a StreamScope. @throws Error naming it.
void push_context(CUcontext context, int device);
/// Pops `pushed`, the context a StreamScope pushed; a failure goes to the release-error
/// handler. Never throws.
void pop_context(CUcontext pushed) noexcept;

/// current_stream() for -1 (the current device) or an ordinal out of range (throws).
[[gnu::cold]] Stream current_stream_slow(int device_id);

}  // namespace custream::detail

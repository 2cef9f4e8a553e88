// The current stream per thread and device (current_stream(), StreamScope; Stream::use() is
// in stream.cpp). Design: docs/design/streams.md, invariant 4.
#include "custream/current_stream.hpp"

#include <cstdlib>
#include <cstring>
#include <memory>

#include "context.hpp"
#include "custream/error.hpp"
#include "stream.hpp"

namespace custream {
namespace detail {

thread_local Stream* t_current_streams __attribute__((tls_model("initial-exec"))) = nullptr;
thread_local int t_current_count __attribute__((tls_model("initial-exec"))) = 0;

namespace {
// Frees this thread's array when the thread ends (dropping its references).
struct CurrentStreamsOwner {
  std::unique_ptr<Stream[]> slots;
  ~CurrentStreamsOwner() {
    t_current_count = 0;
    t_current_streams = nullptr;
  }
};
thread_local CurrentStreamsOwner t_owner;

Stream default_stream() {
  static const bool per_thread = [] {
    const char* v = std::getenv("CUSTREAM_PER_THREAD_DEFAULT_STREAM");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  return per_thread ? Stream::per_thread() : Stream::null();
}
}  // namespace

Stream* init_current_streams() {
  const Loaded& l = loaded();
  auto slots = std::make_unique<Stream[]>(l.device_count > 0 ? l.device_count : 1);
  const Stream initial = default_stream();
  for (int i = 0; i < l.device_count; ++i) slots[i] = initial;
  t_owner.slots = std::move(slots);
  t_current_count = l.device_count;
  return t_current_streams = t_owner.slots.get();
}

Stream current_stream_slow(int device_id) {
  const Loaded& l = loaded();
  if (device_id == -1) return current_slot(current_device_ordinal(l));
  (void)Device(device_id);         // throws the out-of-range error
  return current_slot(device_id);  // a valid ordinal on this thread's first use
}

void push_context(CUcontext context, int device) {
  call<&DriverApi::cuCtxPushCurrent>({Subject::What::context, context, device}, context);
  scoped_context_forget();  // an open ContextScope's context is no longer current
}

void pop_context(CUcontext pushed) noexcept {
  CUcontext popped = nullptr;
  release_call<&DriverApi::cuCtxPopCurrent>("context (a stream scope's)", pushed, &popped);
  scoped_context_forget();  // what a scope inside restored is no longer current
}

}  // namespace detail

}  // namespace custream

// Marks: what a registration puts in the stream so that the watcher can tell when the stream
// reached it, an event it records or a word of host-mapped memory the stream writes, and the
// pools they come from. Internal to the completion engine.
//
// Contract: mark() refuses a capturing stream before it enqueues anything (invariant 1), then
// records an event or has the stream write a word (3, 9); a failure gives the mark back and
// throws. Its common cases (a pooled event, or a word once the device is known to serve them
// and its probe is made) are inline here, reading only what is already known; everything else
// is mark_any() (marks.cpp). Pooled events and words go back to their pools once complete
// (give_back_event(s), release_word); a created context's event is destroyed. Whether a device
// serves words is asked once per device and kept here (memory_writes_supported), not in the
// loader's DeviceSlot. Design: docs/design/completions.md, invariants 1, 3 and 9.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "custream/completions.hpp"
#include "custream/detail/driver.hpp"
#include "pools.hpp"

#pragma GCC visibility push(hidden)
namespace custream::detail {

/// Where a registration marks the stream: the word it has the stream write, or the event it
/// records (pooled: from the device's pool, else made in the stream's context).
struct Mark {
  CUevent event = nullptr;
  std::uint64_t* word = nullptr;
  bool pooled = false;
};

/// Devices with a probe (invariant 9): the written-words mechanism serves the first 64.
inline constexpr std::size_t kMaxProbes = 64;
/// Per device ordinal: an event of its pool, asked for a failed context's error (written
/// words; invariant 9). Devices past the last slot use events.
using Probes = std::array<std::atomic<CUevent>, kMaxProbes>;

/// Per device ordinal (the first kMaxProbes): whether its streams can write completions to
/// host memory. Constant-initialized (all unasked), so reading it needs no lock or guard.
enum class MemoryWrites : unsigned char { unasked = 0, no = 1, yes = 2 };
extern std::array<std::atomic<MemoryWrites>, kMaxProbes> g_memory_writes;

/// This thread's caches of pooled events, by device ordinal (nullptr while the thread ends).
std::vector<ThreadCache<CUevent>> no_event_caches();
inline std::vector<ThreadCache<CUevent>>* thread_events() {
  return ThreadLocal<std::vector<ThreadCache<CUevent>>, no_event_caches>::get();
}
/// This thread's cache of words (nullptr while the thread ends).
ThreadCache<std::uint64_t*> word_cache();
inline ThreadCache<std::uint64_t*>* thread_words() {
  return ThreadLocal<ThreadCache<std::uint64_t*>, word_cache>::get();
}

/// take_event() when this thread's cache of `device` is empty or not made. @throws Error.
[[gnu::noinline]] CUevent refill_event(const Loaded& l, int device);
/// take_word() when this thread's cache is empty (or gone). @throws Error.
[[gnu::noinline]] std::uint64_t* refill_word(const Loaded& l, int device);

/// An event of `device`'s pool, from this thread's cache. @throws Error.
inline CUevent take_event(const Loaded& l, int device) {
  std::vector<ThreadCache<CUevent>>* const mine = thread_events();
  if (mine != nullptr && static_cast<std::size_t>(device) < mine->size()) {
    std::vector<CUevent>& free = (*mine)[static_cast<std::size_t>(device)].free;
    if (!free.empty()) {
      const CUevent e = free.back();
      free.pop_back();
      return e;
    }
  }
  return refill_event(l, device);
}

/// A free word, from this thread's cache. @throws Error.
inline std::uint64_t* take_word(const Loaded& l, int device) {
  ThreadCache<std::uint64_t*>* const mine = thread_words();
  if (mine == nullptr || mine->free.empty()) return refill_word(l, device);
  std::uint64_t* const word = mine->free.back();
  mine->free.pop_back();
  return word;
}

/// Gives `events` (of `device`) back to their pool. Never throws.
void give_back_events(int device, std::vector<CUevent>& events) noexcept;
/// One event back to its device's pool; out of memory, it leaks (nothing dangles).
void give_back_event(int device, CUevent event) noexcept;
/// Gives `words` (each holding 0 again) back to their pool. Never throws.
void give_back_words(std::vector<std::uint64_t*>& words) noexcept;
/// One word (holding 0) back to its pool; out of memory, it leaks.
void release_word(std::uint64_t* word) noexcept;
/// A mark's event: back to its pool when `pooled`, else destroyed.
void release_event(CUevent event, bool pooled, int device) noexcept;
/// fork() (invariant 15): the pools' mutexes, held by the forking thread across it.
void lock_mark_pools_for_fork();
void unlock_mark_pools_after_fork(bool child) noexcept;

/// Whether `device` serves written words (asked once per device). @throws Error.
bool memory_writes_supported(const Loaded& l, int device);
/// Sets the probe event of `device`: one of its pool's events (always complete).
void make_probe(const Loaded& l, int device, Probes& probes);

/// mark() for every stream and mechanism (`memory`: the written-words mechanism).
[[gnu::noinline]] Mark mark_any(const StreamRef& s, bool memory, Probes& probes);
[[noreturn, gnu::cold, gnu::noinline]] void write_failed(const StreamRef& s, const Mark& m,
                                                         CUresult r);
[[noreturn, gnu::cold, gnu::noinline]] void record_failed(const StreamRef& s, const Mark& m,
                                                          CUresult r);
[[noreturn, gnu::cold, gnu::noinline]] void refuse_mark(const StreamRef& s, CUresult r,
                                                        CUstreamCaptureStatus status);

/// What a registration on `s` (of a primary or green context) marks the stream with, as
/// mark_any() decides, where that is known without asking anything: a word once the device is
/// known to serve words and its probe is made (invariant 9); an event with the event
/// mechanism, on a green context's stream, or on a device past the probes or known not to
/// serve words. Otherwise unknown: mark_any() asks, makes the probe, and decides.
enum class KnownMark { event, word, unknown };
inline KnownMark known_mark(const Loaded& l, const StreamRef& s, int device, bool memory,
                            const Probes& probes) noexcept {
  if (!memory || s.context_kind() == ContextKind::green ||
      static_cast<std::size_t>(device) >= kMaxProbes || device >= l.device_count) {
    return KnownMark::event;
  }
  const MemoryWrites writes =
      g_memory_writes[static_cast<std::size_t>(device)].load(std::memory_order_relaxed);
  if (writes == MemoryWrites::no) return KnownMark::event;
  if (writes == MemoryWrites::unasked ||
      probes[static_cast<std::size_t>(device)].load(std::memory_order_acquire) == nullptr) {
    return KnownMark::unknown;
  }
  return KnownMark::word;
}

/// Marks the stream for a registration (invariant 1, 3, 9): refuses a capturing stream, then
/// has the stream write a word or record an event. The common cases here, with nothing of the
/// rare cases' in its frame: a pooled event or a word, on a stream of a primary or green
/// context, where known_mark() knows which. @throws Error.
inline Mark mark(const StreamRef& s, bool memory, Probes& probes) {
  if (s.is_special() || s.context_kind() == ContextKind::created) {
    return mark_any(s, memory, probes);
  }
  const Loaded& l = loaded();
  const int device = s.device_id();
  const KnownMark known = known_mark(l, s, device, memory, probes);
  if (known == KnownMark::unknown) return mark_any(s, memory, probes);
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  const CUresult checked =
      l.api.cuStreamIsCapturing(s.handle(), &status);  // raw: the registration's hot path
  if (checked != CUDA_SUCCESS || status != CU_STREAM_CAPTURE_STATUS_NONE) {
    refuse_mark(s, checked, status);
  }
  Mark m;
  if (known == KnownMark::word) {
    m.word = take_word(l, device);
    const CUresult written = l.api.cuStreamWriteValue64(  // raw: the registration's hot path
        s.handle(), reinterpret_cast<CUdeviceptr>(m.word), 1, 0u);
    if (written != CUDA_SUCCESS) write_failed(s, m, written);
    return m;
  }
  m.event = take_event(l, device);
  m.pooled = true;
  const CUresult recorded =
      l.api.cuEventRecord(m.event, s.handle());  // raw: the registration's hot path
  if (recorded != CUDA_SUCCESS) record_failed(s, m, recorded);
  return m;
}

/// Fills in what the watcher reads of a task: its stream, registering thread and mark.
inline void fill(CompletionTask* t, const StreamRef& s, std::uintptr_t thread, const Mark& m,
                 Stream* keep = nullptr) noexcept {
  t->view = s;
  t->thread = thread;
  t->stream = s.handle();
  t->event = m.event;
  t->word = m.word;
  t->pooled = m.pooled;
  t->keep = keep;
}

}  // namespace custream::detail
#pragma GCC visibility pop

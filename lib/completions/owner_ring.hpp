// The owner's ring: the first thread that registers on an engine hands its registrations to
// the watcher on a ring of its own, with plain stores (invariant 11). One producer (OwnerRing,
// the owner's side) and one consumer (RingReader, the watcher's side). Internal to the
// completion engine.
//
// Contract: reserve() makes room for a registration's two records before anything is
// enqueued (a full ring is followed by a new one, linked from it); push() writes them and
// publishes them with a release store of the ring's tail, then says which sleep of the
// watcher, if any, the owner must wake (the fence before that read: invariant 11). The reader
// takes records in order, frees a ring once it took the last record and the owner went on with
// the next, and, out of memory, leaves what it could not take for a later pass (13). A
// record's callable is moved into a task on the watcher. Design: docs/design/completions.md,
// invariants 8, 11 and 13.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "custream/completions.hpp"
#include "custream/detail/block_pool.hpp"
#include "marks.hpp"
#include "watcher_sleeps.hpp"

#pragma GCC visibility push(hidden)
namespace custream::detail {

/// The calling thread's identity, unique among running threads: the address of a thread-local
/// byte (initial-exec: no call). A thread started after another ended may get the ended one's,
/// as with pthread_self() (invariant 11).
/// (Inline with its constant initializer, so that no TLS init call guards a read.)
inline thread_local char t_identity __attribute__((tls_model("initial-exec"))) = 0;
inline std::uintptr_t this_thread_identity() noexcept {
  return reinterpret_cast<std::uintptr_t>(&t_identity);
}

// Record kinds, in the low bits of a ring record's first word (invariant 11).
inline constexpr std::uintptr_t kRecordInline = 0;  // InlineCallableOps*; the callable inline
inline constexpr std::uintptr_t kRecordTask = 1;    // CompletionTask*, filled in
inline constexpr std::uintptr_t kRecordStream = 2;  // the stream of the records after it
inline constexpr std::uintptr_t kRecordWord = 4;    // (inline) `mark` is a word, not an event
inline constexpr std::uintptr_t kRecordKinds = 3;

/// One record of a ring: 32 bytes, two to a cache line.
struct RingRecord {
  std::uintptr_t head;
  void* mark;  // the record's event or word; a stream record: the StreamRef with `storage`
  alignas(8) unsigned char storage[kInlineCallable];
};
static_assert(sizeof(RingRecord) == 32, "two ring records to a cache line");
static_assert(sizeof(StreamRef) == sizeof(void*) + kInlineCallable &&
                  std::is_trivially_copyable_v<StreamRef>,
              "a stream record holds a StreamRef");

/// The owner's records, written by it and read by the watcher (one producer, one consumer).
struct Ring {
  static constexpr std::uint64_t kRecords = 1024;
  alignas(64) std::atomic<std::uint64_t> tail{0};  // records written (release)
  std::atomic<Ring*> next{nullptr};  // the ring the owner went on with when this one was full
  alignas(64) std::atomic<std::uint64_t> head{0};  // records the watcher took (release)
  alignas(64) RingRecord records[kRecords];
};
static_assert(offsetof(Ring, head) - offsetof(Ring, tail) == 64 &&
                  offsetof(Ring, records) - offsetof(Ring, head) == 64,
              "the owner's tail, the watcher's head and the records on lines of their own");

/// The owner's side of the ring, on a line of its own (the engine's).
class alignas(64) OwnerRing {
 public:
  explicit OwnerRing(Ring* first) noexcept : ring_(first) {}

  /// Room for a registration (two records: its stream's, its own), before anything is
  /// enqueued: a full ring is followed by a new one. @throws std::bad_alloc.
  void reserve() {
    if (tail_ + 2 - head_ > Ring::kRecords) grow();
    // The lines push() writes, which the watcher may have read since the last registration:
    // asked for now, so that they come back during the driver's calls instead of holding the
    // store buffer (and the driver's next locked instruction) after them (invariant 11).
    prefetch_for_write(&ring_->records[tail_ % Ring::kRecords]);
    prefetch_for_write(&ring_->tail);
  }

  /// Writes a registration's records and publishes them (after reserve() and the mark).
  /// Returns the watcher's sleep to wake, 0 for none: a sleep the owner woke before is claimed,
  /// and waking it again would do nothing (invariant 4).
  [[gnu::always_inline]] std::uint64_t push(const StreamRef& s, const Mark& m, std::uintptr_t head,
                                            void (*construct)(void*, void*) noexcept, void* source,
                                            bool expedited, const WatcherSleeps& sleeps) noexcept {
    Ring& ring = *ring_;
    if (std::memcmp(&s, &stream_, sizeof s) != 0) {
      RingRecord& r = ring.records[tail_++ % Ring::kRecords];
      r.head = kRecordStream;
      std::memcpy(&r.mark, &s, sizeof s);
      stream_ = s;
    }
    RingRecord& r = ring.records[tail_++ % Ring::kRecords];
    if ((head & kRecordKinds) == kRecordInline) {
      r.mark = m.word != nullptr ? static_cast<void*>(m.word) : static_cast<void*>(m.event);
      if (m.word != nullptr) head |= kRecordWord;
      construct(r.storage, source);
    }
    r.head = head;
    // The lines a few registrations ahead, which the watcher read a ring ago.
    prefetch_for_write(&ring.records[(tail_ + 8) % Ring::kRecords]);
    registered_.store(registered_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
    ring.tail.store(tail_, std::memory_order_release);
    // The watcher marks itself asleep, then makes every thread of the process pass a full
    // barrier (membarrier), then looks at the ring: either it sees these records or this load
    // sees it asleep (invariant 11). Without membarrier, a full fence here.
    if (expedited) {
      std::atomic_signal_fence(std::memory_order_seq_cst);
    } else {
      std::atomic_thread_fence(std::memory_order_seq_cst);
    }
    const std::uint64_t sleep = sleeps.current(std::memory_order_relaxed);
    if (sleep == 0 || sleep == woke_) return 0;
    woke_ = sleep;
    return sleep;
  }

  /// The ring the owner writes now (the first, before any registration).
  Ring* ring() const noexcept { return ring_; }
  /// Registrations the owner published (read by any thread).
  std::size_t registered() const noexcept { return registered_.load(std::memory_order_acquire); }

 private:
  [[gnu::noinline]] void grow();

  Ring* ring_;
  std::uint64_t tail_ = 0;  // records written on ring_
  std::uint64_t head_ = 0;  // records taken, as last read
  std::atomic<std::size_t> registered_{0};
  std::uint64_t woke_ = 0;  // the last watcher sleep the owner woke (claimed by then)
  StreamRef stream_;        // the stream of its last record
};

/// The watcher's side of the ring.
class RingReader {
 public:
  explicit RingReader(Ring* first) noexcept : ring_(first) {}
  RingReader(const RingReader&) = delete;
  RingReader& operator=(const RingReader&) = delete;
  /// Frees the rings (every record taken). Never throws.
  ~RingReader();

  /// Whether the owner's ring has records the watcher has not taken.
  bool pending() const noexcept {
    return ring_->tail.load(std::memory_order_acquire) != head_ ||
           ring_->next.load(std::memory_order_acquire) != nullptr;
  }
  /// Takes the owner's records into `out` (tasks for small callables, made here; tasks the
  /// owner made; the stream they are of), leaving room in `out` for `then` more. True when it
  /// took every record the ring held when read and made that room; out of memory, sets
  /// `starved`. `owner`: the registering thread of the records. Watcher only.
  bool take(std::vector<CompletionTask*>& out, std::size_t then, std::uintptr_t owner,
            bool& starved);

 private:
  bool take_record(RingRecord& r, std::vector<CompletionTask*>& out, std::uintptr_t owner,
                   bool& starved);

  Ring* ring_;
  std::uint64_t head_ = 0;
  StreamRef stream_;  // the stream of the records being taken
};

}  // namespace custream::detail
#pragma GCC visibility pop

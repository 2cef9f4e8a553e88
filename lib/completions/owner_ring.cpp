// The owner's ring, out of line: a new ring when one is full (the owner's side), and taking
// records (the watcher's side). Contract: owner_ring.hpp. Design: docs/design/completions.md,
// invariants 11 and 13.
#include "owner_ring.hpp"

#include <algorithm>
#include <new>

namespace custream::detail {

namespace {

// Makes room in `v` for `n` more elements, at least doubling its capacity when it grows: a reserve
// of exactly what is needed, once per ring of a backlog, reallocated and copied the vector each
// time (quadratic in the backlog). Where doubling finds no memory, exactly what is needed.
// @throws std::bad_alloc.
template <typename T>
void reserve_more(std::vector<T>& v, std::size_t n) {
  if (v.capacity() - v.size() >= n) return;
  try {
    v.reserve(std::max(v.size() + n, 2 * v.capacity()));
  } catch (const std::bad_alloc&) {
    v.reserve(v.size() + n);
  }
}

}  // namespace

void OwnerRing::grow() {
  head_ = ring_->head.load(std::memory_order_acquire);
  if (tail_ + 2 - head_ <= Ring::kRecords) return;
  Ring* next = new Ring;
  ring_->next.store(next, std::memory_order_release);  // nothing more goes on the old
  ring_ = next;
  tail_ = 0;
  head_ = 0;
}

RingReader::~RingReader() {
  for (Ring* r = ring_; r != nullptr;) {
    Ring* const next = r->next.load(std::memory_order_acquire);
    delete r;
    r = next;
  }
}

bool RingReader::take(std::vector<CompletionTask*>& out, std::size_t then, std::uintptr_t owner,
                      bool& starved) {
  for (;;) {
    Ring& ring = *ring_;
    // `next` first: once it is set, the tail read after it is final.
    Ring* const next = ring.next.load(std::memory_order_acquire);
    const std::uint64_t tail = ring.tail.load(std::memory_order_acquire);
    // Room for every record and the `then` first, so that nothing below (or the caller's
    // insert) can throw; out of memory, the records stay where they are and are taken on a
    // later pass.
    try {
      reserve_more(out, static_cast<std::size_t>(tail - head_) + then);
    } catch (const std::bad_alloc&) {
      starved = true;
      return false;
    }
    if (tail == head_ && next == nullptr) return true;
    for (; head_ != tail; ++head_) {
      if (!take_record(ring.records[head_ % Ring::kRecords], out, owner, starved)) {
        break;  // taken from here on a later pass
      }
    }
    ring.head.store(head_, std::memory_order_release);
    if (head_ != tail) return false;  // a callable could not be moved (out of memory)
    if (next == nullptr) return true;
    delete ring_;  // the owner went on with `next` and writes this one no more
    ring_ = next;
    head_ = 0;
  }
}

// One record into `out` (room made by take()); false, leaving it, when its callable cannot be
// moved into a task (out of memory).
bool RingReader::take_record(RingRecord& r, std::vector<CompletionTask*>& out, std::uintptr_t owner,
                             bool& starved) {
  const std::uintptr_t kind = r.head & kRecordKinds;
  if (kind == kRecordStream) {
    std::memcpy(static_cast<void*>(&stream_), &r.mark, sizeof stream_);
    return true;
  }
  if (kind == kRecordTask) {
    out.push_back(reinterpret_cast<CompletionTask*>(r.head & ~kRecordKinds));
    return true;
  }
  const auto* ops =
      reinterpret_cast<const InlineCallableOps*>(r.head & ~(kRecordKinds | kRecordWord));
  CompletionTask* t;
  try {
    t = ops->materialize(r.storage);  // the callable stays in the record when this throws
  } catch (const std::bad_alloc&) {
    starved = true;
    return false;
  }
  Mark m;
  if ((r.head & kRecordWord) != 0) {
    m.word = static_cast<std::uint64_t*>(r.mark);
  } else {  // pooled as mark() decides for the stream
    m.event = static_cast<CUevent>(r.mark);
    m.pooled = !stream_.is_special() && stream_.context_kind() != ContextKind::created;
  }
  fill(t, stream_, owner, m);
  out.push_back(t);
  return true;
}

}  // namespace custream::detail

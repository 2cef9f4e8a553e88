// The watcher's completing side: asking whether the streams reached their queues' heads,
// probing failed contexts, and running (or readying) what completed. Contract: watcher.hpp.
// Design: docs/design/completions.md, invariants 2, 7, 9 and 13.
#include <unistd.h>

#include <array>

#include "driver.hpp"
#include "tasks.hpp"
#include "watcher.hpp"

namespace custream::detail {

namespace {

// CUDA_SUCCESS when the stream reached `t`, CUDA_ERROR_NOT_READY, or the stream's error.
CUresult reached(const DriverApi& api, const CompletionTask* t) noexcept {
  if (t->word != nullptr) {
    return __atomic_load_n(t->word, __ATOMIC_ACQUIRE) != 0 ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
  }
  return api.cuEventQuery(t->event);  // raw: the answer is the stream's result
}

void note_ripening(std::optional<Watcher::Clock::time_point>& ripens,
                   Watcher::Clock::time_point t) noexcept {
  if (!ripens || t < *ripens) ripens = t;
}

// Appends `item` to `list`; out of memory, hands it back with `give_back` instead.
template <typename T, typename GiveBack>
void keep_or_give_back(std::vector<T>& list, const T& item, GiveBack give_back) noexcept {
  try {
    list.push_back(item);
  } catch (const std::bad_alloc&) {
    give_back();
  }
}

}  // namespace

// Completes what the stream of `q` reached; true when anything was. When it left an event
// unqueried because the watcher took it less than kFresh ago, sets `ripens` to when it may be
// asked, if that is sooner.
bool Watcher::poll(const DriverApi& api, TaskQueue& q, Returned& returned, Clock::time_point now,
                   std::optional<Clock::time_point>& ripens) {
  if (q.empty()) return false;  // its first task could not be queued (out of memory)
  // Events are queried only once the watcher took them kFresh ago (invariant 2): the oldest
  // `ripe` tasks may be asked. Words are loads, read whenever.
  std::size_t ripe = q.ripe(now);
  bool progress = false;
  if (q.head()->word == nullptr) {
    if (ripe == 0) {
      note_ripening(ripens, q.head_ripens());
      return false;
    }
    // An event's query is a driver call that the enqueueing threads feel: the oldest first,
    // since a pending oldest means nothing later is done (one query).
    const CUresult r = api.cuEventQuery(q.head()->event);  // raw: the stream's result
    if (r == CUDA_ERROR_NOT_READY || !complete(q, r, returned, now)) return false;
    progress = true;
    --ripe;
    // Then the newest that is ripe (invariant 2): when it is done, every registration queued
    // before it is, provided their push order is their order in the stream: all of one
    // thread's, on a stream that is not a special handle (whose key is shared by streams
    // that are not ordered together).
    if (ripe > 1 && !q.mixed && !q.at(ripe - 1)->view.is_special() &&
        q.at(ripe - 1)->word == nullptr &&
        api.cuEventQuery(q.at(ripe - 1)->event) == CUDA_SUCCESS) {  // raw: as above
      for (; ripe > 0 && complete(q, CUDA_SUCCESS, returned, now); --ripe) {
      }
      return true;
    }
  }
  // One by one from the oldest (a word is a load: each is read, none taken for another), an
  // event only once it is ripe.
  while (!q.empty()) {
    if (q.head()->word == nullptr && ripe == 0) {
      note_ripening(ripens, q.head_ripens());
      break;
    }
    const CUresult r = reached(api, q.head());
    if (r == CUDA_ERROR_NOT_READY || !complete(q, r, returned, now)) break;
    progress = true;
    if (ripe > 0) --ripe;  // the ripe ones are the oldest
  }
  return progress;
}

// A stream whose work failed never writes its words (invariant 9): for each device with a
// word that has been the head of its queue for `spin` or longer, asks the device's probe
// event (always complete: it answers the context's sticky error, if any), and completes
// that device's word-waiting registrations with the error.
void Watcher::probe(std::unordered_map<CUstream, TaskQueue>& queues, Returned& returned,
                    Clock::time_point now) {
  const DriverApi& api = loaded().api;
  // Each device's answer, asked once a probe (no allocation: invariant 13).
  std::array<std::optional<CUresult>, kMaxProbes> failed;
  for (auto& [key, q] : queues) {
    if (q.empty() || q.head()->word == nullptr || now - q.head_since < ch_.read.options.spin) {
      continue;
    }
    const int device = q.head()->view.device_id();
    std::optional<CUresult>& f = failed[static_cast<std::size_t>(device)];
    if (!f) {
      const CUevent e =
          ch_.probes[static_cast<std::size_t>(device)].load(std::memory_order_acquire);
      const CUresult r = api.cuEventQuery(e);  // raw: the context's error, if any
      // Only an error of the context fails the device's words: not a capture's refusal.
      const bool failure = r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_READY &&
                           r != CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED &&
                           r != CUDA_ERROR_STREAM_CAPTURE_INVALIDATED &&
                           r != CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
      f = failure ? r : CUDA_SUCCESS;
    }
    if (*f == CUDA_SUCCESS) continue;
    for (auto& [other_key, other] : queues) {  // every queue of that device
      // A word the stream wrote is a success (its task waited for room on the ready list).
      while (!other.empty() && other.head()->word != nullptr &&
             other.head()->view.device_id() == device &&
             complete(other, reached(api, other.head()) == CUDA_SUCCESS ? CUDA_SUCCESS : *f,
                      returned, now)) {
      }
    }
  }
}

// Runs (or readies) the head of `q`, which the stream reached with `r`, reading it without
// writing it, and pops it. False, leaving it at the head, when caller delivery's ready list
// has no room for it (out of memory: invariant 13).
bool Watcher::complete(TaskQueue& q, CUresult r, Returned& returned,
                       Clock::time_point now) noexcept {
  CompletionTask* const task = q.head();
  // Read before the task is handed on: a run_ready() may run and destroy it at once.
  std::uint64_t* const word = task->word;
  const CUevent event = task->event;
  const int device = task->view.device_id();
  const bool pooled = task->pooled;
  const bool kept = task->keep != nullptr;  // its event goes with it (finish_task)
  const bool run_here = ch_.read.options.delivery == CompletionDelivery::thread || task->immediate;
  bool was_empty = false;
  if (!run_here) {
    try {
      std::lock_guard<std::mutex> lock(ch_.guarded.mutex);
      was_empty = ch_.guarded.ready.empty();
      ch_.guarded.ready.emplace_back(task, r);
    } catch (...) {  // std::bad_alloc, or the mutex could not be taken
      starved_ = true;
      return false;
    }
  }
  q.pop(now);
  // Its mark is free again: back to the pool after this pass (at once when the list cannot
  // grow). A word the stream did not write (its work failed) is not reused.
  if (word != nullptr) {
    if (r == CUDA_SUCCESS) {
      __atomic_store_n(word, std::uint64_t{0}, __ATOMIC_RELAXED);
      keep_or_give_back(returned.words, word, [&] { release_word(word); });
    }
  } else if (pooled) {
    keep_or_give_back(returned.events, std::pair<int, CUevent>(device, event),
                      [&] { give_back_event(device, event); });
  } else if (!kept) {
    release_call<&DriverApi::cuEventDestroy>("event", event, event);
  }
  if (run_here) {
    run_task(task, r, &ch_.kept_releasing);
    ch_.finished.fetch_add(1, std::memory_order_release);
  } else if (was_empty) {
    const std::uint64_t one = 1;
    (void)!::write(ch_.fd, &one, sizeof one);
  }
  return true;
}

void Watcher::give_back(Returned& returned) noexcept {
  if (!returned.words.empty()) give_back_words(returned.words);
  returned.words.clear();  // out of memory: they leak
  if (returned.events.empty()) return;
  try {
    std::unordered_map<int, std::vector<CUevent>> by_device;
    for (const auto& [device, e] : returned.events) by_device[device].push_back(e);
    for (auto& [device, events] : by_device) give_back_events(device, events);
  } catch (...) {  // out of memory: the events leak, nothing dangles
  }
  returned.events.clear();
}

}  // namespace custream::detail

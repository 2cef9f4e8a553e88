// The pools of marks (marks.hpp): each device's pooled events and the host-mapped words, made
// on demand, never destroyed, shared by every engine. Contract: marks.hpp and pools.hpp.
// Design: docs/design/completions.md, invariants 3 and 9.
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "custream/context_scope.hpp"
#include "driver.hpp"
#include "marks.hpp"

namespace custream::detail {

namespace {

// Events of each device's primary context, reused across registrations (invariant 3): made once,
// never destroyed (the primary contexts stay retained), shared by every engine.
struct EventPools {
  std::mutex mutex;
  std::unordered_map<int, BatchPool<CUevent>> by_device;
};
EventPools& event_pools() {
  static auto* pools = new EventPools;  // never destroyed
  return *pools;
}
BatchPool<CUevent>& event_pool(int device) {
  EventPools& pools = event_pools();
  std::lock_guard<std::mutex> lock(pools.mutex);
  return pools.by_device[device];  // elements of an unordered_map stay where they are
}

CUevent make_event(const Loaded& l, int device) {
  ContextScope scope(primary_context(l, device));
  CUevent e = nullptr;
  call<&DriverApi::cuEventCreate>(device_subject(device), &e,
                                  static_cast<unsigned>(CU_EVENT_DISABLE_TIMING));
  return e;
}

// Words of host-mapped memory for the memory_write mechanism (invariant 9): allocated
// (portable, device-mapped) a page at a time, never freed, shared by every engine and device.
// A free word holds 0; the stream writes 1; the watcher stores 0 again before giving it back.
BatchPool<std::uint64_t*>& word_pool() {
  static auto* pool = new BatchPool<std::uint64_t*>;  // never destroyed: no driver call at exit
  return *pool;
}

constexpr std::size_t kWordsPerPage = 512;

std::uint64_t* make_words(const Loaded& l, int device, std::vector<std::uint64_t*>& out) {
  ContextScope scope(primary_context(l, device));
  void* page = nullptr;
  call<&DriverApi::cuMemHostAlloc>(
      device_subject(device), &page, kWordsPerPage * sizeof(std::uint64_t),
      static_cast<unsigned>(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP));
  CUdeviceptr mapped = 0;
  const CUresult r = try_call<&DriverApi::cuMemHostGetDevicePointer>(&mapped, page, 0u);
  if (r != CUDA_SUCCESS || mapped != reinterpret_cast<CUdeviceptr>(page)) {
    release_call<&DriverApi::cuMemFreeHost>("host-mapped memory", page, page);
    if (r != CUDA_SUCCESS) fail<&DriverApi::cuMemHostGetDevicePointer>(r, device_subject(device));
    throw_call_error(CUDA_ERROR_NOT_SUPPORTED,
                     EntryInfo<&DriverApi::cuMemHostGetDevicePointer>::name, device_subject(device),
                     "host-mapped memory has a device address other than its host address (no "
                     "unified addressing): use CompletionMechanism::event");
  }
  auto* words = static_cast<std::uint64_t*>(page);
  std::memset(words, 0, kWordsPerPage * sizeof(std::uint64_t));
  for (std::size_t i = 1; i < kWordsPerPage; ++i) out.push_back(words + i);
  return words;
}

}  // namespace

std::vector<ThreadCache<CUevent>> no_event_caches() { return {}; }

ThreadCache<std::uint64_t*> word_cache() { return ThreadCache<std::uint64_t*>(&word_pool()); }

CUevent refill_event(const Loaded& l, int device) {
  std::vector<ThreadCache<CUevent>>* const mine = thread_events();
  if (mine == nullptr)
    return take_uncached(event_pool(device), [&] { return make_event(l, device); });
  if (mine->size() <= static_cast<std::size_t>(device)) {
    mine->resize(static_cast<std::size_t>(l.device_count > device ? l.device_count : device + 1));
  }
  ThreadCache<CUevent>& cache = (*mine)[static_cast<std::size_t>(device)];
  if (cache.pool == nullptr) cache.pool = &event_pool(device);
  return cache.take([&] { return make_event(l, device); });
}

std::uint64_t* refill_word(const Loaded& l, int device) {
  ThreadCache<std::uint64_t*>* const mine = thread_words();
  if (mine != nullptr) return mine->take([&] { return make_words(l, device, mine->free); });
  return take_uncached(word_pool(), [&] {  // the rest of a new page goes to the pool
    std::vector<std::uint64_t*> rest;
    std::uint64_t* const word = make_words(l, device, rest);
    word_pool().give_back(rest, rest.size());
    return word;
  });
}

void give_back_events(int device, std::vector<CUevent>& events) noexcept {
  event_pool(device).give_back(events, events.size());
}

void give_back_event(int device, CUevent event) noexcept {
  try {
    event_pool(device).give_back_one(event);
  } catch (...) {
  }
}

void give_back_words(std::vector<std::uint64_t*>& words) noexcept {
  word_pool().give_back(words, words.size());
}

void release_word(std::uint64_t* word) noexcept { word_pool().give_back_one(word); }

void release_event(CUevent event, bool pooled, int device) noexcept {
  if (!pooled) {
    release_call<&DriverApi::cuEventDestroy>("event", event, event);
  } else {
    give_back_event(device, event);
  }
}

void make_probe(const Loaded& l, int device, Probes& probes) {
  CUevent e = take_event(l, device);
  CUevent expected = nullptr;
  if (!probes[static_cast<std::size_t>(device)].compare_exchange_strong(
          expected, e, std::memory_order_acq_rel)) {
    give_back_event(device, e);  // another thread's is there
  }
}

// fork() (invariant 15): the pools' mutexes are held by the forking thread across it, so that
// the child finds none held by a thread it does not have.
void lock_mark_pools_for_fork() {
  word_pool().lock_for_fork();
  event_pools().mutex.lock();
  for (auto& [device, pool] : event_pools().by_device) pool.lock_for_fork();
}

void unlock_mark_pools_after_fork(bool child) noexcept {
  for (auto& [device, pool] : event_pools().by_device) pool.unlock_after_fork(child);
  release_after_fork(event_pools().mutex, child);
  word_pool().unlock_after_fork(child);
}

}  // namespace custream::detail

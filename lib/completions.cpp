// custream::Completions: completion notifications from a watcher thread that queries events (or
// reads words the stream wrote), without host functions. Design: docs/design/completions.md.
#include "custream/completions.hpp"

#include <fcntl.h>
#include <linux/membarrier.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "custream/context_scope.hpp"
#include "custream/detail/block_pool.hpp"
#include "custream/error.hpp"
#include "custream/host_function_error.hpp"
#include "driver.hpp"
#include "error.hpp"
#include "fork_safe.hpp"
#include "host_function.hpp"
#include "task_queue.hpp"
#include "watcher_sleeps.hpp"

namespace custream {
namespace detail {

using Clock = std::chrono::steady_clock;

void throw_completion_failure(CUresult result, CUstream stream, int device) {
  throw Error(result, "cuEventQuery", subject_text({Subject::What::stream, stream, device}),
              "the stream's work failed before the completion was reached (a callback that "
              "takes no CUresult is not run)");
}

namespace {

// Whether this process is registered for membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)
// (Linux 4.14), registering it on first use: the watcher's side of the owner's fence-free
// hand-off (invariant 11).
bool expedited_barrier_registered() noexcept {
  static const bool registered =
      ::syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
  return registered;
}

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

// A process-wide free list that threads take from and give back to a batch at a time, so that
// threads registering at once do not meet on its mutex for every item (invariants 3, 8).
template <typename T>
class BatchPool {
 public:
  static constexpr std::size_t kBatch = 64;
  // Moves up to `batch` free items to `out`.
  void refill(std::vector<T>& out, std::size_t batch = kBatch) {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::size_t n = std::min(free_.size(), batch);
    out.insert(out.end(), free_.end() - static_cast<std::ptrdiff_t>(n), free_.end());
    free_.resize(free_.size() - n);
  }
  // Moves the last `n` items of `items` here; out of memory, `items` keeps them.
  void give_back(std::vector<T>& items, std::size_t n) noexcept {
    try {
      std::lock_guard<std::mutex> lock(mutex_);
      free_.insert(free_.end(), items.end() - static_cast<std::ptrdiff_t>(n), items.end());
      items.resize(items.size() - n);
    } catch (...) {
    }
  }
  // fork() (invariant 15): held by the forking thread across it; made anew in the child.
  void lock_for_fork() { mutex_.lock(); }
  void unlock_after_fork(bool child) noexcept { release_after_fork(mutex_, child); }
  // Moves `item` here; out of memory, it leaks (nothing dangles).
  void give_back_one(T item) noexcept {
    try {
      std::lock_guard<std::mutex> lock(mutex_);
      free_.push_back(item);
    } catch (...) {
    }
  }

 private:
  std::mutex mutex_;
  std::vector<T> free_;
};

// A thread's cache of a pool's items; what is left goes back to the pool when the thread ends.
template <typename T>
struct ThreadCache {
  BatchPool<T>* pool = nullptr;
  std::vector<T> free;
  ThreadCache() = default;
  explicit ThreadCache(BatchPool<T>* p) noexcept : pool(p) {}
  // Moved (a vector of caches grows), never copied: each item is held by one cache.
  ThreadCache(ThreadCache&& other) noexcept : pool(other.pool), free(std::move(other.free)) {
    other.free.clear();
  }
  ThreadCache& operator=(ThreadCache&&) = delete;
  ThreadCache(const ThreadCache&) = delete;
  ThreadCache& operator=(const ThreadCache&) = delete;
  ~ThreadCache() {
    if (pool != nullptr) pool->give_back(free, free.size());
  }
  // An item from the cache, refilled from the pool, else from `make()`.
  template <typename Make>
  T take(Make&& make) {
    if (free.empty()) pool->refill(free);
    if (free.empty()) return make();
    const T item = free.back();
    free.pop_back();
    return item;
  }
};

// A thread's own T, made by `make()` on the thread's first call and destroyed when the thread
// ends, reached through an initial-exec TLS pointer: no __tls_get_addr call from the shared
// library on a registration (invariant 3). nullptr once it is destroyed (a thread-local object
// made before it, registering from its destructor): callers use the shared pools then.
template <typename T, T (*make)()>
class ThreadLocal {
 public:
  static T* get() {
    if (T* const p = fast_) return p;
    return make_slot();
  }

 private:
  struct Slot {
    T value;
    explicit Slot(T v) : value(std::move(v)) {}
    ~Slot() {
      fast_ = nullptr;
      closed_ = true;
    }
  };
  [[gnu::noinline]] static T* make_slot() {
    if (closed_) return nullptr;
    thread_local Slot slot(make());
    fast_ = &slot.value;
    return fast_;
  }
  static thread_local T* fast_ __attribute__((tls_model("initial-exec")));
  static thread_local bool closed_ __attribute__((tls_model("initial-exec")));
};
template <typename T, T (*make)()>
thread_local T* ThreadLocal<T, make>::fast_ __attribute__((tls_model("initial-exec"))) = nullptr;
template <typename T, T (*make)()>
thread_local bool ThreadLocal<T, make>::closed_ __attribute__((tls_model("initial-exec"))) = false;

// The calling thread's identity, unique among running threads: the address of a thread-local
// byte (initial-exec: no call). A thread started after another ended may get the ended one's, as
// with pthread_self() (invariant 11).
thread_local char t_identity __attribute__((tls_model("initial-exec"))) = 0;
inline std::uintptr_t this_thread_identity() noexcept {
  return reinterpret_cast<std::uintptr_t>(&t_identity);
}

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

std::vector<ThreadCache<CUevent>> no_event_caches() { return {}; }

// This thread's caches of pooled events, by device ordinal (nullptr while the thread ends).
std::vector<ThreadCache<CUevent>>* thread_events() {
  return ThreadLocal<std::vector<ThreadCache<CUevent>>, no_event_caches>::get();
}

// An item of `pool` for a thread whose caches are gone (it is ending): one from the pool, else
// `make()`.
template <typename T, typename Make>
T take_uncached(BatchPool<T>& pool, Make&& make) {
  std::vector<T> one;
  pool.refill(one, 1);
  return one.empty() ? make() : one.front();
}

// take_event() when this thread's cache of `device` is empty or not yet made: refills it from
// the pool, else makes an event.
[[gnu::noinline]] CUevent refill_event(const Loaded& l, int device) {
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

// An event of `device`'s pool, from this thread's cache.
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

void give_back_events(int device, std::vector<CUevent>& events) noexcept {
  event_pool(device).give_back(events, events.size());
}

// One event back to its device's pool; out of memory, it leaks (nothing dangles).
void give_back_event(int device, CUevent event) noexcept {
  try {
    event_pool(device).give_back_one(event);
  } catch (...) {
  }
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
    throw_call_error(CUDA_ERROR_NOT_SUPPORTED, "cuMemHostGetDevicePointer", device_subject(device),
                     "host-mapped memory has a device address other than its host address (no "
                     "unified addressing): use CompletionMechanism::event");
  }
  auto* words = static_cast<std::uint64_t*>(page);
  std::memset(words, 0, kWordsPerPage * sizeof(std::uint64_t));
  for (std::size_t i = 1; i < kWordsPerPage; ++i) out.push_back(words + i);
  return words;
}

// This thread's cache of words.
ThreadCache<std::uint64_t*> word_cache() { return ThreadCache<std::uint64_t*>(&word_pool()); }

// take_word() when this thread's cache is empty (or gone): refills it from the pool, else
// makes a page.
[[gnu::noinline]] std::uint64_t* refill_word(const Loaded& l, int device) {
  ThreadCache<std::uint64_t*>* const mine =
      ThreadLocal<ThreadCache<std::uint64_t*>, word_cache>::get();
  if (mine != nullptr) return mine->take([&] { return make_words(l, device, mine->free); });
  return take_uncached(word_pool(), [&] {  // the rest of a new page goes to the pool
    std::vector<std::uint64_t*> rest;
    std::uint64_t* const word = make_words(l, device, rest);
    word_pool().give_back(rest, rest.size());
    return word;
  });
}

// A free word, from this thread's cache.
inline std::uint64_t* take_word(const Loaded& l, int device) {
  ThreadCache<std::uint64_t*>* const mine =
      ThreadLocal<ThreadCache<std::uint64_t*>, word_cache>::get();
  if (mine == nullptr || mine->free.empty()) return refill_word(l, device);
  std::uint64_t* const word = mine->free.back();
  mine->free.pop_back();
  return word;
}

// Whether `device` can have completions written to host memory by the stream: 64-bit stream
// memory operations, unified addressing and the driver's entries (asked once per device).
// @throws Error when the driver cannot answer (nothing is remembered then).
bool memory_writes_supported(const Loaded& l, int device) {
  if (device < 0 || device >= l.device_count) return false;
  std::atomic<signed char>& known = l.devices[static_cast<std::size_t>(device)].memory_writes;
  signed char k = known.load(std::memory_order_relaxed);
  if (k < 0) {
    const auto attribute = [&](CUdevice_attribute a) {
      int v = 0;
      call<&DriverApi::cuDeviceGetAttribute>(device_subject(device), &v, a,
                                             l.devices[static_cast<std::size_t>(device)].device);
      return v != 0;
    };
    k = l.api.cuStreamWriteValue64 != nullptr && l.api.cuMemHostAlloc != nullptr &&
                l.api.cuMemHostGetDevicePointer != nullptr && l.api.cuMemFreeHost != nullptr &&
                attribute(CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS) &&
                attribute(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING)
            ? 1
            : 0;
    known.store(k, std::memory_order_relaxed);
  }
  return k == 1;
}

// fork() (invariant 15): the pools' mutexes are held by the forking thread across it, so that
// the child finds none held by a thread it does not have.
void lock_pools_for_fork() {
  word_pool().lock_for_fork();
  event_pools().mutex.lock();
  for (auto& [device, pool] : event_pools().by_device) pool.lock_for_fork();
}
void unlock_pools_after_fork(bool child) noexcept {
  for (auto& [device, pool] : event_pools().by_device) pool.unlock_after_fork(child);
  release_after_fork(event_pools().mutex, child);
  word_pool().unlock_after_fork(child);
}

}  // namespace

namespace {

// For a thread of custream's that calls the driver behind the application's back (the watcher,
// the KeptReleaser): in the default (global) capture mode its capture-unsafe calls (queries,
// cuCtxSynchronize) would be refused, and would invalidate the capture, while another thread
// captures in global mode (invariant 10). A driver without the entry (before 10.1) has no
// capture modes; a failure leaves the thread in global mode.
void relax_capture_mode() noexcept {
  if (const auto exchange = loaded().api.cuThreadExchangeStreamCaptureMode) {
    CUstreamCaptureMode relaxed = CU_STREAM_CAPTURE_MODE_RELAXED;
    (void)exchange(&relaxed);  // raw: a thread's own setting, no error to report
  }
}

// The Streams that registrations kept (invariant 14), released on a thread of their own when
// the watcher is done with them: the last release of a created or green context waits for the
// context's work (cuCtxDestroy, or the drain before a green context is kept), which on the
// watcher would hold back every other registration of its engine, and wait forever for work
// that waits on one of them. Started on first use, never stopped (it waits, using no CPU);
// what it has not released at exit is abandoned with the process.
class KeptReleaser {
 public:
  static KeptReleaser& instance() {
    static auto* releaser = new KeptReleaser;  // never destroyed: its thread may outlive statics
    return *releaser;
  }
  // Releases `keep` on the releaser's thread, counting it in `releasing` until it is released;
  // here when it cannot be handed on (no thread or no memory).
  void release(Stream* keep, std::atomic<std::size_t>& releasing) noexcept {
    try {
      std::unique_lock<std::mutex> lock(mutex_);
      if (!started_) {
        std::thread([this] { run(); }).detach();
        started_ = true;
      }
      queue_.emplace_back(keep, &releasing);
      releasing.fetch_add(1, std::memory_order_relaxed);
      lock.unlock();
      ready_.notify_one();
      return;
    } catch (...) {
    }
    delete keep;
  }
  // fork() (invariant 15): held by the forking thread across it; the child has no releaser
  // thread, and what was queued is the parent's (abandoned there).
  void lock_for_fork() { mutex_.lock(); }
  void unlock_after_fork(bool child) noexcept {
    release_after_fork(mutex_, child);
    if (!child) return;
    ::new (&ready_) std::condition_variable();
    // The parent's copies: leaked, never released here.
    ::new (&queue_) std::deque<std::pair<Stream*, std::atomic<std::size_t>*>>();
    started_ = false;
  }

 private:
  [[noreturn]] void run() noexcept {
    relax_capture_mode();  // a context's release may synchronize it
    for (;;) {
      std::pair<Stream*, std::atomic<std::size_t>*> item;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        ready_.wait(lock, [this] { return !queue_.empty(); });
        item = queue_.front();
        queue_.pop_front();
      }
      delete item.first;
      item.second->fetch_sub(1, std::memory_order_release);  // its engine may go now
    }
  }
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::pair<Stream*, std::atomic<std::size_t>*>> queue_;
  bool started_ = false;
};

// Destroys `task` (run, or not to be run), then what it keeps (invariant 14): the event made in
// its stream's created context, then its copy of the Stream, so that an owned context goes
// last, after everything made in it; with `releasing` (the watcher's engine's count), the copy
// on the KeptReleaser's thread.
void finish_task(CompletionTask* task, std::atomic<std::size_t>* releasing = nullptr) noexcept {
  Stream* const keep = task->keep;
  const CUevent event =
      keep != nullptr && task->word == nullptr && !task->pooled ? task->event : nullptr;
  task->destroy(task);
  if (keep == nullptr) return;
  if (event != nullptr) release_call<&DriverApi::cuEventDestroy>("event", event, event);
  if (releasing != nullptr) {
    KeptReleaser::instance().release(keep, *releasing);
  } else {
    delete keep;
  }
}

struct TaskDeleter {
  void operator()(CompletionTask* t) const noexcept { finish_task(t); }
};
using TaskPtr = std::unique_ptr<CompletionTask, TaskDeleter>;

// Runs `task` with `result`, reporting what it throws (invariant 5), then destroys it
// (`releasing`: see finish_task()).
void run_task(CompletionTask* task, CUresult result,
              std::atomic<std::size_t>* releasing = nullptr) noexcept {
  try {
    task->invoke(task, result);
  } catch (...) {
    report_host_function_error(
        HostFunctionError{task->view, std::current_exception(), false, /*completion=*/true});
  }
  finish_task(task, releasing);
}

bool is_special(CUstream s) noexcept {
  return reinterpret_cast<std::uintptr_t>(s) <=
         reinterpret_cast<std::uintptr_t>(CU_STREAM_PER_THREAD);
}

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

class CompletionEngine;

// A run_ready() in progress on this thread: the batch it took and how far it got, on a list of
// this thread's (innermost first) that the engine's destructor reads (invariant 6).
struct RunFrame {
  explicit RunFrame(CompletionEngine* e) noexcept : engine(e), outer(t_innermost) {
    t_innermost = this;
  }
  ~RunFrame() { t_innermost = outer; }
  RunFrame(const RunFrame&) = delete;
  RunFrame& operator=(const RunFrame&) = delete;
  static RunFrame* innermost() noexcept { return t_innermost; }

  CompletionEngine* const engine;
  RunFrame* const outer;
  std::vector<std::pair<CompletionTask*, CUresult>> batch;
  std::size_t next = 0;  // the next to run
  bool gone = false;     // the engine was destroyed, and ran the rest of the batch

 private:
  static thread_local RunFrame* t_innermost;
};
thread_local RunFrame* RunFrame::t_innermost = nullptr;

// Every engine of the process, for fork() (invariant 15).
void enlist(CompletionEngine* engine);  // @throws std::bad_alloc
void delist(CompletionEngine* engine) noexcept;

// Hidden: calls between its members are direct (no PLT), so that they can be inlined.
class __attribute__((visibility("hidden"))) CompletionEngine {
 public:
  explicit CompletionEngine(const CompletionOptions& options)
      : options_(options), memory_(options.mechanism == CompletionMechanism::memory_write) {
    // Compared with clock differences in nanoseconds: a day at most, so that none overflows
    // (a negative one is none).
    constexpr std::chrono::microseconds kDay = std::chrono::hours(24);
    options_.spin = std::clamp(options_.spin, std::chrono::microseconds(0), kDay);
    options_.linger = std::clamp(options_.linger, std::chrono::microseconds(0), kDay);
    options_.poll_interval = std::clamp(options_.poll_interval, std::chrono::nanoseconds(0),
                                        std::chrono::nanoseconds(kDay));
    auto first_ring = std::make_unique<Ring>();
    owner_ring_ = watch_ring_ = first_ring.get();
    enlist(this);  // for fork() (invariant 15); taken off again below when this throws
    expedited_ = options.process_barrier && expedited_barrier_registered();
    if (options_.delivery == CompletionDelivery::caller) {
      fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
      if (fd_ < 0) {
        delist(this);
        throw Error(CUDA_ERROR_OPERATING_SYSTEM, "custream::Completions", {},
                    std::string("eventfd failed: ") + std::strerror(errno));
      }
    }
    try {
      thread_ = std::thread([this] {
        watch();
        bool orphaned;
        {
          std::lock_guard<std::mutex> lock(mutex_);
          orphaned = orphaned_;
        }
        if (orphaned) delete this;  // the last use of the engine (orphan())
      });
    } catch (const std::system_error& e) {
      delist(this);
      if (fd_ >= 0) ::close(fd_);
      throw Error(CUDA_ERROR_OPERATING_SYSTEM, "custream::Completions", {},
                  std::string("cannot start the completion thread: ") + e.what());
    }
    (void)first_ring.release();  // the watcher's and the owner's from now on
  }

  // Drains (invariant 6): the watcher runs every pending registration, then stops. With
  // caller delivery this thread runs them, also those its callbacks register meanwhile, and
  // the rest of the run_ready() calls it is inside of (destroyed from a callback). In the child
  // of a fork() (invariant 15) there is no watcher: what is pending is abandoned.
  ~CompletionEngine() {
    delist(this);
    if (!forked_) {
      if (fd_ >= 0) {
        const std::size_t running = finish_frames();  // their callbacks are not finished yet
        while (pending() > running) {
          if (run_ready() == 0) {
            pollfd p{fd_, POLLIN, 0};
            (void)::poll(&p, 1, 1);  // futures complete without a signal: look again soon
          }
        }
      }
      stop(false);
      for (std::size_t n = run_ready(); n > 0; n = run_ready()) {
      }
      // What the registrations kept goes before the engine (invariant 14).
      while (kept_releasing_.load(std::memory_order_acquire) != 0) {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
      for (std::size_t d = 0; d < probes_.size(); ++d) {
        if (CUevent e = probes_[d].load(std::memory_order_acquire)) {
          give_back_event(static_cast<int>(d), e);
        }
      }
    }
    if (fd_ >= 0) ::close(fd_);
    // The watcher took every record: the rings are empty.
    for (Ring* r = watch_ring_; r != nullptr;) {
      Ring* const next = r->next.load(std::memory_order_acquire);
      delete r;
      r = next;
    }
  }

  // Stops the watcher; `abandon`: at once, leaving pending registrations (process exit).
  // Joins it, except from the watcher itself: a standard() engine's exit handler run by exit()
  // in one of its callbacks, which never returns to the watcher (invariant 15; a destructor
  // there orphans instead). Nothing to stop in the child of a fork().
  void stop(bool abandon) noexcept {
    if (forked_) return;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
      abandon_ = abandon;
    }
    wake_.notify_all();
    if (thread_.joinable() && !on_watcher_thread()) thread_.join();
  }

  // standard()'s exit handler (invariant 15): registrations from now on are refused, and the
  // watcher stops, abandoning what is pending.
  void close_at_exit() noexcept {
    close(Closed::exited);
    stop(true);
  }

  // True on the watcher thread (in a callback).
  bool on_watcher_thread() const noexcept { return thread_.get_id() == std::this_thread::get_id(); }
  std::thread::id thread_id() const noexcept { return thread_.get_id(); }

  // The Completions is destroyed from one of its callbacks: the watcher goes on with what is
  // pending and then deletes the engine itself, when nothing of it is in use (invariant 6).
  void orphan() noexcept {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
      orphaned_ = true;
    }
    thread_.detach();
  }

  // Where a registration marks the stream: the word it has the stream write, or the event it
  // records (pooled: from the device's pool, else made in the stream's context).
  struct Mark {
    CUevent event = nullptr;
    std::uint64_t* word = nullptr;
    bool pooled = false;
  };

  // A registration by `task` (made by the registering thread): marks the stream, then hands the
  // task to the watcher (the owner's ring, else the shared stack; invariant 11).
  void add(const StreamRef& s, CompletionTask* task, Stream* keep = nullptr) {
    const bool ring = on_ring(s);
    if (ring) {
      reserve_ring();
    } else {
      // The line of the incoming stack, which the watcher reads on every pass: asked for now,
      // so that the push at the end does not wait for it.
      prefetch_for_write(&incoming_);
    }
    const Mark m = mark(s);
    fill(task, s, this_thread_identity(), m, keep);
    if (ring) {
      ring_push(s, m, reinterpret_cast<std::uintptr_t>(task) | kRecordTask, nullptr, nullptr);
    } else {
      push(task);
    }
  }

  // A registration of a small callable (custream/completions.hpp): on the owner's ring it is
  // made in the ring's record; otherwise in a task, pushed on the stack (invariant 11).
  void add_inline(const StreamRef& s, const InlineCallableOps& ops,
                  void (*construct)(void*, void*) noexcept, void* source) {
    // With caller delivery no code of the callable's (its move) runs on the watcher
    // (invariant 7): it is moved into its task here, and the task goes on the ring.
    if (options_.delivery == CompletionDelivery::thread && on_ring(s)) {
      reserve_ring();
      const Mark m = mark(s);
      ring_push(s, m, reinterpret_cast<std::uintptr_t>(&ops) | kRecordInline, construct, source);
      return;
    }
    alignas(8) unsigned char storage[kInlineCallable];
    construct(storage, source);
    CompletionTask* task;
    try {
      task = ops.materialize(storage);
    } catch (...) {
      ops.destroy(storage);
      throw;
    }
    TaskPtr guard(task);  // destroyed, not run, when the registration fails
    add(s, task);
    (void)guard.release();
  }

 private:
  // Record kinds, in the low bits of a ring record's first word (invariant 11).
  static constexpr std::uintptr_t kRecordInline = 0;  // InlineCallableOps*; the callable inline
  static constexpr std::uintptr_t kRecordTask = 1;    // CompletionTask*, filled in
  static constexpr std::uintptr_t kRecordStream = 2;  // the stream of the records after it
  static constexpr std::uintptr_t kRecordWord = 4;    // (inline) `mark` is a word, not an event
  static constexpr std::uintptr_t kRecordKinds = 3;

  // One record of a ring: 32 bytes, two to a cache line.
  struct RingRecord {
    std::uintptr_t head;
    void* mark;  // the record's event or word; a stream record: the StreamRef with `storage`
    alignas(8) unsigned char storage[kInlineCallable];
  };
  static_assert(sizeof(RingRecord) == 32, "two ring records to a cache line");
  static_assert(sizeof(StreamRef) == sizeof(void*) + kInlineCallable &&
                    std::is_trivially_copyable_v<StreamRef>,
                "a stream record holds a StreamRef");

  // The owner's records, written by it and read by the watcher (one producer, one consumer).
  struct Ring {
    static constexpr std::uint64_t kRecords = 1024;
    alignas(64) std::atomic<std::uint64_t> tail{0};  // records written (release)
    std::atomic<Ring*> next{nullptr};  // the ring the owner went on with when this one was full
    alignas(64) std::atomic<std::uint64_t> head{0};  // records the watcher took (release)
    alignas(64) RingRecord records[kRecords];
  };

  // Whether this thread's registrations go on the ring: it is the engine's owner (the first
  // thread that registered) and no other thread has registered (invariant 11).
  // A closed engine (invariant 15) refuses the registration here: its owner is kClosed, which
  // no thread is, so the owner's path pays nothing for the check.
  bool on_ring(const StreamRef& s) {
    const std::uintptr_t self = this_thread_identity();
    std::uintptr_t owner = owner_.load(std::memory_order_relaxed);
    if (owner == 0 && owner_.compare_exchange_strong(owner, self, std::memory_order_relaxed)) {
      owner = self;
    }
    if (owner == self) return !shared_.load(std::memory_order_relaxed);
    if (owner == kClosed) refuse_closed(s);
    // Another thread: from now on every registration goes on the stack, whose order is the
    // order of the pushes across threads.
    if (!shared_.load(std::memory_order_relaxed)) shared_.store(true, std::memory_order_seq_cst);
    return false;
  }

  // Room on the owner's ring for a registration (two records: its stream's, its own), before
  // anything is enqueued: a full ring is followed by a new one. @throws std::bad_alloc.
  void reserve_ring() {
    if (owner_tail_ + 2 - owner_head_ > Ring::kRecords) grow_ring();
    // The lines ring_push() writes, which the watcher may have read since the last registration:
    // asked for now, so that they come back during the driver's calls instead of holding the
    // store buffer (and the driver's next locked instruction) after them (invariant 11).
    prefetch_for_write(&owner_ring_->records[owner_tail_ % Ring::kRecords]);
    prefetch_for_write(&owner_ring_->tail);
  }

  [[gnu::noinline]] void grow_ring() {
    owner_head_ = owner_ring_->head.load(std::memory_order_acquire);
    if (owner_tail_ + 2 - owner_head_ <= Ring::kRecords) return;
    Ring* next = new Ring;
    owner_ring_->next.store(next, std::memory_order_release);  // nothing more goes on the old
    owner_ring_ = next;
    owner_tail_ = 0;
    owner_head_ = 0;
  }

  // Writes a registration's records on the owner's ring and publishes them (after
  // reserve_ring() and the mark).
  void ring_push(const StreamRef& s, const Mark& m, std::uintptr_t head,
                 void (*construct)(void*, void*) noexcept, void* source) noexcept {
    Ring& ring = *owner_ring_;
    if (std::memcmp(&s, &owner_stream_, sizeof s) != 0) {
      RingRecord& r = ring.records[owner_tail_++ % Ring::kRecords];
      r.head = kRecordStream;
      std::memcpy(&r.mark, &s, sizeof s);
      owner_stream_ = s;
    }
    RingRecord& r = ring.records[owner_tail_++ % Ring::kRecords];
    if ((head & kRecordKinds) == kRecordInline) {
      r.mark = m.word != nullptr ? static_cast<void*>(m.word) : static_cast<void*>(m.event);
      if (m.word != nullptr) head |= kRecordWord;
      construct(r.storage, source);
    }
    r.head = head;
    // The lines a few registrations ahead, which the watcher read a ring ago.
    prefetch_for_write(&ring.records[(owner_tail_ + 8) % Ring::kRecords]);
    owner_registered_.store(owner_registered_.load(std::memory_order_relaxed) + 1,
                            std::memory_order_release);
    ring.tail.store(owner_tail_, std::memory_order_release);
    // The watcher marks itself asleep, then makes every thread of the process pass a full
    // barrier (membarrier), then looks at the ring: either it sees these records or this load
    // sees it asleep (invariant 11). Without membarrier, a full fence here.
    if (expedited_) {
      std::atomic_signal_fence(std::memory_order_seq_cst);
    } else {
      std::atomic_thread_fence(std::memory_order_seq_cst);
    }
    // A sleep the owner woke before is claimed: waking it again would do nothing (invariant 4).
    const std::uint64_t sleep = sleeps_.current(std::memory_order_relaxed);
    if (sleep != 0 && sleep != owner_woke_) {
      owner_woke_ = sleep;
      wake(sleep);
    }
  }

  // Fills in what the watcher reads of a task: its stream, registering thread and mark.
  static void fill(CompletionTask* t, const StreamRef& s, std::uintptr_t thread, const Mark& m,
                   Stream* keep = nullptr) noexcept {
    t->view = s;
    t->thread = thread;
    t->stream = s.handle();
    t->event = m.event;
    t->word = m.word;
    t->pooled = m.pooled;
    t->keep = keep;
  }

  // Marks the stream for a registration (invariant 1, 3, 9): refuses a capturing stream, then
  // has the stream write a word or record an event. The common cases here, with nothing of the
  // rare cases' in its frame: a pooled event or a word, on a stream of a primary or green
  // context, where known_mark() knows which.
  Mark mark(const StreamRef& s) {
    if (s.is_special() || s.context_kind() == ContextKind::created) return mark_any(s);
    const Loaded& l = loaded();
    const int device = s.device_id();
    const KnownMark known = known_mark(l, s, device);
    if (known == KnownMark::unknown) return mark_any(s);
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    const CUresult checked = l.api.cuStreamIsCapturing(s.handle(), &status);
    if (checked != CUDA_SUCCESS || status != CU_STREAM_CAPTURE_STATUS_NONE) {
      refuse(s, checked, status);
    }
    Mark m;
    if (known == KnownMark::word) {
      m.word = take_word(l, device);
      const CUresult written =
          l.api.cuStreamWriteValue64(s.handle(), reinterpret_cast<CUdeviceptr>(m.word), 1, 0u);
      if (written != CUDA_SUCCESS) write_failed(s, m, written);
      return m;
    }
    m.event = take_event(l, device);
    m.pooled = true;
    const CUresult recorded = l.api.cuEventRecord(m.event, s.handle());
    if (recorded != CUDA_SUCCESS) record_failed(s, m, recorded);
    return m;
  }

  // What a registration on `s` (of a primary or green context) marks the stream with, as
  // mark_any() decides, where that is known without asking anything: a word once the device is
  // known to serve words and its probe is made (invariant 9); an event with the event
  // mechanism, on a green context's stream, or on a device past the probes or known not to
  // serve words. Otherwise unknown: mark_any() asks, makes the probe, and decides.
  enum class KnownMark { event, word, unknown };
  KnownMark known_mark(const Loaded& l, const StreamRef& s, int device) const noexcept {
    if (!memory_ || s.context_kind() == ContextKind::green ||
        static_cast<std::size_t>(device) >= kMaxProbes || device >= l.device_count) {
      return KnownMark::event;
    }
    const signed char writes =
        l.devices[static_cast<std::size_t>(device)].memory_writes.load(std::memory_order_relaxed);
    if (writes == 0) return KnownMark::event;
    if (writes < 0 ||
        probes_[static_cast<std::size_t>(device)].load(std::memory_order_acquire) == nullptr) {
      return KnownMark::unknown;
    }
    return KnownMark::word;
  }

  [[noreturn, gnu::cold, gnu::noinline]] static void write_failed(const StreamRef& s, const Mark& m,
                                                                  CUresult r) {
    release_word(m.word);  // nothing was enqueued: it stays 0
    throw_stream_error(r, "cuStreamWriteValue64", s, "registering a completion");
  }

  [[noreturn, gnu::cold, gnu::noinline]] static void refuse(const StreamRef& s, CUresult r,
                                                            CUstreamCaptureStatus status) {
    if (r != CUDA_SUCCESS) throw_stream_error(r, "cuStreamIsCapturing", s);
    refuse_capture(s, status);
  }

  // A special handle is the current context's stream: with none current, the registration is
  // refused (the driver's special-handle retry would put it on the current device's primary
  // context).
  [[gnu::cold]] static void need_current_context(const Loaded& l, const StreamRef& s) {
    CUcontext current = nullptr;
    if (const CUresult r = l.api.cuCtxGetCurrent(&current); r != CUDA_SUCCESS) {
      throw_stream_error(r, "cuCtxGetCurrent", s, "registering a completion");
    }
    if (current != nullptr) return;
    throw_stream_error(CUDA_ERROR_INVALID_CONTEXT, "custream::Completions", s,
                       "no context is current in this thread, and a special handle is the "
                       "current context's stream: make one current (DeviceScope, ContextScope) "
                       "or register on a stream of a device (custream refused it once "
                       "cuCtxGetCurrent found none)");
  }

  // The registration on a closed engine (invariant 15), refused without calling the driver.
  [[noreturn, gnu::cold, gnu::noinline]] void refuse_closed(const StreamRef& s) const {
    if (closed_why_.load(std::memory_order_relaxed) == Closed::forked) {
      throw_stream_error(
          CUDA_ERROR_NOT_PERMITTED, "custream::Completions", s,
          "this Completions was made before fork(): the child process has no watcher thread, "
          "and its CUDA driver is unusable after fork (custream refused it without calling the "
          "driver)");
    }
    throw_stream_error(
        CUDA_ERROR_DEINITIALIZED, "custream::Completions", s,
        "the process is exiting: Completions::standard() stopped its watcher at exit, and a "
        "registration now would never be delivered (custream refused it without calling the "
        "driver)");
  }

  [[noreturn, gnu::cold, gnu::noinline]] static void record_failed(const StreamRef& s,
                                                                   const Mark& m, CUresult r) {
    release_event(m.event, m.pooled, s.is_special() ? -1 : s.device_id());
    throw_stream_error(r, "cuEventRecord", s, "registering a completion");
  }

  // mark() for every stream and mechanism.
  [[gnu::noinline]] Mark mark_any(const StreamRef& s) {
    const Loaded& l = loaded();
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    const bool special = s.is_special();
    if (special) need_current_context(l, s);
    CUresult r = l.api.cuStreamIsCapturing(s.handle(), &status);
    if (r != CUDA_SUCCESS) throw_stream_error(r, "cuStreamIsCapturing", s);
    if (status != CU_STREAM_CAPTURE_STATUS_NONE) refuse_capture(s, status);
    const int device = special ? -1 : s.device_id();
    Mark m;
    // The word (invariant 9), or the event: a primary-context one from the pool (green-context
    // streams use them too), else one made in the stream's context and destroyed after
    // (invariant 3).
    if (!special && s.context_kind() != ContextKind::created) {
      // Words only for primary contexts: the probe is a primary-context event, and whether a
      // green context's failure shows there was not measured (invariant 9).
      if (memory_ && s.context_kind() == ContextKind::primary &&
          memory_writes_supported(l, device) && static_cast<std::size_t>(device) < probes_.size()) {
        // The device's probe for a failed context's error (invariant 9), made by the first
        // registration, where a failure can be thrown.
        if (probes_[static_cast<std::size_t>(device)].load(std::memory_order_acquire) == nullptr) {
          make_probe(l, device);
        }
        m.word = take_word(l, device);
        r = l.api.cuStreamWriteValue64(s.handle(), reinterpret_cast<CUdeviceptr>(m.word), 1, 0u);
        if (r != CUDA_SUCCESS) write_failed(s, m, r);
        return m;
      }
      m.event = take_event(l, device);
      m.pooled = true;
    } else {
      std::optional<ContextScope> own;
      if (!special) own.emplace(s.context());
      call<&DriverApi::cuEventCreate>({Subject::What::stream, s.handle(), device}, &m.event,
                                      static_cast<unsigned>(CU_EVENT_DISABLE_TIMING));
    }
    r = l.api.cuEventRecord(m.event, s.handle());
    if (r != CUDA_SUCCESS) record_failed(s, m, r);
    return m;
  }

 public:
  // Sets the probe event of `device`: one of its pool's events (always complete).
  void make_probe(const Loaded& l, int device) {
    CUevent e = take_event(l, device);
    CUevent expected = nullptr;
    if (!probes_[static_cast<std::size_t>(device)].compare_exchange_strong(
            expected, e, std::memory_order_acq_rel)) {
      give_back_event(device, e);  // another thread's is there
    }
  }

  // Hands a registered task to the watcher.
  void push(CompletionTask* task) noexcept {
    registered_.fetch_add(1, std::memory_order_relaxed);
    // A lock-free push (invariant 4); the watcher is woken only when it sleeps.
    CompletionTask* head = incoming_.load(std::memory_order_relaxed);
    do {
      task->next = head;
    } while (!incoming_.compare_exchange_weak(head, task, std::memory_order_seq_cst,
                                              std::memory_order_relaxed));
    if (const std::uint64_t sleep = sleeps_.current(std::memory_order_seq_cst)) wake(sleep);
  }

  // Ends the watcher's sleep numbered `sleep`: the first registration to claim it notifies,
  // under the mutex (the watcher is in its one wait of that sleep, or has not yet looked for
  // work under the mutex); those after it, until the watcher runs, make no call (invariant 4).
  [[gnu::cold, gnu::noinline]] void wake(std::uint64_t sleep) noexcept {
    if (!sleeps_.claim(sleep)) return;
    std::lock_guard<std::mutex> lock(mutex_);
    ++wakes_;
    wake_.notify_one();
  }

  // How often the watcher went to sleep and how often a registration woke it.
  CompletionWakes wakes() {
    std::lock_guard<std::mutex> lock(mutex_);
    return {static_cast<std::size_t>(sleeps_.count()), static_cast<std::size_t>(wakes_)};
  }

  // Runs the ready callbacks (caller delivery) from a frame on this thread's list, so that the
  // destructor, called from one of them, runs the rest in order and tells it the engine is
  // gone (invariant 6).
  std::size_t run_ready() {
    if (fd_ < 0) return 0;
    std::uint64_t count = 0;
    (void)!::read(fd_, &count, sizeof count);  // clears it; EAGAIN when nothing was signalled
    RunFrame frame(this);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      frame.batch.swap(ready_);
    }
    std::size_t ran = 0;
    while (frame.next < frame.batch.size()) {
      const auto [task, result] = frame.batch[frame.next++];
      run_task(task, result);
      ++ran;
      if (frame.gone) break;  // the callback destroyed the engine, which ran the rest
      finished_.fetch_add(1, std::memory_order_release);
    }
    return ran;
  }

  // The destructor's side of the frames (invariant 6): runs the rest of each run_ready() of
  // this engine that this thread is inside of, the oldest first, and marks them gone. Returns
  // how many there were: each is running a callback, not yet counted as finished.
  std::size_t finish_frames() noexcept {
    std::size_t running = 0;
    for (;;) {
      RunFrame* oldest = nullptr;
      for (RunFrame* f = RunFrame::innermost(); f != nullptr; f = f->outer) {
        if (f->engine == this && !f->gone) oldest = f;
      }
      if (oldest == nullptr) return running;
      while (oldest->next < oldest->batch.size()) {
        const auto [task, result] = oldest->batch[oldest->next++];
        run_task(task, result);
        finished_.fetch_add(1, std::memory_order_release);
      }
      oldest->gone = true;
      ++running;
    }
  }

  int fd() const noexcept { return fd_; }
  std::size_t pending() const noexcept {
    const std::size_t finished = finished_.load(std::memory_order_acquire);
    return registered_.load(std::memory_order_acquire) +
           owner_registered_.load(std::memory_order_acquire) - finished;
  }

 private:
  [[noreturn, gnu::cold]] static void refuse_capture(const StreamRef& s,
                                                     CUstreamCaptureStatus status) {
    throw_stream_error(
        CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "custream::Completions", s,
        std::string(status == CU_STREAM_CAPTURE_STATUS_ACTIVE ? "the stream is capturing"
                                                              : "the stream's capture was "
                                                                "invalidated") +
            ": a completion is of work launched now, not of a graph's nodes; register after "
            "graph.launch(stream), or put a host function (launch_host_func) in the graph for a "
            "notification inside it (custream refused it without calling the driver)");
  }

  static void release_event(CUevent event, bool pooled, int device) noexcept {
    if (!pooled) {
      release_call<&DriverApi::cuEventDestroy>("event", event, event);
    } else {
      give_back_event(device, event);
    }
  }

  static void release_word(std::uint64_t* word) noexcept { word_pool().give_back_one(word); }

  // Appends the registrations made since the last call to `out`, in registration order: the
  // stack is taken first, then the owner's ring, whose records go before the stack's (a
  // registration on the ring never follows one on the stack: invariant 11). Reads the tasks
  // without writing them; makes the tasks of the ring's small callables. Watcher only. Out of
  // memory, nothing is lost (invariant 13): a list taken off the stack waits in `held_`, the
  // stack's tasks in `stacked_`, and the ring's records on the ring, for a later pass.
  void take_incoming(std::vector<CompletionTask*>& out) {
    if (stacked_.empty()) {  // none waits from an earlier pass
      if (held_ == nullptr && incoming_.load(std::memory_order_relaxed) != nullptr) {
        held_ = incoming_.exchange(nullptr, std::memory_order_acquire);
      }
      if (held_ != nullptr) {
        std::size_t n = 0;
        for (const CompletionTask* t = held_; t != nullptr; t = t->next) ++n;
        try {
          stacked_.reserve(n);
        } catch (const std::bad_alloc&) {
          starved_ = true;
          return;  // the ring waits too: its records go before these tasks
        }
        for (CompletionTask* t = held_; t != nullptr; t = t->next) {
          stacked_.push_back(t);  // the stack is newest first
        }
        held_ = nullptr;
        std::reverse(stacked_.begin(), stacked_.end());
      }
    }
    // The ring's records go before the stack's tasks: while any is left on the ring, or `out`
    // has no room for the stack's (out of memory), the stack's wait (invariant 11).
    if (!take_ring(out, stacked_.size())) return;
    out.insert(out.end(), stacked_.begin(), stacked_.end());  // room made by take_ring()
    stacked_.clear();
  }

  // Whether registrations wait for memory on the watcher's side: taken off the stack but not
  // yet queued, or left on the ring (invariant 13).
  bool held_back() const noexcept {
    return held_ != nullptr || !stacked_.empty() || ring_pending();
  }

  // Whether the owner's ring has records the watcher has not taken.
  bool ring_pending() const noexcept {
    return watch_ring_->tail.load(std::memory_order_acquire) != watch_head_ ||
           watch_ring_->next.load(std::memory_order_acquire) != nullptr;
  }

  // Takes the owner's records: tasks for small callables (made here), tasks it made itself, and
  // the stream they are of, leaving room in `out` for `then` more. Watcher only.
  // True when it took every record the ring held when read and made that room.
  bool take_ring(std::vector<CompletionTask*>& out, std::size_t then) {
    for (;;) {
      Ring& ring = *watch_ring_;
      // `next` first: once it is set, the tail read after it is final.
      Ring* const next = ring.next.load(std::memory_order_acquire);
      const std::uint64_t tail = ring.tail.load(std::memory_order_acquire);
      // Room for every record and the `then` first, so that nothing below (or the caller's
      // insert) can throw; out of memory, the records stay where they are and are taken on a
      // later pass.
      try {
        reserve_more(out, static_cast<std::size_t>(tail - watch_head_) + then);
      } catch (const std::bad_alloc&) {
        starved_ = true;
        return false;
      }
      if (tail == watch_head_ && next == nullptr) return true;
      const auto owner = owner_.load(std::memory_order_relaxed);
      for (; watch_head_ != tail; ++watch_head_) {
        RingRecord& r = ring.records[watch_head_ % Ring::kRecords];
        const std::uintptr_t kind = r.head & kRecordKinds;
        if (kind == kRecordStream) {
          std::memcpy(static_cast<void*>(&ring_stream_), &r.mark, sizeof ring_stream_);
          continue;
        }
        if (kind == kRecordTask) {
          out.push_back(reinterpret_cast<CompletionTask*>(r.head & ~kRecordKinds));
          continue;
        }
        const auto* ops =
            reinterpret_cast<const InlineCallableOps*>(r.head & ~(kRecordKinds | kRecordWord));
        CompletionTask* t;
        try {
          t = ops->materialize(r.storage);  // the callable stays in the record when this throws
        } catch (const std::bad_alloc&) {
          starved_ = true;
          break;  // taken from here on a later pass
        }
        Mark m;
        if ((r.head & kRecordWord) != 0) {
          m.word = static_cast<std::uint64_t*>(r.mark);
        } else {  // pooled as mark() decides for the stream
          m.event = static_cast<CUevent>(r.mark);
          m.pooled =
              !ring_stream_.is_special() && ring_stream_.context_kind() != ContextKind::created;
        }
        fill(t, ring_stream_, owner, m);
        out.push_back(t);
      }
      ring.head.store(watch_head_, std::memory_order_release);
      if (watch_head_ != tail) return false;  // a callable could not be moved (out of memory)
      if (next == nullptr) return true;
      delete watch_ring_;  // the owner went on with `next` and writes this one no more
      watch_ring_ = next;
      watch_head_ = 0;
    }
  }

  // Sleeps until a registration, stop (unless `stop_ends` is false: the watcher is already
  // draining), or a notification (at most `timeout` when given); true when there is work or
  // stop.
  bool sleep(std::optional<std::chrono::microseconds> timeout, bool stop_ends = true) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      sleeps_.begin();
    }
    // Against a registrant's full fence (stack pushes, and the ring without membarrier): the
    // looks below come after the store above in the fences' single order.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    // The ring's owner publishes without a fence (invariant 11): before a sleep that only a
    // registration ends, make every running thread of the process pass a full barrier, so that
    // a record published before it is seen below, and a registration after it sees the sleep.
    // Not before a timed sleep of a millisecond or less (a backoff while work is pending): a
    // wake-up missed there costs at most the sleep, and the interrupts would cost every thread
    // of the process. If the barrier fails, sleep at most a millisecond at a time.
    constexpr std::chrono::microseconds kMs = std::chrono::milliseconds(1);
    if ((!timeout || *timeout > kMs) && expedited_ &&
        ::syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) != 0) {
      timeout = timeout ? std::min(*timeout, kMs) : kMs;
    }
    std::unique_lock<std::mutex> lock(mutex_);
    const auto ready = [&] {
      return incoming_.load(std::memory_order_seq_cst) != nullptr || ring_pending() ||
             (stop_ && stop_ends);
    };
    // One wait a sleep: a notification that finds nothing new ends it too, and the watcher
    // begins a new sleep (a new number) to wait again (invariant 4).
    const bool woken = WatcherSleeps::wait_once(wake_, lock, timeout, ready);
    sleeps_.end();
    return woken;
  }

  // The longest pause between passes that is busy, and the first pause after new work or a
  // completion (invariant 2).
  static constexpr std::chrono::microseconds kBusyPause{50};
  static constexpr std::chrono::nanoseconds kFirstGap{1000};

  // Pauses between passes until `until` (invariant 2): busy, without driver calls, when that is
  // kBusyPause away or less; else a timed sleep that a registration or stop ends. While
  // stopping (draining), a millisecond at most. True when it slept: the next pass takes what
  // came.
  bool pause(Clock::time_point now, Clock::time_point until, bool stopping) {
    if (stopping) until = std::min(until, now + std::chrono::milliseconds(1));
    if (until - now <= kBusyPause) {
      while (Clock::now() < until) cpu_relax();
      return false;
    }
    (void)sleep(std::chrono::ceil<std::chrono::microseconds>(until - now), !stopping);
    return true;
  }

  bool stopping(bool* abandon) {
    std::lock_guard<std::mutex> lock(mutex_);
    *abandon = abandon_;
    return stop_;
  }

  // Devices with a probe (invariant 9): the written-words mechanism serves the first 64.
  static constexpr std::size_t kMaxProbes = 64;

  // What a pass completed, given back to the pools after it.
  struct Returned {
    std::vector<std::pair<int, CUevent>> events;  // pooled events, by device
    std::vector<std::uint64_t*> words;
  };

  // CUDA_SUCCESS when the stream reached `t`, CUDA_ERROR_NOT_READY, or the stream's error.
  static CUresult reached(const DriverApi& api, const CompletionTask* t) noexcept {
    if (t->word != nullptr) {
      return __atomic_load_n(t->word, __ATOMIC_ACQUIRE) != 0 ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
    }
    return api.cuEventQuery(t->event);
  }

  // Completes what the stream of `q` (keyed `key`) reached; true when anything was. When it
  // left an event unqueried because the watcher took it less than kFresh ago, sets `ripens` to
  // when it may be asked, if that is sooner.
  bool poll(const DriverApi& api, CUstream key, TaskQueue& q, Returned& returned,
            Clock::time_point now, std::optional<Clock::time_point>& ripens) {
    bool progress = false;
    if (q.empty()) return false;  // its first task could not be queued (out of memory)
    // Events are queried only once the watcher took them kFresh ago (invariant 2): the oldest
    // `ripe` tasks may be asked. Words are loads, read whenever.
    std::size_t ripe = q.ripe(now);
    if (q.head()->word == nullptr) {
      if (ripe == 0) {
        note_ripening(ripens, q.head_ripens());
        return false;
      }
      // An event's query is a driver call that the enqueueing threads feel: the oldest first,
      // since a pending oldest means nothing later is done (one query).
      const CUresult r = api.cuEventQuery(q.head()->event);
      if (r == CUDA_ERROR_NOT_READY || !complete(q, r, returned, now)) return false;
      progress = true;
      --ripe;
      // Then the newest that is ripe (invariant 2): when it is done, every registration queued
      // before it is, provided their push order is their order in the stream: all of one
      // thread's, on a stream that is not a special handle (whose key is shared by streams
      // that are not ordered together).
      if (ripe > 1 && !q.mixed && !is_special(key) && q.at(ripe - 1)->word == nullptr &&
          api.cuEventQuery(q.at(ripe - 1)->event) == CUDA_SUCCESS) {
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

  static void note_ripening(std::optional<Clock::time_point>& ripens,
                            Clock::time_point t) noexcept {
    if (!ripens || t < *ripens) ripens = t;
  }

  // A stream whose work failed never writes its words (invariant 9): for each device with a
  // word that has been the head of its queue for `spin` or longer, asks the device's probe
  // event (always complete: it answers the context's sticky error, if any), and completes
  // that device's word-waiting registrations with the error.
  void probe(std::unordered_map<CUstream, TaskQueue>& queues, Returned& returned,
             Clock::time_point now) {
    const DriverApi& api = loaded().api;
    // Each device's answer, asked once a probe (no allocation: invariant 13).
    std::array<std::optional<CUresult>, kMaxProbes> failed;
    for (auto& [key, q] : queues) {
      if (q.empty() || q.head()->word == nullptr || now - q.head_since < options_.spin) continue;
      const int device = q.head()->view.device_id();
      std::optional<CUresult>& f = failed[static_cast<std::size_t>(device)];
      if (!f) {
        const CUevent e = probes_[static_cast<std::size_t>(device)].load(std::memory_order_acquire);
        const CUresult r = api.cuEventQuery(e);
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

  static constexpr int kTakeEvery = 4;

  // The watcher (invariants 2, 4, 9).
  void watch() noexcept {
    // The watcher's queries are made behind the application's back (invariant 10).
    relax_capture_mode();
    std::unordered_map<CUstream, TaskQueue> queues;
    std::vector<CompletionTask*> batch;
    Returned returned;
    Clock::time_point last_progress = Clock::now();
    Clock::time_point last_probe = last_progress;
    // The last completion, where `linger` counts from (none yet: no linger at start).
    std::optional<Clock::time_point> last_completion;
    long backoff_us = 0;
    // The next pause while spinning (invariant 2): from kFirstGap after new work or a
    // completion, doubling with each pass that finds nothing, up to poll_interval.
    std::chrono::nanoseconds gap = kFirstGap;
    int passes_without_taking = 0;
    for (;;) {
      bool abandon = false;
      const bool stop = stopping(&abandon);
      if (abandon) break;
      starved_ = false;
      // `batch` keeps what the last pass could not queue (out of memory), ahead of what comes.
      // While registrations are pending and none completes, the incoming stack is read every
      // kTakeEvery passes only: each read takes its line from the registering threads, whose
      // next push then waits for it (invariant 4).
      if (queues.empty() || passes_without_taking >= kTakeEvery - 1) {
        take_incoming(batch);
        passes_without_taking = 0;
      } else {
        ++passes_without_taking;
      }
      // Nothing pending: sleep until a registration, after lingering `linger` past the last
      // completion, taking registrations without a wake-up call (invariant 4). What waits for
      // memory is retried after the backoff's timed sleeps instead (invariant 13).
      if (queues.empty() && batch.empty() && !held_back()) {
        if (stop) break;
        const Clock::time_point idle = Clock::now();
        if (last_completion && idle - *last_completion < options_.linger) {
          // What this takes is spun on for `spin` from then, as after a wake-up.
          last_progress = idle;
          backoff_us = 0;
          (void)pause(idle, idle + options_.poll_interval, false);
          continue;
        }
        (void)sleep(std::nullopt);
        last_progress = Clock::now();
        backoff_us = 0;
        continue;
      }
      Clock::time_point now = Clock::now();
      std::size_t queued = 0;
      try {
        for (; queued < batch.size(); ++queued)
          queues[batch[queued]->stream].push(batch[queued], now);
      } catch (const std::bad_alloc&) {  // the rest wait, in order, for a later pass
        starved_ = true;
      }
      batch.erase(batch.begin(), batch.begin() + static_cast<std::ptrdiff_t>(queued));
      if (queued > 0) gap = kFirstGap;
      bool progress = false;
      const DriverApi& api = loaded().api;
      // When the soonest event left unqueried (taken less than kFresh ago) may be asked.
      std::optional<Clock::time_point> ripens;
      for (auto& [key, q] : queues) {
        progress = poll(api, key, q, returned, now, ripens) || progress;
      }
      // At most once per `spin`, whatever completes elsewhere (invariant 9).
      if (memory_ && now - last_probe >= options_.spin) {
        try {
          probe(queues, returned, now);
          last_probe = now;
        } catch (const std::bad_alloc&) {  // asked again on the next pass
          starved_ = true;
        }
      }
      for (auto it = queues.begin(); it != queues.end();) {
        it = it->second.empty() ? queues.erase(it) : std::next(it);
      }
      give_back(returned);
      now = Clock::now();
      if (progress) {
        last_progress = now;
        last_completion = now;
        backoff_us = 0;
        gap = kFirstGap;
        passes_without_taking = kTakeEvery;  // the next pass takes what came meanwhile
        continue;
      }
      // Spinning for `spin` after the last completion, and while an event waits to ripen
      // (whatever `spin`: a backoff would hold a registration the driver may have done).
      if (ripens || now - last_progress < options_.spin) {
        // Between passes a pause without driver calls, so that the queries leave the driver to
        // the threads that enqueue; no longer than until an event ripens (invariant 2).
        Clock::time_point until = now + std::min(gap, options_.poll_interval);
        gap = std::min(2 * gap, options_.poll_interval);
        if (ripens && *ripens < until) until = *ripens;
        if (pause(now, until, stop)) passes_without_taking = kTakeEvery;
        continue;
      }
      // Backing off: sleeps growing to 1 ms; a registration wakes it at once.
      backoff_us = backoff_us == 0 ? 50 : std::min<long>(backoff_us * 2, 1000);
      if (starved_) {
        // Out of memory (invariant 13): what waits on the ring would end a sleep at once.
        std::this_thread::sleep_for(std::chrono::microseconds(backoff_us));
      } else if (sleep(std::chrono::microseconds(backoff_us), !stop)) {
        last_progress = Clock::now();
        backoff_us = 0;
      }
      passes_without_taking = kTakeEvery;  // after a sleep, take at once
    }
    give_back(returned);
  }

  // Runs (or readies) the head of `q`, which the stream reached with `r`, reading it without
  // writing it, and pops it. False, leaving it at the head, when caller delivery's ready list
  // has no room for it (out of memory: invariant 13).
  bool complete(TaskQueue& q, CUresult r, Returned& returned, Clock::time_point now) noexcept {
    CompletionTask* const task = q.head();
    // Read before the task is handed on: a run_ready() may run and destroy it at once.
    std::uint64_t* const word = task->word;
    const CUevent event = task->event;
    const int device = task->view.device_id();
    const bool pooled = task->pooled;
    const bool kept = task->keep != nullptr;  // its event goes with it (finish_task)
    const bool run_here = options_.delivery == CompletionDelivery::thread || task->immediate;
    bool was_empty = false;
    if (!run_here) {
      try {
        std::lock_guard<std::mutex> lock(mutex_);
        was_empty = ready_.empty();
        ready_.emplace_back(task, r);
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
      run_task(task, r, &kept_releasing_);
      finished_.fetch_add(1, std::memory_order_release);
    } else if (was_empty) {
      const std::uint64_t one = 1;
      (void)!::write(fd_, &one, sizeof one);
    }
    return true;
  }

  // Appends `item` to `list`; out of memory, hands it back with `give_back` instead.
  template <typename T, typename GiveBack>
  static void keep_or_give_back(std::vector<T>& list, const T& item, GiveBack give_back) noexcept {
    try {
      list.push_back(item);
    } catch (const std::bad_alloc&) {
      give_back();
    }
  }

  static void give_back(Returned& returned) noexcept {
    if (!returned.words.empty()) word_pool().give_back(returned.words, returned.words.size());
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

  // What every registration reads, on a line that nothing writes after the first registration
  // (invariant 12): the options, and who owns the ring (invariant 11) and whether another
  // thread has registered since (then every registration goes on the stack).
  alignas(64) CompletionOptions options_;
  bool memory_;             // CompletionMechanism::memory_write
  bool expedited_ = false;  // membarrier(PRIVATE_EXPEDITED) serves the watcher
  std::atomic<bool> shared_{false};
  std::atomic<std::uintptr_t> owner_{0};
  // The watcher's lock, taken on every pass, and what it guards: on lines of their own, which
  // no registration reads (invariant 12).
  alignas(64) std::mutex mutex_;
  std::condition_variable wake_;
  // Caller delivery: completed, with their results, waiting for run_ready().
  std::vector<std::pair<CompletionTask*, CUresult>> ready_;
  bool stop_ = false;
  bool abandon_ = false;
  bool orphaned_ = false;    // destroyed from a callback: the watcher deletes the engine
  std::uint64_t wakes_ = 0;  // the registrations that woke the watcher (wake())
  // Read by every registration, written by the watcher around its sleeps.
  alignas(64) WatcherSleeps sleeps_;
  // Counted apart, on lines of their own: registering threads do not share a cache line with
  // the watcher on every registration.
  alignas(64) std::atomic<std::size_t> registered_{0};
  alignas(64) std::atomic<std::size_t> finished_{0};
  alignas(64) std::atomic<CompletionTask*> incoming_{nullptr};  // newest first (lock-free)
  // The owner's side, on a line of its own.
  alignas(64) Ring* owner_ring_ = nullptr;
  std::uint64_t owner_tail_ = 0;  // records written on owner_ring_
  std::uint64_t owner_head_ = 0;  // records taken, as last read
  std::atomic<std::size_t> owner_registered_{0};
  std::uint64_t owner_woke_ = 0;  // the last watcher sleep the owner woke (claimed by then)
  StreamRef owner_stream_;        // the stream of its last record
  // The watcher's side.
  alignas(64) Ring* watch_ring_ = nullptr;
  std::uint64_t watch_head_ = 0;
  StreamRef ring_stream_;  // the stream of the records being taken
  // Taken off the stack, in registration order, not yet handed to the watch loop (out of memory:
  // invariant 13); otherwise empty between passes.
  std::vector<CompletionTask*> stacked_;
  CompletionTask* held_ = nullptr;  // a list taken off the stack that stacked_ had no room for
  bool starved_ = false;            // this pass of the watcher's could not allocate
  // Per device ordinal: an event of its pool, asked for a failed context's error (written
  // words; invariant 9). Devices past the last slot use events. On lines of their own: every
  // word registration reads its device's, and the watcher writes the fields above on every
  // pass (invariant 12).
  alignas(64) std::array<std::atomic<CUevent>, kMaxProbes> probes_{};
  int fd_ = -1;
  std::thread thread_;
  // Streams kept by registrations that the watcher ran, not yet released (KeptReleaser).
  std::atomic<std::size_t> kept_releasing_{0};

 public:
  // Why an engine is closed (invariant 15).
  enum class Closed : unsigned char { open, forked, exited };

  // fork() (invariant 15), with every engine's mutex held by the forking thread. In the child:
  // the engine has no watcher (fork copies the forking thread only); its mutex and condition
  // variable are made anew (the watcher may have been waiting on it: destroying it would wait
  // for that waiter), its thread forgotten, and registrations refused.
  void lock_for_fork() { mutex_.lock(); }
  void unlock_after_fork() noexcept { release_after_fork(mutex_, false); }
  // Caller delivery: the ready list and the eventfd are the parent's too (the child would
  // clear the parent's signal and run what the parent runs): the list is forgotten (leaked) and
  // the child's descriptor made a new eventfd; a run_ready() this thread is inside of stops
  // after its callback (its frame gone), so a callback that forks and destroys the engine in
  // the child leaves nothing that touches it.
  void become_forked_child() noexcept {
    release_after_fork(mutex_, true);
    ::new (&wake_) std::condition_variable();
    ::new (&thread_) std::thread();
    ::new (&ready_) std::vector<std::pair<CompletionTask*, CUresult>>();
    if (fd_ >= 0) {
      const int fresh = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
      if (fresh < 0 || ::dup3(fresh, fd_, O_CLOEXEC) < 0) {
        ::close(fd_);  // no eventfd of its own: none (run_ready() then runs nothing)
        fd_ = -1;
      }
      if (fresh >= 0) ::close(fresh);
    }
    for (RunFrame* f = RunFrame::innermost(); f != nullptr; f = f->outer) {
      if (f->engine == this) f->gone = true;
    }
    forked_ = true;
    close(Closed::forked);
  }

 private:
  // From now on every registration is refused (on_ring()).
  void close(Closed why) noexcept {
    closed_why_.store(why, std::memory_order_relaxed);
    owner_.store(kClosed, std::memory_order_seq_cst);
  }
  // The owner of a closed engine: no thread's identity (an address of a thread's byte).
  static constexpr std::uintptr_t kClosed = 1;
  std::atomic<Closed> closed_why_{Closed::open};
  bool forked_ = false;  // in the child of a fork(): no watcher
};

namespace {

// The engines of the process and what fork() must find unlocked in the child: taken by the
// forking thread before fork, let go after it in both processes (invariant 15).
struct EngineList {
  std::mutex mutex;
  std::vector<CompletionEngine*> engines;
};
EngineList& engine_list() {
  static auto* list = new EngineList;  // never destroyed: engines may outlive static objects
  return *list;
}

void before_fork() noexcept {
  engine_list().mutex.lock();
  for (CompletionEngine* e : engine_list().engines) e->lock_for_fork();
  lock_pools_for_fork();
  KeptReleaser::instance().lock_for_fork();
}

void after_fork_in_parent() noexcept {
  KeptReleaser::instance().unlock_after_fork(false);
  unlock_pools_after_fork(false);
  for (CompletionEngine* e : engine_list().engines) e->unlock_after_fork();
  release_after_fork(engine_list().mutex, false);
}

void after_fork_in_child() noexcept {
  KeptReleaser::instance().unlock_after_fork(true);
  unlock_pools_after_fork(true);
  for (CompletionEngine* e : engine_list().engines) e->become_forked_child();
  release_after_fork(engine_list().mutex, true);
}

}  // namespace

void enlist(CompletionEngine* engine) {
  static std::once_flag once;
  std::call_once(once, [] {
    if (::pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child) != 0) {
      throw std::bad_alloc();  // ENOMEM, its only error
    }
  });
  std::lock_guard<std::mutex> lock(engine_list().mutex);
  engine_list().engines.push_back(engine);
}

void delist(CompletionEngine* engine) noexcept {
  try {
    std::lock_guard<std::mutex> lock(engine_list().mutex);
    auto& v = engine_list().engines;
    v.erase(std::remove(v.begin(), v.end(), engine), v.end());
  } catch (...) {
  }
}

}  // namespace detail

Completions::Completions(CompletionOptions options)
    : engine_(std::make_unique<detail::CompletionEngine>(options)) {}

Completions::~Completions() {
  // From one of its own callbacks: the watcher runs what is pending, then deletes the engine.
  if (engine_ && engine_->on_watcher_thread()) engine_.release()->orphan();
}

Completions& Completions::standard() {
  static Completions* standard = [] {
    auto* c = new Completions();  // never destroyed: stopped at exit, abandoning what is pending
    // Closes it (invariant 15): registrations from then on are refused.
    std::atexit([] { Completions::standard().engine_->close_at_exit(); });
    return c;
  }();
  return *standard;
}

void Completions::register_task(const StreamRef& stream, detail::CompletionTask* task) {
  detail::TaskPtr guard(task);  // destroyed, not run, when the registration fails
  engine_->add(stream, task);
  (void)guard.release();
}

void Completions::register_kept(const Stream& stream, detail::CompletionTask* task) {
  detail::TaskPtr guard(task);  // destroyed, not run, when the registration fails
  auto keep = std::make_unique<Stream>(stream);
  engine_->add(stream, task, keep.get());
  (void)keep.release();  // the task's from now on (invariant 14)
  (void)guard.release();
}

void Completions::register_inline(const StreamRef& stream, const detail::InlineCallableOps& ops,
                                  void (*construct)(void*, void*) noexcept, void* source) {
  engine_->add_inline(stream, ops, construct, source);
}

namespace detail {
namespace {
// A future's registration: sets its promise on the completion thread, with the stream's error
// when its work failed.
struct FutureTask final : CompletionTask {
  static_assert(sizeof(std::promise<void>) + sizeof(CompletionTask) <= kTaskBlock,
                "a future's task fits a task block");
  static void* operator new(std::size_t) { return allocate_task_block(); }
  static void operator delete(void* p) noexcept { free_task_block(p); }
  std::promise<void> promise;
  FutureTask() {
    immediate = true;  // no user code: ready at once, also with caller delivery
    invoke = [](CompletionTask* self, CUresult r) {
      auto& p = static_cast<FutureTask*>(self)->promise;
      if (r == CUDA_SUCCESS) {
        p.set_value();
        return;
      }
      try {
        throw_completion_failure(r, self->stream, self->view.device_id());
      } catch (...) {
        p.set_exception(std::current_exception());
      }
    };
    destroy = [](CompletionTask* self) noexcept { delete static_cast<FutureTask*>(self); };
  }
};
}  // namespace
}  // namespace detail

std::future<void> Completions::future(const StreamRef& stream) {
  auto* task = new detail::FutureTask;
  std::future<void> f = task->promise.get_future();
  register_task(stream, task);
  return f;
}

std::future<void> Completions::future(const Stream& stream) {
  if (stream.context_kind() == ContextKind::primary) {
    return future(static_cast<const StreamRef&>(stream));
  }
  auto* task = new detail::FutureTask;
  std::future<void> f = task->promise.get_future();
  register_kept(stream, task);
  return f;
}

int Completions::eventfd() const noexcept { return engine_->fd(); }
std::size_t Completions::run_ready() { return engine_->run_ready(); }
std::size_t Completions::pending() const noexcept { return engine_->pending(); }

namespace detail {
std::thread::id completion_thread(const Completions& c) noexcept { return c.engine_->thread_id(); }
CompletionWakes completion_wakes(const Completions& c) noexcept {
  try {
    return c.engine_->wakes();
  } catch (const std::system_error&) {  // the mutex could not be taken
    return {};
  }
}
}  // namespace detail

}  // namespace custream

// custream::Completions: completion notifications from a watcher thread that queries events,
// without host functions. Design: docs/design/completions.md.
#include "custream/completions.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "custream/context_scope.hpp"
#include "custream/error.hpp"
#include "custream/host_function_error.hpp"
#include "driver.hpp"
#include "error.hpp"
#include "host_function.hpp"

namespace custream {
namespace detail {

using Clock = std::chrono::steady_clock;

void throw_completion_failure(CUresult result, CUstream stream, int device) {
  throw Error(result, "cuEventQuery", subject_text({Subject::What::stream, stream, device}),
              "the stream's work failed before the completion was reached (a callback that "
              "takes no CUresult is not run)");
}

namespace {

// Events of each device's primary context, reused across registrations (invariant 3): made once,
// never destroyed (the primary contexts stay retained), shared by every engine. Registering
// threads take them from a cache of their own, refilled from the shared pool a batch at a time,
// so that registrations on many threads do not meet on one mutex.
class EventPool {
 public:
  static constexpr std::size_t kBatch = 64;

  // Moves up to kBatch free events of `device` to `out`; makes one when there is none.
  void refill(const Loaded& l, int device, std::vector<CUevent>& out) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto& free = free_[device];
      const std::size_t n = std::min(free.size(), kBatch);
      out.insert(out.end(), free.end() - static_cast<std::ptrdiff_t>(n), free.end());
      free.resize(free.size() - n);
    }
    if (!out.empty()) return;
    ContextScope scope(primary_context(l, device));
    CUevent e = nullptr;
    call<&DriverApi::cuEventCreate>(device_subject(device), &e,
                                    static_cast<unsigned>(CU_EVENT_DISABLE_TIMING));
    out.push_back(e);
  }

  void give_back(int device, const std::vector<CUevent>& events) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& free = free_[device];
    free.insert(free.end(), events.begin(), events.end());
  }

 private:
  std::mutex mutex_;
  std::unordered_map<int, std::vector<CUevent>> free_;
};

EventPool& event_pool() {
  static EventPool* pool = new EventPool;  // never destroyed: no driver call at exit
  return *pool;
}

// A thread's own free events per device ordinal; what is left goes back to the shared pool
// when the thread ends.
struct ThreadEvents {
  std::vector<std::vector<CUevent>> free;  // by device ordinal
  ~ThreadEvents() {
    for (std::size_t device = 0; device < free.size(); ++device) {
      if (free[device].empty()) continue;
      try {
        event_pool().give_back(static_cast<int>(device), free[device]);
      } catch (...) {  // out of memory: they leak
      }
    }
  }
};

CUevent take_event(const Loaded& l, int device) {
  thread_local ThreadEvents mine;
  if (mine.free.size() <= static_cast<std::size_t>(device)) {
    mine.free.resize(
        static_cast<std::size_t>(l.device_count > device ? l.device_count : device + 1));
  }
  std::vector<CUevent>& free = mine.free[static_cast<std::size_t>(device)];
  if (free.empty()) event_pool().refill(l, device, free);
  const CUevent e = free.back();
  free.pop_back();
  return e;
}

// Task blocks (custream/completions.hpp): a shared pool and each thread's cache.
class BlockPool {
 public:
  static constexpr std::size_t kBatch = 64;
  void refill(std::vector<void*>& out) {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::size_t n = std::min(free_.size(), kBatch);
    out.insert(out.end(), free_.end() - static_cast<std::ptrdiff_t>(n), free_.end());
    free_.resize(free_.size() - n);
  }
  void give_back(std::vector<void*>& blocks, std::size_t n) noexcept {
    try {
      std::lock_guard<std::mutex> lock(mutex_);
      free_.insert(free_.end(), blocks.end() - static_cast<std::ptrdiff_t>(n), blocks.end());
      blocks.resize(blocks.size() - n);
    } catch (...) {  // out of memory: the thread keeps them
    }
  }

 private:
  std::mutex mutex_;
  std::vector<void*> free_;
};

BlockPool& block_pool() {
  static BlockPool* pool = new BlockPool;  // never destroyed: blocks may be freed at exit
  return *pool;
}

struct ThreadBlocks {
  std::vector<void*> free;
  ~ThreadBlocks() { block_pool().give_back(free, free.size()); }
};

ThreadBlocks& thread_blocks() {
  thread_local ThreadBlocks blocks;
  return blocks;
}

}  // namespace

void* allocate_task_block() {
  std::vector<void*>& free = thread_blocks().free;
  if (free.empty()) block_pool().refill(free);
  if (free.empty()) return ::operator new(kTaskBlock);
  void* block = free.back();
  free.pop_back();
  return block;
}

void free_task_block(void* block) noexcept {
  std::vector<void*>& free = thread_blocks().free;
  try {
    free.push_back(block);
  } catch (...) {
    ::operator delete(block);
    return;
  }
  // A thread that frees more than it makes (the watcher) passes blocks on.
  if (free.size() >= 2 * BlockPool::kBatch) block_pool().give_back(free, BlockPool::kBatch);
}

namespace {

struct TaskDeleter {
  void operator()(CompletionTask* t) const noexcept { t->destroy(t); }
};
using TaskPtr = std::unique_ptr<CompletionTask, TaskDeleter>;

// Runs `task` with `result`, reporting what it throws (invariant 5), then destroys it.
void run_task(CompletionTask* task, CUresult result) noexcept {
  try {
    task->invoke(task, result);
  } catch (...) {
    report_host_function_error(HostFunctionError{task->view, std::current_exception(), false});
  }
  task->destroy(task);
}

// A singly linked FIFO of tasks.
struct TaskList {
  CompletionTask* head = nullptr;
  CompletionTask* tail = nullptr;
  void push(CompletionTask* t) noexcept {
    t->next = nullptr;
    (tail != nullptr ? tail->next : head) = t;
    tail = t;
  }
  CompletionTask* pop() noexcept {
    CompletionTask* t = head;
    head = t->next;
    if (head == nullptr) tail = nullptr;
    return t;
  }
  CompletionTask* take_all() noexcept {
    CompletionTask* all = head;
    head = tail = nullptr;
    return all;
  }
  bool empty() const noexcept { return head == nullptr; }
};

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

class CompletionEngine {
 public:
  explicit CompletionEngine(const CompletionOptions& options) : options_(options) {
    if (options_.delivery == CompletionDelivery::caller) {
      fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
      if (fd_ < 0) {
        throw Error(CUDA_ERROR_OPERATING_SYSTEM, "custream::Completions", {},
                    std::string("eventfd failed: ") + std::strerror(errno));
      }
    }
    try {
      thread_ = std::thread([this] { watch(); });
    } catch (const std::system_error& e) {
      if (fd_ >= 0) ::close(fd_);
      throw Error(CUDA_ERROR_OPERATING_SYSTEM, "custream::Completions", {},
                  std::string("cannot start the completion thread: ") + e.what());
    }
  }

  // Drains (invariant 6): the watcher runs every pending registration, then stops.
  ~CompletionEngine() {
    stop(false);
    for (std::size_t n = run_ready(); n > 0; n = run_ready()) {
    }
    if (fd_ >= 0) ::close(fd_);
  }

  // Stops the watcher; `abandon`: at once, leaving pending registrations (process exit).
  void stop(bool abandon) noexcept {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
      abandon_ = abandon;
    }
    wake_.notify_all();
    if (thread_.joinable()) {
      if (thread_.get_id() == std::this_thread::get_id()) {
        thread_.detach();  // destroyed from its own callback: it ends after this one
      } else {
        thread_.join();
      }
    }
  }

  void add(const StreamRef& s, CompletionTask* task) {
    const Loaded& l = loaded();
    std::optional<ContextScope> scope;
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    const bool special = s.is_special();
    CUresult r = on_stream<&DriverApi::cuStreamIsCapturing>(special, scope, s.handle(), &status);
    if (r != CUDA_SUCCESS) throw_stream_error(r, "cuStreamIsCapturing", s);
    if (status != CU_STREAM_CAPTURE_STATUS_NONE) refuse_capture(s, status);
    task->view = s;
    task->stream = s.handle();
    task->device = special ? -1 : s.device_id();
    // The event: a primary-context one from the pool (green-context streams use them too),
    // else one made in the stream's context and destroyed after (invariant 3).
    if (!special && s.context_kind() != ContextKind::created) {
      task->event = take_event(l, task->device);
      task->pooled = true;
    } else {
      std::optional<ContextScope> own;
      if (!special) own.emplace(s.context());
      call<&DriverApi::cuEventCreate>({Subject::What::stream, s.handle(), task->device},
                                      &task->event, static_cast<unsigned>(CU_EVENT_DISABLE_TIMING));
    }
    r = l.api.cuEventRecord(task->event, s.handle());
    if (r != CUDA_SUCCESS) {
      release_event(task);
      throw_stream_error(r, "cuEventRecord", s, "registering a completion");
    }
    registered_.fetch_add(1, std::memory_order_relaxed);
    // A lock-free push (invariant 4); the watcher is woken only when it sleeps.
    CompletionTask* head = incoming_.load(std::memory_order_relaxed);
    do {
      task->next = head;
    } while (!incoming_.compare_exchange_weak(head, task, std::memory_order_seq_cst,
                                              std::memory_order_relaxed));
    if (sleeping_.load(std::memory_order_seq_cst)) {
      std::lock_guard<std::mutex> lock(mutex_);  // the watcher is in wait() or sees the push
      wake_.notify_one();
    }
  }

  std::size_t run_ready() {
    if (fd_ < 0) return 0;
    std::uint64_t count = 0;
    (void)!::read(fd_, &count, sizeof count);  // clears it; EAGAIN when nothing was signalled
    CompletionTask* ready = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ready = ready_.take_all();
    }
    std::size_t ran = 0;
    while (ready != nullptr) {
      CompletionTask* next = ready->next;
      const CUresult result = ready->result;
      run_task(ready, result);
      finished_.fetch_add(1, std::memory_order_relaxed);
      ready = next;
      ++ran;
    }
    return ran;
  }

  int fd() const noexcept { return fd_; }
  std::size_t pending() const noexcept {
    const std::size_t finished = finished_.load(std::memory_order_acquire);
    return registered_.load(std::memory_order_acquire) - finished;
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

  static void release_event(CompletionTask* task) noexcept {
    if (task->event != nullptr && !task->pooled) {
      release_call<&DriverApi::cuEventDestroy>("event", task->event, task->event);
    } else if (task->event != nullptr) {
      try {
        event_pool().give_back(task->device, {task->event});
      } catch (...) {  // out of memory: the event leaks, nothing dangles
      }
    }
    task->event = nullptr;
  }

  // The registrations pushed since the last call, in registration order.
  CompletionTask* take_incoming() noexcept {
    if (incoming_.load(std::memory_order_relaxed) == nullptr) return nullptr;
    CompletionTask* lifo = incoming_.exchange(nullptr, std::memory_order_acquire);
    CompletionTask* fifo = nullptr;
    while (lifo != nullptr) {  // the stack is newest first
      CompletionTask* next = lifo->next;
      lifo->next = fifo;
      fifo = lifo;
      lifo = next;
    }
    return fifo;
  }

  // Sleeps until a registration or stop (at most `timeout` when given); false on a timeout.
  bool sleep(std::optional<std::chrono::microseconds> timeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    sleeping_.store(true, std::memory_order_seq_cst);
    const auto ready = [&] {
      return incoming_.load(std::memory_order_seq_cst) != nullptr || stop_;
    };
    bool woken;
    if (timeout) {
      woken = wake_.wait_for(lock, *timeout, ready);
    } else {
      wake_.wait(lock, ready);
      woken = true;
    }
    sleeping_.store(false, std::memory_order_relaxed);
    return woken;
  }

  bool stopping(bool* abandon) {
    std::lock_guard<std::mutex> lock(mutex_);
    *abandon = abandon_;
    return stop_;
  }

  // The watcher (invariants 2, 4).
  void watch() noexcept {
    std::unordered_map<CUstream, TaskList> queues;
    std::vector<std::pair<int, CUevent>> returned;  // pooled events to give back, by device
    Clock::time_point last_progress = Clock::now();
    long backoff_us = 0;
    for (;;) {
      bool abandon = false;
      const bool stop = stopping(&abandon);
      if (abandon) return;
      CompletionTask* batch = take_incoming();
      if (queues.empty() && batch == nullptr) {
        if (stop) return;
        sleep(std::nullopt);
        last_progress = Clock::now();
        backoff_us = 0;
        continue;
      }
      while (batch != nullptr) {
        CompletionTask* next = batch->next;
        queues[batch->stream].push(batch);
        batch = next;
      }
      bool progress = false;
      const DriverApi& api = loaded().api;
      for (auto it = queues.begin(); it != queues.end();) {
        TaskList& q = it->second;
        // The newest first (invariant 2): on one stream, its event done means every earlier
        // one is, so a queue that kept up with a busy stream completes with one query. Not for
        // a special handle, whose key is shared by streams that are not ordered together.
        if (q.head != q.tail && !is_special(it->first) &&
            api.cuEventQuery(q.tail->event) == CUDA_SUCCESS) {
          while (!q.empty()) complete(q.pop(), CUDA_SUCCESS, returned);
          progress = true;
        }
        while (!q.empty()) {
          const CUresult r = api.cuEventQuery(q.head->event);
          if (r == CUDA_ERROR_NOT_READY) break;
          complete(q.pop(), r, returned);
          progress = true;
        }
        it = q.empty() ? queues.erase(it) : std::next(it);
      }
      give_back(returned);
      const Clock::time_point now = Clock::now();
      if (progress) {
        last_progress = now;
        backoff_us = 0;
        continue;
      }
      if (now - last_progress < options_.spin) {
        // Between passes a pause without driver calls, so that the queries leave the driver to
        // the threads that enqueue.
        const Clock::time_point until = now + options_.poll_interval;
        while (Clock::now() < until) cpu_relax();
        continue;
      }
      // Backing off: sleeps growing to 1 ms; a registration wakes it at once.
      backoff_us = backoff_us == 0 ? 50 : std::min<long>(backoff_us * 2, 1000);
      if (sleep(std::chrono::microseconds(backoff_us))) {
        last_progress = Clock::now();
        backoff_us = 0;
      }
    }
  }

  void complete(CompletionTask* task, CUresult r, std::vector<std::pair<int, CUevent>>& returned) {
    task->result = r;
    if (task->pooled) {
      returned.emplace_back(task->device, task->event);  // back to the pool after this pass
      task->event = nullptr;
    } else {
      release_event(task);
    }
    if (options_.delivery == CompletionDelivery::thread || task->immediate) {
      run_task(task, r);
      finished_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    bool was_empty;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      was_empty = ready_.empty();
      ready_.push(task);
    }
    if (was_empty) {
      const std::uint64_t one = 1;
      (void)!::write(fd_, &one, sizeof one);
    }
  }

  static void give_back(std::vector<std::pair<int, CUevent>>& returned) noexcept {
    if (returned.empty()) return;
    try {
      std::unordered_map<int, std::vector<CUevent>> by_device;
      for (const auto& [device, e] : returned) by_device[device].push_back(e);
      for (auto& [device, events] : by_device) event_pool().give_back(device, events);
    } catch (...) {  // out of memory: the events leak, nothing dangles
    }
    returned.clear();
  }

  CompletionOptions options_;
  std::mutex mutex_;
  std::condition_variable wake_;
  TaskList ready_;  // caller delivery: completed, waiting for run_ready()
  bool stop_ = false;
  bool abandon_ = false;
  std::atomic<bool> sleeping_{false};
  // Counted apart, on lines of their own: registering threads do not share a cache line with
  // the watcher on every registration.
  alignas(64) std::atomic<std::size_t> registered_{0};
  alignas(64) std::atomic<std::size_t> finished_{0};
  alignas(64) std::atomic<CompletionTask*> incoming_{nullptr};  // newest first (lock-free)
  int fd_ = -1;
  std::thread thread_;
};

}  // namespace detail

Completions::Completions(CompletionOptions options)
    : engine_(std::make_unique<detail::CompletionEngine>(options)) {}

Completions::~Completions() = default;

Completions& Completions::standard() {
  static Completions* standard = [] {
    auto* c = new Completions();  // never destroyed: stopped at exit, abandoning what is pending
    std::atexit([] { Completions::standard().engine_->stop(true); });
    return c;
  }();
  return *standard;
}

void Completions::register_task(const StreamRef& stream, detail::CompletionTask* task) {
  detail::TaskPtr guard(task);  // destroyed, not run, when the registration fails
  engine_->add(stream, task);
  (void)guard.release();
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
        throw_completion_failure(r, self->stream, self->device);
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

int Completions::eventfd() const noexcept { return engine_->fd(); }
std::size_t Completions::run_ready() { return engine_->run_ready(); }
std::size_t Completions::pending() const noexcept { return engine_->pending(); }

}  // namespace custream

// The facade: the definitions of custream::Completions' public API (custream/completions.hpp),
// each a short call into the engine, whose registering side is inline (engine.hpp) and
// compiles here. Contract: a registration that throws destroys its callable unrun; futures
// are set on the watcher with the stream's error, if any. Design: docs/design/completions.md.
#include "custream/completions.hpp"

#include <cstdlib>
#include <memory>

#include "custream/error.hpp"
#include "engine.hpp"

namespace custream {
namespace detail {

void throw_completion_failure(CUresult result, CUstream stream, int device) {
  throw Error(result, EntryInfo<&DriverApi::cuEventQuery>::name,
              subject_text({Subject::What::stream, stream, device}),
              "the stream's work failed before the completion was reached (a callback that "
              "takes no CUresult is not run)");
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
  detail::TaskPtr<detail::CompletionTask> guard(task);  // destroyed, not run, when it fails
  engine_->add(stream, task);
  (void)guard.release();
}

void Completions::register_kept(const Stream& stream, detail::CompletionTask* task) {
  detail::TaskPtr<detail::CompletionTask> guard(task);  // destroyed, not run, when it fails
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

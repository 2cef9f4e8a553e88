// The completion cases of `custream bench` (docs/performance.md, "Completion notifications"):
// the cost of registering a completion on the enqueueing thread, against the driver calls it
// makes: cuEventRecord (of a distinct event per notification, as custream's are: re-recording
// one event would lose the earlier point) or, for the written-words mechanism,
// cuStreamWriteValue64 (of a distinct word each). Device 0. Latency, stall, throughput and idle
// CPU: bench/completion_latency.cpp.
#include <memory>
#include <vector>

#include "bench_cases.hpp"
#include "custream/custream.hpp"
#include "custream/testing.hpp"

namespace custream_bench {
namespace {

/// What the completion cases share, made by the first that runs (never destroyed); each row's
/// own engine is made when that row is prepared, so that only the engines of the rows run so far
/// have watcher threads.
struct CompletionState {
  custream::Stream stream{custream::Device(0), custream::StreamFlags::non_blocking};
  custream::Completions engine;
  std::unique_ptr<custream::Completions> slow_poll;  // made by its row
  std::unique_ptr<custream::Completions> words;      // made by its row
  std::vector<CUevent> events;  // the raw side's: a distinct event per notification, cycled
  std::size_t next = 0;
  void* raw_words = nullptr;  // the raw side's words (host-mapped), cycled like the events
};

CompletionState& state() {
  static CompletionState* s = [] {
    custream::Device(0).make_current();
    auto* st = new CompletionState;
    st->events.resize(1024);
    const auto& api = custream::testing::driver();
    for (CUevent& e : st->events)
      check(api.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
    if (api.cuMemHostAlloc != nullptr) {
      check(api.cuMemHostAlloc(&st->raw_words, st->events.size() * 8,
                               CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP),
            "cuMemHostAlloc");
    }
    return st;
  }();
  return *s;
}

// The raw side of the checked rows: the capture check and a record of a distinct event.
void raw_checked_records(const custream::detail::DriverApi& api, int n) {
  CompletionState& st = state();
  for (int i = 0; i < n; ++i) {
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    api.cuStreamIsCapturing(st.stream.handle(), &status);
    if (status == CU_STREAM_CAPTURE_STATUS_NONE) {
      api.cuEventRecord(st.events[st.next], st.stream.handle());
    }
    st.next = (st.next + 1) % st.events.size();
  }
}

// custream's side of both rows: `n` registrations with an empty callback.
void register_batch(int n) {
  CompletionState& st = state();
  for (int i = 0; i < n; ++i) st.engine.when_done(st.stream, [] {});
}

// The raw side of the written-words row: the capture check and a write of a distinct word.
void raw_checked_writes(const custream::detail::DriverApi& api, int n) {
  CompletionState& st = state();
  for (int i = 0; i < n; ++i) {
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    api.cuStreamIsCapturing(st.stream.handle(), &status);
    if (status == CU_STREAM_CAPTURE_STATUS_NONE) {
      api.cuStreamWriteValue64(st.stream.handle(),
                               reinterpret_cast<CUdeviceptr>(st.raw_words) + 8 * st.next, 1, 0);
    }
    st.next = (st.next + 1) % st.events.size();
  }
}

}  // namespace

void add_completion_cases(std::vector<Case>& cases) {
  Case registration{"completion registration (callback)",
                    {},
                    {},
                    {Target::Kind::raw_plus_abs, 60, 0},
                    256,
                    61,
                    {},
                    "cuEventRecord (a distinct event each, as a notification needs)"};
  registration.prepare = [](Case& c) {
    CompletionState& st = state();
    const auto& api = custream::testing::driver();
    c.raw = [&api](int n) {
      CompletionState& st = state();
      for (int i = 0; i < n; ++i) {
        api.cuEventRecord(st.events[st.next], st.stream.handle());
        st.next = (st.next + 1) % st.events.size();
      }
    };
    c.ours = register_batch;
    time_parked(c, st.stream.handle());
  };
  cases.push_back(std::move(registration));

  // The same against the capture check a registration must make plus the record: what custream
  // adds of its own.
  Case checked{"completion registration vs raw capture check + record",
               {},
               {},
               {Target::Kind::raw_plus_abs, 60, 0},
               256,
               61,
               {},
               "cuStreamIsCapturing + cuEventRecord (a distinct event each)"};
  checked.prepare = [](Case& c) {
    CompletionState& st = state();
    const auto& api = custream::testing::driver();
    c.raw = [&api](int n) { raw_checked_records(api, n); };
    c.ours = register_batch;
    time_parked(c, st.stream.handle());
  };
  cases.push_back(std::move(checked));

  // The same with a watcher that polls at most every 20 µs: how much of the registration's cost
  // is the watcher's queries meeting the enqueueing thread in the driver.
  Case slow{"completion registration, watcher polling every 20 us",
            {},
            {},
            {Target::Kind::raw_plus_abs, 60, 0},
            256,
            61,
            {},
            "cuStreamIsCapturing + cuEventRecord (a distinct event each)"};
  slow.prepare = [](Case& c) {
    CompletionState& st = state();
    if (!st.slow_poll) {  // an engine that queries at most every 20 µs
      custream::CompletionOptions o;
      o.poll_interval = std::chrono::microseconds(20);
      st.slow_poll = std::make_unique<custream::Completions>(o);
    }
    const auto& api = custream::testing::driver();
    c.raw = [&api](int n) { raw_checked_records(api, n); };
    c.ours = [](int n) {
      CompletionState& st = state();
      for (int i = 0; i < n; ++i) st.slow_poll->when_done(st.stream, [] {});
    };
    time_parked(c, st.stream.handle());
  };
  cases.push_back(std::move(slow));

  // The written-words mechanism against the calls it makes.
  Case words{"completion registration (written words) vs raw capture check + write",
             {},
             {},
             {Target::Kind::raw_plus_abs, 60, 0},
             256,
             61,
             {},
             "cuStreamIsCapturing + cuStreamWriteValue64 (a distinct word each)"};
  words.prepare = [](Case& c) {
    CompletionState& st = state();
    if (st.raw_words == nullptr) {
      c.skip = "the driver has no cuMemHostAlloc";
      return;
    }
    if (!st.words) {  // the written-words mechanism
      custream::CompletionOptions o;
      o.mechanism = custream::CompletionMechanism::memory_write;
      st.words = std::make_unique<custream::Completions>(o);
    }
    const auto& api = custream::testing::driver();
    c.raw = [&api](int n) { raw_checked_writes(api, n); };
    c.ours = [](int n) {
      CompletionState& st = state();
      for (int i = 0; i < n; ++i) st.words->when_done(st.stream, [] {});
    };
    time_parked(c, st.stream.handle());
  };
  cases.push_back(std::move(words));
}

}  // namespace custream_bench

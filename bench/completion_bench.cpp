// The completion cases of `custream bench` (docs/performance.md, "Completion notifications"):
// the cost of registering a completion on the enqueueing thread, against the cuEventRecord it
// makes (of a distinct event per notification, as custream's are: re-recording one event would
// lose the earlier point). Device 0. Latency, stall, throughput and idle CPU:
// bench/completion_latency.cpp.
#include <vector>

#include "bench_cases.hpp"
#include "custream/custream.hpp"
#include "custream/testing.hpp"

namespace custream_bench {
namespace {

/// What the completion cases share, made by the first that runs (never destroyed).
struct CompletionState {
  custream::Stream stream{custream::Device(0), custream::StreamFlags::non_blocking};
  custream::Completions engine;
  custream::Completions slow_poll{[] {  // an engine that queries at most every 20 µs
    custream::CompletionOptions o;
    o.poll_interval = std::chrono::microseconds(20);
    return o;
  }()};
  std::vector<CUevent> events;  // the raw side's: a distinct event per notification, cycled
  std::size_t next = 0;
};

CompletionState& state() {
  static CompletionState* s = [] {
    custream::Device(0).make_current();
    auto* st = new CompletionState;
    st->events.resize(1024);
    for (CUevent& e : st->events) {
      check(custream::testing::driver().cuEventCreate(&e, CU_EVENT_DISABLE_TIMING),
            "cuEventCreate");
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
    const auto& api = custream::testing::driver();
    c.raw = [&api](int n) { raw_checked_records(api, n); };
    c.ours = [](int n) {
      CompletionState& st = state();
      for (int i = 0; i < n; ++i) st.slow_poll.when_done(st.stream, [] {});
    };
    time_parked(c, st.stream.handle());
  };
  cases.push_back(std::move(slow));
}

}  // namespace custream_bench

// Example 4: a plain epoll event loop told when GPU work is done, without a thread of custream's
// running its code. A custream::Completions with CompletionDelivery::caller signals an eventfd
// when notifications are ready; the loop waits on it with epoll next to its other descriptors
// (here a timer), and runs the ready callbacks itself with run_ready(). The same works for
// io_uring, Asio and libuv loops. Each of three streams gets a batch of work (a memset and a
// copy back); the loop reacts to each batch as it completes.
//
// Exit status: 0 PASS, 77 SKIP (no driver or no device), 1 FAIL. Runs on custream's CPU driver
// emulator too.
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <custream/custream.hpp>
#include <string>
#include <vector>

#include "example_support.hpp"

namespace {

constexpr int kStreams = 3;
constexpr int kRounds = 4;

int run() {
  if (!custream::driver_available()) return example::skip("no CUDA driver");
  if (custream::Device::count() == 0) return example::skip("no device");

  custream::Completions completions(
      custream::CompletionOptions{custream::CompletionDelivery::caller});
  const int epoll = ::epoll_create1(EPOLL_CLOEXEC);
  const int timer = ::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (epoll < 0 || timer < 0) return example::fail("epoll_create1 or timerfd_create failed");
  epoll_event watch{};
  watch.events = EPOLLIN;
  watch.data.fd = completions.eventfd();
  ::epoll_ctl(epoll, EPOLL_CTL_ADD, completions.eventfd(), &watch);
  watch.data.fd = timer;
  ::epoll_ctl(epoll, EPOLL_CTL_ADD, timer, &watch);
  const itimerspec tick{{0, 50'000'000}, {0, 50'000'000}};  // a 50 ms heartbeat
  ::timerfd_settime(timer, 0, &tick, nullptr);

  // Per stream: a device buffer and its host copy; each round fills it with a new value.
  struct Lane {
    custream::Stream stream{custream::Device(0), custream::StreamFlags::non_blocking};
    custream::DeviceBuffer buffer{sizeof(std::uint32_t) * 256, custream::Device(0)};
    std::vector<std::uint32_t> host = std::vector<std::uint32_t>(256);
    int round = 0;
  };
  std::vector<Lane> lanes(kStreams);
  int finished = 0, wrong = 0;
  std::function<void(int)> submit = [&](int l) {
    Lane& lane = lanes[l];
    const std::uint32_t value = static_cast<std::uint32_t>(100 * l + lane.round);
    lane.stream.memset32(lane.buffer.get(), value, lane.host.size());
    lane.stream.copy(lane.host.data(), lane.buffer.get(), lane.host.size() * sizeof value);
    // Runs on this thread, from the loop below, once the copy is done.
    completions.when_done(lane.stream, [&, l, value](CUresult result) {
      Lane& done = lanes[l];
      if (result != CUDA_SUCCESS || done.host[0] != value || done.host[255] != value) ++wrong;
      std::printf("stream %d round %d done: %u\n", l, done.round, done.host[0]);
      if (++done.round < kRounds) {
        submit(l);  // the next batch, registered from inside the callback
      } else {
        ++finished;
      }
    });
  };
  for (int l = 0; l < kStreams; ++l) submit(l);

  int ticks = 0;
  while (finished < kStreams && ticks < 200) {  // at most 10 s
    epoll_event ready[4];
    const int n = ::epoll_wait(epoll, ready, 4, 1000);
    for (int i = 0; i < n; ++i) {
      if (ready[i].data.fd == timer) {
        std::uint64_t expirations = 0;
        (void)!::read(timer, &expirations, sizeof expirations);
        ++ticks;
      } else {
        completions.run_ready();  // the callbacks, here
      }
    }
  }
  ::close(timer);
  ::close(epoll);
  if (finished != kStreams) return example::fail("the loop timed out waiting for completions");
  if (wrong != 0) return example::fail(std::to_string(wrong) + " batch(es) read wrong values");
  std::printf("PASS: %d streams x %d rounds, each told to an epoll loop through an eventfd\n",
              kStreams, kRounds);
  return 0;
}

}  // namespace

int main() {
  try {
    return run();
  } catch (const std::exception& e) {
    return example::fail(e.what());
  }
}

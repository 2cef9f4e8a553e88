// custream-update-memory: resident memory of the per-step update loop (docs/performance.md,
// "Graph updates"): each step captures a memset and a host function whose payload counts its
// destruction, updates one executable from that capture, and launches it; the stream is
// synchronized every 1,000 steps. Prints the resident set at checkpoints and its growth since
// step 1,000, then checks that every payload was destroyed exactly once once the Graph is gone.
// Exit status 1 when the growth after step 1,000 exceeds the limit or a payload count is off.
//   custream-update-memory [STEPS (default 1000000)] [--limit-mib M (default 8)] [--mode M]
// Modes: capture (Graph::update_from_capture, the default), graph (Graph::update from the
// Graph end_capture returns: an instantiation per step), and the same loop raw, for
// comparison: raw (cuStreamEndCapture + cuGraphExecUpdate + cuGraphDestroy, the payload in a
// user object), raw-instantiate (raw, plus instantiating, uploading and destroying each
// captured graph as end_capture does), raw-memset (raw without the host function).
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "custream/custream.hpp"
#include "custream/driver.hpp"
#include "custream/graph.hpp"
#include "custream/testing.hpp"

namespace {

std::atomic<long> g_made{0}, g_destroyed{0}, g_runs{0};

// A host-function payload that is not noexcept (so it travels on the heap, owned by the
// capture graph's user object) and counts its copies' destructions exactly once.
class Payload {
 public:
  Payload() { g_made.fetch_add(1, std::memory_order_relaxed); }
  Payload(Payload&& other) noexcept : live_(other.live_) { other.live_ = false; }
  Payload(const Payload&) = delete;
  Payload& operator=(const Payload&) = delete;
  Payload& operator=(Payload&&) = delete;
  ~Payload() {
    if (live_) g_destroyed.fetch_add(1, std::memory_order_relaxed);
  }
  void operator()() { g_runs.fetch_add(1, std::memory_order_relaxed); }

 private:
  bool live_ = true;
};

double rss_mib() {
  long pages = 0, resident = 0;
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
  std::fclose(f);
  return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / 1048576.0;
}

void begin_step(const custream::Stream& s, const custream::DeviceBuffer& b, unsigned value) {
  s.begin_capture();
  s.memset32(b.get(), value, 1);
  s.launch_host_func(Payload());
}

custream::Graph capture_step(const custream::Stream& s, const custream::DeviceBuffer& b,
                             unsigned value) {
  begin_step(s, b, value);
  return s.end_capture();
}

void check(CUresult r, const char* call) {
  if (r != CUDA_SUCCESS) throw custream::Error(r, call, "custream-update-memory (raw loop)");
}

void CUDA_CB run_payload(void* p) { (*static_cast<Payload*>(p))(); }
void CUDA_CB destroy_payload(void* p) { delete static_cast<Payload*>(p); }

// The raw form of one step: capture a memset and (unless `memset_only`) a host function whose
// payload a user object of the capture graph owns; returns the captured graph.
CUgraph raw_capture(CUstream s, CUdeviceptr b, unsigned value, bool memset_only) {
  const auto& api = custream::testing::driver();
  check(api.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED), "cuStreamBeginCapture");
  check(api.cuMemsetD32Async(b, value, 1, s), "cuMemsetD32Async");
  if (!memset_only) {
    CUstreamCaptureStatus status{};
    CUgraph capture_graph = nullptr;
    check(api.cuStreamGetCaptureInfo(s, &status, nullptr, &capture_graph, nullptr, nullptr),
          "cuStreamGetCaptureInfo");
    auto* payload = new Payload;
    CUuserObject object = nullptr;
    check(api.cuUserObjectCreate(&object, payload, destroy_payload, 1,
                                 CU_USER_OBJECT_NO_DESTRUCTOR_SYNC),
          "cuUserObjectCreate");
    check(api.cuGraphRetainUserObject(capture_graph, object, 1, CU_GRAPH_USER_OBJECT_MOVE),
          "cuGraphRetainUserObject");
    check(api.cuLaunchHostFunc(s, run_payload, payload), "cuLaunchHostFunc");
  }
  CUgraph g = nullptr;
  check(api.cuStreamEndCapture(s, &g), "cuStreamEndCapture");
  return g;
}

enum class Mode { capture, graph, raw, raw_instantiate, raw_memset };

bool is_checkpoint(long step) {  // 1, 2, 5 × 10^k from 1,000 on
  for (long scale = 1000; scale <= step; scale *= 10) {
    if (step == scale || step == 2 * scale || step == 5 * scale) return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  long steps = 1000000;
  double limit_mib = 8;
  Mode mode = Mode::capture;
  const char* mode_name = "capture";
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--limit-mib") == 0 && i + 1 < argc) {
      limit_mib = std::atof(argv[++i]);
    } else if (std::strcmp(argv[i], "--mode") == 0 && i + 1 < argc) {
      mode_name = argv[++i];
      const std::string m = mode_name;
      if (m == "capture") {
        mode = Mode::capture;
      } else if (m == "graph") {
        mode = Mode::graph;
      } else if (m == "raw") {
        mode = Mode::raw;
      } else if (m == "raw-instantiate") {
        mode = Mode::raw_instantiate;
      } else if (m == "raw-memset") {
        mode = Mode::raw_memset;
      } else {
        std::fprintf(stderr, "custream-update-memory: unknown mode \"%s\"\n", mode_name);
        return 2;
      }
    } else if (argv[i][0] != '-' && std::atol(argv[i]) >= 1000) {
      steps = std::atol(argv[i]);
    } else {
      std::fprintf(stderr,
                   "usage: custream-update-memory [STEPS >= 1000] [--limit-mib M] [--mode "
                   "capture|graph|raw|raw-instantiate|raw-memset]\n");
      return 2;
    }
  }
  try {
    custream::Device device(0);
    device.make_current();
    custream::Stream s(device, custream::StreamFlags::non_blocking);
    custream::DeviceBuffer buffer(4, device);
    double base_mib = 0, worst_growth = 0;
    {
      custream::Graph g =
          mode == Mode::raw_memset
              ? custream::Graph::adopt(raw_capture(s.handle(), buffer.get(), 0, true),
                                       custream::InstantiateFlags::upload, s)
              : capture_step(s, buffer, 0);
      std::printf(
          "driver: %s (version %d), mode %s\nsteps,rss_mib,growth_since_1000_mib,"
          "us_per_step\n",
          custream::driver_info().library.c_str(), custream::driver_info().version, mode_name);
      const auto& api = custream::testing::driver();
      auto window_start = std::chrono::steady_clock::now();
      long window_steps = 0;
      for (long step = 1; step <= steps; ++step) {
        const auto value = static_cast<unsigned>(step);
        if (mode == Mode::capture) {
          begin_step(s, buffer, value);
          g.update_from_capture(s);
        } else if (mode == Mode::graph) {
          g.update(capture_step(s, buffer, value));
        } else {
          CUgraph newer = raw_capture(s.handle(), buffer.get(), value, mode == Mode::raw_memset);
          if (mode == Mode::raw_instantiate) {
            CUDA_GRAPH_INSTANTIATE_PARAMS params{};
            params.flags = CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD;
            params.hUploadStream = s.handle();
            CUgraphExec exec = nullptr;
            check(api.cuGraphInstantiateWithParams(&exec, newer, &params),
                  "cuGraphInstantiateWithParams");
            check(api.cuGraphExecDestroy(exec), "cuGraphExecDestroy");
          }
          CUgraphExecUpdateResultInfo info{};
          check(api.cuGraphExecUpdate(g.exec(), newer, &info), "cuGraphExecUpdate");
          check(api.cuGraphDestroy(newer), "cuGraphDestroy");
        }
        g.launch(s);
        ++window_steps;
        if (step % 1000 == 0) s.synchronize();
        if (is_checkpoint(step)) {
          const auto now = std::chrono::steady_clock::now();
          const double us = std::chrono::duration<double, std::micro>(now - window_start).count() /
                            static_cast<double>(window_steps);
          const double rss = rss_mib();
          if (step == 1000) base_mib = rss;
          const double growth = rss - base_mib;
          if (growth > worst_growth) worst_growth = growth;
          std::printf("%ld,%.1f,%+.1f,%.1f\n", step, rss, growth, us);
          std::fflush(stdout);
          window_start = std::chrono::steady_clock::now();
          window_steps = 0;
        }
      }
      s.synchronize();
    }
    // User-object destructors run on a driver thread after the last reference is gone.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (g_destroyed.load() != g_made.load() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const long made = g_made.load(), destroyed = g_destroyed.load(), runs = g_runs.load();
    const long expected_runs = mode == Mode::raw_memset ? 0 : steps;
    const long expected_made = mode == Mode::raw_memset ? 0 : steps + 1;
    const bool counts_ok = destroyed == made && runs == expected_runs && made == expected_made;
    const bool memory_ok = worst_growth <= limit_mib;
    std::printf(
        "payloads: %ld made, %ld destroyed, %ld runs (expected %ld made and destroyed, %ld runs)"
        "\ngrowth after step 1,000: at most %+.1f MiB (limit %.0f MiB)\n%s\n",
        made, destroyed, runs, expected_made, expected_runs, worst_growth, limit_mib,
        counts_ok && memory_ok ? "PASS" : "FAIL");
    return counts_ok && memory_ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "custream-update-memory: %s\n", e.what());
    return 1;
  }
}

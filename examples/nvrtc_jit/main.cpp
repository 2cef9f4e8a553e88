// Example 2: a JIT loader, written the way JIT tools should use custream. CUDA C++ source
// with a template kernel is compiled at run time with custream::Program: NVRTC is loaded with
// dlopen (nothing links it), the template is instantiated through a name expression
// ("axpy<float>") whose lowered name Program returns, and the targets are chosen from the
// devices present: PTX for the oldest device architecture, one image for every device (or, where
// the driver's JIT is older than NVRTC, a cubin for each device architecture). The result is a
// custream::Library: code loaded once for the process and every device, through custream's
// content-addressed cache. The same source is then compiled again by a second Program, as a JIT
// tool does when it meets unchanged source, and the example checks that this is a hit of the
// compile cache on disk (no NVRTC run) and of the in-memory cache (the same Library). The kernel
// is preloaded on every device the driver reports (Library::preload, so that no lazy load
// happens later, inside a capture) and launched on a stream of each device with that device's
// own buffers: eagerly, then captured with a host function into one graph per device and
// replayed; the results are checked per device after each. On custream's CPU driver emulator
// the kernel runs as a CPU function registered with it (emu_control.h), so the example also runs
// in CI without a GPU, on as many emulated devices as CUSTREAM_EMU_DEVICES asks for.
//
// Exit status: 0 PASS, 77 SKIP (no NVRTC, no driver or no device, or a driver older than CUDA
// 12.0, which has no libraries), 1 FAIL.
#include <dlfcn.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <custream/custream.hpp>
#include <custream/program.hpp>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "emu_control.h"
#include "example_support.hpp"

namespace {

// axpy on the CPU, for custream's CPU driver emulator (what your own CI can do with kernels:
// docs/emulator.md). Runs once per launch, in stream order, with copies of the arguments.
void cpu_axpy(const custream_emu_kernel_launch* launch) {
  float a;
  const float* x;
  float* y;
  int n;
  std::memcpy(&a, launch->params[0], sizeof a);
  std::memcpy(&x, launch->params[1], sizeof x);
  std::memcpy(&y, launch->params[2], sizeof y);
  std::memcpy(&n, launch->params[3], sizeof n);
  for (int i = 0; i < n; ++i) y[i] = a * x[i] + y[i];
}

// When the loaded driver is the emulator, registers cpu_axpy as the kernel `name` (the lowered
// name of axpy<float>) and returns true.
bool register_cpu_axpy(const std::string& name) {
  void* driver = dlopen(custream::driver_info().library.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (driver == nullptr) return false;
  auto register_kernel = reinterpret_cast<decltype(&custream_emu_register_kernel)>(
      dlsym(driver, "custream_emu_register_kernel"));
  const bool registered = register_kernel != nullptr &&
                          register_kernel(name.c_str(), cpu_axpy, nullptr, nullptr, 0) == 0;
  dlclose(driver);
  return registered;
}

const char* const source = R"(
template <typename T>
__global__ void axpy(T a, const T* x, T* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
)";

constexpr int n = 1 << 16;
constexpr std::size_t bytes = n * sizeof(float);
constexpr int replays = 3;

// What one device works on: a stream of that device, that device's buffers, the kernel, and the
// graph captured there. Its inputs differ from the other devices', so a launch that used
// another device's buffers or function would show in the results.
struct Lane {
  explicit Lane(custream::Device d)
      : device(d),
        stream(d, custream::StreamFlags::non_blocking),
        x(bytes, d),
        y(bytes, d),
        host_x(n),
        host_y(n, 1.0f) {
    for (int i = 0; i < n; ++i) host_x[i] = static_cast<float>((i + 17 * d.ordinal()) % 1024);
  }

  custream::Device device;
  custream::Stream stream;
  custream::DeviceBuffer x, y;
  std::vector<float> host_x, host_y;
  custream::Library library;  // one Library for every device when the PTX loads
  custream::LibraryKernel axpy;
  std::atomic<int> host_calls{0};  // declared before the graph whose host function counts here
  custream::Graph graph;
};

// Copies the lane's y back and compares it with a * x + 1. Returns what differs, or "".
std::string check(Lane& lane, float a) {
  lane.stream.copy(lane.host_y.data(), lane.y.get(), bytes);
  lane.stream.synchronize();
  for (int i = 0; i < n; ++i) {
    const float want = a * lane.host_x[i] + 1.0f;
    if (std::fabs(lane.host_y[i] - want) > 1e-3f * std::max(1.0f, want)) {
      return "device " + std::to_string(lane.device.ordinal()) + ": y[" + std::to_string(i) +
             "] = " + std::to_string(lane.host_y[i]) + ", expected " + std::to_string(want);
    }
  }
  return {};
}

int arch_of(custream::Device device) {
  const custream::ComputeCapability cc = device.compute_capability();
  return cc.major * 10 + cc.minor;
}

// Takes the kernel from `library` for the lane and resolves it in the lane's device's primary
// context now: a JIT tool preloads before it captures, so that the JIT runs (and can fail) here
// rather than at a launch inside a capture.
void preload(Lane& lane, const custream::Program& program) {
  const custream::Library& library = program.library(lane.device);
  lane.library = library;
  lane.axpy = program.kernel("axpy<float>", lane.device);
  library.preload(lane.device);
  std::printf("device %d (%s, sm_%d): axpy preloaded, CUfunction %p in its primary context\n",
              lane.device.ordinal(), lane.device.name().c_str(), arch_of(lane.device),
              static_cast<void*>(lane.axpy.function(lane.device.primary_context())));
}

// A compile cache of its own for the example (a JIT tool would keep the default,
// CompileCache::process_default(): $CUSTREAM_CACHE_DIR or ~/.cache/custream), removed at exit.
struct TempCache {
  std::string dir;
  TempCache() {
    char templ[] = "/tmp/custream-nvrtc-jit-XXXXXX";
    if (mkdtemp(templ) != nullptr) dir = templ;
  }
  ~TempCache() {
    if (!dir.empty() && std::system(("rm -rf '" + dir + "'").c_str()) != 0) {
      std::printf("could not remove %s\n", dir.c_str());
    }
  }
};

// Describes what compile() loaded.
void print_images(const custream::Program& program, const char* which) {
  for (const custream::ProgramImage& image : program.images()) {
    std::printf(
        "%s: %s for %s, %zu bytes, %s\n", which, image.ptx ? "PTX" : "a cubin", image.arch.c_str(),
        image.bytes.size(),
        image.from_cache ? "from the compile cache on disk (NVRTC not run)" : "compiled by NVRTC");
  }
}

int run() {
  // Say which NVRTC compiles; without one there is nothing to show.
  try {
    const auto [major, minor] = custream::Program::nvrtc_version();
    std::printf("NVRTC %d.%d from %s\n", major, minor, custream::Program::nvrtc_library().c_str());
  } catch (const custream::Error& e) {
    return example::skip(std::string("no NVRTC: ") + e.what());
  }
  if (!custream::driver_available()) {
    try {
      custream::driver_info();
    } catch (const custream::Error& e) {
      return example::skip(std::string("NVRTC works but there is no CUDA driver: ") + e.what());
    }
  }
  const int devices = custream::Device::count();
  if (devices == 0) return example::skip("NVRTC works but the CUDA driver reports no device");
  std::printf("%d device(s)\n", devices);

  TempCache cache_dir;
  const custream::CompileCache cache(cache_dir.dir);
  auto make_program = [&] {
    custream::Program program(source, "axpy.cu");
    program.add_name_expression("axpy<float>").cache(cache);
    return program;
  };
  custream::Program program = make_program();
  try {
    program.compile();
  } catch (const custream::Error& e) {
    if (e.result() == CUDA_ERROR_NOT_SUPPORTED) {
      return example::skip(std::string("this driver cannot load libraries: ") + e.what());
    }
    throw;
  }
  print_images(program, "compiled axpy<float>");
  const std::string lowered = program.lowered_name("axpy<float>");
  std::printf("axpy<float> is %s in the image\n", lowered.c_str());
  if (register_cpu_axpy(lowered)) {
    std::printf("on the CPU driver emulator: axpy runs as a CPU function registered with it\n");
  }

  // Unchanged source compiled again, as a JIT tool meets it: the disk cache answers, and the
  // same bytes load the same Library (no second driver load, no second JIT).
  const std::size_t cached = custream::Library::cached_count();
  custream::Program again = make_program();
  again.compile();
  print_images(again, "compiled again");
  for (int d = 0; d < devices; ++d) {
    const custream::Device device(d);
    if (again.library(device) != program.library(device)) {
      return example::fail("compiling unchanged source again gave device " + std::to_string(d) +
                           " another Library");
    }
  }
  if (!again.images().front().from_cache || cache.stats().hits == 0) {
    return example::fail("compiling unchanged source again was no hit of the compile cache");
  }
  if (custream::Library::cached_count() != cached) {
    return example::fail("compiling unchanged source again loaded another image");
  }
  std::printf("compiled again: compile-cache hit on disk, the same Library (%zu image(s) cached)\n",
              cached);

  std::vector<std::unique_ptr<Lane>> lanes;
  for (int d = 0; d < devices; ++d) lanes.push_back(std::make_unique<Lane>(custream::Device(d)));
  for (auto& lane : lanes) preload(*lane, program);

  // Eagerly, on every device at once, each stream with its own device's buffers: y = 2x + 1.
  const custream::Dim3 grid((n + 255) / 256), block(256);
  for (auto& lane : lanes) {
    lane->stream.copy(lane->x.get(), lane->host_x.data(), bytes);
    lane->stream.copy(lane->y.get(), lane->host_y.data(), bytes);
    lane->axpy.launch(lane->stream, grid, block, 0, 2.0f, lane->x.get(), lane->y.get(), n);
  }
  for (auto& lane : lanes) {
    if (const std::string wrong = check(*lane, 2.0f); !wrong.empty()) {
      return example::fail("after the eager launch, " + wrong);
    }
  }
  std::printf("eager launches: results correct on %d device(s)\n", devices);

  // Captured on each device: the same kernel and a host function, one graph per device.
  for (auto& lane : lanes) {
    custream::CaptureScope capture(lane->stream);
    lane->axpy.launch(lane->stream, grid, block, 0, 1.0f, lane->x.get(), lane->y.get(),
                      n);  // y += x, per replay
    std::atomic<int>* calls = &lane->host_calls;
    lane->stream.launch_host_func([calls] { calls->fetch_add(1); });
    lane->graph = capture.end();
    std::printf("device %d: captured %zu nodes\n", lane->device.ordinal(),
                lane->graph.node_count());
  }
  for (int i = 0; i < replays; ++i) {
    for (auto& lane : lanes) lane->graph.launch(lane->stream);
  }
  for (auto& lane : lanes) {
    if (const std::string wrong = check(*lane, 2.0f + replays); !wrong.empty()) {
      return example::fail("after " + std::to_string(replays) + " graph replays, " + wrong);
    }
    if (lane->host_calls.load() != replays) {
      return example::fail(
          "device " + std::to_string(lane->device.ordinal()) + ": the captured host function ran " +
          std::to_string(lane->host_calls.load()) + " times, expected " + std::to_string(replays));
    }
  }
  std::printf("graph replays: results and host functions correct on %d device(s)\n", devices);
  std::printf(
      "PASS: axpy<float> compiled with custream::Program, loaded once for every device, ran "
      "eagerly and in %d "
      "graph replays on %d device(s)\n",
      replays, devices);
  return example::exit_pass;
}

}  // namespace

int main() try { return run(); } catch (const std::exception& e) {
  return example::fail(e.what());
}

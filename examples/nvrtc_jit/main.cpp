// Example 2: a JIT loader, written the way JIT tools should use custream::Library. CUDA C++
// source is compiled once at run time with NVRTC (libnvrtc is loaded with dlopen, nothing links
// it) to PTX for the oldest architecture NVRTC supports, and loaded with Library::from_ptx: code
// loaded once for the process and every device, through custream's content-addressed cache.
// The same PTX is then loaded a second time, as a JIT tool does when it compiles unchanged
// source again, and the example checks that this is a cache hit: the same Library, and no new
// cache entry. The kernel (Library::kernel) is preloaded on every device the driver reports
// (Library::preload, so that no lazy load happens later, inside a capture) and launched on a
// stream of each device with that device's own buffers: eagerly, then captured with a host
// function into one graph per device and replayed; the results are checked per device after
// each. Where the driver's JIT refuses this NVRTC's PTX (an NVRTC newer than the driver), a
// cubin for each device architecture is compiled and loaded with Library::from_image instead.
// On custream's CPU driver emulator the kernel runs as a CPU function registered with it
// (emu_control.h), so the example also runs in CI without a GPU, on as many emulated devices as
// CUSTREAM_EMU_DEVICES asks for.
//
// Exit status: 0 PASS, 77 SKIP (no NVRTC, no driver or no device, or a driver older than CUDA
// 12.0, which has no libraries), 1 FAIL.
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <custream/custream.hpp>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
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

// When the loaded driver is the emulator, registers cpu_axpy as axpy and returns true.
bool register_cpu_axpy() {
  void* driver = dlopen(custream::driver_info().library.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (driver == nullptr) return false;
  auto register_kernel = reinterpret_cast<decltype(&custream_emu_register_kernel)>(
      dlsym(driver, "custream_emu_register_kernel"));
  const bool registered =
      register_kernel != nullptr && register_kernel("axpy", cpu_axpy, nullptr, nullptr, 0) == 0;
  dlclose(driver);
  return registered;
}

// The NVRTC entry points used, declared here (no nvrtc.h needed).
using nvrtcResult = int;
using nvrtcProgram = struct _nvrtcProgram*;
using nvrtcGetErrorString_t = const char* (*)(nvrtcResult);
using nvrtcVersion_t = nvrtcResult (*)(int*, int*);
using nvrtcCreateProgram_t = nvrtcResult (*)(nvrtcProgram*, const char*, const char*, int,
                                             const char* const*, const char* const*);
using nvrtcDestroyProgram_t = nvrtcResult (*)(nvrtcProgram*);
using nvrtcCompileProgram_t = nvrtcResult (*)(nvrtcProgram, int, const char* const*);
using nvrtcGetSize_t = nvrtcResult (*)(nvrtcProgram, std::size_t*);
using nvrtcGetText_t = nvrtcResult (*)(nvrtcProgram, char*);
using nvrtcGetNumSupportedArchs_t = nvrtcResult (*)(int*);
using nvrtcGetSupportedArchs_t = nvrtcResult (*)(int*);

const char* const source = R"(
extern "C" __global__ void axpy(float a, const float* x, float* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
)";

struct Nvrtc {
  example::Library lib{
      "CUSTREAM_NVRTC",
      {"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12", "/usr/local/cuda/lib64/libnvrtc.so",
       "/usr/local/cuda/lib64/libnvrtc.so.13", "/usr/local/cuda/lib64/libnvrtc.so.12"}};
  nvrtcGetErrorString_t error_string = lib.get<nvrtcGetErrorString_t>("nvrtcGetErrorString");
  nvrtcVersion_t version = lib.get<nvrtcVersion_t>("nvrtcVersion");
  nvrtcCreateProgram_t create = lib.get<nvrtcCreateProgram_t>("nvrtcCreateProgram");
  nvrtcDestroyProgram_t destroy = lib.get<nvrtcDestroyProgram_t>("nvrtcDestroyProgram");
  nvrtcCompileProgram_t compile = lib.get<nvrtcCompileProgram_t>("nvrtcCompileProgram");
  nvrtcGetSize_t log_size = lib.get<nvrtcGetSize_t>("nvrtcGetProgramLogSize");
  nvrtcGetText_t log = lib.get<nvrtcGetText_t>("nvrtcGetProgramLog");
  nvrtcGetSize_t ptx_size = lib.get<nvrtcGetSize_t>("nvrtcGetPTXSize");
  nvrtcGetText_t ptx = lib.get<nvrtcGetText_t>("nvrtcGetPTX");
  nvrtcGetSize_t cubin_size = lib.get<nvrtcGetSize_t>("nvrtcGetCUBINSize");
  nvrtcGetText_t cubin = lib.get<nvrtcGetText_t>("nvrtcGetCUBIN");
  nvrtcGetNumSupportedArchs_t num_archs =
      lib.get<nvrtcGetNumSupportedArchs_t>("nvrtcGetNumSupportedArchs");
  nvrtcGetSupportedArchs_t archs = lib.get<nvrtcGetSupportedArchs_t>("nvrtcGetSupportedArchs");

  bool complete() const {
    return error_string && version && create && destroy && compile && log_size && log && ptx_size &&
           ptx && cubin_size && cubin;
  }

  /// The oldest virtual architecture NVRTC supports (e.g. 75): its PTX is JIT-compiled by
  /// the driver for any newer device.
  int baseline_arch() const {
    int n = 0;
    if (!num_archs || !archs || num_archs(&n) != 0 || n <= 0) return 75;
    std::vector<int> list(static_cast<std::size_t>(n));
    if (archs(list.data()) != 0) return 75;
    return *std::min_element(list.begin(), list.end());
  }

  /// Compiles `source` with `option`: PTX (`--gpu-architecture=compute_XX`) or a
  /// cubin (`--gpu-architecture=sm_XX`). Throws std::runtime_error with NVRTC's log on failure.
  std::string build(const std::string& option, bool want_cubin) const {
    nvrtcProgram program = nullptr;
    check(create(&program, source, "axpy.cu", 0, nullptr, nullptr), "nvrtcCreateProgram");
    const char* options[] = {option.c_str(), "-std=c++17"};
    const nvrtcResult compiled = compile(program, 2, options);
    std::size_t size = 0;
    log_size(program, &size);
    std::string text(size, '\0');
    if (size > 0) log(program, text.data());
    if (compiled != 0) {
      destroy(&program);
      throw std::runtime_error(std::string("nvrtcCompileProgram: ") + error_string(compiled) +
                               "\n" + text);
    }
    check((want_cubin ? cubin_size : ptx_size)(program, &size), "nvrtcGet{PTX,CUBIN}Size");
    std::string image(size, '\0');
    check((want_cubin ? cubin : ptx)(program, image.data()), "nvrtcGet{PTX,CUBIN}");
    destroy(&program);
    return image;  // PTX: NUL-terminated (size counts the NUL)
  }

  void check(nvrtcResult r, const char* call) const {
    if (r != 0) throw std::runtime_error(std::string(call) + ": " + error_string(r));
  }
};

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

// Loads an image twice, as a JIT tool that compiles unchanged source again does, and checks
// that the second load is a cache hit: the same Library (no second driver load, no second JIT)
// and no new cache entry. @throws std::runtime_error when it is not; custream::Error from the
// load.
template <typename Load>
custream::Library load_twice(const Load& load, const std::string& what) {
  const custream::Library first = load();
  const std::size_t cached = custream::Library::cached_count();
  std::printf("loaded %s: CUlibrary %p (%zu image(s) in the cache)\n", what.c_str(),
              static_cast<void*>(first.handle()), cached);
  const custream::Library again = load();
  const std::size_t cached_again = custream::Library::cached_count();
  if (again != first || cached_again != cached) {
    throw std::runtime_error(
        "loading " + what +
        " again was no cache hit: " + (again == first ? "the same" : "another") + " Library, " +
        std::to_string(cached_again) + " image(s) cached instead of " + std::to_string(cached));
  }
  std::printf("loaded it again: a cache hit (the same Library, still %zu image(s) cached)\n",
              cached_again);
  return first;
}

// Whether the driver's JIT could not read the PTX: an NVRTC newer than the driver writes a PTX
// ISA version the driver does not know. Libraries load lazily, so the driver accepts the image
// and says so at its first use: with an error, or (drivers that list a library's kernels) with
// a library that has no kernel, where looking up axpy answers CUDA_ERROR_NOT_FOUND.
bool jit_refused(const custream::Error& e) {
  switch (e.result()) {
    case CUDA_ERROR_UNSUPPORTED_PTX_VERSION:
    case CUDA_ERROR_INVALID_PTX:
    case CUDA_ERROR_INVALID_IMAGE:
    case CUDA_ERROR_NOT_FOUND:
      return true;
    default:
      return false;
  }
}

int arch_of(custream::Device device) {
  const custream::ComputeCapability cc = device.compute_capability();
  return cc.major * 10 + cc.minor;
}

// Takes the kernel from `library` for the lane and resolves it in the lane's device's primary
// context now: a JIT tool preloads before it captures, so that the JIT runs (and can fail) here
// rather than at a launch inside a capture.
void preload(Lane& lane, const custream::Library& library) {
  lane.library = library;
  lane.axpy = library.kernel("axpy");
  library.preload(lane.device);
  std::printf("device %d (%s, sm_%d): axpy preloaded, CUfunction %p in its primary context\n",
              lane.device.ordinal(), lane.device.name().c_str(), arch_of(lane.device),
              static_cast<void*>(lane.axpy.function(lane.device.primary_context())));
}

int run() {
  static const Nvrtc nvrtc;
  if (!nvrtc.lib) return example::skip("no NVRTC library (" + nvrtc.lib.tried + ")");
  if (!nvrtc.complete()) return example::fail(nvrtc.lib.path + " lacks an NVRTC entry point");
  int major = 0, minor = 0;
  nvrtc.version(&major, &minor);
  std::printf("NVRTC %d.%d from %s\n", major, minor, nvrtc.lib.path.c_str());

  // Compile before custream loads the driver: NVRTC 13 opens libcuda.so.1 itself, and once
  // custream has loaded its CPU emulator (CUSTREAM_LIBCUDA; soname libcuda.so.1) it would get
  // the emulator, which lacks cuGetExportTable, and crash. PTX for the oldest virtual
  // architecture runs on every newer device, so one compilation serves every device: the
  // driver's JIT compiles it for each device's architecture when the kernel is loaded there.
  const int arch = nvrtc.baseline_arch();
  const std::string ptx = nvrtc.build("--gpu-architecture=compute_" + std::to_string(arch), false);
  std::printf("compiled axpy once for compute_%d: %zu bytes of PTX\n", arch, ptx.size());

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
  if (register_cpu_axpy()) {
    std::printf("on the CPU driver emulator: axpy runs as a CPU function registered with it\n");
  }

  std::vector<std::unique_ptr<Lane>> lanes;
  for (int d = 0; d < devices; ++d) lanes.push_back(std::make_unique<Lane>(custream::Device(d)));

  // One load for every device: a Library is not tied to a context, unlike a Module.
  custream::Library library;
  std::string refused;  // why the driver's JIT refused the PTX, if it did
  try {
    const std::string_view ptx_text(ptx.c_str());  // without the NUL NVRTC counts
    library = load_twice([&] { return custream::Library::from_ptx(ptx_text); },
                         "the PTX with Library::from_ptx");
    for (auto& lane : lanes) preload(*lane, library);
  } catch (const custream::Error& e) {
    if (!library && e.result() == CUDA_ERROR_NOT_SUPPORTED) {
      return example::skip(std::string("NVRTC compiled the kernel, but this driver cannot load "
                                       "libraries: ") +
                           e.what());
    }
    if (!jit_refused(e)) throw;
    refused = e.name();
  }
  if (!refused.empty()) {
    // A cubin for a device's own architecture needs no JIT. It serves only that architecture,
    // so each architecture gets its own; devices that share one load the same cubin, which is
    // a cache hit. (The driver is loaded by now: on a GPU NVRTC opens the real libcuda.so.1.)
    std::printf(
        "the driver's JIT refused this NVRTC's PTX (%s); loading a cubin per device "
        "architecture with Library::from_image\n",
        refused.c_str());
    std::map<int, std::string> cubins;
    for (auto& lane : lanes) {
      const int device_arch = arch_of(lane->device);
      std::string& cubin = cubins[device_arch];
      auto load = [&cubin] { return custream::Library::from_image(cubin.data(), cubin.size()); };
      if (cubin.empty()) {
        cubin = nvrtc.build("--gpu-architecture=sm_" + std::to_string(device_arch), true);
        preload(*lane, load_twice(load, "the cubin for sm_" + std::to_string(device_arch) +
                                            " with Library::from_image"));
      } else {
        preload(*lane, load());
      }
    }
  }

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
      "PASS: NVRTC-compiled axpy, loaded once for every device, ran eagerly and in %d "
      "graph replays on %d device(s)\n",
      replays, devices);
  return example::exit_pass;
}

}  // namespace

int main() try { return run(); } catch (const std::exception& e) {
  return example::fail(e.what());
}

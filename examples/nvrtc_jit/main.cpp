// Example 2: a JIT loader. CUDA C++ source is compiled at run time with NVRTC (libnvrtc is
// loaded with dlopen, nothing links it), the PTX is loaded by custream (Module::from_ptx),
// and the kernel is launched eagerly, then captured with a host function into a graph and
// replayed. On custream's CPU driver emulator the kernel runs as a CPU function registered
// with it (emu_control.h), so the example also runs in CI without a GPU.
//
// Exit status: 0 PASS, 77 SKIP (no NVRTC, no driver, or a driver that cannot load modules),
// 1 FAIL.
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <custream/capture_scope.hpp>
#include <custream/custream.hpp>
#include <custream/graph.hpp>
#include <custream/kernel.hpp>
#include <custream/module.hpp>
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
constexpr int replays = 3;

int run() {
  static const Nvrtc nvrtc;
  if (!nvrtc.lib) return example::skip("no NVRTC library (" + nvrtc.lib.tried + ")");
  if (!nvrtc.complete()) return example::fail(nvrtc.lib.path + " lacks an NVRTC entry point");
  int major = 0, minor = 0;
  nvrtc.version(&major, &minor);
  std::printf("NVRTC %d.%d from %s\n", major, minor, nvrtc.lib.path.c_str());

  // Compile before custream loads the driver: NVRTC 13 opens libcuda.so.1 itself, and once
  // custream has loaded its CPU emulator (CUSTREAM_LIBCUDA; soname libcuda.so.1) it would get
  // the emulator, which lacks cuGetExportTable, and crash. PTX for the oldest virtual architecture
  // runs on every newer device: the driver's JIT compiles it for the device at load time.
  const int arch = nvrtc.baseline_arch();
  const std::string ptx = nvrtc.build("--gpu-architecture=compute_" + std::to_string(arch), false);
  std::printf("compiled axpy for compute_%d: %zu bytes of PTX\n", arch, ptx.size());

  if (!custream::driver_available()) {
    try {
      custream::driver_info();
    } catch (const custream::Error& e) {
      return example::skip(std::string("NVRTC works but there is no CUDA driver: ") + e.what());
    }
  }
  custream::Device device = custream::Device::current();
  const custream::ComputeCapability cc = device.compute_capability();
  const int device_arch = cc.major * 10 + cc.minor;

  custream::Module module;
  try {
    module = custream::Module::from_ptx(std::string_view(ptx.c_str()), device.ordinal());
    std::printf("loaded the PTX on device %d (%s)\n", device.ordinal(), device.name().c_str());
  } catch (const custream::Error& e) {
    if (e.result() == CUDA_ERROR_NOT_SUPPORTED) {
      return example::skip(std::string("NVRTC compiled the kernel, but this driver cannot load "
                                       "modules (the CPU emulator?): ") +
                           e.what());
    }
    if (e.result() != CUDA_ERROR_UNSUPPORTED_PTX_VERSION) throw;
    // NVRTC newer than the driver: its PTX is too new for the driver's JIT. A cubin for the
    // device's own architecture needs no JIT.
    std::printf("the driver's JIT refused this NVRTC's PTX (%s); loading a cubin for sm_%d\n",
                e.name().c_str(), device_arch);
    const std::string cubin =
        nvrtc.build("--gpu-architecture=sm_" + std::to_string(device_arch), true);
    module = custream::Module::from_image(cubin.data(), device.ordinal());
  }
  const custream::Kernel axpy = module.kernel("axpy");
  if (register_cpu_axpy()) {
    std::printf("on the CPU driver emulator: axpy runs as a CPU function registered with it\n");
  }

  custream::Stream stream(device, custream::StreamFlags::non_blocking);
  const std::size_t bytes = n * sizeof(float);
  custream::DeviceBuffer x(bytes, device), y(bytes, device);
  std::vector<float> host_x(n), host_y(n, 1.0f);
  for (int i = 0; i < n; ++i) host_x[i] = static_cast<float>(i % 1024);
  stream.copy(x.get(), host_x.data(), bytes);
  stream.copy(y.get(), host_y.data(), bytes);

  const custream::Dim3 grid((n + 255) / 256), block(256);
  axpy.launch(stream, grid, block, 0, 2.0f, x.get(), y.get(), n);  // y = 2x + 1

  std::atomic<int> host_calls{0};
  custream::CaptureScope capture(stream);
  axpy.launch(stream, grid, block, 0, 1.0f, x.get(), y.get(), n);  // y += x, per replay
  stream.launch_host_func([&host_calls] { host_calls.fetch_add(1); });
  custream::Graph graph = capture.end();
  std::printf("captured %zu nodes; replaying %d times\n", graph.node_count(), replays);
  for (int i = 0; i < replays; ++i) graph.launch(stream);

  stream.copy(host_y.data(), y.get(), bytes);
  stream.synchronize();
  for (int i = 0; i < n; ++i) {
    const float want = (2.0f + replays) * host_x[i] + 1.0f;
    if (std::fabs(host_y[i] - want) > 1e-3f * std::max(1.0f, want)) {
      return example::fail("y[" + std::to_string(i) + "] = " + std::to_string(host_y[i]) +
                           ", expected " + std::to_string(want));
    }
  }
  if (host_calls.load() != replays) {
    return example::fail("the captured host function ran " + std::to_string(host_calls.load()) +
                         " times, expected " + std::to_string(replays));
  }
  std::printf("PASS: NVRTC-compiled axpy ran eagerly and in %d graph replays on device %d\n",
              replays, device.ordinal());
  return example::exit_pass;
}

}  // namespace

int main() try { return run(); } catch (const std::exception& e) {
  return example::fail(e.what());
}

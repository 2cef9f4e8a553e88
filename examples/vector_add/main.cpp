// Example 6: vector add, the first page. CUDA C++ compiled at run time (custream::Program:
// NVRTC loaded with dlopen, code for the devices present), the inputs copied in with typed,
// stream-ordered device arrays (custream::DeviceArray), the kernel launched on a stream of EACH
// device, the sum copied back and checked. On custream's CPU driver emulator the kernel runs
// as a CPU function registered under its name (emu_control.h), so CI runs the example without
// a GPU (docs/emulator.md).
//
// Exit status: 0 PASS, 77 SKIP (no NVRTC, no driver or no device), 1 FAIL.
#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <custream/custream.hpp>
#include <string>
#include <vector>

#include "emu_control.h"
#include "example_support.hpp"

namespace {

const char* const source = R"(
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}
)";

// vector_add on the CPU, for the emulator: once per launch, with copies of the arguments.
void cpu_vector_add(const custream_emu_kernel_launch* launch) {
  const float* a;
  const float* b;
  float* c;
  int n;
  std::memcpy(&a, launch->params[0], sizeof a);
  std::memcpy(&b, launch->params[1], sizeof b);
  std::memcpy(&c, launch->params[2], sizeof c);
  std::memcpy(&n, launch->params[3], sizeof n);
  for (int i = 0; i < n; ++i) c[i] = a[i] + b[i];
}

// When the loaded driver is custream's emulator, registers cpu_vector_add as vector_add.
void register_cpu_twin() {
  void* driver = dlopen(custream::driver_info().library.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (driver == nullptr) return;
  if (auto register_kernel = reinterpret_cast<decltype(&custream_emu_register_kernel)>(
          dlsym(driver, "custream_emu_register_kernel"))) {
    register_kernel("vector_add", cpu_vector_add, nullptr, nullptr, 0);
  }
  dlclose(driver);
}

int run() {
  // Without NVRTC (a machine with only the driver) the example has nothing to compile with.
  try {
    custream::Program::nvrtc_version();
  } catch (const custream::Error& e) {
    return example::skip(std::string("no NVRTC: ") + e.what());
  }
  if (!custream::driver_available()) {
    try {
      custream::driver_info();
    } catch (const custream::Error& e) {
      return example::skip(std::string("no CUDA driver: ") + e.what());
    }
  }
  if (custream::Device::count() == 0) return example::skip("the CUDA driver reports no device");
  register_cpu_twin();

  // The first page: compile, copy in, launch on each device, copy back.
  custream::Program program(source, "vector_add.cu");
  program.compile();  // for the devices present (a cache on disk skips NVRTC next time)

  constexpr int n = 1 << 20;
  std::vector<float> a(n), b(n);
  for (int i = 0; i < n; ++i) {
    a[i] = static_cast<float>(i);
    b[i] = 0.5f * static_cast<float>(i);
  }
  for (int d = 0; d < custream::Device::count(); ++d) {
    const custream::Device device(d);
    const custream::Stream stream(device, custream::StreamFlags::non_blocking);
    custream::DeviceArray<float> x(n, stream), y(n, stream), z(n, stream);
    x.copy_from(stream, a);
    y.copy_from(stream, b);
    program.kernel("vector_add", device)
        .launch(stream, {(n + 255) / 256}, {256}, 0, x.get(), y.get(), z.get(), n);
    const std::vector<float> c = z.to_vector(stream);  // copies back and synchronizes
    for (int i = 0; i < n; ++i) {
      if (c[i] != a[i] + b[i]) {
        return example::fail("device " + std::to_string(d) + ": c[" + std::to_string(i) + "] = " +
                             std::to_string(c[i]) + ", expected " + std::to_string(a[i] + b[i]));
      }
    }
    std::printf("device %d (%s): %d sums right\n", d, device.name().c_str(), n);
  }
  std::printf("PASS\n");
  return example::exit_pass;
}

}  // namespace

int main() {
  try {
    return run();
  } catch (const std::exception& e) {
    return example::fail(e.what());
  }
}

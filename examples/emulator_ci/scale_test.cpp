// Tests of scale.cpp that run without a GPU: the kernel's CPU twin is registered with the
// emulator, a driver failure is injected, and the emulator's object count proves no leak.
#include "scale.hpp"

#include <custream/emu_control.h>

#include <cstdio>
#include <cstring>
#include <custream/custream.hpp>
#include <custream/device_buffer.hpp>
#include <custream/graph.hpp>
#include <string>
#include <vector>

namespace {

int failures = 0;

void check(bool ok, const std::string& what) {
  std::printf("%s: %s\n", ok ? "ok" : "FAILED", what.c_str());
  if (!ok) ++failures;
}

// What the kernel does, on the CPU: once per launch, over the whole grid.
void cpu_scale(const custream_emu_kernel_launch* launch) {
  float* data;
  unsigned n;
  float factor;
  std::memcpy(&data, launch->params[0], sizeof data);
  std::memcpy(&n, launch->params[1], sizeof n);
  std::memcpy(&factor, launch->params[2], sizeof factor);
  const unsigned threads = launch->grid[0] * launch->block[0];
  for (unsigned i = 0; i < n && i < threads; ++i) data[i] *= factor;
}

std::vector<float> read(const custream::Stream& s, const custream::DeviceBuffer& b) {
  std::vector<float> v(b.size() / sizeof(float));
  s.copy(v.data(), b.get(), b.size());
  s.synchronize();
  return v;
}

}  // namespace

int main() {
  const long objects_before = custream_emu_live_objects();
  custream_emu_register_kernel("scale", cpu_scale, nullptr, nullptr, 0);  // sizes from the PTX
  {
    const unsigned n = 1000;
    std::vector<float> host(n);
    for (unsigned i = 0; i < n; ++i) host[i] = static_cast<float>(i);
    custream::Stream stream(custream::StreamFlags::non_blocking);
    custream::DeviceBuffer data(n * sizeof(float));
    stream.copy(data.get(), host.data(), data.size());
    example::Scaler scaler;

    scaler.run(stream, data.get(), n, 2.0f);
    std::vector<float> v = read(stream, data);
    check(v[1] == 2.0f && v[n - 1] == 2.0f * (n - 1), "the kernel scaled the vector");

    stream.begin_capture();
    scaler.run(stream, data.get(), n, 3.0f);
    custream::Graph graph = stream.end_capture();
    graph.launch(stream);
    graph.launch(stream);
    v = read(stream, data);
    check(v[1] == 18.0f, "the captured kernel ran at each of two replays");

    // The next cuLaunchKernel fails as on a GPU out of resources: the error names it.
    custream_emu_fail_call("cuLaunchKernel", 1, CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES);
    try {
      scaler.run(stream, data.get(), n, 2.0f);
      check(false, "an injected launch failure is reported");
    } catch (const custream::Error& e) {
      check(e.result() == CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES && e.call() == "cuLaunchKernel",
            std::string("an injected launch failure is reported: ") + e.what());
    }
    check(read(stream, data)[1] == 18.0f, "the failed launch changed nothing");
    check(custream_emu_kernel_runs("scale") == 3, "three launches of scale ran");
  }
  check(custream_emu_live_objects() == objects_before,
        "streams, graphs, modules and memory are all released");
  std::printf("scale-test: %s\n", failures == 0 ? "PASS" : "FAIL");
  return failures == 0 ? 0 : 1;
}

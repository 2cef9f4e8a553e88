// The program every consumer builds (pkg-config, CMake package, Meson subproject): creates a
// stream, wraps its handle as a foreign stream (device inferred), captures a memset and a
// host function into a graph, replays it and checks the result. Prints
// "consumer (<argv[1]>): OK"; argv[1] names the way custream was pulled in.
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <custream/capture_scope.hpp>
#include <custream/custream.hpp>
#include <custream/graph.hpp>
#include <vector>

namespace {
const char* how = "?";
}  // namespace

int main(int argc, char** argv) try {
  if (argc > 1) how = argv[1];
  std::printf("driver %d from %s\n", custream::driver_info().version,
              custream::driver_info().library.c_str());
  custream::Stream owner(custream::Device(0), custream::StreamFlags::non_blocking);
  custream::ExternalStream stream(owner.handle());  // device inferred
  custream::DeviceBuffer buffer(1024 * sizeof(std::uint32_t), custream::Device(0));
  std::atomic<int> calls{0};

  custream::CaptureScope capture(stream);
  stream.memset32(buffer.get(), 0xC0FFEE, 1024);
  stream.launch_host_func([&calls] { ++calls; });
  custream::Graph graph = capture.end();
  for (int i = 0; i < 3; ++i) graph.launch(stream);

  std::vector<std::uint32_t> host(1024);
  stream.copy(host.data(), buffer.get(), host.size() * sizeof(std::uint32_t));
  stream.synchronize();
  for (std::uint32_t v : host) {
    if (v != 0xC0FFEE) {
      std::printf("consumer (%s): FAILED: wrong value %x\n", how, v);
      return 1;
    }
  }
  if (calls != 3 || stream.device_id() != 0) {
    std::printf("consumer (%s): FAILED: %d host calls, device %d\n", how, calls.load(),
                stream.device_id());
    return 1;
  }
  std::printf("consumer (%s): OK (%s)\n", how, stream.to_string().c_str());
  return 0;
} catch (const custream::Error& e) {
  std::printf("consumer (%s): FAILED: %s\n", how, e.what());
  return 1;
}

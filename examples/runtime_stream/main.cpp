// Example 1: a CUDA runtime-API program's stream, wrapped by custream.
//
// The program creates its stream the runtime way (cudaSetDevice + cudaStreamCreateWithFlags;
// libcudart is loaded with dlopen, nothing links it). custream wraps it as an
// ExternalStream, inferring its device, and captures work into a graph — runtime calls
// (cudaMemsetAsync) and custream calls (memset32, copy, a host function) into one capture —
// then replays the graph and checks the results.
//
//   custream-example-runtime-stream                 # the CUDA runtime's stream (real GPU)
//   custream-example-runtime-stream --driver-stream # a cuStreamCreate stream instead
//
// `--driver-stream` is for machines where the runtime cannot run (the CPU driver emulator
// of custream's tests): the foreign stream is then created by cuStreamCreate through the
// driver custream loaded, which exercises the same wrap / capture / replay path but not the
// runtime. It says so in its output. Exit status: 0 PASS, 77 SKIP, 1 FAIL.
#include <custream/capture_scope.hpp>
#include <custream/custream.hpp>
#include <custream/graph.hpp>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "example_support.hpp"

namespace {

// The few CUDA runtime entry points used, declared here (no cuda_runtime.h, no -lcudart).
// cudaStream_t and CUstream are the same type (struct CUstream_st*).
using cudaError_t = int;
using cudaGetDeviceCount_t = cudaError_t (*)(int*);
using cudaSetDevice_t = cudaError_t (*)(int);
using cudaStreamCreateWithFlags_t = cudaError_t (*)(CUstream*, unsigned);
using cudaStreamDestroy_t = cudaError_t (*)(CUstream);
using cudaMemsetAsync_t = cudaError_t (*)(void*, int, std::size_t, CUstream);
using cudaGetErrorString_t = const char* (*)(cudaError_t);
constexpr unsigned cudaStreamNonBlocking = 1;

/// The foreign stream and how to release it: the runtime's, or the driver's.
struct ForeignStream {
  CUstream handle = nullptr;
  int device = 0;
  std::string made_by;
  // Runtime mode only: enqueue a memset through the runtime (captured like any other work).
  cudaMemsetAsync_t runtime_memset = nullptr;
  cudaStreamDestroy_t runtime_destroy = nullptr;
  PFN_cuStreamDestroy_v4000 driver_destroy = nullptr;

  ~ForeignStream() {
    if (runtime_destroy != nullptr) runtime_destroy(handle);
    if (driver_destroy != nullptr) driver_destroy(handle);
  }
};

constexpr std::size_t words = 1 << 16;
constexpr std::uint32_t marker = 0x2A2A2A2A;
constexpr int replays = 5;

int run(ForeignStream& foreign) {
  // Wrap with device inference (cuStreamGetCtx once; the runtime's stream is never
  // destroyed by custream).
  custream::ExternalStream stream(foreign.handle);
  std::printf("foreign stream from %s: %s\n", foreign.made_by.c_str(),
              stream.to_string().c_str());
  if (stream.device_id() != foreign.device) {
    return example::fail("inferred device " + std::to_string(stream.device_id()) +
                         ", the stream was made on device " + std::to_string(foreign.device));
  }

  const std::size_t bytes = words * sizeof(std::uint32_t);
  custream::Device device(stream.device_id());
  custream::DeviceBuffer work(bytes, device);
  custream::DeviceBuffer result(bytes, device);
  std::atomic<int> host_calls{0};

  // Capture: runtime and custream work on the same stream end up in one graph.
  custream::CaptureScope capture(stream);
  if (foreign.runtime_memset != nullptr) {
    const cudaError_t e = foreign.runtime_memset(reinterpret_cast<void*>(work.get()), 0, bytes,
                                                 stream.handle());
    if (e != 0) return example::fail("cudaMemsetAsync during capture: error " + std::to_string(e));
  } else {
    stream.memset(work.get(), 0, bytes);
  }
  stream.memset32(work.get(), marker, words / 2);  // first half: the marker, second half: 0
  stream.copy(result.get(), work.get(), bytes);
  // Owned by the graph (a CUDA user object): runs on every replay.
  stream.launch_host_func([&host_calls] { host_calls.fetch_add(1); });
  custream::Graph graph = capture.end();  // instantiated and uploaded
  std::printf("captured %zu nodes; replaying %d times\n", graph.node_count(), replays);

  {
    // The wrapped stream as the current stream of its device (which must be the current
    // device: StreamScope refuses a stream of another device): graph.launch() uses it.
    custream::DeviceScope on_device(device);
    custream::StreamScope scope(stream);
    for (int i = 0; i < replays; ++i) graph.launch();
  }
  stream.synchronize();

  std::vector<std::uint32_t> host(words, 1);
  stream.copy(host.data(), result.get(), bytes);
  stream.synchronize();
  for (std::size_t i = 0; i < words; ++i) {
    const std::uint32_t want = i < words / 2 ? marker : 0;
    if (host[i] != want) {
      return example::fail("word " + std::to_string(i) + " is " + std::to_string(host[i]) +
                           ", expected " + std::to_string(want));
    }
  }
  if (host_calls.load() != replays) {
    return example::fail("the captured host function ran " + std::to_string(host_calls.load()) +
                         " times, expected " + std::to_string(replays));
  }
  std::printf("PASS: %s stream wrapped on device %d, %d replays, results and host calls match\n",
              foreign.made_by.c_str(), stream.device_id(), replays);
  return example::exit_pass;
}

int with_runtime() {
  if (const char* emu = std::getenv("CUSTREAM_LIBCUDA"); emu != nullptr && *emu != '\0') {
    return example::skip(std::string("CUSTREAM_LIBCUDA is set (") + emu +
                         "): custream and the CUDA runtime would use different drivers "
                         "(use --driver-stream there)");
  }
  static const example::Library cudart(
      "CUSTREAM_LIBCUDART",
      {"libcudart.so", "libcudart.so.13", "libcudart.so.12", "/usr/local/cuda/lib64/libcudart.so",
       "/usr/local/cuda/lib64/libcudart.so.13", "/usr/local/cuda/lib64/libcudart.so.12"});
  if (!cudart) return example::skip("no CUDA runtime library (" + cudart.tried + ")");
  auto get_count = cudart.get<cudaGetDeviceCount_t>("cudaGetDeviceCount");
  auto set_device = cudart.get<cudaSetDevice_t>("cudaSetDevice");
  auto create = cudart.get<cudaStreamCreateWithFlags_t>("cudaStreamCreateWithFlags");
  auto error_string = cudart.get<cudaGetErrorString_t>("cudaGetErrorString");
  ForeignStream foreign;
  foreign.runtime_memset = cudart.get<cudaMemsetAsync_t>("cudaMemsetAsync");
  auto destroy = cudart.get<cudaStreamDestroy_t>("cudaStreamDestroy");
  if (!get_count || !set_device || !create || !error_string || !foreign.runtime_memset || !destroy) {
    return example::fail(cudart.path + " lacks a runtime entry point");
  }
  int count = 0;
  if (const cudaError_t e = get_count(&count); e != 0 || count == 0) {
    return example::skip(std::string("the CUDA runtime (") + cudart.path +
                         ") sees no usable GPU: " + (e != 0 ? error_string(e) : "0 devices"));
  }
  // The last device, so that inference has something to find on a multi-GPU machine.
  foreign.device = count - 1;
  foreign.made_by = "cudaStreamCreateWithFlags (" + cudart.path + ")";
  if (const cudaError_t e = set_device(foreign.device); e != 0) {
    return example::fail(std::string("cudaSetDevice: ") + error_string(e));
  }
  if (const cudaError_t e = create(&foreign.handle, cudaStreamNonBlocking); e != 0) {
    return example::fail(std::string("cudaStreamCreateWithFlags: ") + error_string(e));
  }
  foreign.runtime_destroy = destroy;
  return run(foreign);
}

int with_driver() {
  if (!custream::driver_available()) {
    try {
      custream::driver_info();
    } catch (const custream::Error& e) {
      return example::skip(e.what());
    }
  }
  // The driver custream loaded (same library, so the same driver state).
  const std::string& library = custream::driver_info().library;
  void* driver = dlopen(library.c_str(), RTLD_NOW | RTLD_NOLOAD);
  auto get_proc = driver ? reinterpret_cast<PFN_cuGetProcAddress_v12000>(
                               dlsym(driver, "cuGetProcAddress_v2"))
                         : nullptr;
  if (get_proc == nullptr) return example::fail("cannot find cuGetProcAddress_v2 in " + library);
  void* create = nullptr;
  void* destroy = nullptr;
  get_proc("cuStreamCreate", &create, 2000, CU_GET_PROC_ADDRESS_DEFAULT, nullptr);
  get_proc("cuStreamDestroy", &destroy, 4000, CU_GET_PROC_ADDRESS_DEFAULT, nullptr);
  if (create == nullptr || destroy == nullptr) return example::fail("no cuStreamCreate");

  ForeignStream foreign;
  foreign.device = custream::Device::count() - 1;
  foreign.made_by = "cuStreamCreate (--driver-stream, " + library + "; the runtime is not used)";
  {
    custream::DeviceScope scope(foreign.device);  // cuStreamCreate needs a current context
    const CUresult r = reinterpret_cast<PFN_cuStreamCreate_v2000>(create)(
        &foreign.handle, CU_STREAM_NON_BLOCKING);
    if (r != CUDA_SUCCESS) return example::fail("cuStreamCreate: " + custream::result_name(r));
  }
  foreign.driver_destroy = reinterpret_cast<PFN_cuStreamDestroy_v4000>(destroy);
  return run(foreign);
}

}  // namespace

int main(int argc, char** argv) try {
  const bool driver_stream = argc > 1 && std::strcmp(argv[1], "--driver-stream") == 0;
  return driver_stream ? with_driver() : with_runtime();
} catch (const custream::Error& e) {
  return example::fail(e.what());
}

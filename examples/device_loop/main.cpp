// Example 7: a data-dependent loop that runs on the device, in one graph launch. The Collatz
// sequence of a number (n -> n/2 when even, 3n+1 when odd, until 1) takes a number of steps
// no one knows in advance. The graph holds a WHILE node whose body is captured from ordinary
// stream work (one kernel launch per step); custream's set-condition node ends each iteration by
// setting the loop's condition from a flag the kernel wrote in device memory. The CPU launches
// the graph once per number and waits; the device decides how often the body runs.
//
// Built with custream alone (the kernels are PTX loaded as a custream::Library; the
// set-condition kernel ships inside libcustream when it was built with the CUDA toolkit's
// nvcc). Exit status: 0 PASS, 77 SKIP (no driver, no device, a driver older than 12.3, or a
// libcustream without the set-condition kernel), 1 FAIL. Runs on custream's CPU driver emulator
// too, where the kernels run as the CPU functions below.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <custream/custream.hpp>
#include <custream/graph_builder.hpp>
#include <custream/graph_capture_scope.hpp>
#include <custream/testing.hpp>
#include <string>
#include <vector>

#include "emu_control.h"  // installed as <custream/emu_control.h>
#include "example_support.hpp"

namespace {

// The state in device memory: n, the steps taken, and whether another step is needed.
struct State {
  std::uint32_t n;
  std::uint32_t steps;
  std::uint32_t more;
};

// collatz_init(State* s): steps = 0, more = (n != 1).
// collatz_step(State* s): one step when n != 1 (steps + 1), then more = (n != 1).
constexpr const char* kPtx = R"(
.version 7.0
.target sm_70
.address_size 64

.visible .entry collatz_init(.param .u64 state)
{
  .reg .pred %p;
  .reg .b32 %r<4>;
  .reg .b64 %rd<3>;
  ld.param.u64 %rd1, [state];
  cvta.to.global.u64 %rd2, %rd1;
  ld.global.u32 %r1, [%rd2];
  mov.u32 %r2, 0;
  st.global.u32 [%rd2+4], %r2;
  setp.ne.u32 %p, %r1, 1;
  selp.u32 %r3, 1, 0, %p;
  st.global.u32 [%rd2+8], %r3;
  ret;
}

.visible .entry collatz_step(.param .u64 state)
{
  .reg .pred %p<3>;
  .reg .b32 %r<8>;
  .reg .b64 %rd<3>;
  ld.param.u64 %rd1, [state];
  cvta.to.global.u64 %rd2, %rd1;
  ld.global.u32 %r1, [%rd2];
  setp.eq.u32 %p1, %r1, 1;
  @%p1 bra DONE;
  and.b32 %r2, %r1, 1;
  setp.eq.u32 %p2, %r2, 0;
  shr.u32 %r3, %r1, 1;
  mad.lo.u32 %r4, %r1, 3, 1;
  selp.u32 %r1, %r3, %r4, %p2;
  st.global.u32 [%rd2], %r1;
  ld.global.u32 %r5, [%rd2+4];
  add.u32 %r5, %r5, 1;
  st.global.u32 [%rd2+4], %r5;
DONE:
  setp.ne.u32 %p1, %r1, 1;
  selp.u32 %r6, 1, 0, %p1;
  st.global.u32 [%rd2+8], %r6;
  ret;
}
)";

State* state_of(const custream_emu_kernel_launch* launch) {
  State* s = nullptr;
  std::memcpy(&s, launch->params[0], sizeof s);
  return s;
}

// On custream's CPU driver emulator the kernels run as these CPU functions.
void cpu_init(const custream_emu_kernel_launch* launch) {
  State* s = state_of(launch);
  s->steps = 0;
  s->more = s->n != 1;
}

void cpu_step(const custream_emu_kernel_launch* launch) {
  State* s = state_of(launch);
  if (s->n != 1) {
    s->n = s->n % 2 == 0 ? s->n / 2 : 3 * s->n + 1;
    ++s->steps;
  }
  s->more = s->n != 1;
}

std::uint32_t host_steps(std::uint32_t n) {
  std::uint32_t steps = 0;
  for (; n != 1; ++steps) n = n % 2 == 0 ? n / 2 : 3 * n + 1;
  return steps;
}

int run() {
  if (!custream::driver_available()) return example::skip("no CUDA driver");
  if (custream::Device::count() == 0) return example::skip("no device");
  if (custream::driver_info().version < 12030) {
    return example::skip("conditional nodes need a CUDA driver >= 12.3");
  }
  if (auto emulate = custream::testing::driver_symbol<decltype(&custream_emu_register_kernel)>(
          "custream_emu_register_kernel")) {
    emulate("collatz_init", cpu_init, nullptr, nullptr, 0);  // only the emulator exports it
    emulate("collatz_step", cpu_step, nullptr, nullptr, 0);
  }
  custream::DeviceScope device(0);
  custream::Stream stream(custream::StreamFlags::non_blocking);
  custream::DeviceBuffer state(sizeof(State));
  const CUdeviceptr more = state.get() + offsetof(State, more);
  const custream::Library library = custream::Library::from_ptx(kPtx);
  const custream::LibraryKernel init = library.kernel("collatz_init");
  const custream::LibraryKernel step = library.kernel("collatz_step");
  const custream::LaunchConfig one{custream::Dim3(1), custream::Dim3(1)};

  // The program: init; condition = more; WHILE (condition) { step; condition = more; }.
  custream::GraphBuilder program = custream::GraphBuilder::create();
  const custream::ConditionalHandle condition = program.add_condition();
  const custream::GraphNode start = program.add_kernel({}, init, one, state.get());
  custream::GraphNode first_test;
  try {
    first_test = program.add_set_condition(start, condition, more);
  } catch (const custream::Error& e) {  // a libcustream built without nvcc says so
    if (e.result() != CUDA_ERROR_NOT_SUPPORTED) throw;
    return example::skip(e.what());
  }
  custream::GraphBuilder body = program.add_while(first_test, condition).body();
  std::vector<custream::GraphNode> last;
  {
    custream::GraphCaptureScope capture(stream, body);  // ordinary stream work, into the body
    step.launch(stream, {1}, {1}, 0, state.get());
    last = capture.end();
  }
  body.add_set_condition(last, condition, more);
  const custream::Graph graph = program.instantiate();

  bool right = true;
  for (std::uint32_t n : {27u, 97u, 1u, 871u, 837799u}) {
    State host{n, 0, 0};
    stream.copy(state.get(), &host, sizeof host);
    graph.launch(stream);  // one launch: the loop runs on the device
    stream.copy(&host, state.get(), sizeof host);
    stream.synchronize();
    const std::uint32_t expected = host_steps(n);
    std::printf("%u reaches 1 in %u steps (expected %u)\n", n, host.steps, expected);
    right = right && host.steps == expected && host.n == 1;
  }
  if (!right) return example::fail("the device loop took the wrong number of steps");
  std::printf("PASS\n");
  return example::exit_pass;
}

}  // namespace

int main() {
  try {
    return run();
  } catch (const custream::Error& e) {
    return example::fail(e.what());
  }
}

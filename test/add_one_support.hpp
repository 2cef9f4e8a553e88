// The add_one kernel of the per-node update tests (test/graph_node_update_test.cpp,
// test/context_scope_update_test.cpp): its PTX, its CPU implementation registered on the
// emulator, and what a kernel-update case sets up.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "custream/device_buffer.hpp"
#include "custream/kernel.hpp"
#include "custream/module.hpp"
#include "custream/stream.hpp"
#include "emu_control.h"
#include "graph_support.hpp"
#include "test_support.hpp"

namespace custream_test::add_one {

// add_one(int* data, unsigned n): data[i] += 1 for i < n.
inline constexpr const char* kAddOnePtx = R"(
.version 7.0
.target sm_70
.address_size 64

.visible .entry add_one(
  .param .u64 data,
  .param .u32 n
)
{
  .reg .pred %p<2>;
  .reg .b32 %r<8>;
  .reg .b64 %rd<5>;
  ld.param.u64 %rd1, [data];
  ld.param.u32 %r1, [n];
  mov.u32 %r2, %ctaid.x;
  mov.u32 %r3, %ntid.x;
  mov.u32 %r4, %tid.x;
  mad.lo.s32 %r5, %r2, %r3, %r4;
  setp.ge.u32 %p1, %r5, %r1;
  @%p1 bra DONE;
  cvta.to.global.u64 %rd2, %rd1;
  mul.wide.u32 %rd3, %r5, 4;
  add.s64 %rd4, %rd2, %rd3;
  ld.global.u32 %r6, [%rd4];
  add.s32 %r7, %r6, 1;
  st.global.u32 [%rd4], %r7;
DONE:
  ret;
}
)";

inline void cpu_add_one(const custream_emu_kernel_launch* l) {
  int* data = nullptr;
  unsigned n = 0;
  std::memcpy(&data, l->params[0], sizeof data);
  std::memcpy(&n, l->params[1], sizeof n);
  const unsigned threads = l->grid[0] * l->block[0];
  for (unsigned i = 0; i < threads && i < n; ++i) ++data[i];
}

// On the emulator: add_one's CPU implementation, registered for the test's life.
struct AddOneOnEmulator {
  AddOneOnEmulator() {
    if (!custream_test::emulated()) return;
    reg = custream_test::emu_symbol<decltype(&custream_emu_register_kernel)>(
        "custream_emu_register_kernel");
    REQUIRE(reg != nullptr);
    REQUIRE(reg("add_one", cpu_add_one, nullptr, nullptr, 0) == 0);
  }
  ~AddOneOnEmulator() {
    if (reg != nullptr) reg("add_one", nullptr, nullptr, nullptr, 0);
  }
  decltype(&custream_emu_register_kernel) reg = nullptr;
};

// Declared first in a test case, destroyed last: on the emulator, waits until the work and the
// user-object destructors the case left (keepers, builders' payloads) are done, so the next
// case counts the emulator's live objects from a settled state.
struct Settled {
  ~Settled() {
    if (custream_test::emulated()) (void)custream_test::emu_wait_idle();
  }
};

inline std::vector<std::uint32_t> words(const custream::Stream& s,
                                        const custream::DeviceBuffer& b) {
  return custream_test::read(s, b);
}

inline constexpr std::size_t kBytes = custream_test::kN * sizeof(std::uint32_t);

// What the kernel-update cases share: the emulator settled after them, add_one's CPU twin,
// a stream and the add_one kernel.
struct AddOneCase {
  Settled settled;
  AddOneOnEmulator add_one_impl;
  custream::Stream s{custream::StreamFlags::non_blocking};
  custream::Module m = custream::Module::from_ptx(kAddOnePtx);
  custream::Kernel add_one = m.kernel("add_one");
};

}  // namespace custream_test::add_one

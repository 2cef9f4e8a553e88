// Two trivial kernels as PTX text, for `custream bench` and `custream selftest`. Written for
// sm_70 so that the driver's JIT compiles them for any newer GPU (sm_90 on the H200).
//   noop():                         does nothing
//   set_value(int* out, int value): *out = value (one thread's worth of work)
#pragma once

namespace custream_bench {

inline constexpr const char* kTrivialPtx = R"(
.version 7.0
.target sm_70
.address_size 64

.visible .entry noop()
{
  ret;
}

.visible .entry set_value(
  .param .u64 out,
  .param .u32 value
)
{
  .reg .b32 %r<2>;
  .reg .b64 %rd<3>;
  ld.param.u64 %rd1, [out];
  ld.param.u32 %r1, [value];
  cvta.to.global.u64 %rd2, %rd1;
  st.global.u32 [%rd2], %r1;
  ret;
}
)";

}  // namespace custream_bench

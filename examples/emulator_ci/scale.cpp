#include "scale.hpp"

namespace example {
namespace {

// scale(float* data, unsigned n, float factor)
constexpr const char* kPtx = R"(
.version 7.0
.target sm_70
.address_size 64

.visible .entry scale(
  .param .u64 data,
  .param .u32 n,
  .param .f32 factor
)
{
  .reg .pred %p<2>;
  .reg .b32 %r<6>;
  .reg .f32 %f<4>;
  .reg .b64 %rd<5>;
  ld.param.u64 %rd1, [data];
  ld.param.u32 %r1, [n];
  ld.param.f32 %f1, [factor];
  mov.u32 %r2, %ctaid.x;
  mov.u32 %r3, %ntid.x;
  mov.u32 %r4, %tid.x;
  mad.lo.s32 %r5, %r2, %r3, %r4;
  setp.ge.u32 %p1, %r5, %r1;
  @%p1 bra DONE;
  cvta.to.global.u64 %rd2, %rd1;
  mul.wide.u32 %rd3, %r5, 4;
  add.s64 %rd4, %rd2, %rd3;
  ld.global.f32 %f2, [%rd4];
  mul.f32 %f3, %f2, %f1;
  st.global.f32 [%rd4], %f3;
DONE:
  ret;
}
)";

}  // namespace

Scaler::Scaler() : kernel_(custream::Module::from_ptx(kPtx).kernel("scale")) {}

void Scaler::run(custream::StreamRef stream, CUdeviceptr data, unsigned n, float factor) const {
  kernel_.launch(stream, {(n + 255) / 256}, {256}, 0, data, n, factor);
}

}  // namespace example

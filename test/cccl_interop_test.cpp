// Interop with CCCL's cuda::stream_ref (CUDA 13's <cuda/stream_ref>): a custream stream
// converts to one, and an ExternalStream or StreamRef is made from one.
#include "custream/external_stream.hpp"
#include "custream/stream.hpp"
#include "custream/stream_ref.hpp"
#include "test_support.hpp"

#if __has_include(<cuda/stream_ref>)
#include <cuda/stream_ref>

namespace {
// A function of a library that takes CCCL's view.
CUstream handle_of(cuda::stream_ref stream) { return stream.get(); }
}  // namespace

static_assert(custream::detail::is_foreign_stream_view<cuda::stream_ref>);
static_assert(!custream::detail::is_foreign_stream_view<custream::StreamRef>);
static_assert(!custream::detail::is_foreign_stream_view<custream::Stream>);
static_assert(std::is_convertible_v<custream::Stream, cuda::stream_ref>);
static_assert(std::is_convertible_v<custream::StreamRef, cuda::stream_ref>);

TEST_CASE("a custream stream passes where cuda::stream_ref is taken, and back", "[gpu][cccl]") {
  REQUIRE_DRIVER();
  custream::Stream s(custream::StreamFlags::non_blocking);
  const cuda::stream_ref view = s;
  CHECK(view.get() == s.handle());
  CHECK(handle_of(s) == s.handle());
  CHECK(handle_of(custream::StreamRef(s)) == s.handle());
  CHECK(handle_of(custream::Stream::legacy()) == CU_STREAM_LEGACY);

  custream::ExternalStream wrapped(view);
  CHECK(wrapped.handle() == s.handle());
  CHECK(wrapped.device_id() == s.device_id());
  CHECK(wrapped.context() == s.context());
  CHECK(wrapped.kind() == custream::StreamRef::Kind::external);

  const custream::StreamRef ref = custream::StreamRef::wrap(view);
  CHECK(ref == s);
  CHECK(ref.device_id() == s.device_id());
  CHECK_THROWS_AS(custream::StreamRef::wrap(view, custream::Device::count()), custream::Error);
}
#else
TEST_CASE("a custream stream passes where cuda::stream_ref is taken, and back", "[gpu][cccl]") {
  CUSTREAM_SKIP("<cuda/stream_ref> is not on the include path (CCCL, CUDA >= 13 toolkits)");
}
#endif

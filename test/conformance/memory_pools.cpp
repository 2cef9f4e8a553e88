// Driver conformance: memory pools (a device's default pool, its attributes, trimming) and
// the 16-bit memset. Sizes are multiples of 2 MiB so that the driver's allocation granularity
// does not show in the byte counts.
#include "helpers.hpp"

namespace conformance {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

cuuint64_t pool_attribute(CUmemoryPool pool, CUmemPool_attribute a) {
  cuuint64_t v = 0;
  CU_OK(api().cuMemPoolGetAttribute(pool, a, &v));
  return v;
}

void set_threshold(CUmemoryPool pool, cuuint64_t bytes) {
  CU_OK(api().cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &bytes));
}

CUmemoryPool default_pool(int dev) {
  CUdevice d = 0;
  CU_OK(api().cuDeviceGet(&d, dev));
  CUmemoryPool pool = nullptr;
  CU_OK(api().cuDeviceGetDefaultMemPool(&pool, d));
  return pool;
}

// Restores a pool's release threshold when a case ends.
struct ThresholdGuard {
  CUmemoryPool pool;
  cuuint64_t saved;
  explicit ThresholdGuard(CUmemoryPool p)
      : pool(p), saved(pool_attribute(p, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD)) {}
  ~ThresholdGuard() {
    api().cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &saved);
  }
};

TEST_CASE("cuDeviceGetDefaultMemPool: one pool per device, the same every time",
          "[conformance][mempool]") {
  REQUIRE_MEMPOOLS();
  std::set<CUmemoryPool> pools;
  for (int dev = 0; dev < driver().device_count; ++dev) {
    const CUmemoryPool pool = default_pool(dev);
    REQUIRE(pool != nullptr);
    CHECK(default_pool(dev) == pool);
    pools.insert(pool);
  }
  CHECK(pools.size() == static_cast<size_t>(driver().device_count));
  CUmemoryPool pool = nullptr;
  CU_EQ(api().cuDeviceGetDefaultMemPool(&pool, driver().device_count), CUDA_ERROR_INVALID_DEVICE);
}

TEST_CASE("memory pool: the release threshold is stored; 0 by default", "[conformance][mempool]") {
  REQUIRE_MEMPOOLS();
  const CUmemoryPool pool = default_pool(0);
  ThresholdGuard guard(pool);
  set_threshold(pool, 96 * kMiB);
  CHECK(pool_attribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) == 96 * kMiB);
  set_threshold(pool, UINT64_MAX);
  CHECK(pool_attribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) == UINT64_MAX);
  set_threshold(pool, 0);
  CHECK(pool_attribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) == 0);
}

TEST_CASE("memory pool: used bytes follow cuMemAllocAsync and cuMemFreeAsync",
          "[conformance][mempool]") {
  REQUIRE_MEMPOOLS();
  PrimaryScope scope;
  const CUmemoryPool pool = default_pool(0);
  ThresholdGuard guard(pool);
  set_threshold(pool, 0);
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  CU_OK(api().cuStreamSynchronize(s.s));
  const cuuint64_t used = pool_attribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT);
  const cuuint64_t other_used =
      driver().device_count > 1 ? pool_attribute(default_pool(1), CU_MEMPOOL_ATTR_USED_MEM_CURRENT)
                                : 0;
  CUdeviceptr a = 0, b = 0;
  CU_OK(api().cuMemAllocAsync(&a, 4 * kMiB, s.s));
  CU_OK(api().cuMemAllocAsync(&b, 2 * kMiB, s.s));
  CU_OK(api().cuStreamSynchronize(s.s));
  CHECK(pool_attribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) == used + 6 * kMiB);
  CHECK(pool_attribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) >= used + 6 * kMiB);
  CHECK(pool_attribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH) >= used + 6 * kMiB);
  CU_OK(api().cuMemFreeAsync(a, s.s));
  CU_OK(api().cuStreamSynchronize(s.s));
  CHECK(pool_attribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) == used + 2 * kMiB);
  CU_OK(api().cuMemFreeAsync(b, s.s));
  CU_OK(api().cuStreamSynchronize(s.s));
  CHECK(pool_attribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) == used);
  // Another device's pool saw none of it.
  if (driver().device_count > 1) {
    CHECK(pool_attribute(default_pool(1), CU_MEMPOOL_ATTR_USED_MEM_CURRENT) == other_used);
  }
}

// The figures of reserved memory are not documented beyond "reserved >= used", what the
// threshold keeps across a synchronization and what trimming gives back.
TEST_CASE("memory pool: reserved bytes, the threshold and cuMemPoolTrimTo",
          "[conformance][mempool][unsure]") {
  REQUIRE_MEMPOOLS();
  PrimaryScope scope;
  const CUmemoryPool pool = default_pool(0);
  ThresholdGuard guard(pool);
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  CU_OK(api().cuStreamSynchronize(s.s));
  const cuuint64_t used = pool_attribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT);
  fact("used bytes before", static_cast<long long>(used));
  // A threshold above what is freed: the freed memory stays reserved across a synchronization.
  set_threshold(pool, used + 64 * kMiB);
  CUdeviceptr p = 0;
  CU_OK(api().cuMemAllocAsync(&p, 8 * kMiB, s.s));
  CU_OK(api().cuMemFreeAsync(p, s.s));
  CU_OK(api().cuStreamSynchronize(s.s));
  const cuuint64_t kept = pool_attribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
  fact("reserved bytes after a free under the threshold", static_cast<long long>(kept));
  CHECK(kept >= used + 8 * kMiB);
  // Trimming to 0 gives back what is not used.
  CU_OK(api().cuMemPoolTrimTo(pool, 0));
  const cuuint64_t trimmed = pool_attribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
  fact("reserved bytes after cuMemPoolTrimTo(0)", static_cast<long long>(trimmed));
  CHECK(trimmed >= used);
  if (used == 0) CHECK(trimmed == 0);
  // Threshold 0: a free gives everything back at the synchronization.
  set_threshold(pool, 0);
  CU_OK(api().cuMemAllocAsync(&p, 8 * kMiB, s.s));
  CU_OK(api().cuMemFreeAsync(p, s.s));
  CU_OK(api().cuStreamSynchronize(s.s));
  const cuuint64_t released = pool_attribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
  fact("reserved bytes after a free over threshold 0", static_cast<long long>(released));
  if (used == 0) CHECK(released == 0);
  // The watermarks reset to the current figures when set to 0; another value is refused.
  cuuint64_t zero = 0, one = 1;
  CU_OK(api().cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &zero));
  CHECK(pool_attribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH) == used);
  CU_EQ(api().cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &one),
        CUDA_ERROR_INVALID_VALUE);
  // The current figures are read-only.
  CU_EQ(api().cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &zero),
        CUDA_ERROR_INVALID_VALUE);
}

TEST_CASE("cuMemsetD16Async: sets 16-bit elements in stream order", "[conformance][mempool]") {
  REQUIRE_MEMPOOLS();
  PrimaryScope scope;
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  constexpr size_t n = 1001;  // odd: a 32-bit fill would show at the end
  DeviceBuffer dev(n * 2 + 2);
  CU_OK(api().cuMemsetD8Async(dev.p, 0x11, n * 2 + 2, s.s));
  CU_OK(api().cuMemsetD16Async(dev.p, 0xbeef, n, s.s));
  std::vector<uint16_t> out(n + 1);
  CU_OK(api().cuMemcpyDtoHAsync(out.data(), dev.p, (n + 1) * 2, s.s));
  CU_OK(api().cuStreamSynchronize(s.s));
  CHECK(std::count(out.begin(), out.begin() + n, uint16_t{0xbeef}) == static_cast<long>(n));
  CHECK(out[n] == 0x1111);  // the element after is untouched
  // An odd address is not 16-bit aligned.
  CU_EQ(api().cuMemsetD16Async(dev.p + 1, 0, 1, s.s), CUDA_ERROR_INVALID_VALUE);
}

}  // namespace
}  // namespace conformance

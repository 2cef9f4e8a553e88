// Driver conformance: Host functions and callbacks
#include "helpers.hpp"

namespace conformance {
namespace {

TEST_CASE("host functions and callbacks run in order on one non-caller thread", "[conformance]") {
  REQUIRE_DRIVER_LOADED();
  PrimaryScope scope;
  StreamHandle s1, s2(CU_STREAM_NON_BLOCKING);
  Log log1, log2;
  std::atomic<int> wrong{0};
  std::vector<CallbackRecord> r1, r2;
  r1.reserve(200);
  r2.reserve(200);
  DeviceBuffer buf(1 << 16);
  std::vector<unsigned char> host(1 << 16);
  for (int i = 0; i < 100; ++i) {
    r1.push_back({&log1, i, s1.s, &wrong});
    r2.push_back({&log2, i, s2.s, &wrong});
  }
  for (int i = 0; i < 100; ++i) {
    CU_OK(api().cuMemcpyHtoDAsync(buf.p, host.data(), host.size(), s1.s));
    if (i % 2) {
      CU_OK(api().cuStreamAddCallback(s1.s, record_callback, &r1[i], 0));
    } else {
      CU_OK(api().cuLaunchHostFunc(s1.s, record_host, &r1[i]));
    }
    CU_OK(api().cuStreamAddCallback(s2.s, record_callback, &r2[i], 0));
  }
  CU_OK(api().cuStreamSynchronize(s1.s));
  CU_OK(api().cuStreamSynchronize(s2.s));
  std::vector<int> expected(100);
  for (int i = 0; i < 100; ++i) expected[i] = i;
  CHECK(log1.get() == expected);
  CHECK(log2.get() == expected);
  CHECK(wrong.load() == 0);
  const auto me = std::this_thread::get_id();
  std::set<std::thread::id> threads(log1.threads.begin(), log1.threads.end());
  threads.insert(log2.threads.begin(), log2.threads.end());
  CHECK(threads.count(me) == 0);
  // Measured on the H200: host functions of different streams ran on one driver thread.
  CHECK(threads.size() == 1);
}

}  // namespace
}  // namespace conformance

// Driver conformance: Events
#include "helpers.hpp"

namespace conformance {
namespace {

TEST_CASE("event elapsed time and its errors", "[conformance]") {
  REQUIRE_DRIVER_LOADED();
  PrimaryScope scope;
  StreamHandle s;
  EventHandle start(CU_EVENT_DEFAULT), end(CU_EVENT_DEFAULT), never(CU_EVENT_DEFAULT);
  EventHandle untimed(CU_EVENT_DISABLE_TIMING);
  float ms = -1;
  // Never recorded: documented CUDA_ERROR_INVALID_HANDLE; query of such an event succeeds.
  CU_EQ(api().cuEventElapsedTime(&ms, never.e, never.e), CUDA_ERROR_INVALID_HANDLE);
  CU_OK(api().cuEventQuery(never.e));

  std::function<void()> sleep20 = [] { std::this_thread::sleep_for(20ms); };
  CU_OK(api().cuEventRecord(start.e, s.s));
  CU_OK(launch(s.s, &sleep20));
  CU_OK(api().cuEventRecord(end.e, s.s));
  CU_OK(api().cuEventRecord(untimed.e, s.s));
  CU_OK(api().cuStreamSynchronize(s.s));
  CU_OK(api().cuEventElapsedTime(&ms, start.e, end.e));
  CHECK(ms >= 15.0f);
  CHECK(ms < 5000.0f);
  // Timing disabled: documented CUDA_ERROR_INVALID_HANDLE.
  CU_EQ(api().cuEventElapsedTime(&ms, start.e, untimed.e), CUDA_ERROR_INVALID_HANDLE);
  CU_EQ(api().cuEventElapsedTime(&ms, start.e, never.e), CUDA_ERROR_INVALID_HANDLE);

  // Recorded but not complete: documented CUDA_ERROR_NOT_READY.
  std::atomic<bool> release{false};
  std::function<void()> gate = [&] {
    while (!release.load()) std::this_thread::sleep_for(1ms);
  };
  CU_OK(api().cuEventRecord(start.e, s.s));
  CU_OK(launch(s.s, &gate));
  CU_OK(api().cuEventRecord(end.e, s.s));
  CU_EQ(api().cuEventQuery(end.e), CUDA_ERROR_NOT_READY);
  CU_EQ(api().cuEventElapsedTime(&ms, start.e, end.e), CUDA_ERROR_NOT_READY);
  release = true;
  CU_OK(api().cuEventSynchronize(end.e));
  CU_OK(api().cuEventElapsedTime(&ms, start.e, end.e));
  CHECK(ms >= 0.0f);
}

TEST_CASE("interprocess events need disabled timing", "[conformance]") {
  REQUIRE_DRIVER_LOADED();
  PrimaryScope scope;
  CUevent e = nullptr;
  CU_EQ(api().cuEventCreate(&e, CU_EVENT_INTERPROCESS), CUDA_ERROR_INVALID_VALUE);
  CU_OK(api().cuEventCreate(&e, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING));
  CUipcEventHandle h{};
  CU_OK(api().cuIpcGetEventHandle(&h, e));
  CU_OK(api().cuEventDestroy(e));
}

}  // namespace
}  // namespace conformance

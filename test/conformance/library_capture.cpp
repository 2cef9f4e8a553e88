// Driver conformance: Libraries: what another thread may do during a global capture (custream's library cache)
#include "helpers.hpp"

namespace conformance {
namespace {

// custream's library cache loads and unloads on whichever thread loads or clears it
// (docs/design/libraries.md, invariant 4): the loads while another thread captures in global
// mode, and the unloads with the thread's capture mode relaxed.
TEST_CASE("libraries: another thread loads during a global capture, and unloads in relaxed mode",
          "[conformance][library]") {
  REQUIRE_LIBRARIES();
  LaunchFixture fx;
  CUlibrary old = nullptr;
  CU_OK(api().cuLibraryLoadData(&old, kLibraryPtx, nullptr, nullptr, 0, nullptr, nullptr, 0));
  CU_OK(api().cuStreamBeginCapture(fx.s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CUresult load = CUDA_ERROR_UNKNOWN, relax = CUDA_ERROR_UNKNOWN, unload = CUDA_ERROR_UNKNOWN,
           restore = CUDA_ERROR_UNKNOWN;
  CUstreamCaptureMode before = CU_STREAM_CAPTURE_MODE_RELAXED,
                      after = CU_STREAM_CAPTURE_MODE_GLOBAL;
  CUlibrary loaded = nullptr;
  std::thread t([&] {
    load = api().cuLibraryLoadData(&loaded, kLibraryPtx, nullptr, nullptr, 0, nullptr, nullptr, 0);
    relax = api().cuThreadExchangeStreamCaptureMode(&before);
    unload = api().cuLibraryUnload(old);
    after = before;
    restore = api().cuThreadExchangeStreamCaptureMode(&after);
  });
  t.join();
  CU_CHECK_EQ(load, CUDA_SUCCESS);
  CU_CHECK_EQ(relax, CUDA_SUCCESS);
  CHECK(before == CU_STREAM_CAPTURE_MODE_GLOBAL);  // a new thread's mode
  CU_CHECK_EQ(unload, CUDA_SUCCESS);
  CU_CHECK_EQ(restore, CUDA_SUCCESS);
  CHECK(after == CU_STREAM_CAPTURE_MODE_RELAXED);
  CHECK(capture_status(fx.s) == CU_STREAM_CAPTURE_STATUS_ACTIVE);
  CHECK(end_capture_result(fx.s) == nm(CUDA_SUCCESS));
  if (unload != CUDA_SUCCESS) api().cuLibraryUnload(old);
  if (loaded) CU_OK(api().cuLibraryUnload(loaded));
}

}  // namespace
}  // namespace conformance

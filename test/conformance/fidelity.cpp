// Driver conformance: Emulator fidelity: cuMemFree after a destroyed stream, a kernel fault kills the context,
// cuCtxCreate's flags
#include "helpers.hpp"

namespace conformance {
namespace {

TEST_CASE("cuMemFree waits for the queued work of a destroyed stream that writes the memory",
          "[conformance][memfree]") {
  REQUIRE_MEMOPS();
  SECTION("a stream of the primary context") {
    PrimaryScope scope;
    expect_free_waits_for_held_writer(true);
  }
  SECTION("a stream of a created context") {
    CUcontext created = nullptr;
    CU_OK(api().cuCtxCreate(&created, 0, 0));
    AtExit destroy{[&] { api().cuCtxDestroy(created); }};
    expect_free_waits_for_held_writer(true);
  }
  SECTION("a live stream of a created context") {
    CUcontext created = nullptr;
    CU_OK(api().cuCtxCreate(&created, 0, 0));
    AtExit destroy{[&] { api().cuCtxDestroy(created); }};
    expect_free_waits_for_held_writer(false);
  }
}

TEST_CASE("a kernel fault kills the context: queued work never runs, every query fails",
          "[conformance][sticky]") {
  REQUIRE_DRIVER_LOADED();
  if (const char* missing = missing_memop_entry()) CUSTREAM_SKIP("the driver lacks " << missing);
  const auto [status, out] = run_child_case("sticky child: work queued behind a kernel fault");
  INFO(out);
  CHECK(status == 0);
  CHECK(out.find("All tests passed") != std::string::npos);
}

TEST_CASE("sticky child: work queued behind a kernel fault", "[.][sticky-child]") {
  if (!std::getenv(kStickyChildEnv)) CUSTREAM_SKIP("runs in the child of the [sticky] case");
  REQUIRE_MEMOPS();
  if (driver().emulated) {
    auto reg = emu_control<decltype(&custream_emu_register_kernel)>("custream_emu_register_kernel");
    REQUIRE(reg != nullptr);
    REQUIRE(reg("fault_store", cpu_fault_store, nullptr, nullptr, 0) == 0);
  }
  PrimaryScope scope;
  CUmodule mod = nullptr;
  CU_OK(api().cuModuleLoadData(&mod, kFaultPtx));
  CUfunction fault = nullptr;
  CU_OK(api().cuModuleGetFunction(&fault, mod, "fault_store"));
  // Words: 0 gate of s, 1 gate of s2; 8 memset, 10 written, 12 copied, 14 written by s2,
  // 15 written by s3.
  HostMapped m(4096);
  auto word = [&m](size_t i) { return load_word<uint32_t>(m.p, 4 * i); };
  DeviceBuffer seven(4);
  CU_OK(api().cuMemsetD32Async(seven.p, 7, 1, CU_STREAM_LEGACY));
  CU_OK(api().cuStreamSynchronize(CU_STREAM_LEGACY));
  CUstream s = nullptr, s2 = nullptr, s3 = nullptr;
  CU_OK(api().cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CU_OK(api().cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
  CU_OK(api().cuStreamCreate(&s3, CU_STREAM_NON_BLOCKING));
  CUevent ev = nullptr, ev2 = nullptr;
  CU_OK(api().cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
  CU_OK(api().cuEventCreate(&ev2, CU_EVENT_DISABLE_TIMING));
  std::atomic<int> host_runs{0};
  std::function<void()> count = [&host_runs] { ++host_runs; };

  CUdeviceptr bad = 8;
  void* args[] = {&bad};
  CU_OK(api().cuStreamWaitValue32(s, m.d, 1, CU_STREAM_WAIT_VALUE_EQ));
  CU_OK(api().cuLaunchKernel(fault, 1, 1, 1, 1, 1, 1, 0, s, args, nullptr));
  CU_OK(api().cuMemsetD32Async(m.d + 4 * 8, 7, 1, s));
  CU_OK(launch(s, &count));
  CU_OK(api().cuStreamAddCallback(s, record_fault_callback, nullptr, 0));
  CU_OK(api().cuEventRecord(ev, s));
  CU_OK(api().cuStreamWriteValue32(s, m.d + 4 * 10, 9, 0));
  CU_OK(api().cuMemcpyDtoHAsync(static_cast<char*>(m.p) + 4 * 12, seven.p, 4, s));
  // Another stream's work, queued before the fault and held until after it.
  CU_OK(api().cuStreamWaitValue32(s2, m.d + 4, 1, CU_STREAM_WAIT_VALUE_EQ));
  CU_OK(api().cuStreamWriteValue32(s2, m.d + 4 * 14, 3, 0));
  CU_OK(launch(s2, &count));
  CU_OK(api().cuEventRecord(ev2, s2));
  // Work that completed before the fault.
  CU_OK(api().cuStreamWriteValue32(s3, m.d + 4 * 15, 4, 0));
  CU_OK(api().cuStreamSynchronize(s3));

  store_word<uint32_t>(m.p, 0, 1);  // the kernel runs and faults
  CU_EQ(api().cuStreamSynchronize(s), CUDA_ERROR_ILLEGAL_ADDRESS);
  store_word<uint32_t>(m.p, 4, 1);
  std::this_thread::sleep_for(300ms);
  CHECK(word(8) == 0u);          // the memset after the kernel did not run
  CHECK(word(10) == 0u);         // nor the write
  CHECK(word(12) == 0u);         // nor the copy
  CHECK(word(14) == 0u);         // nor another stream's work queued before the fault
  CHECK(word(15) == 4u);         // work done before the fault stays done
  CHECK(host_runs.load() == 0);  // host functions queued behind the fault never run
  // A callback runs once, with the error (cuda.h; as the H100, driver 580.159.04).
  CHECK(g_callback_runs.load() == 1);
  CHECK(g_callback_status.load() == static_cast<int>(CUDA_ERROR_ILLEGAL_ADDRESS));
  CU_CHECK_EQ(api().cuStreamQuery(s), CUDA_ERROR_ILLEGAL_ADDRESS);
  CU_CHECK_EQ(api().cuStreamQuery(s2), CUDA_ERROR_ILLEGAL_ADDRESS);
  CU_CHECK_EQ(api().cuStreamSynchronize(s2), CUDA_ERROR_ILLEGAL_ADDRESS);
  CU_CHECK_EQ(api().cuEventQuery(ev), CUDA_ERROR_ILLEGAL_ADDRESS);
  CU_CHECK_EQ(api().cuEventSynchronize(ev), CUDA_ERROR_ILLEGAL_ADDRESS);
  CU_CHECK_EQ(api().cuEventQuery(ev2), CUDA_ERROR_ILLEGAL_ADDRESS);
  CU_CHECK_EQ(api().cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  CUstream another = nullptr;
  CU_CHECK_EQ(api().cuStreamCreate(&another, 0), CUDA_ERROR_ILLEGAL_ADDRESS);
  CU_CHECK_EQ(launch(s3, &count), CUDA_ERROR_ILLEGAL_ADDRESS);
  std::this_thread::sleep_for(100ms);
  CHECK(host_runs.load() == 0);
  // The process ends here, with the context dead: nothing is released.
  std::fflush(stdout);
}

TEST_CASE("cuCtxCreate accepts the documented flags and refuses unknown bits",
          "[conformance][ctx-flags]") {
  REQUIRE_DRIVER_LOADED();
  CUcontext before = nullptr;
  CU_OK(api().cuCtxGetCurrent(&before));
  const std::vector<std::string> ok(4, "CUDA_SUCCESS");
  const std::vector<std::string> invalid(4, "CUDA_ERROR_INVALID_VALUE");
  for (unsigned flags : {0u, unsigned{CU_CTX_SCHED_SPIN}, unsigned{CU_CTX_SCHED_YIELD},
                         unsigned{CU_CTX_SCHED_BLOCKING_SYNC}, unsigned{CU_CTX_MAP_HOST},
                         unsigned{CU_CTX_LMEM_RESIZE_TO_MAX}, unsigned{CU_CTX_SYNC_MEMOPS},
                         unsigned{CU_CTX_SCHED_BLOCKING_SYNC | CU_CTX_MAP_HOST |
                                  CU_CTX_LMEM_RESIZE_TO_MAX | CU_CTX_SYNC_MEMOPS}}) {
    INFO("flags " << flags);
    CHECK(ctx_create_results(flags) == ok);
  }
  for (unsigned flags : {0x100u, 0x200u, 0x1000u, 0x10000u, 0x80000000u, 0x1FFu}) {
    INFO("flags " << flags);
    CHECK(ctx_create_results(flags) == invalid);
  }
  CUcontext after = nullptr;
  CU_OK(api().cuCtxGetCurrent(&after));
  CHECK(after == before);  // nothing refused was pushed, everything made was popped
}

TEST_CASE("emulator: a fault abandons queued work in-process; clearing it lets later work run",
          "[emu-only][sticky]") {
  REQUIRE_EMULATOR();
  REQUIRE_MEMOPS();
  auto sticky =
      emu_control<decltype(&custream_emu_set_sticky_error)>("custream_emu_set_sticky_error");
  auto idle = emu_control<decltype(&custream_emu_wait_idle)>("custream_emu_wait_idle");
  auto live = emu_control<decltype(&custream_emu_live_objects)>("custream_emu_live_objects");
  REQUIRE(sticky);
  REQUIRE(idle);
  REQUIRE(live);
  PrimaryScope scope;
  HostMapped m(64);
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  AtExit clear{[&] {
    sticky(CUDA_SUCCESS);
    store_word<uint32_t>(m.p, 0, 1);
    idle(5000);
  }};
  const long before = live();
  CUdeviceptr async = 0;
  CU_OK(api().cuMemAllocAsync(&async, 64, s.s));
  std::atomic<int> host_runs{0};
  std::function<void()> count = [&host_runs] { ++host_runs; };
  static std::atomic<int> callback_status{-1};
  callback_status = -1;
  CU_OK(api().cuStreamWaitValue32(s.s, m.d, 1, CU_STREAM_WAIT_VALUE_EQ));
  CU_OK(launch(s.s, &count));
  CU_OK(api().cuStreamAddCallback(
      s.s, [](CUstream, CUresult r, void*) { callback_status = static_cast<int>(r); }, nullptr, 0));
  CU_OK(api().cuMemFreeAsync(async, s.s));  // abandoned, its memory is still released
  CU_OK(api().cuStreamWriteValue32(s.s, m.d + 8, 5, 0));
  sticky(CUDA_ERROR_ILLEGAL_ADDRESS);
  store_word<uint32_t>(m.p, 0, 1);
  CHECK(idle(5000) == 1);
  CHECK(host_runs.load() == 0);
  CHECK(callback_status.load() == static_cast<int>(CUDA_ERROR_ILLEGAL_ADDRESS));  // cuda.h
  CHECK(load_word<uint32_t>(m.p, 8) == 0u);
  CHECK(live() == before);  // the allocation went with cuMemFreeAsync (LeakSanitizer: freed)
  sticky(CUDA_SUCCESS);
  // A test convenience a GPU lacks: cleared, the context runs work again.
  CU_OK(api().cuStreamWriteValue32(s.s, m.d + 8, 6, 0));
  CU_OK(launch(s.s, &count));
  CU_OK(api().cuStreamSynchronize(s.s));
  CHECK(load_word<uint32_t>(m.p, 8) == 6u);
  CHECK(host_runs.load() == 1);
}

}  // namespace
}  // namespace conformance

// Driver failures inside destructors and cleanup paths reach the release-error handler (they
// used to be swallowed silently). Faults are injected on the emulator.
#include <algorithm>
#include <mutex>
#include <string>
#include <vector>

#include "custream/context_scope.hpp"
#include "custream/device.hpp"
#include "custream/device_buffer.hpp"
#include "custream/event.hpp"
#include "custream/graph.hpp"
#include "custream/release_error_handler.hpp"
#include "custream/stream.hpp"
#include "graph_support.hpp"
#include "release_support.hpp"

using custream::ReleaseError;
using custream::Stream;
using custream_test::drop_stream_failing_destroy;
using custream_test::emu_fail_call;
using custream_test::raw;

namespace {

using Reports = custream_test::ReleaseReports;

void expect_one(Reports& reports, const std::string& call, const std::string& subject) {
  const std::vector<ReleaseError> seen = reports.seen();
  REQUIRE(seen.size() == 1);
  CHECK(seen[0].call == call);
  CHECK(seen[0].result == CUDA_ERROR_UNKNOWN);
  CHECK(seen[0].subject.rfind(subject, 0) == 0);
  CHECK(seen[0].message().find("CUDA_ERROR_UNKNOWN") != std::string::npos);
}

}  // namespace

TEST_CASE("a failed cuStreamDestroy in a destructor is reported",
          "[gpu][release][stream][emu-only]") {
  REQUIRE_EMULATOR();
  Reports reports;
  const CUstream handle = drop_stream_failing_destroy(CUDA_ERROR_UNKNOWN);
  expect_one(reports, "cuStreamDestroy", "stream 0x");
  CHECK(raw().cuStreamDestroy(handle) == CUDA_SUCCESS);  // the fault left it alive
  custream_test::emu_reset();
}

TEST_CASE("failed event, memory and graph releases are reported", "[gpu][release][emu-only]") {
  REQUIRE_EMULATOR();
  custream::Device(0).make_current();
  {
    Reports reports;
    CUevent handle = nullptr;
    {
      custream::Event e;
      handle = e.handle();
      emu_fail_call("cuEventDestroy", 1, CUDA_ERROR_UNKNOWN);
    }
    expect_one(reports, "cuEventDestroy", "event 0x");
    CHECK(raw().cuEventDestroy(handle) == CUDA_SUCCESS);
  }
  {
    Reports reports;
    CUdeviceptr ptr = 0;
    {
      custream::DeviceBuffer buffer(256);
      ptr = buffer.get();
      emu_fail_call("cuMemFree", 1, CUDA_ERROR_UNKNOWN);
    }
    expect_one(reports, "cuMemFree", "device allocation 0x");
    CHECK(raw().cuMemFree(ptr) == CUDA_SUCCESS);
  }
  {
    Reports reports;
    Stream s(custream::StreamFlags::non_blocking);
    custream::DeviceBuffer buffer(64);
    CUgraphExec exec = nullptr;
    {
      s.begin_capture();
      s.memset32(buffer.get(), 0, 16);
      custream::Graph g = s.end_capture();
      exec = g.exec();
      emu_fail_call("cuGraphExecDestroy", 1, CUDA_ERROR_UNKNOWN);
    }
    expect_one(reports, "cuGraphExecDestroy", "executable graph 0x");
    CHECK(raw().cuGraphExecDestroy(exec) == CUDA_SUCCESS);
  }
  custream_test::emu_reset();
}

TEST_CASE("a context scope that cannot restore the previous context reports it",
          "[gpu][release][context][emu-only]") {
  REQUIRE_EMULATOR();
  Reports reports;
  CUcontext before = nullptr;
  REQUIRE(raw().cuCtxSetCurrent(nullptr) == CUDA_SUCCESS);
  {
    custream::ContextScope scope(custream::Device(0).primary_context().handle());
    emu_fail_call("cuCtxSetCurrent", 1, CUDA_ERROR_UNKNOWN);
  }
  expect_one(reports, "cuCtxSetCurrent", "context (restoring it) 0x");
  REQUIRE(raw().cuCtxGetCurrent(&before) == CUDA_SUCCESS);
  CHECK(before != nullptr);  // the restore did fail: the scope's context is still current
  REQUIRE(raw().cuCtxSetCurrent(nullptr) == CUDA_SUCCESS);
  custream_test::emu_reset();
}

TEST_CASE("the default release-error handler writes one line on stderr",
          "[gpu][release][emu-only]") {
  REQUIRE_EMULATOR();
  auto previous = custream::set_release_error_handler({});  // the default
  CUstream handle = nullptr;
  const std::string line = custream_test::captured_stderr(
      [&] { handle = drop_stream_failing_destroy(CUDA_ERROR_UNKNOWN); });
  custream::set_release_error_handler(std::move(previous));
  CHECK(line.rfind("custream: cuStreamDestroy(stream 0x", 0) == 0);
  CHECK(line.find("failed in a destructor: CUDA_ERROR_UNKNOWN") != std::string::npos);
  CHECK(std::count(line.begin(), line.end(), '\n') == 1);
  CHECK(raw().cuStreamDestroy(handle) == CUDA_SUCCESS);
  custream_test::emu_reset();
}

TEST_CASE("CUDA_ERROR_DEINITIALIZED at teardown is not reported", "[gpu][release][emu-only]") {
  REQUIRE_EMULATOR();
  Reports reports;
  const CUstream handle = drop_stream_failing_destroy(CUDA_ERROR_DEINITIALIZED);
  CHECK(reports.seen().empty());
  CHECK(raw().cuStreamDestroy(handle) == CUDA_SUCCESS);
  custream_test::emu_reset();
}

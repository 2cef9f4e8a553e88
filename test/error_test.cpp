// custream::Error and the CUresult error category. Needs no driver.
#include "custream/error.hpp"

#include <string>
#include <system_error>

#include "catch_compat.hpp"
#include "custream/stream_ref.hpp"
#include "driver.hpp"

using custream::Error;

TEST_CASE("Error carries result, name, description, call and subject", "[unit][error]") {
  Error e(CUDA_ERROR_INVALID_HANDLE, "cuStreamSynchronize", "stream 0x10 (device 0)");
  CHECK(e.result() == CUDA_ERROR_INVALID_HANDLE);
  CHECK(e.name() == "CUDA_ERROR_INVALID_HANDLE");
  CHECK(e.call() == "cuStreamSynchronize");
  CHECK(e.subject() == "stream 0x10 (device 0)");
  CHECK_FALSE(e.description().empty());
  const std::string what = e.what();
  CHECK(what.find(
            "cuStreamSynchronize(stream 0x10 (device 0)) failed: CUDA_ERROR_INVALID_HANDLE") == 0);
  CHECK(what.find(e.description()) != std::string::npos);
}

TEST_CASE("Error appends detail text", "[unit][error]") {
  Error e(CUDA_ERROR_NOT_SUPPORTED, "cuStreamGetId", {}, "needs a driver >= 12.0");
  CHECK(std::string(e.what()) == "cuStreamGetId failed: CUDA_ERROR_NOT_SUPPORTED (" +
                                     e.description() + "); needs a driver >= 12.0");
}

TEST_CASE("CUresult compares with std::error_code", "[unit][error]") {
  Error e(CUDA_ERROR_NOT_READY, "cuStreamQuery", {});
  std::error_code ec = e.code();
  CHECK(ec == CUDA_ERROR_NOT_READY);
  CHECK(ec != CUDA_ERROR_INVALID_VALUE);
  CHECK(std::string(ec.category().name()) == "cuda");
  CHECK(ec.message().rfind("CUDA_ERROR_NOT_READY: ", 0) == 0);
  std::error_code implicit = CUDA_ERROR_ILLEGAL_ADDRESS;
  CHECK(implicit.value() == 700);
  CHECK(&implicit.category() == &custream::cuda_category());
}

TEST_CASE("result_name knows every code and names unknown ones", "[unit][error]") {
  CHECK(custream::result_name(CUDA_SUCCESS) == "CUDA_SUCCESS");
  CHECK(custream::result_name(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT) ==
        "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT");
  CHECK(custream::result_name(static_cast<CUresult>(123456)) == "CUDA_ERROR_UNKNOWN_CODE_123456");
}

TEST_CASE("stream errors name the stream and the device", "[unit][error]") {
  try {
    custream::detail::throw_stream_error(CUDA_ERROR_ILLEGAL_ADDRESS, "cuStreamSynchronize",
                                         custream::StreamRef::legacy());
    FAIL("no throw");
  } catch (const Error& e) {
    CHECK(e.subject() == "stream 0x1 (device -1)");
    CHECK(e.name() == "CUDA_ERROR_ILLEGAL_ADDRESS");
  }
}

// The C entry points of embed.cpp called the way a careless C caller might: null out-pointers
// and null or zero-sized buffers must give -1 (with a message where a buffer can take one),
// never a crash. Runs on the CPU driver emulator (examples/meson.build) and on a GPU:
//
//     CUSTREAM_LIBCUDA=<build>/emulator/libcuda.so.1 <build>/examples/custream-example-embed-test
//
// Prints PASS / FAIL lines; exits 0 when all pass, 1 otherwise, 77 when there is no driver.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <custream/custream.hpp>
#include <string>

extern "C" {
int custream_embed_fill(std::uintptr_t stream, int device_id, std::uintptr_t dst, std::size_t count,
                        std::uint32_t value, int* used_device, char* error, std::size_t error_size);
int custream_embed_describe(std::uintptr_t stream, char* out, std::size_t out_size);
int custream_embed_stream_create(int device_id, std::uintptr_t* handle, char* error,
                                 std::size_t error_size);
int custream_embed_stream_destroy(std::uintptr_t handle);
}

namespace {
int failures = 0;

void check(bool ok, const std::string& what) {
  std::printf("%s: %s\n", ok ? "PASS" : "FAIL", what.c_str());
  std::fflush(stdout);
  if (!ok) ++failures;
}

bool says(const char* text, const char* part) { return std::strstr(text, part) != nullptr; }
}  // namespace

int main() {
  if (!custream::driver_available()) {
    std::printf("SKIP: no CUDA driver\n");
    return 77;
  }
  char error[512] = "untouched";
  // A null handle pointer: refused before a stream is made, with a message.
  int r = custream_embed_stream_create(0, nullptr, error, sizeof error);
  check(r == -1 && says(error, "handle") && says(error, "null"),
        std::string("stream_create with a null handle pointer: -1, \"") + error + "\"");
  check(custream_embed_stream_create(0, nullptr, nullptr, 0) == -1,
        "stream_create with a null handle pointer and no error buffer: -1");
  std::strcpy(error, "untouched");
  check(custream_embed_stream_create(0, nullptr, error, 0) == -1 && says(error, "untouched"),
        "stream_create with a zero-sized error buffer: -1, the buffer untouched");
  // A working stream, then the other entry points with bad buffers.
  std::uintptr_t handle = 0;
  check(custream_embed_stream_create(0, &handle, error, sizeof error) == 0 && handle != 0,
        "stream_create: a stream");
  char out[256] = "";
  r = custream_embed_describe(handle, out, sizeof out);
  check(r == 0 && says(out, "ExternalStream"), std::string("describe: \"") + out + "\"");
  check(custream_embed_describe(handle, nullptr, 0) == -1,
        "describe with no output buffer: -1 (nothing to write to)");
  check(custream_embed_describe(handle, nullptr, sizeof out) == -1,
        "describe with a null output buffer and a size: -1");
  check(custream_embed_describe(handle, out, 0) == -1, "describe with a zero-sized buffer: -1");
  check(custream_embed_describe(handle, out, 1) == 0 && out[0] == '\0',
        "describe with a 1-byte buffer: 0, truncated to \"\"");
  // A fill of an invalid address fails in the driver: -1 whatever the error buffer is.
  check(custream_embed_fill(handle, 0, 0, 4, 7, nullptr, nullptr, 0) == -1,
        "fill that fails, with no error buffer and no used_device: -1");
  std::strcpy(error, "");
  r = custream_embed_fill(handle, 0, 0, 4, 7, nullptr, error, sizeof error);
  check(r == -1 && std::strlen(error) > 0, std::string("fill that fails: -1, \"") + error + "\"");
  check(custream_embed_stream_destroy(handle) == 0, "stream_destroy: 0");
  check(custream_embed_stream_destroy(handle) == -1, "stream_destroy again: -1");
  check(custream_embed_stream_destroy(0) == -1, "stream_destroy of 0: -1");
  std::printf("%s\n", failures == 0 ? "PASS" : "FAIL");
  return failures == 0 ? 0 : 1;
}

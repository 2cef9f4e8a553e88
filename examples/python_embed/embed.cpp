// Example 3: embedding custream in a Python program. This shared library has a C entry point
// that takes a stream pointer from CuPy (`stream.ptr`) or PyTorch (`stream.cuda_stream`)
// through ctypes, wraps it as a custream::ExternalStream (device inferred, or checked
// against the caller's idea of it), and enqueues a fill and a host function on it; the other
// way round, it makes custream streams whose handles the libraries take as external streams.
// run.py drives it. Nothing here knows about Python: any C caller works the same way.
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <custream/custream.hpp>
#include <exception>
#include <mutex>
#include <unordered_map>

#define CUSTREAM_EMBED_API extern "C" __attribute__((visibility("default")))

namespace {
std::atomic<unsigned long long> host_calls{0};

// The streams custream_embed_stream_create made, by handle, until destroyed.
std::mutex streams_mutex;
std::unordered_map<std::uintptr_t, custream::Stream>& streams() {
  static auto* s = new std::unordered_map<std::uintptr_t, custream::Stream>;  // never destroyed
  return *s;
}

void copy_message(const char* what, char* error, std::size_t error_size) {
  if (error != nullptr && error_size > 0) std::snprintf(error, error_size, "%s", what);
}
}  // namespace

/// Enqueues, on the foreign stream `stream` (a CUstream / cudaStream_t as an integer), a fill
/// of `count` 32-bit words at device address `dst` with `value`, then a host function that
/// counts its calls (custream_embed_host_calls). `device_id` is the caller's device for the
/// stream, or -1 to let custream infer it; the device custream uses is stored in
/// `*used_device` (unless null). Returns 0, or -1 with custream's message in `error`.
///
/// Every entry point takes a null or zero-sized error buffer (the message is then dropped).
///
/// When the stream is capturing (a capture begun by CuPy, say), both become graph nodes, and
/// the host function runs on every replay of the caller's graph.
CUSTREAM_EMBED_API int custream_embed_fill(std::uintptr_t stream, int device_id, std::uintptr_t dst,
                                           std::size_t count, std::uint32_t value, int* used_device,
                                           char* error, std::size_t error_size) {
  try {
    custream::ExternalStream s(reinterpret_cast<CUstream>(stream), device_id);
    if (used_device != nullptr) *used_device = s.device_id();
    s.memset32(static_cast<CUdeviceptr>(dst), value, count);
    s.launch_host_func([] { host_calls.fetch_add(1); });
    return 0;
  } catch (const std::exception& e) {
    copy_message(e.what(), error, error_size);
    return -1;
  }
}

/// How many times the host functions enqueued by custream_embed_fill have run.
CUSTREAM_EMBED_API unsigned long long custream_embed_host_calls() { return host_calls.load(); }

/// Writes custream's description of the wrapped stream ("<ExternalStream 0x… (device 0)>")
/// into `out` (truncated to `out_size` bytes with its terminating null). Returns 0, or -1 with
/// the error message in `out`; -1 when `out` is null or `out_size` is 0 (nothing to write to).
CUSTREAM_EMBED_API int custream_embed_describe(std::uintptr_t stream, char* out,
                                               std::size_t out_size) {
  if (out == nullptr || out_size == 0) return -1;
  try {
    copy_message(custream::ExternalStream(reinterpret_cast<CUstream>(stream)).to_string().c_str(),
                 out, out_size);
    return 0;
  } catch (const std::exception& e) {
    copy_message(e.what(), out, out_size);
    return -1;
  }
}

/// Makes a custream stream on device `device_id` (non-blocking) and stores its CUstream in
/// `*handle`, for a library to take as an external stream (CuPy's ExternalStream, PyTorch's
/// torch.cuda.ExternalStream, cuda.core's `__cuda_stream__` protocol). It lives until
/// custream_embed_stream_destroy. Returns 0, or -1 with custream's message in `error` (also
/// for a null `handle`, before any stream is made).
CUSTREAM_EMBED_API int custream_embed_stream_create(int device_id, std::uintptr_t* handle,
                                                    char* error, std::size_t error_size) {
  if (handle == nullptr) {
    copy_message(
        "custream_embed_stream_create: the handle pointer is null (pass where to store "
        "the stream's handle)",
        error, error_size);
    return -1;
  }
  try {
    custream::Stream s(custream::Device(device_id), custream::StreamFlags::non_blocking);
    *handle = reinterpret_cast<std::uintptr_t>(s.handle());
    std::lock_guard<std::mutex> lock(streams_mutex);
    streams().emplace(*handle, std::move(s));
    return 0;
  } catch (const std::exception& e) {
    copy_message(e.what(), error, error_size);
    return -1;
  }
}

/// Destroys a stream of custream_embed_stream_create (after the work enqueued on it; the
/// driver's rule). Returns 0, or -1 when `handle` is not one of them.
CUSTREAM_EMBED_API int custream_embed_stream_destroy(std::uintptr_t handle) {
  std::lock_guard<std::mutex> lock(streams_mutex);
  return streams().erase(handle) == 1 ? 0 : -1;
}

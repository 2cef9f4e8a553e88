/// @file
/// custream::CaptureScope: a stream capture that always ends.
#pragma once

#include <string_view>

#include "custream/capture_mode.hpp"
#include "custream/graph.hpp"
#include "custream/instantiate_flags.hpp"
#include "custream/nvtx_range.hpp"
#include "custream/stream.hpp"

namespace custream {

/// Begins a capture on a stream and guarantees that it ends: end() ends it and returns the
/// instantiated Graph; if end() was not called (an exception unwinds, an early return), the
/// destructor ends the capture and discards the graph, freeing every captured host-function
/// payload. The stream has left capture mode either way.
///
/// @code
/// custream::CaptureScope capture(stream);
/// enqueue_work(stream);              // may throw: the capture still ends
/// custream::Graph graph = capture.end();
/// @endcode
class CaptureScope {
 public:
  /// Begins capturing `stream` (Stream::begin_capture). The scope holds a reference, so
  /// the stream lives at least as long.
  /// @throws as Stream::begin_capture (nothing to end then).
  explicit CaptureScope(const Stream& stream, CaptureMode mode = CaptureMode::relaxed);
  /// As CaptureScope(stream, mode), inside an NVTX range named `range` (see NvtxRange): it
  /// opens before the capture begins and ends once the capture has ended (end(), the
  /// destructor, or this constructor throwing), so Nsight Systems shows the capture under that
  /// name. An empty `range` sends nothing.
  /// @throws as CaptureScope(stream, mode); std::bad_alloc.
  explicit CaptureScope(const Stream& stream, CaptureMode mode, std::string_view range);
  /// Ends the capture unless end() did, discarding the graph. Never throws.
  ~CaptureScope();

  CaptureScope(const CaptureScope&) = delete;
  CaptureScope& operator=(const CaptureScope&) = delete;

  /// Ends the capture and instantiates the graph (Stream::end_capture). When this throws,
  /// the scope asks the driver whether its capture still runs (an end refused with
  /// CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD has ended it on the driver; an injected or
  /// transient failure may not have): if it does, or the driver cannot say, the scope stays
  /// active and the destructor asks again and ends it.
  /// @throws Error (CUDA_ERROR_ILLEGAL_STATE) when already ended; as Stream::end_capture.
  Graph end(InstantiateFlags flags = InstantiateFlags::upload);

  /// The stream being captured.
  const Stream& stream() const noexcept { return stream_; }
  /// True until end() ended the capture (or a failed end() found it ended).
  bool active() const noexcept { return active_; }

 private:
  /// Ends the scope's NVTX range, if it has one. Never throws.
  void end_range() noexcept;

  Stream stream_;
  NvtxRange range_;  // open from before the capture began until it ended (none: not asked)
  bool active_ = false;
  unsigned long long id_ = 0;  // the capture this scope began
};

}  // namespace custream

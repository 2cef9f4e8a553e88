/// @file
/// custream::HostFunctionError: an exception that escaped a host function or callback.
#pragma once

#include <exception>
#include <string>

#include "custream/stream_ref.hpp"

namespace custream {

/// What the host-function error handler receives when a callable given to
/// Stream::launch_host_func or Stream::add_callback threw (built on the driver's host-function
/// thread; the exception never reaches the driver), or when a completion callback
/// (custream::Completions) threw or was not run because its stream's work failed.
struct HostFunctionError {
  /// The stream the callable was enqueued on: a non-owning view (the stream may be gone
  /// once the handler returns; for a captured callable it is the stream of the capture,
  /// not necessarily the one a replay runs on).
  StreamRef stream;
  /// The exception the callable threw.
  std::exception_ptr exception;
  /// True when the callable ran as a node of a captured graph (a replay).
  bool captured = false;
  /// True when the callable was a completion callback registered on a custream::Completions.
  bool completion = false;

  /// "a host function enqueued on <Stream 0x… (device 0)> threw: <what()>" ("a completion
  /// callback registered on <…>" for a completion's; "threw a non-standard exception" when it
  /// was not a std::exception). @throws std::bad_alloc only.
  std::string message() const;
};

}  // namespace custream

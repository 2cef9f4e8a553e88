/// @file
/// The replaceable, process-wide handler of exceptions thrown by host functions and
/// callbacks.
#pragma once

#include <functional>

#include "custream/host_function_error.hpp"

namespace custream {

/// Receives every exception that escapes a host function or callback. It runs on the
/// driver's host-function thread: it must not call the CUDA driver, and it delays every
/// other stream's host functions while it runs. An exception it throws itself is swallowed
/// (after a line on stderr).
using HostFunctionErrorHandler = std::function<void(const HostFunctionError&)>;

/// Installs `handler` for the whole process (thread-safe) and returns the previous one.
/// An empty handler restores the default.
HostFunctionErrorHandler set_host_function_error_handler(HostFunctionErrorHandler handler);

/// The default handler: writes "custream: " + error.message() and a newline to stderr.
void default_host_function_error_handler(const HostFunctionError& error) noexcept;

}  // namespace custream

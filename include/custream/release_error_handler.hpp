/// @file
/// The replaceable, process-wide handler of driver errors that destructors cannot throw.
#pragma once

#include <functional>

#include "custream/release_error.hpp"

namespace custream {

/// Receives every driver failure custream swallows in a destructor or a cleanup path (a leak
/// or a wrong current context is never silent). It may run on any thread, also on the
/// driver's host-function thread and during static destruction; it must not throw (an
/// exception it throws is dropped after a line on stderr) and must not destroy custream
/// objects.
using ReleaseErrorHandler = std::function<void(const ReleaseError&)>;

/// Installs `handler` for the whole process (thread-safe) and returns the previous one. An
/// empty handler restores the default.
ReleaseErrorHandler set_release_error_handler(ReleaseErrorHandler handler);

/// The default handler: writes "custream: " + error.message() and a newline to stderr.
void default_release_error_handler(const ReleaseError& error) noexcept;

}  // namespace custream

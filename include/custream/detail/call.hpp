// The call layer: every driver call goes through one of these, which take the entry from the
// table and name it once (the name comes from the table, detail::EntryInfo). Internal: not
// part of custream's API. Design: docs/design/loading.md (the call layer).
#pragma once

#include "custream/detail/cuda.hpp"

#include <optional>
#include <string>

#include "custream/context_scope.hpp"
#include "custream/detail/driver.hpp"

namespace custream {

class StreamRef;

namespace detail {

/// What a failing call was about; formatted only when it fails, in the one format every error
/// subject has: "device 0", "stream 0x5581… (device 0)", "event 0x… (device 0)",
/// "graph 0x…", "executable graph 0x…", "module 0x… (device 0)", "context 0x…", "library 0x…", or nothing.
struct Subject {
  /// The kind of object.
  enum class What : unsigned char {
    none,
    device,
    stream,
    event,
    graph,
    executable,
    module,
    context,
    library
  };
  What what = What::none;
  const void* handle = nullptr;
  int device = -1;
};

/// "device N".
inline Subject device_subject(int ordinal) noexcept {
  return {Subject::What::device, nullptr, ordinal};
}
/// "context 0x…".
inline Subject context_subject(CUcontext context) noexcept {
  return {Subject::What::context, context, -1};
}
/// "graph 0x…".
inline Subject graph_subject(CUgraph graph) noexcept { return {Subject::What::graph, graph, -1}; }

/// The subject's text in the one format (see Subject).
std::string subject_text(const Subject& subject);

/// Throws Error for `call` failing with `result` about `subject`, `detail` appended.
[[noreturn, gnu::cold]] void throw_call_error(CUresult result, const char* call,
                                              const Subject& subject, std::string detail = {});
/// Throws Error for `call` failing with `result` on stream `stream` (subject "stream 0x…
/// (device N)"); when the driver answered that the call is not allowed while capturing, the
/// detail says that the capture is now invalidated. `detail` is appended.
[[noreturn, gnu::cold]] void throw_stream_error(CUresult result, const char* call,
                                                const StreamRef& stream, std::string detail = {});

/// Reports `result` of a release call (`call` on the `what` at `handle`, e.g. the name of
/// cuStreamDestroy, "stream", h) to the release-error handler, unless it is CUDA_SUCCESS or
/// CUDA_ERROR_DEINITIALIZED. For destructors and cleanup paths: never throws, and allocates
/// only on failure. Defined in lib/error.cpp, with the two throw helpers above.
void report_release_failure(CUresult result, const char* call, const char* what,
                            const void* handle) noexcept;

/// The entry's function pointer from `api`; for an optional entry the driver lacks, throws
/// the error that names the minimum driver.
template <auto Field>
auto entry(const DriverApi& api) {
  const auto fn = api.*Field;
  if constexpr (!EntryInfo<Field>::required) {
    if (fn == nullptr) throw_missing_entry(EntryInfo<Field>::field);
  }
  return fn;
}

/// Throws Error for the entry `Field` failing with `result` about `subject`.
template <auto Field>
[[noreturn, gnu::cold]] void fail(CUresult result, const Subject& subject,
                                  std::string detail = {}) {
  throw_call_error(result, EntryInfo<Field>::name, subject, std::move(detail));
}

/// Calls the entry and returns its result. Throws only when there is no driver, or for an
/// optional entry the driver lacks.
template <auto Field, typename... Args>
CUresult try_call(Args... args) {
  return entry<Field>(api())(args...);
}

/// Calls the entry; throws Error naming it and `subject` unless it succeeds.
template <auto Field, typename... Args>
void call(const Subject& subject, Args... args) {
  if (const CUresult r = try_call<Field>(args...); r != CUDA_SUCCESS) fail<Field>(r, subject);
}

/// The no-throw twin, for destructors and cleanup paths: calls the entry of the loaded
/// driver (whoever holds a handle to release has loaded it, and it is never unloaded) and
/// reports a failure other than CUDA_ERROR_DEINITIALIZED (process exit) to the release-error
/// handler, naming the entry, `what` and `handle`. Returns the result.
template <auto Field, typename... Args>
CUresult release_call(const char* what, const void* handle, Args... args) noexcept {
  const CUresult r = (g_loaded.load(std::memory_order_acquire)->api.*Field)(args...);
  report_release_failure(r, EntryInfo<Field>::name, what, handle);
  return r;
}

/// The one special-handle retry. The handles 0, 1 and 2 mean "the current context's stream":
/// when a call on one failed with CUDA_ERROR_INVALID_CONTEXT (no context current), this makes
/// the current device's primary context current in `scope` (the caller keeps it for the calls
/// that follow) and returns true: call again. Otherwise returns false and changes nothing.
/// Hot paths pay nothing: only that failure gets here. @throws Error when no context can be
/// made current.
inline bool retry_special(CUresult first, bool special, std::optional<ContextScope>& scope) {
  if (first != CUDA_ERROR_INVALID_CONTEXT || !special || scope) return false;
  scope.emplace(current_primary_context());
  return true;
}

/// Calls the entry on a stream (`special`: the stream is a special handle) with the
/// special-handle retry; the context it made current stays in `scope`. Returns the result.
template <auto Field, typename... Args>
CUresult on_stream(bool special, std::optional<ContextScope>& scope, Args... args) {
  const auto fn = entry<Field>(api());
  CUresult r = fn(args...);
  if (r != CUDA_SUCCESS && retry_special(r, special, scope)) r = fn(args...);
  return r;
}

}  // namespace detail
}  // namespace custream

// custream::Error, the CUresult error category, and the cold throw helpers.
#include "custream/error.hpp"

#include <cstdint>
#include <cstdio>
#include <string>

#include "custream/release_error_handler.hpp"
#include "custream/stream_ref.hpp"
#include "driver.hpp"
#include "handler_slot.hpp"
#include "result_names.hpp"

namespace custream {
namespace {

// The driver's own text when it is loaded, custream's copy of cuda.h's otherwise.
std::string description_of(CUresult result) {
  if (const detail::Loaded* l = detail::g_loaded.load(std::memory_order_acquire)) {
    const char* text = nullptr;
    const CUresult r = l->api.cuGetErrorString(result, &text);  // raw: describing an error
    if (r == CUDA_SUCCESS && text != nullptr) return text;
  }
  const char* text = detail::result_description(result);
  return text ? text : "unknown CUDA error code";
}

// Whether `call` names custream's own operation ("custream::…", which did not call the driver
// for what it reports) rather than a driver entry point.
bool custream_call(const std::string& call) { return call.rfind("custream::", 0) == 0; }

std::string compose(CUresult result, const std::string& call, const std::string& subject,
                    const std::string& detail) {
  if (call.empty()) return detail + " [" + result_name(result) + "]";  // custream's own finding
  std::string message = call;
  if (!subject.empty()) message += "(" + subject + ")";
  if (result == CUDA_SUCCESS) {
    message += ": " + detail;
    return message;
  }
  message += " failed: " + result_name(result) + " (" + description_of(result) + ")";
  if (!detail.empty()) message += "; " + detail;
  return message;
}

class CudaCategory final : public std::error_category {
 public:
  const char* name() const noexcept override { return "cuda"; }
  std::string message(int code) const override {
    auto result = static_cast<CUresult>(code);
    return result_name(result) + ": " + description_of(result);
  }
};

}  // namespace

const std::error_category& cuda_category() noexcept {
  static const CudaCategory category;  // Trivial destructor work only; never calls the driver.
  return category;
}

std::string result_name(CUresult result) {
  const char* name = detail::result_name(result);
  return name ? name : "CUDA_ERROR_UNKNOWN_CODE_" + std::to_string(static_cast<int>(result));
}

Error::Error(CUresult result, std::string call, std::string subject, std::string detail)
    : std::runtime_error(compose(result, call, subject, detail)),
      result_(result),
      name_(custream::result_name(result)),
      description_(description_of(result)),
      call_(std::move(call)),
      subject_(std::move(subject)) {}

namespace detail {

std::string pointer_text(const void* p) {
  char buffer[2 + 2 * sizeof(void*) + 1];
  std::snprintf(buffer, sizeof buffer, "%#llx",
                static_cast<unsigned long long>(reinterpret_cast<std::uintptr_t>(p)));
  return p == nullptr ? "0x0" : buffer;
}

void throw_error(CUresult result, const char* call) { throw Error(result, call, {}); }

std::string subject_text(const Subject& subject) {
  using What = Subject::What;
  const std::string device = " (device " + std::to_string(subject.device) + ")";
  switch (subject.what) {
    case What::none:
      return {};
    case What::device:
      return "device " + std::to_string(subject.device);
    case What::stream:
      return "stream " + pointer_text(subject.handle) + device;
    case What::event:
      return "event " + pointer_text(subject.handle) + device;
    case What::graph:
      return "graph " + pointer_text(subject.handle);
    case What::executable:
      return "executable graph " + pointer_text(subject.handle);
    case What::module:
      return "module " + pointer_text(subject.handle) + device;
    case What::library:
      return "library " + pointer_text(subject.handle);
    case What::context:
      return "context " + pointer_text(subject.handle) + (subject.device >= 0 ? device : "");
  }
  return {};
}

void throw_call_error(CUresult result, const char* call, const Subject& subject,
                      std::string detail) {
  throw Error(result, call, subject_text(subject), std::move(detail));
}

void throw_stream_error(CUresult result, const char* call, const StreamRef& stream,
                        std::string detail) {
  // Only where the driver itself answered so: custream's own refusals invalidate nothing.
  if ((result == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED ||
       result == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT) &&
      !custream_call(call)) {
    detail =
        "the call is not allowed while the stream (or the legacy stream it depends on) "
        "captures; the driver has now invalidated that capture" +
        (detail.empty() ? std::string() : "; " + detail);
  }
  throw_call_error(result, call, {Subject::What::stream, stream.handle(), stream.device_id()},
                   std::move(detail));
}

void throw_bad_ordinal(int ordinal, int count, const char* call) {
  throw Error(count == 0 ? CUDA_ERROR_NO_DEVICE : CUDA_ERROR_INVALID_DEVICE, call,
              "device " + std::to_string(ordinal),
              count == 0 ? std::string("the driver reports no device")
                         : "the driver reports " + std::to_string(count) +
                               " device(s), ordinals 0.." + std::to_string(count - 1));
}

void throw_error(CUresult result, const char* call, std::string subject, std::string detail) {
  throw Error(result, call, std::move(subject), std::move(detail));
}

}  // namespace detail
}  // namespace custream

// --- Release errors: failures destructors cannot throw ---

namespace custream {

std::string ReleaseError::message() const {
  return call + "(" + subject + ") failed in a destructor: " + result_name(result) + " (" +
         description_of(result) + ")";
}

ReleaseErrorHandler set_release_error_handler(ReleaseErrorHandler handler) {
  return detail::HandlerSlot<ReleaseErrorHandler>::instance().exchange(std::move(handler));
}

void default_release_error_handler(const ReleaseError& error) noexcept {
  try {
    const std::string text = "custream: " + error.message() + "\n";
    std::fputs(text.c_str(), stderr);
  } catch (...) {
    std::fputs("custream: a driver call failed in a destructor (no memory to describe it)\n",
               stderr);
  }
}

namespace detail {

void report_release_failure(CUresult result, const char* call, const char* what,
                            const void* handle) noexcept {
  if (result == CUDA_SUCCESS || result == CUDA_ERROR_DEINITIALIZED) return;
  try {
    const ReleaseError error{result, call, std::string(what) + " " + pointer_text(handle)};
    HandlerSlot<ReleaseErrorHandler>::instance().report(&default_release_error_handler, error);
  } catch (...) {
    std::fputs("custream: a driver call failed in a destructor (no memory to describe it)\n",
               stderr);
  }
}

}  // namespace detail
}  // namespace custream

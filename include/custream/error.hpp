/// @file
/// custream::Error and the std::error_category for CUresult.
#pragma once

#include "custream/detail/cuda.hpp"

#include <stdexcept>
#include <string>
#include <system_error>

namespace custream {

/// The std::error_category of CUresult codes: `name()` is "cuda", `message(c)` is
/// "CUDA_ERROR_X: description". Lets users compare with `std::error_code`.
const std::error_category& cuda_category() noexcept;

/// The enumerator's name ("CUDA_ERROR_INVALID_HANDLE"), also with no driver loaded;
/// "CUDA_ERROR_UNKNOWN_CODE_<n>" for a code this build does not know.
std::string result_name(CUresult result);

/// Everything custream throws for a failed driver call, a missing driver or bad input.
///
/// The message names the failing call, the object it was about and the driver's error:
/// `cuStreamSynchronize(stream 0x5581… (device 0)) failed: CUDA_ERROR_ILLEGAL_ADDRESS (an
/// illegal memory access was encountered)`. Messages are built only on failure.
class Error : public std::runtime_error {
 public:
  /// An error from `call` about `subject` (may be empty) with driver result `result`;
  /// `detail` is appended when not empty. With an empty `call` the message is `detail`
  /// followed by the result's name in brackets (custream's own findings, e.g. no driver).
  Error(CUresult result, std::string call, std::string subject, std::string detail = {});

  /// The driver's result code (CUDA_ERROR_INVALID_VALUE for custream's own argument checks).
  CUresult result() const noexcept { return result_; }
  /// The result as a std::error_code in cuda_category().
  std::error_code code() const noexcept { return {static_cast<int>(result_), cuda_category()}; }
  /// "CUDA_ERROR_INVALID_HANDLE".
  const std::string& name() const noexcept { return name_; }
  /// The driver's description of the code (custream's copy when no driver is loaded).
  const std::string& description() const noexcept { return description_; }
  /// The failing call, e.g. "cuStreamSynchronize" or "custream::Stream::wrap"; empty for
  /// custream's own findings.
  const std::string& call() const noexcept { return call_; }
  /// The object the call was about, e.g. "stream 0x1 (device -1)"; may be empty.
  const std::string& subject() const noexcept { return subject_; }

 private:
  CUresult result_;
  std::string name_;
  std::string description_;
  std::string call_;
  std::string subject_;
};

}  // namespace custream

/// Makes a std::error_code in custream::cuda_category() from a CUresult. It lives in the
/// global namespace, beside CUresult, so that argument-dependent lookup finds it.
inline std::error_code make_error_code(CUresult result) noexcept {
  return {static_cast<int>(result), custream::cuda_category()};
}

namespace std {
/// CUresult converts implicitly to std::error_code, so `ec == CUDA_ERROR_NOT_READY` works.
template <>
struct is_error_code_enum<::cudaError_enum> : true_type {};
}  // namespace std

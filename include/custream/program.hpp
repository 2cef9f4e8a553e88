/// @file
/// custream::Program: CUDA C++ compiled at run time (NVRTC), loaded as a custream::Library.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "custream/code_target.hpp"
#include "custream/compile_cache.hpp"
#include "custream/compile_error.hpp"
#include "custream/library.hpp"
#include "custream/library_kernel.hpp"
#include "custream/program_image.hpp"
#include "custream/program_options.hpp"

namespace custream {

class Device;

/// CUDA C++ source compiled at run time with NVRTC, which custream loads with dlopen like the
/// driver ($CUSTREAM_NVRTC, else libnvrtc.so.13, .12, libnvrtc.so on the loader's path or in
/// the toolkit's lib64); nothing links it. Linked programs (ProgramOptions::needs_link) use
/// nvJitLink the same way ($CUSTREAM_NVJITLINK).
///
/// compile() picks the targets from the devices present (CodeTarget), compiles each once —
/// or takes it from the compile cache on disk (CompileCache::process_default() unless set) —
/// and loads it as a Library through Library's in-memory cache. Name expressions
/// (add_name_expression("scale<float>")) instantiate templates; their lowered names are
/// known after compiling, and kernel() takes either. A Program is a builder: not for use by
/// several threads at once.
class Program {
 public:
  /// The source `source`, named `name` in the compiler's messages ("name(LINE): error").
  explicit Program(std::string source, std::string name = "program.cu",
                   ProgramOptions options = {});

  /// Makes `text` includable as `#include "name"`. Returns *this.
  Program& add_header(std::string name, std::string text);
  /// Instantiates `expression` ("scale<float>", "&ns::kernel<3>") and records its lowered
  /// name. Returns *this.
  Program& add_name_expression(std::string expression);
  /// What to compile to (CodeTarget::automatic by default). Returns *this.
  Program& target(CodeTarget target);
  /// The compile cache to use (CompileCache::off() for none). Returns *this.
  Program& cache(CompileCache cache);
  /// The options. Returns *this.
  Program& options(ProgramOptions options);

  /// Compiles for one target ("compute_75": PTX; "sm_90": cubin) without loading it, through
  /// the compile cache. Needs no driver.
  /// @throws CompileError with the log; Error (CUDA_ERROR_NOT_FOUND) when NVRTC (or nvJitLink,
  /// or libcudadevrt.a) cannot be loaded, naming what was tried.
  ProgramImage build(const std::string& arch) const;

  /// Compiles for the devices present and loads the result (a cache hit on disk skips NVRTC).
  /// Compiling again after a change compiles anew. Returns the Library of device 0.
  /// @throws as build(); Error (CUDA_ERROR_NO_DEVICE) when the driver reports no device;
  /// Library's errors from loading.
  const Library& compile();

  /// The Library every device uses. @throws Error (CUDA_ERROR_NOT_PERMITTED) before compile(),
  /// or when devices of different architectures got different cubins (see library(Device)).
  const Library& library() const;
  /// The Library `device` uses. @throws Error (CUDA_ERROR_NOT_PERMITTED) before compile().
  const Library& library(const Device& device) const;
  /// The lowered name of a name expression given before compile().
  /// @throws Error (CUDA_ERROR_NOT_FOUND) naming the expression and listing those given.
  const std::string& lowered_name(const std::string& expression) const;
  /// The kernel `name` (a name expression, or a kernel's name in the image) of library().
  /// @throws as library() and Library::kernel().
  LibraryKernel kernel(const std::string& name) const;
  /// The kernel `name` for `device` (of library(device)). @throws as above.
  LibraryKernel kernel(const std::string& name, const Device& device) const;
  /// The images compile() loaded, one per target.
  const std::vector<ProgramImage>& images() const noexcept { return images_; }

  /// NVRTC's version (loads NVRTC). @throws Error (CUDA_ERROR_NOT_FOUND) when it is absent.
  static std::pair<int, int> nvrtc_version();
  /// The path of the NVRTC library loaded. @throws as nvrtc_version().
  static std::string nvrtc_library();

 private:
  std::string cache_key(const std::string& arch, const std::vector<std::string>& options) const;
  ProgramImage compile_image(const std::string& arch,
                             const std::vector<std::string>& options) const;
  void load_cubins(const std::vector<int>& archs);
  const std::string& resolve(const std::string& name) const;

  std::string source_;
  std::string name_;
  ProgramOptions options_;
  std::vector<std::pair<std::string, std::string>> headers_;
  std::vector<std::string> expressions_;
  CodeTarget target_ = CodeTarget::automatic;
  CompileCache cache_;
  std::vector<ProgramImage> images_;
  std::vector<Library> by_device_;  // the Library each device ordinal uses
  std::map<std::string, std::string> lowered_;
};

}  // namespace custream

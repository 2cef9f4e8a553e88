// custream::Program: NVRTC compilation for the devices present, through the compile cache,
// loaded as Libraries. Design: docs/design/jit.md (invariants 2-5).
#include "custream/program.hpp"

#include <algorithm>
#include <cstdlib>
#include <mutex>

#include "compile.hpp"
#include "custream/device.hpp"
#include "custream/driver.hpp"
#include "custream/error.hpp"
#include "nvrtc.hpp"
#include "payload.hpp"
#include "sha256.hpp"

namespace custream {
namespace {

[[noreturn]] void refuse(CUresult result, const std::string& what) {
  throw Error(result, {}, {}, "custream::Program refused: " + what);
}

// The SHA-256 of libcudadevrt.a's contents, read once per process (it is part of the key of
// programs that link it).
const std::string& device_runtime_digest(const std::string& path) {
  static std::mutex mutex;
  static std::map<std::string, std::string> digests;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = digests.find(path);
  if (it == digests.end()) {
    std::string data;
    detail::read_whole_file(path, &data);
    it = digests.emplace(path, detail::Sha256::hex(detail::Sha256::of(data))).first;
  }
  return it->second;
}

int device_arch(const Device& d) {
  const ComputeCapability cc = d.compute_capability();
  return cc.major * 10 + cc.minor;
}

// The architecture NVRTC compiles PTX for: the oldest device's, within NVRTC's range.
int ptx_arch(const detail::NvrtcApi& api, int oldest) {
  int n = 0;
  if (api.num_archs(&n) != 0 || n <= 0) return oldest;
  std::vector<int> archs(static_cast<std::size_t>(n));
  if (api.archs(archs.data()) != 0) return oldest;
  const auto [lo, hi] = std::minmax_element(archs.begin(), archs.end());
  return std::clamp(oldest, *lo, *hi);
}

// Whether the driver's JIT could not take NVRTC's PTX (a PTX ISA newer than the driver): a
// lazily loading driver accepts the image and writes a JIT error log, or (a driver that lists a
// library's kernels, CUDA 12.4) lists no kernel of a PTX that has entries.
bool jit_refused(const Library& lib, const ProgramImage& image) {
  if (!lib.jit_error_log().empty()) return true;
  constexpr int kListsKernels = 12040;
  return driver_info().version >= kListsKernels && lib.kernel_names().empty() &&
         image.bytes.find(".entry") != std::string::npos;
}

}  // namespace

Program::Program(std::string source, std::string name, ProgramOptions options)
    : source_(std::move(source)),
      name_(std::move(name)),
      options_(std::move(options)),
      cache_(CompileCache::process_default()) {}

Program& Program::add_header(std::string name, std::string text) {
  headers_.emplace_back(std::move(name), std::move(text));
  return *this;
}

Program& Program::add_name_expression(std::string expression) {
  expressions_.push_back(std::move(expression));
  return *this;
}

Program& Program::target(CodeTarget target) {
  target_ = target;
  return *this;
}

Program& Program::cache(CompileCache cache) {
  cache_ = std::move(cache);
  return *this;
}

Program& Program::options(ProgramOptions options) {
  options_ = std::move(options);
  return *this;
}

std::pair<int, int> Program::nvrtc_version() {
  const detail::NvrtcApi& api = detail::nvrtc();
  return {api.major, api.minor};
}

std::string Program::nvrtc_library() { return detail::nvrtc().library; }

// Invariant 3: everything that changes the output is in the key.
std::string Program::cache_key(const std::string& arch,
                               const std::vector<std::string>& options) const {
  detail::Sha256 h;
  h.field(name_);
  h.field(source_);
  h.field(std::to_string(headers_.size()));
  for (const auto& [name, text] : headers_) h.field(name), h.field(text);
  h.field(std::to_string(expressions_.size()));
  for (const std::string& e : expressions_) h.field(e);
  h.field(std::to_string(options.size()));
  for (const std::string& o : options) h.field(o);
  h.field(arch);
  h.field("NVRTC " + detail::nvrtc().version_text());
  if (options_.needs_link()) {
    h.field("nvJitLink " + detail::nvjitlink().version_text());
    h.field(options_.device_runtime ? device_runtime_digest(detail::device_runtime_library())
                                    : std::string());
  }
  return CompileCache::key_of({"program", detail::Sha256::hex(h.finish())});
}

ProgramImage Program::compile_image(const std::string& arch,
                                    const std::vector<std::string>& options) const {
  const std::string key = cache_key(arch, options);
  if (std::optional<std::string> payload = cache_.find(key)) {
    ProgramImage image;
    if (detail::decode_image(*payload, &image)) {
      image.from_cache = true;
      return image;
    }
  }
  const detail::SourceSet source{source_, name_, headers_, expressions_};
  const bool ptx = arch.rfind("compute_", 0) == 0;
  ProgramImage image;
  if (!options_.needs_link()) {
    image = detail::run_nvrtc(source, options,
                              ptx ? detail::NvrtcOutput::ptx : detail::NvrtcOutput::cubin, arch);
  } else {
    if (ptx)
      refuse(CUDA_ERROR_INVALID_VALUE, name_ +
                                           " is linked (-rdc or -dlto): it needs a "
                                           "cubin target (sm_XY), not " +
                                           arch);
    const bool lto = options_.link_time_optimization;
    image = detail::run_nvrtc(source, options,
                              lto ? detail::NvrtcOutput::ltoir : detail::NvrtcOutput::cubin, arch);
    image.bytes = detail::run_nvjitlink(name_, image.bytes, lto, arch, options_.device_runtime);
  }
  cache_.store(key, detail::encode_image(image));
  return image;
}

ProgramImage Program::build(const std::string& arch) const {
  std::vector<std::string> options = options_.nvrtc_options();
  options.push_back("--gpu-architecture=" + arch);
  return compile_image(arch, options);
}

void Program::load_cubins(const std::vector<int>& archs) {
  std::map<int, Library> by_arch;
  for (std::size_t d = 0; d < archs.size(); ++d) {
    auto it = by_arch.find(archs[d]);
    if (it == by_arch.end()) {
      images_.push_back(build("sm_" + std::to_string(archs[d])));
      const ProgramImage& image = images_.back();
      it = by_arch.emplace(archs[d], Library::from_image(image.bytes.data(), image.bytes.size()))
               .first;
    }
    by_device_[d] = it->second;
  }
}

const Library& Program::compile() {
  const detail::NvrtcApi& api = detail::nvrtc();  // before the driver (see program.hpp)
  const int count = Device::count();
  if (count == 0) refuse(CUDA_ERROR_NO_DEVICE, "compile() for no device: the driver reports none");
  std::vector<int> archs;
  for (int d = 0; d < count; ++d) archs.push_back(device_arch(Device(d)));
  CodeTarget mode = target_;
  if (options_.needs_link() && mode == CodeTarget::ptx) {
    refuse(CUDA_ERROR_INVALID_VALUE, name_ +
                                         " is linked (-rdc or -dlto), which needs cubins: "
                                         "CodeTarget::ptx cannot serve it");
  }
  if (mode == CodeTarget::automatic) {  // invariant 4
    const bool old_driver = driver_info().version < api.version_number();
    mode = options_.needs_link() || old_driver ? CodeTarget::cubin : CodeTarget::ptx;
  }
  images_.clear();
  lowered_.clear();
  by_device_.assign(static_cast<std::size_t>(count), Library());
  if (mode == CodeTarget::ptx) {
    const int oldest = *std::min_element(archs.begin(), archs.end());
    ProgramImage image = build("compute_" + std::to_string(ptx_arch(api, oldest)));
    Library lib;
    try {
      lib = Library::from_image(image.bytes.data(), image.bytes.size());
    } catch (const Error& e) {
      const bool ptx_refused =
          e.result() == CUDA_ERROR_UNSUPPORTED_PTX_VERSION || e.result() == CUDA_ERROR_INVALID_PTX;
      if (target_ != CodeTarget::automatic || !ptx_refused) throw;
    }
    if (lib && (target_ != CodeTarget::automatic || !jit_refused(lib, image))) {
      images_.push_back(std::move(image));
      std::fill(by_device_.begin(), by_device_.end(), lib);
    } else {
      mode = CodeTarget::cubin;  // the driver's JIT is older than NVRTC
    }
  }
  if (mode == CodeTarget::cubin) load_cubins(archs);
  for (const auto& [expression, lowered] : images_.front().lowered_names) {
    lowered_[expression] = lowered;
  }
  return by_device_.front();
}

const Library& Program::library() const {
  if (by_device_.empty()) refuse(CUDA_ERROR_NOT_PERMITTED, name_ + " is not compiled yet");
  for (const Library& lib : by_device_) {
    if (lib != by_device_.front()) {
      refuse(CUDA_ERROR_NOT_PERMITTED,
             name_ + " has a cubin per device architecture: ask library(device)");
    }
  }
  return by_device_.front();
}

const Library& Program::library(const Device& device) const {
  if (by_device_.empty()) refuse(CUDA_ERROR_NOT_PERMITTED, name_ + " is not compiled yet");
  return by_device_.at(static_cast<std::size_t>(device.ordinal()));
}

const std::string& Program::resolve(const std::string& name) const {
  auto it = lowered_.find(name);
  return it != lowered_.end() ? it->second : name;
}

const std::string& Program::lowered_name(const std::string& expression) const {
  auto it = lowered_.find(expression);
  if (it == lowered_.end()) {
    std::string given;
    for (const std::string& e : expressions_) given += (given.empty() ? "" : ", ") + e;
    throw Error(CUDA_ERROR_NOT_FOUND, {}, {},
                "custream::Program " + name_ + " has no lowered name for \"" + expression + "\" (" +
                    (by_device_.empty() ? "not compiled yet; " : "") +
                    "name expressions given: " + (given.empty() ? "none" : given) + ")");
  }
  return it->second;
}

LibraryKernel Program::kernel(const std::string& name) const {
  return library().kernel(resolve(name));
}

LibraryKernel Program::kernel(const std::string& name, const Device& device) const {
  return library(device).kernel(resolve(name));
}

}  // namespace custream

// One NVRTC compilation: the program, its headers, its name expressions; the output and the
// log. Design: docs/design/jit.md (invariant 4).
#include "compile.hpp"

#include "custream/compile_error.hpp"
#include "custream/error.hpp"
#include "nvrtc.hpp"

namespace custream::detail {
namespace {

// An nvrtcProgram destroyed on every path.
struct ProgramHandle {
  const NvrtcApi& api;
  nvrtcProgram handle = nullptr;
  ~ProgramHandle() {
    if (handle != nullptr) api.destroy(&handle);
  }
};

[[noreturn]] void nvrtc_failed(const NvrtcApi& api, nvrtcResult r, const char* call,
                               const std::string& program) {
  throw Error(CUDA_ERROR_UNKNOWN, call, program,
              std::string("NVRTC ") + api.version_text() + " (" + api.library + ") answered " +
                  api.error_string(r));
}

std::string program_log(const NvrtcApi& api, nvrtcProgram p) {
  std::size_t size = 0;
  if (api.log_size(p, &size) != 0 || size <= 1) return {};
  std::string log(size, '\0');
  if (api.log(p, log.data()) != 0) return {};
  log.resize(size - 1);  // the NUL NVRTC counts
  return log;
}

// Copies NVRTC's output of the kind asked for into `image`.
void take_output(const NvrtcApi& api, nvrtcProgram p, NvrtcOutput output,
                 const std::string& program, ProgramImage* image) {
  using Size = nvrtcResult (*)(nvrtcProgram, std::size_t*);
  using Data = nvrtcResult (*)(nvrtcProgram, char*);
  Size size_fn = api.ptx_size;  // the PTX with its NUL
  Data data_fn = api.ptx;
  const char* what = "nvrtcGetPTX";
  if (output == NvrtcOutput::cubin)
    size_fn = api.cubin_size, data_fn = api.cubin, what = "nvrtcGetCUBIN";
  if (output == NvrtcOutput::ltoir)
    size_fn = api.ltoir_size, data_fn = api.ltoir, what = "nvrtcGetLTOIR";
  if (size_fn == nullptr || data_fn == nullptr) {
    throw Error(CUDA_ERROR_NOT_SUPPORTED, {}, {},
                "NVRTC " + api.version_text() + " cannot output LTO-IR (NVRTC >= 12.0)");
  }
  std::size_t size = 0;
  if (nvrtcResult r = size_fn(p, &size)) nvrtc_failed(api, r, what, program);
  image->bytes.assign(size, '\0');
  if (nvrtcResult r = data_fn(p, image->bytes.data())) nvrtc_failed(api, r, what, program);
  image->ptx = output == NvrtcOutput::ptx;
}

}  // namespace

std::string joined(const std::vector<std::string>& options) {
  std::string out;
  for (const std::string& o : options) out += (out.empty() ? "" : " ") + o;
  return out;
}

ProgramImage run_nvrtc(const SourceSet& source, const std::vector<std::string>& options,
                       NvrtcOutput output, const std::string& arch) {
  const NvrtcApi& api = nvrtc();
  std::vector<const char*> header_texts, header_names, option_ptrs;
  for (const auto& [name, text] : source.headers) {
    header_names.push_back(name.c_str());
    header_texts.push_back(text.c_str());
  }
  for (const std::string& o : options) option_ptrs.push_back(o.c_str());
  ProgramHandle p{api};
  if (nvrtcResult r = api.create(&p.handle, source.text.c_str(), source.name.c_str(),
                                 static_cast<int>(header_texts.size()), header_texts.data(),
                                 header_names.data())) {
    nvrtc_failed(api, r, "nvrtcCreateProgram", source.name);
  }
  for (const std::string& e : source.expressions) {
    if (nvrtcResult r = api.add_name(p.handle, e.c_str())) {
      nvrtc_failed(api, r, "nvrtcAddNameExpression", source.name + ": " + e);
    }
  }
  const nvrtcResult compiled =
      api.compile(p.handle, static_cast<int>(option_ptrs.size()), option_ptrs.data());
  ProgramImage image;
  image.arch = arch;
  image.log = program_log(api, p.handle);
  if (compiled != 0) {
    throw CompileError("nvrtcCompileProgram", source.name,
                       std::string(api.error_string(compiled)) + "\n" + image.log, joined(options),
                       arch, "NVRTC " + api.version_text());
  }
  for (const std::string& e : source.expressions) {
    const char* lowered = nullptr;
    if (api.lowered_name(p.handle, e.c_str(), &lowered) != 0 || lowered == nullptr) {
      throw CompileError("nvrtcGetLoweredName", source.name,
                         "the name expression \"" + e +
                             "\" names no __global__ function or __device__ variable of the "
                             "program\n" +
                             image.log,
                         joined(options), arch, "NVRTC " + api.version_text());
    }
    image.lowered_names.emplace_back(e, lowered);
  }
  take_output(api, p.handle, output, source.name, &image);
  return image;
}

}  // namespace custream::detail

// Modules, functions and kernel launches. Kernels cannot run on the CPU: a launch executes, in
// stream order, the CPU implementation registered for its name (emu_control.h), or nothing.
#include <cctype>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>

#include "emu.hpp"
#include "emu_control.h"

#define EMU_EXPORT extern "C" __attribute__((visibility("default")))

namespace emu {

/// A CPU implementation registered for a kernel name.
struct KernelImpl {
  custream_emu_kernel_fn fn = nullptr;
  void* user = nullptr;
  std::vector<size_t> param_sizes;  // empty: from the PTX
  bool sizes_given = false;
};

struct KernelLaunch {
  std::string name;
  std::shared_ptr<const KernelImpl> impl;  // null: a no-op
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  unsigned shared_bytes = 0;
  std::vector<std::vector<unsigned char>> args;  // copies taken at launch
};

namespace {

struct Module;

struct Function {
  Module* module = nullptr;
  std::string name;
  std::vector<size_t> param_sizes;
  bool sizes_known = false;  // from the PTX
};

struct Module {
  Context* ctx = nullptr;
  bool ptx = false;                                    // a binary image resolves any name
  std::map<std::string, std::vector<size_t>> entries;  // PTX: name -> parameter sizes
  std::map<std::string, std::unique_ptr<Function>> functions;
};

struct Kernels {
  std::mutex mu;  // lock order: State::mu -> Kernels::mu
  std::map<std::string, std::shared_ptr<const KernelImpl>> impls;
  std::map<std::string, long> runs;
};

Kernels& kernels() {
  static Kernels* k = new Kernels;  // leaked (invariant 5)
  return *k;
}

std::unordered_set<const void*>& functions() {
  static auto* f = new std::unordered_set<const void*>;  // guarded by State::mu; leaked
  return *f;
}

bool is_ident(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$';
}

/// Size in bytes of one `.param` declaration: `.param .u32 n`, `.param .align 8 .b8 s[16]`,
/// `.param .u64 .ptr.global.align 8 p`. 0 when it cannot be read.
size_t param_size(const std::string& decl) {
  size_t elem = 0;
  for (size_t i = 0; i + 2 < decl.size(); ++i) {
    if (decl[i] != '.' || !std::strchr("usbf", decl[i + 1])) continue;
    size_t j = i + 2, bits = 0;
    while (j < decl.size() && std::isdigit(static_cast<unsigned char>(decl[j])))
      bits = bits * 10 + static_cast<size_t>(decl[j++] - '0');
    if (j > i + 2 && (j == decl.size() || !is_ident(decl[j])) &&
        (bits == 8 || bits == 16 || bits == 32 || bits == 64)) {
      elem = bits / 8;
      break;
    }
  }
  const size_t open = decl.find('[');
  if (open == std::string::npos) return elem;
  return elem * static_cast<size_t>(std::strtoull(decl.c_str() + open + 1, nullptr, 10));
}

/// The kernels of PTX text: each `.entry name(params)` with its parameter sizes.
std::map<std::string, std::vector<size_t>> ptx_entries(const char* text) {
  std::map<std::string, std::vector<size_t>> out;
  const std::string s = text;
  for (size_t at = s.find(".entry"); at != std::string::npos; at = s.find(".entry", at + 6)) {
    size_t i = at + 6;
    if (i < s.size() && is_ident(s[i])) continue;  // e.g. ".entryfoo"
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    const size_t b = i;
    while (i < s.size() && is_ident(s[i])) ++i;
    if (i == b) continue;
    std::vector<size_t>& sizes = out[s.substr(b, i - b)];
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    if (i >= s.size() || s[i] != '(') continue;
    const size_t close = s.find(')', i);
    if (close == std::string::npos) continue;
    const std::string list = s.substr(i + 1, close - i - 1);
    size_t p = 0;
    while (p < list.size()) {
      size_t comma = list.find(',', p);
      if (comma == std::string::npos) comma = list.size();
      const std::string decl = list.substr(p, comma - p);
      if (decl.find(".param") != std::string::npos) sizes.push_back(param_size(decl));
      p = comma + 1;
    }
  }
  return out;
}

/// An ELF (cubin) or fatbin image; anything else is read as NUL-terminated PTX text. Bytes are
/// compared one by one so a short text is never read past its end.
bool binary_image(const void* image) {
  const auto* b = static_cast<const unsigned char*>(image);
  const bool elf = b[0] == 0x7f && b[1] == 'E' && b[2] == 'L' && b[3] == 'F';
  const bool fatbin = b[0] == 0x50 && b[1] == 0xED && b[2] == 0x55 && b[3] == 0xBA;  // 0xBA55ED50
  return elf || fatbin;
}

CUresult load(CUmodule* out, const void* image) {
  if (!out || !image) return CUDA_ERROR_INVALID_VALUE;
  *out = nullptr;
  if (!current_context()) return CUDA_ERROR_INVALID_CONTEXT;
  auto m = std::make_unique<Module>();
  if (!binary_image(image)) {
    m->ptx = true;
    m->entries = ptx_entries(static_cast<const char*>(image));
    if (m->entries.empty() && std::strstr(static_cast<const char*>(image), ".version") == nullptr)
      return CUDA_ERROR_INVALID_IMAGE;  // neither PTX nor a binary image
  }
  State& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  if (CUresult r = usable_current_context(&m->ctx)) return r;
  s.modules.insert(m.get());
  s.live.fetch_add(1);
  *out = reinterpret_cast<CUmodule>(m.release());
  return CUDA_SUCCESS;
}

CUresult module_load_data(CUmodule* m, const void* image) {
  EMU_ENTER("cuModuleLoadData");
  return load(m, image);
}

// JIT options: logs come back empty (nothing is compiled); the sizes written back are 0.
CUresult module_load_data_ex(CUmodule* m, const void* image, unsigned int n, CUjit_option* options,
                             void** values) {
  EMU_ENTER("cuModuleLoadDataEx");
  if (n > 0 && (!options || !values)) return CUDA_ERROR_INVALID_VALUE;
  const CUresult r = load(m, image);
  for (unsigned i = 0; i < n; ++i) {
    switch (options[i]) {
      case CU_JIT_INFO_LOG_BUFFER:
      case CU_JIT_ERROR_LOG_BUFFER:
        if (values[i]) static_cast<char*>(values[i])[0] = '\0';
        break;
      case CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES:
      case CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES:
        values[i] = nullptr;  // the size in bytes written back: 0
        break;
      default:
        break;
    }
  }
  return r;
}

Module* as_module(CUmodule h) {
  return valid(state().modules, h) ? reinterpret_cast<Module*>(h) : nullptr;
}

CUresult module_unload(CUmodule h) {
  EMU_ENTER("cuModuleUnload");
  State& s = state();
  std::unique_ptr<Module> m;
  {
    std::lock_guard<std::mutex> lk(s.mu);
    m.reset(as_module(h));
    if (!m) return CUDA_ERROR_INVALID_HANDLE;
    s.modules.erase(m.get());
    for (const auto& f : m->functions) functions().erase(f.second.get());
    s.live.fetch_sub(1);
  }
  return CUDA_SUCCESS;  // launches in flight hold copies, never the module
}

CUresult module_get_function(CUfunction* out, CUmodule h, const char* name) {
  EMU_ENTER("cuModuleGetFunction");
  if (!out || !name) return CUDA_ERROR_INVALID_VALUE;
  *out = nullptr;
  std::lock_guard<std::mutex> lk(state().mu);
  Module* m = as_module(h);
  if (!m) return CUDA_ERROR_INVALID_HANDLE;
  auto& f = m->functions[name];
  if (!f) {
    auto e = m->entries.find(name);
    if (m->ptx && e == m->entries.end()) {
      m->functions.erase(name);
      return CUDA_ERROR_NOT_FOUND;
    }
    f = std::make_unique<Function>();
    f->module = m;
    f->name = name;
    if (m->ptx) {
      f->param_sizes = e->second;
      f->sizes_known = true;
    }
    functions().insert(f.get());
  }
  *out = reinterpret_cast<CUfunction>(f.get());
  return CUDA_SUCCESS;
}

CUresult launch_kernel(CUfunction hf, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                       unsigned by, unsigned bz, unsigned shared_bytes, CUstream hs, void** params,
                       void** extra) {
  EMU_ENTER("cuLaunchKernel");
  State& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  if (!valid(functions(), hf)) return CUDA_ERROR_INVALID_HANDLE;
  const Function& f = *reinterpret_cast<const Function*>(hf);
  Stream* st = nullptr;
  if (CUresult r = resolve_stream(hs, &st)) return r;
  // Loaded in another context: refused. A green context uses the primary context's modules,
  // and the primary context its green contexts' (resource_owner).
  if (resource_owner(f.module->ctx) != resource_owner(st->ctx)) return CUDA_ERROR_INVALID_HANDLE;
  if (!gx || !gy || !gz || !bx || !by || !bz) return CUDA_ERROR_INVALID_VALUE;
  if (static_cast<unsigned long long>(bx) * by * bz > 1024 || bz > 64 || gy > 65535 || gz > 65535)
    return CUDA_ERROR_INVALID_VALUE;
  if (shared_bytes > 227 * 1024) return CUDA_ERROR_INVALID_VALUE;
  if (extra) return CUDA_ERROR_NOT_SUPPORTED;  // packed arguments are not emulated
  auto k = std::make_shared<KernelLaunch>();
  k->name = f.name;
  k->grid[0] = gx, k->grid[1] = gy, k->grid[2] = gz;
  k->block[0] = bx, k->block[1] = by, k->block[2] = bz;
  k->shared_bytes = shared_bytes;
  {
    Kernels& ks = kernels();
    std::lock_guard<std::mutex> klk(ks.mu);
    auto it = ks.impls.find(f.name);
    if (it != ks.impls.end()) k->impl = it->second;
  }
  if (k->impl) {
    const std::vector<size_t>* sizes = k->impl->sizes_given ? &k->impl->param_sizes
                                       : f.sizes_known      ? &f.param_sizes
                                                            : nullptr;
    if (!sizes) return CUDA_ERROR_NOT_SUPPORTED;  // cubin/fatbin: register the sizes
    if (!sizes->empty() && !params) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizes->size(); ++i) {
      const auto* p = static_cast<const unsigned char*>(params[i]);
      if (!p && (*sizes)[i]) return CUDA_ERROR_INVALID_VALUE;
      k->args.emplace_back(p, p + (*sizes)[i]);
    }
  }
  Work w;
  w.type = CU_GRAPH_NODE_TYPE_KERNEL;
  w.kernel = std::move(k);
  return enqueue(st, std::move(w));
}

}  // namespace

void release_context_modules(Context* ctx) {
  State& s = state();
  for (auto it = s.modules.begin(); it != s.modules.end();) {
    auto* m = static_cast<Module*>(const_cast<void*>(*it));
    if (m->ctx != ctx) {
      ++it;
      continue;
    }
    for (const auto& f : m->functions) functions().erase(f.second.get());
    it = s.modules.erase(it);
    s.live.fetch_sub(1);
    delete m;  // launches in flight hold copies, never the module
  }
}

void run_kernel(const KernelLaunch& k) {
  if (k.impl) {
    std::vector<void*> params;
    for (const auto& a : k.args) params.push_back(const_cast<unsigned char*>(a.data()));
    custream_emu_kernel_launch l{};
    l.name = k.name.c_str();
    std::memcpy(l.grid, k.grid, sizeof l.grid);
    std::memcpy(l.block, k.block, sizeof l.block);
    l.shared_bytes = k.shared_bytes;
    l.params = params.empty() ? nullptr : params.data();
    l.param_count = static_cast<unsigned>(params.size());
    l.user = k.impl->user;
    k.impl->fn(&l);
  }
  Kernels& ks = kernels();
  std::lock_guard<std::mutex> lk(ks.mu);
  ++ks.runs[k.name];
}

void register_module_entries(std::vector<Entry>& out) {
  out.insert(out.end(), {
                            EMU_ENTRY(cuModuleLoadData, 2000, module_load_data),
                            EMU_ENTRY(cuModuleLoadDataEx, 2010, module_load_data_ex),
                            EMU_ENTRY(cuModuleUnload, 2000, module_unload),
                            EMU_ENTRY(cuModuleGetFunction, 2000, module_get_function),
                            EMU_ENTRY(cuLaunchKernel, 4000, launch_kernel),
                        });
}

}  // namespace emu

EMU_EXPORT int custream_emu_register_kernel(const char* name, custream_emu_kernel_fn fn, void* user,
                                            const size_t* param_sizes, unsigned param_count) {
  if (!name || (!param_sizes && param_count != 0)) return -1;
  emu::Kernels& ks = emu::kernels();
  std::lock_guard<std::mutex> lk(ks.mu);
  if (!fn) {
    ks.impls.erase(name);
    return 0;
  }
  auto impl = std::make_shared<emu::KernelImpl>();
  impl->fn = fn;
  impl->user = user;
  if (param_sizes) {  // given (none when param_count is 0); NULL: from the PTX
    impl->param_sizes.assign(param_sizes, param_sizes + param_count);
    impl->sizes_given = true;
  }
  ks.impls[name] = std::move(impl);
  return 0;
}

EMU_EXPORT long custream_emu_kernel_runs(const char* name) {
  if (!name) return 0;
  emu::Kernels& ks = emu::kernels();
  std::lock_guard<std::mutex> lk(ks.mu);
  auto it = ks.runs.find(name);
  return it == ks.runs.end() ? 0 : it->second;
}

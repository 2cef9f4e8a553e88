// Context-independent loading: libraries (CUlibrary) and their kernels (CUkernel), loaded into a
// context lazily (invariants 10 and 11 of emu.hpp). The rules were measured on an H200, driver
// 580 (CUDA 13.0), with the default lazy module loading:
//  - cuLibraryLoadData needs no context and does not refuse a bad image: garbage or PTX that
//    does not compile loads (the JIT error log says why); cuLibraryGetKernel, cuLibraryGetModule
//    and cuLibraryGetGlobal then answer CUDA_ERROR_INVALID_IMAGE / CUDA_ERROR_INVALID_PTX, and
//    the library counts 0 kernels.
//  - Loading into a context (cuKernelGetFunction, a launch of a CUkernel) is allowed while a
//    stream captures, in every mode, and leaves the capture valid; cuLibraryUnload during a
//    global capture (any thread's), or a thread-local one of the calling thread, answers
//    CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates it, unless the calling thread's
//    mode is relaxed (relaxed captures: allowed); the library stays loaded.
//  - After cuLibraryUnload, launching a function of the library answers
//    CUDA_ERROR_INVALID_HANDLE; most other calls on its kernels or on the library crash the
//    driver (SIGSEGV; unloading twice aborts), and so may launching a graph executable that
//    holds a launch of its kernels. The emulator answers CUDA_ERROR_INVALID_HANDLE.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "emu.hpp"
#include "module.hpp"

namespace emu {
namespace {

constexpr int kDefaultDynamicShared = 48 * 1024;
constexpr int kSharedOptIn = 232448;  // CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
// Not known without compiling: what the H200 gives small kernels.
constexpr int kRegistersPerThread = 8;
constexpr int kBinaryVersion = 90;  // compute capability 9.0

Library* as_library(CUlibrary h) {
  return valid(state().libraries, h) ? reinterpret_cast<Library*>(h) : nullptr;
}

Kernel* as_kernel(CUkernel h) {
  return valid(state().kernels, h) ? reinterpret_cast<Kernel*>(h) : nullptr;
}

bool valid_device(CUdevice dev) { return dev >= 0 && dev < state().device_count; }

/// Device memory for a variable: zeros, then its initializer.
CUdeviceptr allocate_variable(const PtxGlobal& g) {
  const size_t bytes = (std::max<size_t>(g.bytes, 1) + 255) / 256 * 256;
  void* p = std::aligned_alloc(256, bytes);
  if (!p) return 0;
  std::memset(p, 0, bytes);
  if (!g.init.empty()) std::memcpy(p, g.init.data(), g.init.size());
  return reinterpret_cast<CUdeviceptr>(p);
}

void free_variable(CUdeviceptr p) { std::free(reinterpret_cast<void*>(p)); }

Kernel* make_kernel(Library* lib, PtxEntry entry, bool sizes_known) {
  auto k = std::make_unique<Kernel>();
  k->library = lib;
  k->entry = std::move(entry);
  k->sizes_known = sizes_known;
  Kernel* raw = k.get();
  lib->kernels.push_back(std::move(k));
  state().kernels.insert(raw);
  return raw;
}

/// The library loaded into `owner` (a resource owner), made on first use (mu held).
CUresult load_into(Library* lib, Context* owner, LibraryContext** out) {
  auto it = lib->contexts.find(owner);
  if (it == lib->contexts.end()) {
    LibraryContext lc;
    for (const PtxGlobal& g : lib->image.globals) {
      if (g.managed) continue;  // one for every device (Library::managed)
      const CUdeviceptr p = allocate_variable(g);
      if (!p) {
        for (const auto& v : lc.globals) free_variable(v.second);
        return CUDA_ERROR_OUT_OF_MEMORY;
      }
      lc.globals[g.name] = p;
    }
    auto m = std::make_unique<Module>();
    m->ctx = owner;
    m->ptx = lib->image.kind == Image::kPtx;
    m->ptx_version = lib->image.ptx_version;
    for (const PtxEntry& e : lib->image.entries) {
      m->entries[e.name] = e.param_sizes;
      m->static_shared[e.name] = e.static_shared;
    }
    m->library = lib;
    lc.module = m.release();
    state().modules.insert(lc.module);  // not counted: the library is (invariant 10)
    it = lib->contexts.emplace(owner, std::move(lc)).first;
  }
  *out = &it->second;
  return CUDA_SUCCESS;
}

/// The calling thread's usable current context's resource owner (mu held).
CUresult current_owner(Context** out) {
  Context* c = nullptr;
  if (CUresult r = usable_current_context(&c)) return r;
  *out = resource_owner(c);
  return CUDA_SUCCESS;
}

// ---- loading ----

CUresult load_library(CUlibrary* out, const void* code, CUjit_option* jit_options,
                      void** jit_values, unsigned num_jit, CUlibraryOption* options,
                      void** option_values, unsigned num_options) {
  if (!out || !code) return CUDA_ERROR_INVALID_VALUE;
  if (num_jit > 0 && (!jit_options || !jit_values)) return CUDA_ERROR_INVALID_VALUE;
  // NULL arrays with a count: the H200 crashes.
  if (num_options > 0 && (!options || !option_values)) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned i = 0; i < num_options; ++i) {
    const int option = enum_value(options[i]);
    if (option != CU_LIBRARY_HOST_UNIVERSAL_FUNCTION_AND_DATA_TABLE &&
        option != CU_LIBRARY_BINARY_IS_PRESERVED)
      return CUDA_ERROR_INVALID_VALUE;  // nothing is kept: the image is read now
  }
  *out = nullptr;
  auto lib = std::make_unique<Library>();
  lib->image = read_image(code);
  // A bad image loads: the log says why, the error comes with the first use (as the H200).
  write_jit_logs(num_jit, jit_options, jit_values, lib->image.log);
  for (const PtxGlobal& g : lib->image.globals) {
    if (!g.managed) continue;
    const CUdeviceptr p = allocate_variable(g);
    if (!p) {
      for (const auto& v : lib->managed) free_variable(v.second);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    lib->managed[g.name] = p;
  }
  State& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  for (const PtxEntry& e : lib->image.entries) make_kernel(lib.get(), e, true);
  s.libraries.insert(lib.get());
  s.live.fetch_add(1);
  *out = reinterpret_cast<CUlibrary>(lib.release());
  return CUDA_SUCCESS;
}

CUresult library_load_data(CUlibrary* library, const void* code, CUjit_option* jit_options,
                           void** jit_values, unsigned int num_jit, CUlibraryOption* options,
                           void** option_values, unsigned int num_options) {
  EMU_ENTER("cuLibraryLoadData");
  return load_library(library, code, jit_options, jit_values, num_jit, options, option_values,
                      num_options);
}

CUresult library_load_from_file(CUlibrary* library, const char* file, CUjit_option* jit_options,
                                void** jit_values, unsigned int num_jit, CUlibraryOption* options,
                                void** option_values, unsigned int num_options) {
  EMU_ENTER("cuLibraryLoadFromFile");
  if (!library || !file) return CUDA_ERROR_INVALID_VALUE;
  FILE* f = std::fopen(file, "rb");
  if (!f) return CUDA_ERROR_FILE_NOT_FOUND;
  std::string bytes;
  char buf[65536];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) bytes.append(buf, n);
  std::fclose(f);
  bytes.append(4, '\0');  // NUL-terminated text; binary_image reads 4 bytes
  return load_library(library, bytes.data(), jit_options, jit_values, num_jit, options,
                      option_values, num_options);
}

CUresult library_unload(CUlibrary h) {
  EMU_ENTER("cuLibraryUnload");
  State& s = state();
  std::unique_lock<std::mutex> lk(s.mu);
  std::unique_ptr<Library> lib(as_library(h));
  if (!lib) return CUDA_ERROR_INVALID_HANDLE;  // also unloaded twice (the H200 aborts)
  if (refused_by_capture()) {
    (void)lib.release();
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  // Every handle goes now; the variables once the work submitted so far has completed.
  s.libraries.erase(lib.get());
  s.live.fetch_sub(1);
  lib->alive.reset();  // graphs holding its launches: refused from now (invariant 11)
  for (const auto& k : lib->kernels) s.kernels.erase(k.get());
  std::vector<std::unique_ptr<Module>> modules;
  std::vector<CUdeviceptr> memory;
  std::vector<SignalPtr> tails;
  for (auto& [owner, lc] : lib->contexts) {
    for (const auto& f : lc.module->functions) functions().erase(f.second.get());
    s.modules.erase(lc.module);
    modules.emplace_back(lc.module);
    for (const auto& v : lc.globals) memory.push_back(v.second);
    for (Context* c : covered_contexts(owner)) {
      if (c->legacy->tail) tails.push_back(c->legacy->tail);
      for (Stream* st : c->streams)
        if (st->tail) tails.push_back(st->tail);
    }
  }
  for (const auto& v : lib->managed) memory.push_back(v.second);
  if (!memory.empty()) {
    s.cv.wait(lk, [&] {
      for (const auto& t : tails)
        if (!t->done) return false;
      return true;
    });
  }
  lk.unlock();
  for (CUdeviceptr p : memory) free_variable(p);
  return CUDA_SUCCESS;  // launches hold copies, never the library (invariant 11)
}

// ---- kernels of a library ----

CUresult library_get_kernel(CUkernel* out, CUlibrary h, const char* name) {
  EMU_ENTER("cuLibraryGetKernel");
  if (!out || !name) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(state().mu);
  Library* lib = as_library(h);
  if (!lib) return CUDA_ERROR_INVALID_HANDLE;
  if (lib->image.error) return lib->image.error;  // a bad image, reported now (as the H200)
  Kernel* k = library_kernel(lib, name);
  if (!k) return CUDA_ERROR_NOT_FOUND;
  *out = reinterpret_cast<CUkernel>(k);
  return CUDA_SUCCESS;
}

CUresult library_get_kernel_count(unsigned int* count, CUlibrary h) {
  EMU_ENTER("cuLibraryGetKernelCount");
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(state().mu);
  Library* lib = as_library(h);
  if (!lib) return CUDA_ERROR_INVALID_HANDLE;
  *count = static_cast<unsigned>(lib->kernels.size());  // a bad image: 0
  return CUDA_SUCCESS;
}

// The H200 lists the kernels last declared first; so does the emulator.
CUresult library_enumerate_kernels(CUkernel* out, unsigned int n, CUlibrary h) {
  EMU_ENTER("cuLibraryEnumerateKernels");
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(state().mu);
  Library* lib = as_library(h);
  if (!lib) return CUDA_ERROR_INVALID_HANDLE;
  const size_t count = lib->kernels.size();
  for (size_t i = 0; i < count && i < n; ++i)
    out[i] = reinterpret_cast<CUkernel>(lib->kernels[count - 1 - i].get());
  return CUDA_SUCCESS;
}

CUresult library_get_module(CUmodule* out, CUlibrary h) {
  EMU_ENTER("cuLibraryGetModule");
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(state().mu);
  Library* lib = as_library(h);
  if (!lib) return CUDA_ERROR_INVALID_HANDLE;
  if (lib->image.error) return lib->image.error;
  Context* owner = nullptr;
  if (CUresult r = current_owner(&owner)) return r;
  LibraryContext* lc = nullptr;
  if (CUresult r = load_into(lib, owner, &lc)) return r;
  *out = reinterpret_cast<CUmodule>(lc->module);
  return CUDA_SUCCESS;
}

const PtxGlobal* find_global(const Library& lib, const char* name) {
  for (const PtxGlobal& g : lib.image.globals)
    if (g.name == name) return &g;
  return nullptr;
}

// The variable in the current context (a managed one: the same for every context).
CUresult library_get_global(CUdeviceptr* dptr, size_t* bytes, CUlibrary h, const char* name) {
  EMU_ENTER("cuLibraryGetGlobal");
  if ((!dptr && !bytes) || !name) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(state().mu);
  Library* lib = as_library(h);
  if (!lib) return CUDA_ERROR_INVALID_HANDLE;
  if (lib->image.error) return lib->image.error;
  Context* owner = nullptr;
  if (CUresult r = current_owner(&owner)) return r;
  const PtxGlobal* g = find_global(*lib, name);
  if (!g) {  // a kernel's name: CUDA_ERROR_INVALID_VALUE (as the H200)
    for (const PtxEntry& e : lib->image.entries)
      if (e.name == name) return CUDA_ERROR_INVALID_VALUE;
    return CUDA_ERROR_NOT_FOUND;
  }
  LibraryContext* lc = nullptr;
  if (CUresult r = load_into(lib, owner, &lc)) return r;
  if (dptr) *dptr = g->managed ? lib->managed[g->name] : lc->globals[g->name];
  if (bytes) *bytes = g->bytes;
  return CUDA_SUCCESS;
}

// Managed variables: one for the whole process, no context needed.
CUresult library_get_managed(CUdeviceptr* dptr, size_t* bytes, CUlibrary h, const char* name) {
  EMU_ENTER("cuLibraryGetManaged");
  if ((!dptr && !bytes) || !name) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(state().mu);
  Library* lib = as_library(h);
  if (!lib) return CUDA_ERROR_INVALID_HANDLE;
  if (lib->image.error) return lib->image.error;
  const PtxGlobal* g = find_global(*lib, name);
  if (!g || !g->managed) return CUDA_ERROR_NOT_FOUND;
  if (dptr) *dptr = lib->managed[g->name];
  if (bytes) *bytes = g->bytes;
  return CUDA_SUCCESS;
}

CUresult kernel_get_function(CUfunction* out, CUkernel h) {
  EMU_ENTER("cuKernelGetFunction");
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(state().mu);
  Kernel* k = as_kernel(h);
  if (!k) return CUDA_ERROR_INVALID_HANDLE;  // also unloaded (the H200 crashes)
  Context* c = nullptr;
  if (CUresult r = usable_current_context(&c)) return r;
  Function* f = nullptr;
  if (CUresult r = kernel_function(k, c, &f)) return r;
  *out = reinterpret_cast<CUfunction>(f);
  return CUDA_SUCCESS;
}

CUresult kernel_get_name(const char** name, CUkernel h) {
  EMU_ENTER("cuKernelGetName");
  if (!name || !h) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(state().mu);
  Kernel* k = as_kernel(h);
  if (!k) return CUDA_ERROR_INVALID_HANDLE;  // unloaded (the H200 reads freed memory)
  *name = k->entry.name.c_str();
  return CUDA_SUCCESS;
}

CUresult kernel_get_library(CUlibrary* out, CUkernel h) {
  EMU_ENTER("cuKernelGetLibrary");
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(state().mu);
  Kernel* k = as_kernel(h);
  if (!k) return CUDA_ERROR_INVALID_HANDLE;
  *out = reinterpret_cast<CUlibrary>(k->library);
  return CUDA_SUCCESS;
}

/// The defaults of a kernel's settable attributes: 48 KiB of dynamic shared memory less the
/// static shared memory, the rest unset.
KernelAttributes default_attributes(size_t static_shared) {
  KernelAttributes a;
  a.max_dynamic_shared = std::max(0, kDefaultDynamicShared - static_cast<int>(static_shared));
  return a;
}

// What cuKernelGetAttribute and cuFuncGetAttribute answer, one implementation for both: for code
// of `static_shared` bytes of static shared memory, PTX version `ptx_version` (0: a binary
// image), with settable attributes a. What the emulator cannot know without compiling: no
// constant or local memory, 8 registers per thread, 1,024 threads per block.
CUresult attribute_value(int id, size_t static_shared, int ptx_version, const KernelAttributes& a,
                         int* out) {
  switch (id) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
      *out = 1024;
      break;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES:
      *out = static_cast<int>(static_shared);
      break;
    case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES:
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES:
    case CU_FUNC_ATTRIBUTE_CACHE_MODE_CA:
    case CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET:
      *out = 0;
      break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS:
      *out = kRegistersPerThread;
      break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION:
      *out = ptx_version ? ptx_version : kBinaryVersion;
      break;
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION:
      *out = kBinaryVersion;
      break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
      *out = a.max_dynamic_shared;
      break;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
      *out = a.carveout;
      break;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
      *out = a.required_cluster[id - CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH];
      break;
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
      *out = a.non_portable_cluster;
      break;
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
      *out = a.cluster_policy;
      break;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

/// attribute_value for kernel k on device dev.
CUresult kernel_attribute(Kernel* k, int dev, int id, int* out) {
  const Image& image = k->library->image;
  return attribute_value(id, k->entry.static_shared,
                         image.kind == Image::kPtx ? image.ptx_version : 0,
                         kernel_attributes(k, dev), out);
}

// Per device, no context needed.
CUresult kernel_get_attribute(int* pi, CUfunction_attribute attrib, CUkernel h, CUdevice dev) {
  EMU_ENTER("cuKernelGetAttribute");
  if (!pi) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(state().mu);
  Kernel* k = as_kernel(h);
  if (!k) return CUDA_ERROR_INVALID_HANDLE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  return kernel_attribute(k, dev, enum_value(attrib), pi);
}

// A library's function answers its kernel's attributes on the function's device, as
// cuKernelGetAttribute does (also once cuKernelSetAttribute set them: the H200). A CUkernel cast
// to a CUfunction is no function here (the H200: INVALID_HANDLE). A module's function has no
// settable attributes here (no cuFuncSetAttribute): the defaults, so 48 KiB less its static
// shared memory of dynamic shared memory, as the H200 answers (its launches, though, may take up
// to 227 KiB here).
CUresult func_get_attribute(int* pi, CUfunction_attribute attrib, CUfunction h) {
  EMU_ENTER("cuFuncGetAttribute");
  if (!pi) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(state().mu);
  if (!valid(functions(), h)) return CUDA_ERROR_INVALID_HANDLE;
  const auto* f = reinterpret_cast<const Function*>(h);
  const int id = enum_value(attrib);
  if (f->kernel) return kernel_attribute(f->kernel, f->module->ctx->device, id, pi);
  return attribute_value(id, f->static_shared, f->module->ptx ? f->module->ptx_version : 0,
                         default_attributes(f->static_shared), pi);
}

// The settable attributes, with the H200's bounds: dynamic shared memory up to the device's
// opt-in maximum less the static shared memory; a carveout of -1 to 100 percent.
CUresult kernel_set_attribute(CUfunction_attribute attrib, int val, CUkernel h, CUdevice dev) {
  EMU_ENTER("cuKernelSetAttribute");
  std::lock_guard<std::mutex> lk(state().mu);
  Kernel* k = as_kernel(h);
  if (!k) return CUDA_ERROR_INVALID_HANDLE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  KernelAttributes& a = kernel_attributes(k, dev);
  const int id = enum_value(attrib);
  switch (id) {
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
      if (val < 0 || val > kSharedOptIn - static_cast<int>(k->entry.static_shared))
        return CUDA_ERROR_INVALID_VALUE;
      a.max_dynamic_shared = val;
      break;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
      if (val < -1 || val > 100) return CUDA_ERROR_INVALID_VALUE;
      a.carveout = val;
      break;
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:  // any value (as the H200)
      a.non_portable_cluster = val;
      break;
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
      if (val < CU_CLUSTER_SCHEDULING_POLICY_DEFAULT ||
          val > CU_CLUSTER_SCHEDULING_POLICY_LOAD_BALANCING)
        return CUDA_ERROR_INVALID_VALUE;
      a.cluster_policy = val;
      break;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
      if (val < 0) return CUDA_ERROR_INVALID_VALUE;
      a.required_cluster[id - CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH] = val;
      break;
    default:  // read-only or unknown
      return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

// Offsets and sizes from the PTX. The H200 needs a current context here (else
// CUDA_ERROR_INVALID_CONTEXT), though not for the arguments' checks.
CUresult kernel_get_param_info(CUkernel h, size_t index, size_t* offset, size_t* size) {
  EMU_ENTER("cuKernelGetParamInfo");
  if (!h || !offset) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(state().mu);
  Kernel* k = as_kernel(h);
  if (!k) return CUDA_ERROR_INVALID_HANDLE;
  Context* c = nullptr;
  if (CUresult r = usable_current_context(&c)) return r;
  if (!k->sizes_known) return CUDA_ERROR_NOT_SUPPORTED;  // a cubin's: not read
  if (index >= k->entry.param_sizes.size()) return CUDA_ERROR_INVALID_VALUE;
  *offset = k->entry.param_offsets[index];
  if (size) *size = k->entry.param_sizes[index];
  return CUDA_SUCCESS;
}

}  // namespace

Kernel* library_kernel(Library* lib, const std::string& name) {
  for (const auto& k : lib->kernels)
    if (k->entry.name == name) return k.get();
  if (lib->image.kind != Image::kBinary) return nullptr;
  PtxEntry e;  // a binary image: any name resolves, its parameters unknown
  e.name = name;
  return make_kernel(lib, std::move(e), false);
}

CUresult kernel_function(Kernel* k, Context* ctx, Function** out) {
  LibraryContext* lc = nullptr;
  if (CUresult r = load_into(k->library, resource_owner(ctx), &lc)) return r;
  Function* f = module_function(lc->module, k->entry.name);
  if (!f) return CUDA_ERROR_NOT_FOUND;
  *out = f;
  return CUDA_SUCCESS;
}

KernelAttributes& kernel_attributes(Kernel* k, int dev) {
  auto it = k->attributes.find(dev);
  if (it == k->attributes.end())
    it = k->attributes.emplace(dev, default_attributes(k->entry.static_shared)).first;
  return it->second;
}

void release_library_context(Module* m) {
  Library* lib = m->library;
  auto it = lib->contexts.find(m->ctx);
  if (it == lib->contexts.end()) return;
  for (const auto& v : it->second.globals) free_variable(v.second);
  lib->contexts.erase(it);
}

void register_library_entries(std::vector<Entry>& out) {
  out.insert(out.end(), {
                            EMU_ENTRY(cuLibraryLoadData, 12000, library_load_data),
                            EMU_ENTRY(cuLibraryLoadFromFile, 12000, library_load_from_file),
                            EMU_ENTRY(cuLibraryUnload, 12000, library_unload),
                            EMU_ENTRY(cuLibraryGetKernel, 12000, library_get_kernel),
                            EMU_ENTRY(cuLibraryGetKernelCount, 12040, library_get_kernel_count),
                            EMU_ENTRY(cuLibraryEnumerateKernels, 12040, library_enumerate_kernels),
                            EMU_ENTRY(cuLibraryGetModule, 12000, library_get_module),
                            EMU_ENTRY(cuLibraryGetGlobal, 12000, library_get_global),
                            EMU_ENTRY(cuLibraryGetManaged, 12000, library_get_managed),
                            EMU_ENTRY(cuKernelGetFunction, 12000, kernel_get_function),
                            EMU_ENTRY(cuKernelGetName, 12030, kernel_get_name),
                            EMU_ENTRY(cuKernelGetLibrary, 12050, kernel_get_library),
                            EMU_ENTRY(cuKernelGetAttribute, 12000, kernel_get_attribute),
                            EMU_ENTRY(cuKernelSetAttribute, 12000, kernel_set_attribute),
                            EMU_ENTRY(cuKernelGetParamInfo, 12040, kernel_get_param_info),
                            EMU_ENTRY(cuFuncGetAttribute, 2020, func_get_attribute),
                        });
}

}  // namespace emu

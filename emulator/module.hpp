// Internal header shared by module.cpp (modules, functions, launches) and library.cpp
// (context-independent loading: CUlibrary and CUkernel). Everything here is guarded by
// State::mu unless noted.
// (Invariants 10 and 11 of emu.hpp.)
#pragma once

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "emu.hpp"

namespace emu {

/// One `.entry` of PTX text: its parameters (sizes and offsets in the parameter buffer) and
/// the shared memory it declares statically (function-scope `.shared` declarations).
struct PtxEntry {
  std::string name;
  std::vector<size_t> param_sizes;
  std::vector<size_t> param_offsets;
  size_t static_shared = 0;
};

/// One module-scope `.global` or `.const` variable (`.attribute(.managed)`: managed).
struct PtxGlobal {
  std::string name;
  size_t bytes = 0;
  bool managed = false;
  std::vector<unsigned char> init;  // the initializer's bytes (shorter: zeros follow)
};

/// What an image holds, as far as the emulator reads it.
struct Image {
  enum Kind { kPtx, kBinary, kInvalid };
  Kind kind = kInvalid;
  CUresult error = CUDA_SUCCESS;  // kInvalid: CUDA_ERROR_INVALID_IMAGE or CUDA_ERROR_INVALID_PTX
  std::string log;                // the JIT error log of an invalid image
  int ptx_version = 0;            // `.version 7.0` -> 70
  std::vector<PtxEntry> entries;  // in declaration order
  std::vector<PtxGlobal> globals;
};

/// Reads an image: an ELF (cubin) or fatbin is kBinary (any kernel name resolves); anything else
/// is NUL-terminated PTX text, kInvalid when it is neither PTX (no `.entry`, no `.version`:
/// CUDA_ERROR_INVALID_IMAGE) nor balanced (unbalanced braces or parentheses:
/// CUDA_ERROR_INVALID_PTX), with an error log saying why.
Image read_image(const void* image);

/// Writes the JIT log options of cuModuleLoadDataEx / cuLibraryLoadData: the error log
/// (`error_log`, truncated to the buffer) and an empty info log; each size option gets the
/// characters written, the terminating NUL not included (as the H200).
void write_jit_logs(unsigned n, const CUjit_option* options, void** values,
                    const std::string& error_log);

/// The value of an enumerator a caller passed, which may be none of the enumeration's (read
/// without an enum-typed load, which UBSan would report).
template <class E>
int enum_value(const E& e) {
  static_assert(sizeof(E) == sizeof(int), "an int-sized enumeration");
  int v = 0;
  std::memcpy(&v, &e, sizeof v);
  return v;
}

struct Module;
struct Library;
struct Kernel;

struct Function {
  Module* module = nullptr;
  std::string name;
  std::vector<size_t> param_sizes;
  bool sizes_known = false;  // from the PTX
  size_t static_shared = 0;
  Kernel* kernel = nullptr;  // a library's function: the kernel whose attributes apply
};

struct Module {
  Context* ctx = nullptr;
  bool ptx = false;                                    // a binary image resolves any name
  int ptx_version = 0;                                 // PTX: `.version 7.0` -> 70
  std::map<std::string, std::vector<size_t>> entries;  // PTX: name -> parameter sizes
  std::map<std::string, size_t> static_shared;         // PTX: name -> static shared bytes
  std::map<std::string, std::unique_ptr<Function>> functions;
  Library* library = nullptr;  // set: the module of a library in ctx (not counted as live)
  // Its launches' liveness token (invariant 11); a library's module uses the library's.
  std::shared_ptr<const int> alive = std::make_shared<const int>(0);
};

/// The attributes of a kernel on one device that cuKernelSetAttribute changes.
struct KernelAttributes {
  int max_dynamic_shared = 0;  // default: 48 KiB less the static shared memory
  int carveout = -1;
  int non_portable_cluster = 0;  // nonzero: allowed (the H200 takes any value)
  int cluster_policy = 0;
  int required_cluster[3] = {0, 0, 0};
};

struct Kernel {
  Library* library = nullptr;
  PtxEntry entry;                              // name, parameters, static shared memory
  bool sizes_known = false;                    // from the PTX (false: a kernel of a binary image)
  std::map<int, KernelAttributes> attributes;  // by device, made on first use
};

/// A library loaded into one context (the resource owner): its module and its variables.
struct LibraryContext {
  Module* module = nullptr;
  std::map<std::string, CUdeviceptr> globals;
};

struct Library {
  Image image;
  std::shared_ptr<const int> alive = std::make_shared<const int>(0);  // invariant 11
  std::vector<std::unique_ptr<Kernel>> kernels;  // PTX: every entry, made at load
  std::map<std::string, CUdeviceptr> managed;    // managed variables: one for every device
  std::map<Context*, LibraryContext> contexts;   // by resource owner
};

/// The registered functions (guarded by State::mu; process lifetime).
std::unordered_set<const void*>& functions();
/// What a CUfunction handle names: one of the emulator's functions (*f set) or a CUkernel cast
/// to one (*k set; cuda.h: the launch and occupancy calls take one for its function
/// in a context), else CUDA_ERROR_INVALID_HANDLE.
CUresult function_or_kernel(CUfunction h, Function** f, Kernel** k);
/// The function `name` of module m, made on first use (nullptr: not in the PTX).
Function* module_function(Module* m, const std::string& name);
/// The kernel `name` of a library, or nullptr; a binary image's is made on first use.
Kernel* library_kernel(Library* lib, const std::string& name);
/// The function of kernel k in ctx's resource owner, loading the library there on first use.
CUresult kernel_function(Kernel* k, Context* ctx, Function** out);
/// The attributes of k on device dev (defaults made on first use).
KernelAttributes& kernel_attributes(Kernel* k, int dev);
/// Forgets a library's module of a destroyed context and frees its variables (the context's
/// work has completed).
void release_library_context(Module* m);

}  // namespace emu

// Modules, functions and kernel launches (cuLaunchKernel, cuLaunchKernelEx). Kernels cannot run
// on the CPU: a launch executes, in stream order, the CPU implementation registered for its name
// (emu_control.h), or nothing. Also the PTX reader that modules and libraries share.
#include "module.hpp"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
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
  // The liveness token of the code launched: its library's, or its module's (invariant 11).
  std::weak_ptr<const int> code;
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  unsigned shared_bytes = 0;
  // Copies of the arguments taken at launch (none when their sizes are unknown or the launch
  // passed none), and pointers to each, the kernelParams of cuGraphKernelNodeGetParams.
  std::vector<std::vector<unsigned char>> args;
  std::vector<void*> arg_pointers;
  // The handles of the launch, as values only (invariant 11), as the H200 reports them: the
  // function (a CUkernel's function in the stream's context), the library's CUkernel of that
  // function (also when the launch named the function), the stream's context.
  CUfunction func = nullptr;
  CUkernel kern = nullptr;
  CUcontext ctx = nullptr;
};

std::unordered_set<const void*>& functions() {
  static auto* f = new std::unordered_set<const void*>;  // guarded by State::mu; leaked
  return *f;
}

namespace {

struct Kernels {
  std::mutex mu;  // lock order: State::mu -> Kernels::mu
  std::map<std::string, std::shared_ptr<const KernelImpl>> impls;
  std::map<std::string, long> runs;
};

// The built-in CPU twin of custream's set-condition kernel,
// custream_set_condition(CUgraphConditionalHandle handle, const unsigned* value): sets the
// handle of the running launch to *value (invariant 14).
void set_condition_twin(const custream_emu_kernel_launch* l) {
  CUgraphConditionalHandle handle = 0;
  const unsigned* value = nullptr;
  std::memcpy(&handle, l->params[0], sizeof handle);
  std::memcpy(&value, l->params[1], sizeof value);
  if (value) set_conditional(handle, *value);
}

Kernels& kernels() {
  static Kernels* k = [] {
    auto* made = new Kernels;  // leaked (invariant 5)
    auto twin = std::make_shared<KernelImpl>();
    twin->fn = set_condition_twin;
    twin->param_sizes = {sizeof(CUgraphConditionalHandle), sizeof(const unsigned*)};
    twin->sizes_given = true;
    made->impls["custream_set_condition"] = std::move(twin);
    return made;
  }();
  return *k;
}

// ---- reading PTX ----

bool is_ident(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$';
}

bool is_space(char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }

/// The text with its comments blanked (newlines kept, so line numbers stay).
std::string strip_comments(std::string s) {
  for (size_t i = 0; i + 1 < s.size(); ++i) {
    if (s[i] == '/' && s[i + 1] == '/') {
      while (i < s.size() && s[i] != '\n') s[i++] = ' ';
    } else if (s[i] == '/' && s[i + 1] == '*') {
      size_t j = i;
      for (; j < s.size() && !(s[j] == '*' && j + 1 < s.size() && s[j + 1] == '/'); ++j)
        if (s[j] != '\n') s[j] = ' ';
      if (j < s.size()) s[j] = ' ';
      if (j + 1 < s.size()) s[j + 1] = ' ';
      i = j + 1;
    }
  }
  return s;
}

/// True when the directive `d` (".entry") starts a token at s[i].
bool directive_at(const std::string& s, size_t i, const char* d) {
  const size_t n = std::strlen(d);
  return s.compare(i, n, d) == 0 && (i == 0 || is_space(s[i - 1])) &&
         (i + n == s.size() || !is_ident(s[i + n]));
}

/// One declaration (`.param`, `.shared`, `.global` without its state space): `.align 8 .b8 s[12]`,
/// `.u64 .ptr.global.align 8 p`, `.v4 .f32 v`, `.u32 arr[2][3]`.
struct Decl {
  size_t elem = 0;  // bytes of one element (0: unknown type)
  bool is_float = false;
  size_t vector = 1;
  size_t count = 1;      // product of the array dimensions
  bool unsized = false;  // `[]`: the initializer gives the count
  size_t align = 0;      // `.align N`; 0: natural
  std::string name;
  size_t bytes() const { return elem * vector * count; }
  size_t alignment() const { return align ? align : std::max<size_t>(1, elem * vector); }
};

Decl parse_decl(const std::string& d) {
  Decl out;
  size_t i = 0;
  while (i < d.size()) {
    while (i < d.size() && is_space(d[i])) ++i;
    const size_t b = i;
    if (i < d.size() && d[i] == '.') {
      ++i;
      while (i < d.size() && (is_ident(d[i]) || d[i] == '.' || d[i] == '(' || d[i] == ')')) ++i;
      const std::string tok = d.substr(b, i - b);
      if (tok == ".align") {
        while (i < d.size() && is_space(d[i])) ++i;
        out.align = static_cast<size_t>(std::strtoull(d.c_str() + i, nullptr, 10));
        while (i < d.size() && is_ident(d[i])) ++i;
      } else if (tok.size() >= 3 && tok[1] == 'v' &&
                 std::isdigit(static_cast<unsigned char>(tok[2]))) {
        out.vector = static_cast<size_t>(std::strtoull(tok.c_str() + 2, nullptr, 10));
      } else if (out.elem == 0 && tok.size() >= 3 && std::strchr("usbf", tok[1]) &&
                 std::isdigit(static_cast<unsigned char>(tok[2]))) {
        const size_t bits = static_cast<size_t>(std::strtoull(tok.c_str() + 2, nullptr, 10));
        if (bits == 8 || bits == 16 || bits == 32 || bits == 64) {
          out.elem = bits / 8;
          out.is_float = tok[1] == 'f';
        }
      }
      continue;
    }
    if (i < d.size() && (std::isalpha(static_cast<unsigned char>(d[i])) || d[i] == '_' ||
                         d[i] == '$' || d[i] == '%')) {
      while (i < d.size() && (is_ident(d[i]) || d[i] == '%')) ++i;
      if (out.name.empty()) out.name = d.substr(b, i - b);
      continue;
    }
    if (i < d.size() && d[i] == '[' && !out.name.empty()) {
      const size_t close = d.find(']', i);
      if (close == std::string::npos) break;
      const std::string dim = d.substr(i + 1, close - i - 1);
      if (dim.find_first_not_of(" \t\r\n") == std::string::npos) {
        out.unsized = true;
      } else {
        out.count *= static_cast<size_t>(std::strtoull(dim.c_str(), nullptr, 0));
      }
      i = close + 1;
      continue;
    }
    ++i;  // numbers, punctuation
  }
  return out;
}

/// The bytes of an initializer (`= 7`, `= {1, 2, 3}`, `= 0f3F800000`, `= {1.5, 2.0}`).
std::vector<unsigned char> parse_initializer(const std::string& rhs, const Decl& d) {
  std::vector<unsigned char> out;
  if (d.elem == 0) return out;
  size_t i = 0;
  while (i < rhs.size()) {
    while (i < rhs.size() && (is_space(rhs[i]) || rhs[i] == '{' || rhs[i] == '}' || rhs[i] == ','))
      ++i;
    const size_t b = i;
    while (i < rhs.size() && !is_space(rhs[i]) && rhs[i] != '{' && rhs[i] != '}' && rhs[i] != ',')
      ++i;
    if (i == b) continue;
    const std::string tok = rhs.substr(b, i - b);
    uint64_t bits = 0;
    if (tok.size() == 10 && tok[0] == '0' && (tok[1] == 'f' || tok[1] == 'F')) {
      bits = std::strtoull(tok.c_str() + 2, nullptr, 16);
    } else if (tok.size() == 18 && tok[0] == '0' && (tok[1] == 'd' || tok[1] == 'D')) {
      bits = std::strtoull(tok.c_str() + 2, nullptr, 16);
    } else if (d.is_float) {
      const double v = std::strtod(tok.c_str(), nullptr);
      if (d.elem == 4) {
        const float f = static_cast<float>(v);
        uint32_t u = 0;
        std::memcpy(&u, &f, sizeof u);
        bits = u;
      } else {
        std::memcpy(&bits, &v, sizeof bits);
      }
    } else {
      bits = tok[0] == '-' ? static_cast<uint64_t>(std::strtoll(tok.c_str(), nullptr, 0))
                           : std::strtoull(tok.c_str(), nullptr, 0);
    }
    for (size_t k = 0; k < d.elem; ++k) out.push_back(static_cast<unsigned char>(bits >> (8 * k)));
  }
  return out;
}

/// The statement that ends at the first ';' at or after `from`.
std::string statement_from(const std::string& s, size_t from) {
  const size_t end = s.find(';', from);
  return s.substr(from, (end == std::string::npos ? s.size() : end) - from);
}

/// True when `.extern` precedes position `at` in its statement (a declaration, no definition).
bool extern_declaration(const std::string& s, size_t at) {
  size_t b = at;
  while (b > 0 && s[b - 1] != ';' && s[b - 1] != '{' && s[b - 1] != '}') --b;
  const std::string head = s.substr(b, at - b);
  for (size_t p = head.find(".extern"); p != std::string::npos; p = head.find(".extern", p + 1))
    if (directive_at(head, p, ".extern")) return true;
  return false;
}

/// Reads `.entry name(params) ... { body }` starting after the directive; returns the entry and
/// leaves `i` after the parameter list.
PtxEntry read_entry(const std::string& s, size_t& i) {
  PtxEntry e;
  while (i < s.size() && is_space(s[i])) ++i;
  const size_t b = i;
  while (i < s.size() && is_ident(s[i])) ++i;
  e.name = s.substr(b, i - b);
  while (i < s.size() && is_space(s[i])) ++i;
  if (i >= s.size() || s[i] != '(') return e;
  const size_t close = s.find(')', i);
  if (close == std::string::npos) return e;
  const std::string list = s.substr(i + 1, close - i - 1);
  i = close + 1;
  size_t offset = 0;
  for (size_t p = 0; p < list.size();) {
    size_t comma = list.find(',', p);
    if (comma == std::string::npos) comma = list.size();
    const std::string decl = list.substr(p, comma - p);
    const size_t at = decl.find(".param");
    if (at != std::string::npos) {
      const Decl d = parse_decl(decl.substr(at + 6));
      const size_t a = d.alignment();
      offset = (offset + a - 1) / a * a;
      e.param_sizes.push_back(d.bytes());
      e.param_offsets.push_back(offset);
      offset += d.bytes();
    }
    p = comma + 1;
  }
  // The body: function-scope `.shared` declarations (not `.extern .shared`: dynamic).
  const size_t open = s.find('{', i);
  if (open == std::string::npos) return e;
  const size_t semicolon = s.find(';', i);
  if (semicolon != std::string::npos && semicolon < open) return e;  // a prototype
  int depth = 0;
  size_t end = open;
  for (; end < s.size(); ++end) {
    if (s[end] == '{') ++depth;
    if (s[end] == '}' && --depth == 0) break;
  }
  for (size_t p = s.find(".shared", open); p != std::string::npos && p < end;
       p = s.find(".shared", p + 7)) {
    if (!directive_at(s, p, ".shared") || extern_declaration(s, p)) continue;
    const Decl d = parse_decl(statement_from(s, p + 7));
    const size_t a = d.alignment();
    e.static_shared = (e.static_shared + a - 1) / a * a + d.bytes();
  }
  return e;
}

/// A module-scope `.global` / `.const` definition starting after its directive.
PtxGlobal read_global(const std::string& s, size_t i) {
  const std::string st = statement_from(s, i);
  const size_t eq = st.find('=');
  const std::string lhs = st.substr(0, eq);
  Decl d = parse_decl(lhs);
  PtxGlobal g;
  g.name = d.name;
  g.managed = lhs.find(".managed") != std::string::npos;
  if (eq != std::string::npos) g.init = parse_initializer(st.substr(eq + 1), d);
  if (d.unsized && d.elem) d.count = g.init.size() / (d.elem * d.vector);
  g.bytes = d.bytes();
  if (g.init.size() > g.bytes) g.init.resize(g.bytes);
  return g;
}

std::string line_message(const std::string& s, size_t at, const char* what) {
  const long line = 1 + std::count(s.begin(), s.begin() + static_cast<long>(at), '\n');
  return "emulator: PTX line " + std::to_string(line) + ": " + what;
}

Image read_ptx(const char* text) {
  Image img;
  const std::string s = strip_comments(text);
  int braces = 0, parens = 0;
  size_t last_open = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '{' || c == '(') last_open = i;
    if (c == '{') ++braces;
    if (c == '(') ++parens;
    if (c == ')' && --parens < 0) {
      img.log = line_message(s, i, "unbalanced ')'");
      break;
    }
    if (c == '}' && --braces < 0) {
      img.log = line_message(s, i, "unbalanced '}'");
      break;
    }
    if (braces != 0 || c != '.') continue;
    if (directive_at(s, i, ".version")) {
      size_t p = i + 8;
      const int major = static_cast<int>(std::strtol(s.c_str() + p, nullptr, 10));
      p = s.find('.', p);
      const int minor = p == std::string::npos
                            ? 0
                            : static_cast<int>(std::strtol(s.c_str() + p + 1, nullptr, 10));
      img.ptx_version = major * 10 + minor;
    } else if (directive_at(s, i, ".entry")) {
      size_t p = i + 6;
      PtxEntry e = read_entry(s, p);
      if (e.name.empty()) continue;
      auto same = std::find_if(img.entries.begin(), img.entries.end(),
                               [&](const PtxEntry& x) { return x.name == e.name; });
      if (same == img.entries.end()) {
        img.entries.push_back(std::move(e));
      } else {
        *same = std::move(e);  // a prototype, then its definition
      }
    } else if ((directive_at(s, i, ".global") || directive_at(s, i, ".const")) &&
               !extern_declaration(s, i)) {
      PtxGlobal g = read_global(s, i + (s[i + 1] == 'g' ? 7 : 6));
      if (!g.name.empty()) img.globals.push_back(std::move(g));
    }
  }
  if (img.log.empty() && (braces != 0 || parens != 0))
    img.log = line_message(s, last_open, braces ? "unbalanced '{'" : "unbalanced '('");
  if (!img.log.empty()) {
    img.kind = Image::kInvalid;
    img.error = CUDA_ERROR_INVALID_PTX;
    img.entries.clear();
    img.globals.clear();
    return img;
  }
  if (img.entries.empty() && std::strstr(text, ".version") == nullptr) {
    img.kind = Image::kInvalid;  // neither PTX nor a binary image
    img.error = CUDA_ERROR_INVALID_IMAGE;
    img.log = "emulator: the image is neither PTX text nor a cubin or fatbin";
    return img;
  }
  img.kind = Image::kPtx;
  return img;
}

/// An ELF (cubin) or fatbin image; anything else is read as NUL-terminated PTX text. Bytes are
/// compared one by one so a short text is never read past its end.
bool binary_image(const void* image) {
  const auto* b = static_cast<const unsigned char*>(image);
  const bool elf = b[0] == 0x7f && b[1] == 'E' && b[2] == 'L' && b[3] == 'F';
  const bool fatbin = b[0] == 0x50 && b[1] == 0xED && b[2] == 0x55 && b[3] == 0xBA;  // 0xBA55ED50
  return elf || fatbin;
}

// ---- modules ----

CUresult load(CUmodule* out, const void* image, std::string* log) {
  if (!out || !image) return CUDA_ERROR_INVALID_VALUE;
  *out = nullptr;
  if (!current_context()) return CUDA_ERROR_INVALID_CONTEXT;
  Image img = read_image(image);
  *log = img.log;
  if (img.kind == Image::kInvalid) return img.error;
  auto m = std::make_unique<Module>();
  m->ptx = img.kind == Image::kPtx;
  m->ptx_version = img.ptx_version;
  for (const PtxEntry& e : img.entries) {
    m->entries[e.name] = e.param_sizes;
    m->static_shared[e.name] = e.static_shared;
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
  std::string log;
  return load(m, image, &log);
}

// JIT options: the error log says why an image is refused (nothing is compiled); the info log
// comes back empty.
CUresult module_load_data_ex(CUmodule* m, const void* image, unsigned int n, CUjit_option* options,
                             void** values) {
  EMU_ENTER("cuModuleLoadDataEx");
  if (n > 0 && (!options || !values)) return CUDA_ERROR_INVALID_VALUE;
  std::string log;
  const CUresult r = load(m, image, &log);
  write_jit_logs(n, options, values, log);
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
    Module* raw = as_module(h);
    if (!raw) return CUDA_ERROR_INVALID_HANDLE;
    if (raw->library) return CUDA_ERROR_NOT_PERMITTED;  // a library's: as the H200
    m.reset(raw);
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
  Function* f = module_function(m, name);
  if (!f) return CUDA_ERROR_NOT_FOUND;
  *out = reinterpret_cast<CUfunction>(f);
  return CUDA_SUCCESS;
}

// ---- launches ----

constexpr unsigned kStaticSharedLimit = 227 * 1024;  // a module's function (no attributes here)
constexpr unsigned kMaxThreadsPerBlock = 1024;
constexpr unsigned kMaxBlocksPerSm = 32;     // CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR
constexpr unsigned kMaxThreadsPerSm = 2048;  // CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR
constexpr unsigned kSharedPerSm = 233472;  // CU_DEVICE_ATTRIBUTE_MAX_SHARED_..._PER_MULTIPROCESSOR
constexpr unsigned kSharedReservedPerBlock = 1024;  // ..._RESERVED_SHARED_MEMORY_PER_BLOCK
constexpr unsigned kSharedGranularity = 128;  // CC 8.x and 9.x allocate shared memory in these

/// The dynamic shared memory a launch of f on device dev may ask for.
unsigned dynamic_shared_limit(const Function& f, int dev) {
  return f.kernel ? static_cast<unsigned>(kernel_attributes(f.kernel, dev).max_dynamic_shared)
                  : kStaticSharedLimit;
}

/// The occupancy model, one for the cooperative-launch check and for
/// cuOccupancyMaxActiveBlocksPerMultiprocessor, so that they cannot disagree: the blocks of f
/// (`threads` threads, `dynamic_shared` bytes) one SM of device dev holds at once. As the
/// toolkit's cuda_occupancy.h computes it for CC 9.0: at most 32 blocks and 2,048 threads in
/// whole warps; the shared memory of a block (static, dynamic and the 1 KiB the driver reserves,
/// rounded up to 128 bytes) out of the SM's 228 KiB; none when the block is too large or asks
/// for more dynamic shared memory than f may. Registers never limit (8 per thread here).
unsigned long long blocks_per_sm(const Function& f, unsigned long long threads,
                                 unsigned long long dynamic_shared, int dev) {
  if (threads == 0 || threads > kMaxThreadsPerBlock) return 0;
  if (dynamic_shared > dynamic_shared_limit(f, dev)) return 0;
  const unsigned long long warp_threads = (threads + 31) / 32 * 32;
  const unsigned long long shared =
      (f.static_shared + dynamic_shared + kSharedReservedPerBlock + kSharedGranularity - 1) /
      kSharedGranularity * kSharedGranularity;
  return std::min<unsigned long long>(
      {kMaxBlocksPerSm, kMaxThreadsPerSm / warp_threads, kSharedPerSm / shared});
}

struct LaunchRequest {
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  unsigned shared = 0;
  CUstream stream = nullptr;
  const CUlaunchAttribute* attrs = nullptr;
  unsigned num_attrs = 0;
};

/// What the launch attributes ask for.
struct LaunchOptions {
  bool cooperative = false;
  unsigned cluster[3] = {0, 0, 0};
};

/// Reads the launch attributes. A refused attribute leaves a capture valid (as the H200).
CUresult read_attributes(const LaunchRequest& q, LaunchOptions* out) {
  for (unsigned i = 0; i < q.num_attrs; ++i) {
    const CUlaunchAttributeValue& v = q.attrs[i].value;
    switch (enum_value(q.attrs[i].id)) {
      case CU_LAUNCH_ATTRIBUTE_IGNORE:
      case CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW:  // hints: no effect here
      case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION:
      case CU_LAUNCH_ATTRIBUTE_PRIORITY:  // any value (as the H200: clamped)
      case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP:
      case CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
      case CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING:
        break;
      case CU_LAUNCH_ATTRIBUTE_COOPERATIVE:
        out->cooperative = v.cooperative != 0;
        break;
      case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
        out->cluster[0] = v.clusterDim.x;
        out->cluster[1] = v.clusterDim.y;
        out->cluster[2] = v.clusterDim.z;
        break;
      case CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
        if (static_cast<unsigned>(enum_value(v.clusterSchedulingPolicyPreference)) >
            CU_CLUSTER_SCHEDULING_POLICY_LOAD_BALANCING)
          return CUDA_ERROR_INVALID_VALUE;
        break;
      case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN:
        if (static_cast<unsigned>(enum_value(v.memSyncDomain)) > CU_LAUNCH_MEM_SYNC_DOMAIN_REMOTE)
          return CUDA_ERROR_INVALID_VALUE;
        break;
      case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT:  // not emulated
      case CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION:
      case CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT:
      case CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE:
        return CUDA_ERROR_NOT_SUPPORTED;
      default:  // unknown, or a stream attribute (SYNCHRONIZATION_POLICY): as the H200
        return CUDA_ERROR_INVALID_VALUE;
    }
  }
  return CUDA_SUCCESS;
}

/// The configuration checks of a launch of f on a stream of device `dev` (mu held). A refused
/// configuration invalidates a capture (as the H200).
CUresult check_launch(const Function& f, const LaunchRequest& q, const LaunchOptions& o, int dev) {
  const unsigned* g = q.grid;
  const unsigned* b = q.block;
  if (!g[0] || !g[1] || !g[2] || !b[0] || !b[1] || !b[2]) return CUDA_ERROR_INVALID_VALUE;
  const unsigned long long threads = static_cast<unsigned long long>(b[0]) * b[1] * b[2];
  if (threads > kMaxThreadsPerBlock || b[2] > 64 || g[1] > 65535 || g[2] > 65535)
    return CUDA_ERROR_INVALID_VALUE;
  const KernelAttributes* ka = f.kernel ? &kernel_attributes(f.kernel, dev) : nullptr;
  if (q.shared > dynamic_shared_limit(f, dev)) return CUDA_ERROR_INVALID_VALUE;
  // Clusters: all-zero dimensions mean none; each must divide the grid; at most 8 blocks (16
  // with the kernel's NON_PORTABLE_CLUSTER_SIZE_ALLOWED), as on the H200.
  const unsigned* cluster = o.cluster;
  if (cluster[0] || cluster[1] || cluster[2]) {
    if (!cluster[0] || !cluster[1] || !cluster[2]) return CUDA_ERROR_INVALID_CLUSTER_SIZE;
    for (int d = 0; d < 3; ++d)
      if (g[d] % cluster[d]) return CUDA_ERROR_INVALID_CLUSTER_SIZE;
    const unsigned long long size =
        static_cast<unsigned long long>(cluster[0]) * cluster[1] * cluster[2];
    if (size > ((ka && ka->non_portable_cluster) ? 16u : 8u))
      return CUDA_ERROR_INVALID_CLUSTER_SIZE;
  }
  // Cooperative: every block resident at once: the occupancy times the device's SMs (the H200:
  // 264 blocks of 1,024 threads, 4,224 of 32, 264 of 101 KiB of shared memory).
  if (o.cooperative) {
    const unsigned long long blocks = static_cast<unsigned long long>(g[0]) * g[1] * g[2];
    if (blocks > blocks_per_sm(f, threads, q.shared, dev) * device_sm_count(dev))
      return CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE;
  }
  return CUDA_SUCCESS;
}

// The launch of f in ctx with the arguments copied (mu held): what a kernel Op or kernel node
// runs. The CPU implementation registered for f's name now is the one it runs.
CUresult make_launch(const Function& fn, const LaunchRequest& q, Context* ctx, void** params,
                     void** extra, std::shared_ptr<KernelLaunch>* out) {
  const Function* f = &fn;
  if (extra) return CUDA_ERROR_NOT_SUPPORTED;  // packed arguments are not emulated
  auto k = std::make_shared<KernelLaunch>();
  k->name = f->name;
  std::memcpy(k->grid, q.grid, sizeof k->grid);
  std::memcpy(k->block, q.block, sizeof k->block);
  k->shared_bytes = q.shared;
  k->func = reinterpret_cast<CUfunction>(const_cast<Function*>(f));
  k->kern = reinterpret_cast<CUkernel>(f->kernel);
  k->ctx = reinterpret_cast<CUcontext>(ctx);
  k->code = f->module->library ? f->module->library->alive : f->module->alive;
  {
    Kernels& ks = kernels();
    std::lock_guard<std::mutex> klk(ks.mu);
    auto it = ks.impls.find(f->name);
    if (it != ks.impls.end()) k->impl = it->second;
  }
  const std::vector<size_t>* sizes = k->impl && k->impl->sizes_given ? &k->impl->param_sizes
                                     : f->sizes_known                ? &f->param_sizes
                                                                     : nullptr;
  // A CPU implementation needs the arguments. Without one they are copied when they can be, for
  // cuGraphKernelNodeGetParams; the launch runs nothing, so it needs none.
  // Too few arguments (a null pointer where a parameter's is due, as custream's arrays end):
  // refused, naming the kernel, where the driver would read past the array. No array at all is
  // taken, as the driver takes it (H100, driver 580: the launch succeeds).
  if (sizes != nullptr && params != nullptr) {
    std::size_t given = 0;
    while (given < sizes->size() && params[given] != nullptr) ++given;
    if (given < sizes->size()) {
      std::fprintf(stderr,
                   "custream emulator: a launch of kernel \"%s\" gave %zu argument(s) for its %zu "
                   "parameter(s): CUDA_ERROR_INVALID_VALUE\n",
                   f->name.c_str(), given, sizes->size());
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  bool copy = sizes && (params || sizes->empty());
  if (k->impl) {
    if (!sizes) return CUDA_ERROR_NOT_SUPPORTED;  // cubin/fatbin: register the sizes
    if (!copy) return CUDA_ERROR_INVALID_VALUE;
  }
  for (size_t i = 0; copy && i < sizes->size(); ++i) {
    if (!params[i] && (*sizes)[i]) {
      if (k->impl) return CUDA_ERROR_INVALID_VALUE;
      copy = false;
    }
  }
  for (size_t i = 0; copy && i < sizes->size(); ++i) {
    const auto* p = static_cast<const unsigned char*>(params[i]);
    k->args.emplace_back(p, p + (*sizes)[i]);
  }
  for (auto& a : k->args) k->arg_pointers.push_back(a.data());
  *out = std::move(k);
  return CUDA_SUCCESS;
}

// A launch of a CUfunction, or of a CUkernel cast to one (cuda.h: the function of the kernel
// in the stream's context, or in the current context for a NULL stream; loaded there first if
// need be, as lazy loading does, also while the stream captures).
CUresult launch(CUfunction hf, const LaunchRequest& q, void** params, void** extra) {
  State& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  Function* f = nullptr;
  Kernel* kernel = nullptr;
  if (CUresult r = function_or_kernel(hf, &f, &kernel)) return r;
  Stream* st = nullptr;
  if (CUresult r = resolve_stream(q.stream, &st)) return r;
  if (kernel) {
    if (CUresult r = kernel_function(kernel, st->ctx, &f)) return r;
  }
  // Loaded in another context: refused. A green context uses the primary context's modules,
  // and the primary context its green contexts' (resource_owner).
  if (resource_owner(f->module->ctx) != resource_owner(st->ctx)) return CUDA_ERROR_INVALID_HANDLE;
  LaunchOptions options;
  if (CUresult r = read_attributes(q, &options)) return r;
  if (CUresult r = check_launch(*f, q, options, st->ctx->device)) {
    if (st->capture) invalidate(st->capture.get());
    return r;
  }
  std::shared_ptr<KernelLaunch> k;
  if (CUresult r = make_launch(*f, q, st->ctx, params, extra, &k)) return r;
  Work w;
  w.type = CU_GRAPH_NODE_TYPE_KERNEL;
  w.kernel = std::move(k);
  return enqueue(st, std::move(w));
}

// Offsets (natural alignment, at most 8) and sizes from the PTX; a cubin's are not read.
CUresult func_get_param_info(CUfunction h, size_t index, size_t* offset, size_t* size) {
  EMU_ENTER("cuFuncGetParamInfo");
  if (!h || !offset) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(state().mu);
  Function* f = nullptr;
  Kernel* k = nullptr;
  if (function_or_kernel(h, &f, &k) != CUDA_SUCCESS || f == nullptr) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  if (!f->sizes_known) return CUDA_ERROR_NOT_SUPPORTED;
  if (index >= f->param_sizes.size()) return CUDA_ERROR_INVALID_VALUE;
  size_t at = 0;
  for (size_t i = 0;; ++i) {
    const size_t bytes = f->param_sizes[i];
    const size_t align = bytes >= 8 ? 8 : bytes == 0 ? 1 : bytes;
    at = (at + align - 1) / align * align;
    if (i == index) {
      *offset = at;
      if (size) *size = bytes;
      return CUDA_SUCCESS;
    }
    at += bytes;
  }
}

CUresult launch_kernel(CUfunction hf, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                       unsigned by, unsigned bz, unsigned shared_bytes, CUstream hs, void** params,
                       void** extra) {
  EMU_ENTER("cuLaunchKernel");
  LaunchRequest q;
  q.grid[0] = gx, q.grid[1] = gy, q.grid[2] = gz;
  q.block[0] = bx, q.block[1] = by, q.block[2] = bz;
  q.shared = shared_bytes;
  q.stream = hs;
  return launch(hf, q, params, extra);
}

LaunchRequest request_of(const CUlaunchConfig& config) {
  LaunchRequest q;
  q.grid[0] = config.gridDimX, q.grid[1] = config.gridDimY, q.grid[2] = config.gridDimZ;
  q.block[0] = config.blockDimX, q.block[1] = config.blockDimY, q.block[2] = config.blockDimZ;
  q.shared = config.sharedMemBytes;
  q.stream = config.hStream;
  q.attrs = config.attrs;
  q.num_attrs = config.numAttrs;
  return q;
}

// cuLaunchKernelEx: cuLaunchKernel with a configuration and launch attributes (check_launch).
CUresult launch_kernel_ex(const CUlaunchConfig* config, CUfunction f, void** params, void** extra) {
  EMU_ENTER("cuLaunchKernelEx");
  if (!config) return CUDA_ERROR_INVALID_VALUE;
  if (!f) return CUDA_ERROR_INVALID_HANDLE;
  if (config->numAttrs > 0 && !config->attrs) return CUDA_ERROR_INVALID_VALUE;
  return launch(f, request_of(*config), params, extra);
}

// ---- occupancy ----

// blocks_per_sm for a function, or a CUkernel's function in the current context (cuda.h). As on
// the H200: a current context is needed also for a function; a block size of none (or negative)
// is INVALID_VALUE; one over 1,024 threads fits no block (0).
CUresult occupancy_max_active_blocks(int* n, CUfunction hf, int block_size, size_t dynamic_shared) {
  EMU_ENTER("cuOccupancyMaxActiveBlocksPerMultiprocessor");
  if (!n) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(state().mu);
  Function* f = nullptr;
  Kernel* kernel = nullptr;
  if (CUresult r = function_or_kernel(hf, &f, &kernel)) return r;
  Context* c = nullptr;
  if (CUresult r = usable_current_context(&c)) return r;
  if (kernel) {
    if (CUresult r = kernel_function(kernel, c, &f)) return r;
  }
  if (block_size <= 0) return CUDA_ERROR_INVALID_VALUE;
  *n = static_cast<int>(
      blocks_per_sm(*f, static_cast<unsigned>(block_size), dynamic_shared, f->module->ctx->device));
  return CUDA_SUCCESS;
}

// The clusters of the configuration's size that fit on the device at once, with the kernel's
// required cluster dimensions when the configuration names none. As on the H200: no cluster size
// at all, or one over 16 blocks (the hardware's largest) once the kernel allows a non-portable
// size, is 0 clusters; a cluster that does not divide the grid, or of over 8 blocks without that
// attribute, INVALID_CLUSTER_SIZE; the rest of the configuration is checked as a launch's. The
// model: a cluster's blocks on as many SMs, so floor(SMs / cluster size) groups of SMs, each
// holding the occupancy's number of clusters. It is an upper bound: the H200's GPCs (at most 18
// SMs, varying from chip to chip) allow fewer (for 2, 8 and 16 blocks of 128, 1,024 and 1,024
// threads it answered 528, 30 and 14 where this answers 1,056, 32 and 16).
CUresult occupancy_max_active_clusters(int* n, CUfunction hf, const CUlaunchConfig* config) {
  EMU_ENTER("cuOccupancyMaxActiveClusters");
  if (!n || !config) return CUDA_ERROR_INVALID_VALUE;
  if (config->numAttrs > 0 && !config->attrs) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(state().mu);
  Function* f = nullptr;
  Kernel* kernel = nullptr;
  if (CUresult r = function_or_kernel(hf, &f, &kernel)) return r;
  if (kernel) {  // the context of the configuration's stream (the current one for NULL: cuda.h)
    Stream* st = nullptr;
    if (CUresult r = resolve_stream(config->hStream, &st)) return r;
    if (CUresult r = kernel_function(kernel, st->ctx, &f)) return r;
  }
  const LaunchRequest q = request_of(*config);
  LaunchOptions o;
  if (CUresult r = read_attributes(q, &o)) return r;
  o.cooperative = false;
  const int dev = f->module->ctx->device;
  if (f->kernel) {
    const int* required = kernel_attributes(f->kernel, dev).required_cluster;
    if (required[0] && required[1] && required[2]) {
      const bool none = !o.cluster[0] && !o.cluster[1] && !o.cluster[2];
      for (int d = 0; d < 3; ++d) {
        const auto want = static_cast<unsigned>(required[d]);
        if (!none && o.cluster[d] != want) return CUDA_ERROR_INVALID_CLUSTER_SIZE;
        o.cluster[d] = want;
      }
    }
  }
  const unsigned cluster[3] = {o.cluster[0], o.cluster[1], o.cluster[2]};
  const bool none = !cluster[0] && !cluster[1] && !cluster[2];
  unsigned long long size = 1;
  if (!none) {
    for (int d = 0; d < 3; ++d) {
      if (!cluster[d] || q.grid[d] % cluster[d]) return CUDA_ERROR_INVALID_CLUSTER_SIZE;
      size *= cluster[d];
    }
    if (size > 8 && !(f->kernel && kernel_attributes(f->kernel, dev).non_portable_cluster))
      return CUDA_ERROR_INVALID_CLUSTER_SIZE;
  }
  o.cluster[0] = o.cluster[1] = o.cluster[2] = 0;  // checked above
  if (CUresult r = check_launch(*f, q, o, dev)) return r;
  if (none || size > 16) {
    *n = 0;
    return CUDA_SUCCESS;
  }
  const unsigned long long threads =
      static_cast<unsigned long long>(q.block[0]) * q.block[1] * q.block[2];
  *n = static_cast<int>(device_sm_count(dev) / size * blocks_per_sm(*f, threads, q.shared, dev));
  return CUDA_SUCCESS;
}

}  // namespace

CUresult function_or_kernel(CUfunction h, Function** f, Kernel** k) {
  *f = valid(functions(), h) ? reinterpret_cast<Function*>(h) : nullptr;
  *k = !*f && valid(state().kernels, h) ? reinterpret_cast<Kernel*>(h) : nullptr;
  return *f || *k ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult kernel_node_launch(const CUDA_KERNEL_NODE_PARAMS_v3& p,
                            std::shared_ptr<const KernelLaunch>* out) {
  Function* f = nullptr;
  Kernel* kernel = nullptr;
  Context* ctx = nullptr;
  if (p.func) {  // cuda.h: ctx is ignored when func is set
    if (CUresult r = function_or_kernel(p.func, &f, &kernel)) return r;
  } else if (p.kern) {
    if (!valid(state().kernels, p.kern)) return CUDA_ERROR_INVALID_HANDLE;
    kernel = reinterpret_cast<Kernel*>(p.kern);
  } else {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (kernel) {  // a CUkernel: its function in p.ctx, or the current context
    ctx = p.func ? nullptr : reinterpret_cast<Context*>(p.ctx);
    if (!ctx) {
      if (CUresult r = usable_current_context(&ctx)) return r;
    } else if (CUresult r = context_status(ctx)) {
      return r;
    }
    if (CUresult r = kernel_function(kernel, ctx, &f)) return r;
  } else {
    ctx = f->module->ctx;
  }
  LaunchRequest q;
  q.grid[0] = p.gridDimX, q.grid[1] = p.gridDimY, q.grid[2] = p.gridDimZ;
  q.block[0] = p.blockDimX, q.block[1] = p.blockDimY, q.block[2] = p.blockDimZ;
  q.shared = p.sharedMemBytes;
  if (CUresult r = check_launch(*f, q, LaunchOptions{}, ctx->device)) return r;
  std::shared_ptr<KernelLaunch> k;
  if (CUresult r = make_launch(*f, q, ctx, p.kernelParams, p.extra, &k)) return r;
  *out = std::move(k);
  return CUDA_SUCCESS;
}

void kernel_node_params(const KernelLaunch& k, CUDA_KERNEL_NODE_PARAMS_v2* out) {
  out->func = k.func;
  out->gridDimX = k.grid[0], out->gridDimY = k.grid[1], out->gridDimZ = k.grid[2];
  out->blockDimX = k.block[0], out->blockDimY = k.block[1], out->blockDimZ = k.block[2];
  out->sharedMemBytes = k.shared_bytes;
  // The node owns the copies; callers must not write through them (cuda.h).
  out->kernelParams = k.arg_pointers.empty() ? nullptr : const_cast<void**>(k.arg_pointers.data());
  out->extra = nullptr;  // packed arguments are refused at launch
  out->kern = k.kern;
  out->ctx = k.ctx;
}

Image read_image(const void* image) {
  if (binary_image(image)) {
    Image img;
    img.kind = Image::kBinary;
    return img;
  }
  return read_ptx(static_cast<const char*>(image));
}

void write_jit_logs(unsigned n, const CUjit_option* options, void** values,
                    const std::string& error_log) {
  char* error_buf = nullptr;
  char* info_buf = nullptr;
  size_t error_cap = 0, info_cap = 0;
  for (unsigned i = 0; i < n; ++i) {
    const auto v = reinterpret_cast<uintptr_t>(values[i]);
    switch (enum_value(options[i])) {
      case CU_JIT_ERROR_LOG_BUFFER:
        error_buf = static_cast<char*>(values[i]);
        break;
      case CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES:
        error_cap = static_cast<size_t>(v);
        break;
      case CU_JIT_INFO_LOG_BUFFER:
        info_buf = static_cast<char*>(values[i]);
        break;
      case CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES:
        info_cap = static_cast<size_t>(v);
        break;
      default:
        break;
    }
  }
  size_t error_written = 0;
  if (error_buf) {
    error_buf[0] = '\0';
    if (error_cap > 1 && !error_log.empty()) {
      const size_t len = std::min(error_log.size(), error_cap - 1);
      std::memcpy(error_buf, error_log.data(), len);
      error_buf[len] = '\0';
      error_written = len;  // the H200 counts the characters, not the NUL
    }
  }
  if (info_buf) info_buf[0] = '\0';
  (void)info_cap;
  for (unsigned i = 0; i < n; ++i) {
    if (enum_value(options[i]) == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
      values[i] = reinterpret_cast<void*>(static_cast<uintptr_t>(error_written));
    if (enum_value(options[i]) == CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES) values[i] = nullptr;  // empty
  }
}

Function* module_function(Module* m, const std::string& name) {
  auto& f = m->functions[name];
  if (!f) {
    auto e = m->entries.find(name);
    if (m->ptx && e == m->entries.end()) {
      m->functions.erase(name);
      return nullptr;
    }
    f = std::make_unique<Function>();
    f->module = m;
    f->name = name;
    if (m->ptx) {
      f->param_sizes = e->second;
      f->sizes_known = true;
      f->static_shared = m->static_shared[name];
    }
    if (m->library) f->kernel = library_kernel(m->library, name);
    functions().insert(f.get());
  }
  return f.get();
}

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
    if (m->library) {
      release_library_context(m);  // the library stays loaded elsewhere
    } else {
      s.live.fetch_sub(1);
    }
    delete m;  // launches in flight hold copies, never the module
  }
}

bool kernel_code_unloaded(const KernelLaunch& k) { return k.code.expired(); }

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
  out.insert(
      out.end(),
      {
          EMU_ENTRY(cuModuleLoadData, 2000, module_load_data),
          EMU_ENTRY(cuModuleLoadDataEx, 2010, module_load_data_ex),
          EMU_ENTRY(cuModuleUnload, 2000, module_unload),
          EMU_ENTRY(cuModuleGetFunction, 2000, module_get_function),
          EMU_ENTRY(cuLaunchKernel, 4000, launch_kernel),
          EMU_ENTRY(cuFuncGetParamInfo, 12040, func_get_param_info),
          EMU_ENTRY(cuLaunchKernelEx, 11060, launch_kernel_ex),
          EMU_ENTRY(cuOccupancyMaxActiveBlocksPerMultiprocessor, 6050, occupancy_max_active_blocks),
          EMU_ENTRY(cuOccupancyMaxActiveClusters, 11070, occupancy_max_active_clusters),
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

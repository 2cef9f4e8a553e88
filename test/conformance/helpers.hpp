// Driver conformance suite: the helpers of the subject files (test/conformance/*.cpp), several
// of which use another subject's fixtures. Inline, in an anonymous namespace: each file takes
// what it uses.
#pragma once

#include "support.hpp"

namespace conformance {
namespace {

// ---- host_functions ----

struct CallbackRecord {
  Log* log;
  int value;
  CUstream expected;
  std::atomic<int>* wrong;
};
inline void CUDA_CB record_callback(CUstream s, CUresult status, void* p) {
  auto* r = static_cast<CallbackRecord*>(p);
  if (s != r->expected || status != CUDA_SUCCESS) r->wrong->fetch_add(1);
  r->log->add(r->value);
}
inline void record_host(void* p) {
  auto* r = static_cast<CallbackRecord*>(p);
  r->log->add(r->value);
}

// ---- graphs ----

struct Payload {
  std::atomic<int>* destroyed;
  Log* log;
};
inline void destroy_payload(void* p) {
  auto* payload = static_cast<Payload*>(p);
  payload->log->add(-1);
  payload->destroyed->fetch_add(1);
  delete payload;
}

// Begins a global capture on `s` and attaches a counting payload to the capture graph.
inline void capture_with_payload(CUstream s, std::atomic<int>* destroyed, Log* log) {
  CU_OK(api().cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CUstreamCaptureStatus st{};
  CUgraph capture_graph = nullptr;
  CU_OK(api().cuStreamGetCaptureInfo_v2(s, &st, nullptr, &capture_graph, nullptr, nullptr));
  CUuserObject obj = nullptr;
  CU_OK(api().cuUserObjectCreate(&obj, new Payload{destroyed, log}, destroy_payload, 1,
                                 CU_USER_OBJECT_NO_DESTRUCTOR_SYNC));
  CU_OK(api().cuGraphRetainUserObject(capture_graph, obj, 1, CU_GRAPH_USER_OBJECT_MOVE));
}

// A one-host-node graph running `f`, whose user object owns a counting payload.
inline CUgraph host_graph_with_payload(std::function<void()>* f, std::atomic<int>* destroyed, Log* log) {
  CUgraph g = nullptr;
  CU_OK(api().cuGraphCreate(&g, 0));
  CUDA_HOST_NODE_PARAMS p{call_function, f};
  CUgraphNode node = nullptr;
  CU_OK(api().cuGraphAddHostNode(&node, g, nullptr, 0, &p));
  CUuserObject obj = nullptr;
  CU_OK(api().cuUserObjectCreate(&obj, new Payload{destroyed, log}, destroy_payload, 1,
                                 CU_USER_OBJECT_NO_DESTRUCTOR_SYNC));
  CU_OK(api().cuGraphRetainUserObject(g, obj, 1, CU_GRAPH_USER_OBJECT_MOVE));
  return g;
}

// ---- kernels ----

// add(int* data, int amount): data[0] += amount (one thread); PTX for sm_70, JIT-compiled on
// the GPU; the emulator reads the kernel names and parameter sizes from it.
constexpr const char* kKernelPtx = R"(
.version 7.0
.target sm_70
.address_size 64

.visible .entry add(
  .param .u64 data,
  .param .u32 amount
)
{
  .reg .b32 %r<4>;
  .reg .b64 %rd<3>;
  ld.param.u64 %rd1, [data];
  ld.param.u32 %r1, [amount];
  cvta.to.global.u64 %rd2, %rd1;
  ld.global.u32 %r2, [%rd2];
  add.s32 %r3, %r2, %r1;
  st.global.u32 [%rd2], %r3;
  ret;
}
)";

// ---- green ----

inline CUdevResource device_sm_resource(int dev = 0) {
  CUdevResource r{};
  CU_OK(api().cuDeviceGetDevResource(dev, &r, CU_DEV_RESOURCE_TYPE_SM));
  REQUIRE(r.type == CU_DEV_RESOURCE_TYPE_SM);
  return r;
}

inline int compute_capability_major(int dev = 0) {
  int major = 0;
  CU_OK(api().cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
  return major;
}

// The size of a group of a split by count on compute capability 9.x: minCount rounded up to
// the granularity (8; 2 ignoring co-scheduling), at least the granularity.
inline unsigned cc9_group_size(unsigned min_count, unsigned granularity = 8) {
  return std::max(granularity, (min_count + granularity - 1) / granularity * granularity);
}

// A green context of device `dev` made of one group of at least `min_sms` SMs of a split of the
// whole device, and its CUcontext (cuCtxFromGreenCtx). Destroyed at scope exit unless the case
// destroyed it itself (forget()).
class GreenScope {
 public:
  explicit GreenScope(unsigned min_sms = 16, int dev = 0) {
    CUdevResource whole = device_sm_resource(dev);
    CUdevResource group{};
    unsigned n = 1;
    CU_OK(api().cuDevSmResourceSplitByCount(&group, &n, &whole, nullptr, 0, min_sms));
    REQUIRE(n == 1);
    sms_ = group.sm.smCount;
    CUdevResourceDesc desc = nullptr;
    CU_OK(api().cuDevResourceGenerateDesc(&desc, &group, 1));
    CU_OK(api().cuGreenCtxCreate(&green_, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM));
    CU_OK(api().cuCtxFromGreenCtx(&ctx_, green_));
  }
  ~GreenScope() {
    if (green_) api().cuGreenCtxDestroy(green_);
  }
  GreenScope(const GreenScope&) = delete;
  GreenScope& operator=(const GreenScope&) = delete;
  CUgreenCtx get() const { return green_; }
  CUcontext ctx() const { return ctx_; }  // the converted context
  unsigned sms() const { return sms_; }
  void forget() { green_ = nullptr; }  // the case destroyed it

 private:
  CUgreenCtx green_ = nullptr;
  CUcontext ctx_ = nullptr;
  unsigned sms_ = 0;
};

struct GreenStream {
  CUstream s = nullptr;
  explicit GreenStream(CUgreenCtx g, int priority = 0) {
    CU_OK(api().cuGreenCtxStreamCreate(&s, g, CU_STREAM_NON_BLOCKING, priority));
  }
  ~GreenStream() {
    if (s) api().cuStreamDestroy(s);
  }
  GreenStream(const GreenStream&) = delete;
  GreenStream& operator=(const GreenStream&) = delete;
};

// A host function with no state: safe whenever the driver runs it.
inline void sleep_20ms(void*) { std::this_thread::sleep_for(20ms); }

// An event made with `ctx` current (the current context is restored).
inline CUevent event_in(CUcontext ctx, CUcontext restore) {
  CUevent e = nullptr;
  CU_OK(api().cuCtxSetCurrent(ctx));
  CU_OK(api().cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
  CU_OK(api().cuCtxSetCurrent(restore));
  return e;
}

// ---- libraries ----

// Kernels lib_add(int* data, int amount) (data[0] += amount, one thread), lib_mixed (parameters
// of several alignments), lib_shared (1 KiB of static shared memory), lib_internal (not
// .visible) and a .func; variables, one of them managed. JIT-compiled on the GPU; the emulator
// reads the names, parameters, static shared memory and variables from it.
constexpr const char* kLibraryPtx = R"(
.version 7.0
.target sm_70
.address_size 64

.visible .global .align 4 .u32 counter;
.visible .global .align 4 .u32 initialized = 7;
.visible .global .align 4 .u32 table[3] = {1, 2, 3};
.visible .global .attribute(.managed) .align 4 .u32 managed_value;
.global .align 4 .u32 hidden_var;

.func helper()
{
  ret;
}

.visible .entry lib_add(
  .param .u64 data,
  .param .u32 amount
)
{
  .reg .b32 %r<4>;
  .reg .b64 %rd<3>;
  ld.param.u64 %rd1, [data];
  ld.param.u32 %r1, [amount];
  cvta.to.global.u64 %rd2, %rd1;
  ld.global.u32 %r2, [%rd2];
  add.s32 %r3, %r2, %r1;
  st.global.u32 [%rd2], %r3;
  ret;
}

.visible .entry lib_mixed(
  .param .u32 a,
  .param .u64 b,
  .param .align 8 .b8 s[12],
  .param .u16 c
)
{
  ret;
}

.visible .entry lib_shared(
  .param .u64 out
)
{
  .shared .align 4 .b8 sbuf[1024];
  .reg .b32 %r<3>;
  .reg .b64 %rd<3>;
  mov.u32 %r1, 5;
  st.shared.u32 [sbuf], %r1;
  bar.sync 0;
  ld.shared.u32 %r2, [sbuf+4];
  ld.param.u64 %rd1, [out];
  cvta.to.global.u64 %rd2, %rd1;
  st.global.u32 [%rd2], %r2;
  ret;
}

.entry lib_internal()
{
  ret;
}
)";

// PTX whose braces do not balance: ptxas refuses it (CUDA_ERROR_INVALID_PTX), and so does the
// emulator.
constexpr const char* kUnbalancedPtx = R"(
.version 7.0
.target sm_70
.address_size 64

.visible .entry broken(
  .param .u32 a
)
{
  ret;
)";

constexpr const char* kGarbageImage = "this is not a cubin";

struct LibraryHandle {
  CUlibrary lib = nullptr;
  explicit LibraryHandle(const char* image = kLibraryPtx) {
    CU_OK(api().cuLibraryLoadData(&lib, image, nullptr, nullptr, 0, nullptr, nullptr, 0));
  }
  ~LibraryHandle() {
    if (lib) api().cuLibraryUnload(lib);
  }
  LibraryHandle(const LibraryHandle&) = delete;
  LibraryHandle& operator=(const LibraryHandle&) = delete;
  CUkernel kernel(const char* name) const {
    CUkernel k = nullptr;
    CU_OK(api().cuLibraryGetKernel(&k, lib, name));
    return k;
  }
};

// lib_add on the CPU: data[0] += amount.
inline void cpu_lib_add(const custream_emu_kernel_launch* l) {
  int* data = nullptr;
  int amount = 0;
  std::memcpy(&data, l->params[0], sizeof data);
  std::memcpy(&amount, l->params[1], sizeof amount);
  *data += amount;
}

// On the emulator, registers lib_add's CPU twin for the scope, so that results can be checked
// on both drivers.
class LibAddTwin {
 public:
  LibAddTwin() {
    if (driver().emulated) registrar()("lib_add", cpu_lib_add, nullptr, nullptr, 0);
  }
  ~LibAddTwin() {
    if (driver().emulated) registrar()("lib_add", nullptr, nullptr, nullptr, 0);
  }
  LibAddTwin(const LibAddTwin&) = delete;
  LibAddTwin& operator=(const LibAddTwin&) = delete;

 private:
  static decltype(&custream_emu_register_kernel) registrar() {
    auto r = emu_control<decltype(&custream_emu_register_kernel)>("custream_emu_register_kernel");
    REQUIRE(r != nullptr);
    return r;
  }
};

inline int read_int(CUdeviceptr p, CUstream s) {
  int v = -1;
  CU_OK(api().cuMemcpyDtoHAsync(&v, p, sizeof v, s));
  CU_OK(api().cuStreamSynchronize(s));
  return v;
}

inline CUlaunchConfig launch_config(CUstream s, unsigned grid = 1, unsigned block = 1) {
  CUlaunchConfig c{};
  c.gridDimX = grid;
  c.gridDimY = c.gridDimZ = 1;
  c.blockDimX = block;
  c.blockDimY = c.blockDimZ = 1;
  c.hStream = s;
  return c;
}

// cuLaunchKernelEx of f with one attribute.
inline CUresult launch_ex_with(CUfunction f, CUlaunchConfig c, CUlaunchAttribute attr, void** args) {
  c.attrs = &attr;
  c.numAttrs = 1;
  return api().cuLaunchKernelEx(&c, f, args, nullptr);
}

inline CUlaunchAttribute cluster_attr(unsigned x, unsigned y = 1, unsigned z = 1) {
  CUlaunchAttribute a{};
  a.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  a.value.clusterDim.x = x;
  a.value.clusterDim.y = y;
  a.value.clusterDim.z = z;
  return a;
}

// Ends a capture and answers what cuStreamEndCapture said (a graph that came back is destroyed).
inline std::string end_capture_result(CUstream s) {
  CUgraph g = nullptr;
  const std::string r = nm(api().cuStreamEndCapture(s, &g));
  if (g) api().cuGraphDestroy(g);
  return r;
}

inline std::set<std::string> kernel_names(CUlibrary lib) {
  unsigned count = 0;
  CU_OK(api().cuLibraryGetKernelCount(&count, lib));
  std::vector<CUkernel> ks(count);
  if (count) CU_OK(api().cuLibraryEnumerateKernels(ks.data(), count, lib));
  std::set<std::string> names;
  for (CUkernel k : ks) {
    const char* n = nullptr;
    CU_OK(api().cuKernelGetName(&n, k));
    names.insert(n);
  }
  return names;
}

// The setup the launching cases share, made after REQUIRE_LIBRARIES(): lib_add's CPU twin (on
// the emulator), the primary context current, a non-blocking stream `s`, an int on the device
// set to 0 on it, and lib_add's arguments `args` for that int and `amount` (1 unless a case
// changes it).
struct LaunchFixture {
  LibAddTwin twin;
  PrimaryScope scope;
  StreamHandle stream{CU_STREAM_NON_BLOCKING};
  DeviceBuffer buf{sizeof(int)};
  CUstream s = stream.s;
  CUdeviceptr p = buf.p;
  int amount = 1;
  void* args[2] = {&p, &amount};

  LaunchFixture() { CU_OK(api().cuMemsetD32Async(buf.p, 0, 1, s)); }
  LaunchFixture(const LaunchFixture&) = delete;
  LaunchFixture& operator=(const LaunchFixture&) = delete;
  // The int, once the stream's work so far has completed.
  int value() const { return read_int(buf.p, s); }
};

// ... and a library of kLibraryPtx, its kernel `k` (lib_add unless named) and k's function `f`
// in the primary context.
struct LibraryFixture : LaunchFixture {
  LibraryHandle lib;
  CUkernel k = nullptr;
  CUfunction f = nullptr;

  explicit LibraryFixture(const char* kernel = "lib_add") : k(lib.kernel(kernel)) {
    CU_OK(api().cuKernelGetFunction(&f, k));
  }
};

// Checks the (offset, size) of each parameter of `k` (cuKernelGetParamInfo, with the primary
// context current, as the H200 needs), and that the index past the last, and SIZE_MAX, are
// CUDA_ERROR_INVALID_VALUE.
inline void check_param_layout(CUkernel k, const std::vector<std::pair<size_t, size_t>>& expected) {
  PrimaryScope scope;
  for (size_t i = 0; i < expected.size(); ++i) {
    size_t offset = 777, size = 777;
    INFO(i);
    CU_OK(api().cuKernelGetParamInfo(k, i, &offset, &size));
    CHECK(offset == expected[i].first);
    CHECK(size == expected[i].second);
  }
  size_t offset = 777, size = 777;
  CU_CHECK_EQ(api().cuKernelGetParamInfo(k, expected.size(), &offset, &size),
              CUDA_ERROR_INVALID_VALUE);
  CU_CHECK_EQ(api().cuKernelGetParamInfo(k, SIZE_MAX, &offset, &size), CUDA_ERROR_INVALID_VALUE);
}

// ---- kernel_attributes ----

// lib_params(.u64 a, .u32 b, .f32 c, .u64 d): parameters at offsets 0, 8, 12 and 16.
constexpr const char* kParamsPtx = R"(
.version 7.0
.target sm_70
.address_size 64

.visible .entry lib_params(
  .param .u64 a,
  .param .u32 b,
  .param .f32 c,
  .param .u64 d
)
{
  ret;
}
)";

// Prints a value that the emulator's model only approximates, so that a run on a GPU records
// what the GPU answered ("fact: what = value").
inline void fact(const std::string& what, long long value) {
  std::printf("fact: %s = %lld\n", what.c_str(), value);
  std::fflush(stdout);
}

inline int sm_count(int dev = 0) {
  int sms = 0;
  CU_OK(api().cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
  return sms;
}

inline int occupancy(CUfunction f, int block, size_t dynamic_shared) {
  int n = -1;
  CU_OK(api().cuOccupancyMaxActiveBlocksPerMultiprocessor(&n, f, block, dynamic_shared));
  return n;
}

inline int func_attribute(CUfunction f, CUfunction_attribute a) {
  int v = -1;
  CU_OK(api().cuFuncGetAttribute(&v, a, f));
  return v;
}

// What a call answering a number answered: the number, or the error's name.
inline std::string number_or_error(CUresult r, int n) {
  return r == CUDA_SUCCESS ? std::to_string(n) : nm(r);
}

inline std::string occupancy_of(CUfunction f, int block, size_t dynamic_shared) {
  int n = -1;
  const CUresult r =
      api().cuOccupancyMaxActiveBlocksPerMultiprocessor(&n, f, block, dynamic_shared);
  return number_or_error(r, n);
}

// cuOccupancyMaxActiveClusters of f for configuration c with the given attributes.
inline CUresult clusters_with(int* n, CUfunction f, CUlaunchConfig c,
                       std::vector<CUlaunchAttribute> attrs) {
  c.attrs = attrs.empty() ? nullptr : attrs.data();
  c.numAttrs = static_cast<unsigned>(attrs.size());
  return api().cuOccupancyMaxActiveClusters(n, f, &c);
}

// The two arguments of a lib_add launch, read from a kernel node's copies.
inline std::pair<CUdeviceptr, int> lib_add_arguments(void** params) {
  std::pair<CUdeviceptr, int> out{0, -1};
  std::memcpy(&out.first, params[0], sizeof out.first);
  std::memcpy(&out.second, params[1], sizeof out.second);
  return out;
}

// ---- memops ----

constexpr unsigned kMapped = CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP;

// cuMemHostAlloc'd memory, zeroed, with its device pointer; freed with cuMemFreeHost.
struct HostMapped {
  void* p = nullptr;
  CUdeviceptr d = 0;
  explicit HostMapped(size_t bytes, unsigned flags = kMapped) {
    CU_OK(api().cuMemHostAlloc(&p, bytes, flags));
    REQUIRE(p != nullptr);
    std::memset(p, 0, bytes);
    CU_OK(api().cuMemHostGetDevicePointer(&d, p, 0));
  }
  ~HostMapped() {
    if (p) api().cuMemFreeHost(p);
  }
  HostMapped(const HostMapped&) = delete;
  HostMapped& operator=(const HostMapped&) = delete;
};

// What a watcher thread does with a word the stream writes: acquire loads and release stores.
template <class U>
inline U load_word(const void* base, size_t offset) {
  return __atomic_load_n(reinterpret_cast<const U*>(static_cast<const char*>(base) + offset),
                         __ATOMIC_ACQUIRE);
}
template <class U>
inline void store_word(void* base, size_t offset, U value) {
  __atomic_store_n(reinterpret_cast<U*>(static_cast<char*>(base) + offset), value,
                   __ATOMIC_RELEASE);
}

// A host function that holds its stream until the test opens the gate (the destructor opens
// it, so that a failed case does not leave the stream blocked on a destroyed gate).
struct Gate {
  std::atomic<bool> entered{false};
  std::atomic<bool> open{false};
  std::atomic<bool> left{false};
  std::function<void()> fn = [this] {
    entered = true;
    while (!open.load()) std::this_thread::sleep_for(1ms);
    left = true;
  };
  ~Gate() {
    open = true;
    if (entered.load()) wait_until([this] { return left.load(); });
  }
};

// Runs `f` at scope exit, also when a REQUIRE throws: releases what a failed case left blocked
// before the streams and the memory it waits on go.
struct AtExit {
  std::function<void()> f;
  ~AtExit() { f(); }
};

inline int device_attribute(CUdevice_attribute a) {
  int v = -1;
  CU_OK(api().cuDeviceGetAttribute(&v, a, 0));
  return v;
}

// ---- emulator_only ----

// add(int* data, int amount) on the CPU: data[0] += amount, as registered with the emulator.
inline void cpu_add(const custream_emu_kernel_launch* l) {
  int* data = nullptr;
  int amount = 0;
  std::memcpy(&data, l->params[0], sizeof data);
  std::memcpy(&amount, l->params[1], sizeof amount);
  *data += amount * static_cast<int>(l->grid[0]) * *static_cast<int*>(l->user);
}

// ---- fidelity ----

// cuMemFree of memory that a held stream will still write (memset, then copied back to
// host-mapped memory, then a written word): the free returns only once that work has run. The
// stream is destroyed first, unless `destroy` is false.
inline void expect_free_waits_for_held_writer(bool destroy) {
  HostMapped m(4096);  // word 0: gate; word 2: done; bytes 64..319: the copy
  CUdeviceptr buf = 0;
  CU_OK(api().cuMemAlloc(&buf, 256));
  CUstream s = nullptr;
  CU_OK(api().cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  std::thread opener;
  AtExit release{[&] {
    store_word<uint32_t>(m.p, 0, 1);
    if (opener.joinable()) opener.join();
    if (!destroy) api().cuStreamSynchronize(s);
  }};
  CU_OK(api().cuStreamWaitValue32(s, m.d, 1, CU_STREAM_WAIT_VALUE_EQ));
  CU_OK(api().cuMemsetD32Async(buf, 0xC0FFEEu, 64, s));
  CU_OK(api().cuMemcpyDtoHAsync(static_cast<char*>(m.p) + 64, buf, 256, s));
  CU_OK(api().cuStreamWriteValue32(s, m.d + 8, 1, 0));
  if (destroy) CU_OK(api().cuStreamDestroy(s));
  CU_EQ(api().cuStreamQuery(CU_STREAM_LEGACY), CUDA_SUCCESS);  // a non-blocking stream
  opener = std::thread([&m] {
    std::this_thread::sleep_for(200ms);
    store_word<uint32_t>(m.p, 0, 1);
  });
  CU_OK(api().cuMemFree(buf));
  const uint32_t done_when_freed = load_word<uint32_t>(m.p, 8);
  opener.join();
  CHECK(done_when_freed == 1u);  // the free returned after the stream's last operation
  CHECK(load_word<uint32_t>(m.p, 64) == 0xC0FFEEu);
  CHECK(load_word<uint32_t>(m.p, 64 + 252) == 0xC0FFEEu);
}

// fault_store(p): *p = 1. Launched with p = 8, an address no allocation holds: on a GPU an
// illegal address (CUDA_ERROR_ILLEGAL_ADDRESS, sticky); the emulator's CPU twin injects the
// same sticky error at that point of the stream.
constexpr const char* kFaultPtx = R"(
.version 7.0
.target sm_70
.address_size 64

.visible .entry fault_store(
  .param .u64 p
)
{
  .reg .b32 %r<2>;
  .reg .b64 %rd<2>;
  ld.param.u64 %rd1, [p];
  mov.u32 %r1, 1;
  st.global.u32 [%rd1], %r1;
  ret;
}
)";

// Status of the last callback (cuStreamAddCallback) that ran, and how many ran.
std::atomic<int> g_callback_status{-1};
std::atomic<int> g_callback_runs{0};

inline void CUDA_CB record_fault_callback(CUstream, CUresult status, void*) {
  g_callback_status = static_cast<int>(status);
  ++g_callback_runs;
}

inline void cpu_fault_store(const custream_emu_kernel_launch*) {
  emu_control<decltype(&custream_emu_set_sticky_error)>("custream_emu_set_sticky_error")(
      CUDA_ERROR_ILLEGAL_ADDRESS);
}

constexpr const char* kStickyChildEnv = "CUSTREAM_CONFORMANCE_STICKY_CHILD";

// Runs the hidden test case `name` of this binary in a child process (a sticky error cannot be
// undone in a process) and answers its exit status and output.
inline std::pair<int, std::string> run_child_case(const std::string& name) {
  char exe[4096] = {};
  REQUIRE(readlink("/proc/self/exe", exe, sizeof exe - 1) > 0);
  const std::string cmd = std::string(kStickyChildEnv) + "=1 '" + exe + "' '" + name + "' 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::string out;
  char buf[4096];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  return {status, out};
}

// cuCtxCreate at each of its ABIs (2: flags, 3: execution affinity, 4: CUctxCreateParams, with
// NULL and with empty parameters): what each answers for `flags` on device 0. A context made is
// destroyed at once.
inline std::vector<std::string> ctx_create_results(unsigned flags) {
  void* v3 = nullptr;
  void* v4 = nullptr;
  CUdriverProcAddressQueryResult st{};
  CU_OK(driver().get_proc("cuCtxCreate", &v3, 11040, CU_GET_PROC_ADDRESS_DEFAULT, &st));
  CU_OK(driver().get_proc("cuCtxCreate", &v4, 12050, CU_GET_PROC_ADDRESS_DEFAULT, &st));
  const auto create_v3 = reinterpret_cast<PFN_cuCtxCreate_v11040>(v3);
  const auto create_v4 = reinterpret_cast<PFN_cuCtxCreate_v12050>(v4);
  CUctxCreateParams params{};
  const std::function<CUresult(CUcontext*)> creates[] = {
      [&](CUcontext* c) { return api().cuCtxCreate(c, flags, 0); },
      [&](CUcontext* c) { return create_v3(c, nullptr, 0, flags, 0); },
      [&](CUcontext* c) { return create_v4(c, nullptr, flags, 0); },
      [&](CUcontext* c) { return create_v4(c, &params, flags, 0); },
  };
  std::vector<std::string> out;
  for (const auto& create : creates) {
    CUcontext c = nullptr;
    const CUresult r = create(&c);
    out.push_back(nm(r));
    if (r == CUDA_SUCCESS) CU_OK(api().cuCtxDestroy(c));
  }
  return out;
}

}  // namespace
}  // namespace conformance

// Driver conformance: Emulator-only: fault injection and leak accounting
#include "helpers.hpp"

namespace conformance {
namespace {

TEST_CASE("fault injection: the nth call fails without side effects", "[emu-only]") {
  REQUIRE_EMULATOR();
  auto fail = emu_control<void (*)(const char*, int, CUresult)>("custream_emu_fail_call");
  auto reset = emu_control<void (*)()>("custream_emu_reset");
  auto live = emu_control<long (*)()>("custream_emu_live_objects");
  REQUIRE(fail);
  REQUIRE(reset);
  REQUIRE(live);
  PrimaryScope scope;
  const long before = live();
  fail("cuStreamCreate", 2, CUDA_ERROR_OUT_OF_MEMORY);
  CUstream a = nullptr, b = nullptr, c = nullptr;
  CU_OK(api().cuStreamCreate(&a, 0));
  CU_EQ(api().cuStreamCreate(&b, 0), CUDA_ERROR_OUT_OF_MEMORY);
  CHECK(b == nullptr);
  CHECK(live() == before + 1);
  CU_OK(api().cuStreamCreate(&c, 0));
  CU_OK(api().cuStreamDestroy(a));
  CU_OK(api().cuStreamDestroy(c));
  CHECK(live() == before);
  // Every ABI version of an entry point counts as the same entry point.
  fail("cuStreamGetCtx", 1, CUDA_ERROR_INVALID_CONTEXT);
  CUcontext ctx = nullptr;
  CUgreenCtx green = nullptr;
  CU_EQ(api().cuStreamGetCtx_v2(nullptr, &ctx, &green), CUDA_ERROR_INVALID_CONTEXT);
  CU_OK(api().cuStreamGetCtx(nullptr, &ctx));
  fail("cuEventRecord", 1, CUDA_ERROR_LAUNCH_FAILED);
  reset();
  EventHandle e;
  CU_OK(api().cuEventRecord(e.e, nullptr));
}

TEST_CASE("fault injection: sticky error", "[emu-only]") {
  REQUIRE_EMULATOR();
  auto sticky = emu_control<void (*)(CUresult)>("custream_emu_set_sticky_error");
  REQUIRE(sticky);
  PrimaryScope scope;
  StreamHandle s;
  sticky(CUDA_ERROR_ILLEGAL_ADDRESS);
  CU_EQ(api().cuStreamQuery(s.s), CUDA_ERROR_ILLEGAL_ADDRESS);
  CU_EQ(api().cuStreamSynchronize(s.s), CUDA_ERROR_ILLEGAL_ADDRESS);
  CUevent e = nullptr;
  CU_EQ(api().cuEventCreate(&e, 0), CUDA_ERROR_ILLEGAL_ADDRESS);
  const char* name = nullptr;
  CU_OK(api().cuGetErrorName(CUDA_ERROR_ILLEGAL_ADDRESS, &name));
  int v = 0;
  CU_OK(api().cuDriverGetVersion(&v));
  sticky(CUDA_SUCCESS);
  CU_OK(api().cuStreamQuery(s.s));
}

TEST_CASE("live objects return to their baseline", "[emu-only]") {
  REQUIRE_EMULATOR();
  auto live = emu_control<long (*)()>("custream_emu_live_objects");
  auto idle = emu_control<int (*)(int)>("custream_emu_wait_idle");
  REQUIRE(live);
  REQUIRE(idle);
  PrimaryScope scope;
  REQUIRE(idle(5000) == 1);
  const long before = live();
  {
    StreamHandle s;
    EventHandle e;
    DeviceBuffer b(64);
    CUdeviceptr p = 0;
    CU_OK(api().cuMemAllocAsync(&p, 128, s.s));
    CU_OK(api().cuMemsetD8Async(p, 1, 128, s.s));
    CU_OK(api().cuMemFreeAsync(p, s.s));  // no longer counted
    CUgraph g = nullptr;
    CU_OK(api().cuGraphCreate(&g, 0));
    CUgraphNode n = nullptr;
    CU_OK(api().cuGraphAddEmptyNode(&n, g, nullptr, 0));
    CUgraphExec x = instantiate(g);
    CHECK(live() == before + 5);  // stream, event, buffer, graph, executable
    GreenScope green;
    GreenStream gs(green.get());
    CUcontext created = nullptr;
    CU_OK(api().cuCtxCreate(&created, 0, 0));
    CU_OK(api().cuCtxPopCurrent(nullptr));
    CHECK(live() == before + 8);  // and a green context, its stream, a created context
    CU_OK(api().cuCtxDestroy(created));
    CU_OK(api().cuGraphLaunch(x, gs.s));
    CU_OK(api().cuGraphLaunch(x, s.s));
    CU_OK(api().cuGraphExecDestroy(x));
    CU_OK(api().cuGraphDestroy(g));
  }
  CHECK(idle(5000) == 1);
  CHECK(live() == before);
}

TEST_CASE("emulator: a destroyed created context's streams answer CONTEXT_IS_DESTROYED",
          "[emu-only]") {
  REQUIRE_EMULATOR();
  auto live = emu_control<long (*)()>("custream_emu_live_objects");
  auto idle = emu_control<int (*)(int)>("custream_emu_wait_idle");
  REQUIRE(live);
  REQUIRE(idle);
  PrimaryScope scope;
  EventHandle primary_event;  // made first: a freed handle's address is not reused for it
  REQUIRE(idle(5000) == 1);
  const long before = live();
  CUcontext created = nullptr;
  CU_OK(api().cuCtxCreate(&created, 0, 0));
  CUstream s = nullptr;
  CU_OK(api().cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUevent e = nullptr;
  CU_OK(api().cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
  CUmodule m = nullptr;
  CU_OK(api().cuModuleLoadData(&m, kKernelPtx));
  CHECK(live() == before + 4);  // context, stream, event, module
  CU_OK(api().cuEventRecord(e, s));
  CU_OK(api().cuCtxDestroy(created));
  CHECK(live() == before);  // destroyed with their context
  // Where the H200 crashes, the emulator answers CONTEXT_IS_DESTROYED.
  CU_CHECK_EQ(api().cuStreamQuery(s), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  CU_CHECK_EQ(api().cuStreamSynchronize(s), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  CUcontext c = nullptr;
  CU_CHECK_EQ(api().cuStreamGetCtx(s, &c), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  CUgreenCtx g = nullptr;
  CU_CHECK_EQ(api().cuStreamGetCtx_v2(s, &c, &g), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  CU_CHECK_EQ(api().cuEventRecord(primary_event.e, s), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  std::function<void()> nothing = [] {};
  CU_CHECK_EQ(launch(s, &nothing), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  CU_CHECK_EQ(api().cuStreamDestroy(s), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  CUdevice dev = -1;
  CU_CHECK_EQ(api().cuCtxGetDevice_v2(&dev, created), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  // Its events and modules went with it.
  CU_CHECK_EQ(api().cuEventQuery(e), CUDA_ERROR_INVALID_HANDLE);
  CU_CHECK_EQ(api().cuModuleUnload(m), CUDA_ERROR_INVALID_HANDLE);
  CU_CHECK_EQ(api().cuCtxSetCurrent(created), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  CHECK(live() == before);
}

TEST_CASE("emulator: green contexts in the live-object count, and fault injection", "[emu-only]") {
  REQUIRE_EMULATOR();
  auto live = emu_control<long (*)()>("custream_emu_live_objects");
  auto idle = emu_control<int (*)(int)>("custream_emu_wait_idle");
  auto fail = emu_control<void (*)(const char*, int, CUresult)>("custream_emu_fail_call");
  auto reset = emu_control<void (*)()>("custream_emu_reset");
  REQUIRE(live);
  REQUIRE(idle);
  REQUIRE(fail);
  REQUIRE(reset);
  PrimaryScope scope;
  REQUIRE(idle(5000) == 1);
  const long before = live();
  {
    GreenScope green;
    GreenStream gs(green.get());
    CHECK(live() == before + 2);  // the green context and its stream; descriptors are not
  }
  CHECK(live() == before);
  // A stream left alive when its green context is destroyed leaks (cuda.h): still counted.
  CUstream orphan = nullptr;
  {
    GreenScope green;
    CU_OK(api().cuGreenCtxStreamCreate(&orphan, green.get(), CU_STREAM_NON_BLOCKING, 0));
  }
  CHECK(live() == before + 1);
  CU_CHECK_EQ(api().cuStreamDestroy(orphan), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  // The converted context of a destroyed green context cannot be made current (the H200 says
  // CUDA_SUCCESS and may then abort on a double free in the driver).
  {
    CUcontext converted = nullptr;
    {
      GreenScope gone;
      converted = gone.ctx();
    }
    CU_CHECK_EQ(api().cuCtxSetCurrent(converted), CUDA_ERROR_CONTEXT_IS_DESTROYED);
    CU_CHECK_EQ(api().cuCtxPushCurrent(converted), CUDA_ERROR_CONTEXT_IS_DESTROYED);
    CUcontext now = nullptr;
    CU_OK(api().cuCtxGetCurrent(&now));
    CHECK(now == scope.ctx());
  }

  // Every new entry point goes through fault injection: the injected error, no side effect.
  GreenScope green;
  GreenStream gs(green.get());
  EventHandle e;
  CUdevResource whole = device_sm_resource();
  CUdevResource r{};
  unsigned n = 1;
  CUdevResourceDesc desc = nullptr;
  CU_OK(api().cuDevResourceGenerateDesc(&desc, &whole, 1));
  CUgreenCtx g = nullptr;
  CUcontext c = nullptr;
  CUstream s = nullptr;
  unsigned long long id = 0;
  const long mid = live();
  const std::vector<std::pair<const char*, std::function<CUresult()>>> calls = {
      {"cuDeviceGetDevResource",
       [&] { return api().cuDeviceGetDevResource(0, &r, CU_DEV_RESOURCE_TYPE_SM); }},
      {"cuCtxGetDevResource",
       [&] { return api().cuCtxGetDevResource(scope.ctx(), &r, CU_DEV_RESOURCE_TYPE_SM); }},
      {"cuGreenCtxGetDevResource",
       [&] { return api().cuGreenCtxGetDevResource(green.get(), &r, CU_DEV_RESOURCE_TYPE_SM); }},
      {"cuDevSmResourceSplitByCount",
       [&] { return api().cuDevSmResourceSplitByCount(&r, &n, &whole, nullptr, 0, 8); }},
      {"cuDevResourceGenerateDesc", [&] { return api().cuDevResourceGenerateDesc(&desc, &r, 1); }},
      {"cuGreenCtxCreate",
       [&] { return api().cuGreenCtxCreate(&g, desc, 0, CU_GREEN_CTX_DEFAULT_STREAM); }},
      {"cuGreenCtxDestroy", [&] { return api().cuGreenCtxDestroy(green.get()); }},
      {"cuCtxFromGreenCtx", [&] { return api().cuCtxFromGreenCtx(&c, green.get()); }},
      {"cuStreamGetGreenCtx", [&] { return api().cuStreamGetGreenCtx(gs.s, &g); }},
      {"cuGreenCtxRecordEvent", [&] { return api().cuGreenCtxRecordEvent(green.get(), e.e); }},
      {"cuGreenCtxWaitEvent", [&] { return api().cuGreenCtxWaitEvent(green.get(), e.e); }},
      {"cuGreenCtxGetId", [&] { return api().cuGreenCtxGetId(green.get(), &id); }},
      {"cuCtxRecordEvent", [&] { return api().cuCtxRecordEvent(scope.ctx(), e.e); }},
      {"cuCtxWaitEvent", [&] { return api().cuCtxWaitEvent(scope.ctx(), e.e); }},
      {"cuGreenCtxStreamCreate",
       [&] { return api().cuGreenCtxStreamCreate(&s, green.get(), CU_STREAM_NON_BLOCKING, 0); }},
      {"cuCtxGetId", [&] { return api().cuCtxGetId(scope.ctx(), &id); }},
  };
  for (const auto& [name, call] : calls) {
    INFO(name);
    fail(name, 1, CUDA_ERROR_LAUNCH_FAILED);
    CU_CHECK_EQ(call(), CUDA_ERROR_LAUNCH_FAILED);
    CHECK(live() == mid);
  }
  reset();
  CHECK(g == nullptr);
  CHECK(s == nullptr);
  CU_OK(api().cuGreenCtxGetId(green.get(), &id));  // still alive
}

TEST_CASE("emulator: an unloaded library's handles answer INVALID_HANDLE where the H200 crashes",
          "[emu-only][library]") {
  REQUIRE_EMULATOR();
  PrimaryScope scope;
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  CUlibrary lib = nullptr;
  CU_OK(api().cuLibraryLoadData(&lib, kLibraryPtx, nullptr, nullptr, 0, nullptr, nullptr, 0));
  CUkernel k = nullptr, never_loaded = nullptr;
  CU_OK(api().cuLibraryGetKernel(&k, lib, "lib_add"));
  CU_OK(api().cuLibraryGetKernel(&never_loaded, lib, "lib_shared"));
  CUfunction f = nullptr;
  CU_OK(api().cuKernelGetFunction(&f, k));
  // A graph executable holding a launch of the kernel (the function and the CUkernel).
  CU_OK(api().cuStreamBeginCapture(s.s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU_OK(api().cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s.s, nullptr, nullptr));
  CUgraph graph = nullptr;
  CU_OK(api().cuStreamEndCapture(s.s, &graph));
  CUgraphExec exec = instantiate(graph);
  CU_OK(api().cuGraphLaunch(exec, s.s));
  CU_OK(api().cuLibraryUnload(lib));
  CU_OK(api().cuStreamSynchronize(s.s));
  // Launching the executable now: the H200 crashed once in two runs.
  CU_CHECK_EQ(api().cuGraphLaunch(exec, s.s), CUDA_ERROR_INVALID_HANDLE);
  CU_OK(api().cuGraphExecDestroy(exec));
  CU_OK(api().cuGraphDestroy(graph));
  // The H200 answers the first three from freed memory (CUDA_SUCCESS); the others crash it
  // (SIGSEGV; a second cuLibraryUnload aborts on a double free).
  const char* name = nullptr;
  int v = 0;
  CUlibrary back = nullptr;
  CU_CHECK_EQ(api().cuKernelGetName(&name, k), CUDA_ERROR_INVALID_HANDLE);
  CU_CHECK_EQ(api().cuKernelGetAttribute(&v, CU_FUNC_ATTRIBUTE_NUM_REGS, k, 0),
              CUDA_ERROR_INVALID_HANDLE);
  CU_CHECK_EQ(api().cuKernelGetLibrary(&back, k), CUDA_ERROR_INVALID_HANDLE);
  CU_CHECK_EQ(api().cuKernelGetFunction(&f, k), CUDA_ERROR_INVALID_HANDLE);
  CU_CHECK_EQ(api().cuKernelGetFunction(&f, never_loaded), CUDA_ERROR_INVALID_HANDLE);
  CU_CHECK_EQ(api().cuLaunchKernel(reinterpret_cast<CUfunction>(k), 1, 1, 1, 1, 1, 1, 0, s.s,
                                   nullptr, nullptr),
              CUDA_ERROR_INVALID_HANDLE);
  CU_CHECK_EQ(
      api().cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 1000, k, 0),
      CUDA_ERROR_INVALID_HANDLE);
  size_t offset = 0, size = 0;
  CU_CHECK_EQ(api().cuKernelGetParamInfo(k, 0, &offset, &size), CUDA_ERROR_INVALID_HANDLE);
  CUkernel again = nullptr;
  unsigned count = 0;
  CU_CHECK_EQ(api().cuLibraryGetKernel(&again, lib, "lib_add"), CUDA_ERROR_INVALID_HANDLE);
  CU_CHECK_EQ(api().cuLibraryGetKernelCount(&count, lib), CUDA_ERROR_INVALID_HANDLE);
  CU_CHECK_EQ(api().cuLibraryEnumerateKernels(&again, 1, lib), CUDA_ERROR_INVALID_HANDLE);
  CUmodule m = nullptr;
  CU_CHECK_EQ(api().cuLibraryGetModule(&m, lib), CUDA_ERROR_INVALID_HANDLE);
  CUdeviceptr p = 0;
  CU_CHECK_EQ(api().cuLibraryGetGlobal(&p, nullptr, lib, "counter"), CUDA_ERROR_INVALID_HANDLE);
  CU_CHECK_EQ(api().cuLibraryGetManaged(&p, nullptr, lib, "managed_value"),
              CUDA_ERROR_INVALID_HANDLE);
  CU_CHECK_EQ(api().cuLibraryUnload(lib), CUDA_ERROR_INVALID_HANDLE);

  // A destroyed context forgets the library's module there; the library stays loaded.
  LibraryHandle kept;
  CUcontext created = nullptr;
  CU_OK(api().cuCtxCreate(&created, 0, 0));
  CU_OK(api().cuLibraryGetModule(&m, kept.lib));
  CUfunction in_created = nullptr;
  CU_OK(api().cuKernelGetFunction(&in_created, kept.kernel("lib_add")));
  CU_OK(api().cuCtxDestroy(created));
  CUfunction g = nullptr;
  CU_CHECK_EQ(api().cuModuleGetFunction(&g, m, "lib_add"), CUDA_ERROR_INVALID_HANDLE);
  CU_CHECK_EQ(api().cuLaunchKernel(in_created, 1, 1, 1, 1, 1, 1, 0, s.s, nullptr, nullptr),
              CUDA_ERROR_INVALID_HANDLE);
  CU_OK(api().cuKernelGetFunction(&g, kept.kernel("lib_add")));
  // NULL option arrays with a count: refused (the H200 crashes).
  CU_CHECK_EQ(api().cuLibraryLoadData(&lib, kLibraryPtx, nullptr, nullptr, 0, nullptr, nullptr, 1),
              CUDA_ERROR_INVALID_VALUE);
}

TEST_CASE("emulator: a library of a binary image resolves any kernel name", "[emu-only][library]") {
  REQUIRE_EMULATOR();
  auto register_kernel =
      emu_control<decltype(&custream_emu_register_kernel)>("custream_emu_register_kernel");
  REQUIRE(register_kernel != nullptr);
  PrimaryScope scope;
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  const unsigned char elf[] = {0x7f, 'E', 'L', 'F', 2, 1, 1, 0};
  LibraryHandle lib(reinterpret_cast<const char*>(elf));
  unsigned count = 99;
  CU_OK(api().cuLibraryGetKernelCount(&count, lib.lib));
  CHECK(count == 0);
  CUkernel k = lib.kernel("bin_add");
  CU_OK(api().cuLibraryGetKernelCount(&count, lib.lib));
  CHECK(count == 1);
  size_t offset = 0, size = 0;
  CU_CHECK_EQ(api().cuKernelGetParamInfo(k, 0, &offset, &size), CUDA_ERROR_NOT_SUPPORTED);
  CUdeviceptr p = 0;
  CU_CHECK_EQ(api().cuLibraryGetGlobal(&p, nullptr, lib.lib, "counter"), CUDA_ERROR_NOT_FOUND);
  // A registered CPU implementation needs the parameter sizes.
  DeviceBuffer buf(sizeof(int));
  CU_OK(api().cuMemsetD32Async(buf.p, 0, 1, s.s));
  CUdeviceptr dp = buf.p;
  int amount = 4;
  void* args[] = {&dp, &amount};
  REQUIRE(register_kernel("bin_add", cpu_lib_add, nullptr, nullptr, 0) == 0);
  CU_CHECK_EQ(api().cuLaunchKernel(reinterpret_cast<CUfunction>(k), 1, 1, 1, 1, 1, 1, 0, s.s, args,
                                   nullptr),
              CUDA_ERROR_NOT_SUPPORTED);
  const size_t sizes[] = {sizeof(CUdeviceptr), sizeof(int)};
  REQUIRE(register_kernel("bin_add", cpu_lib_add, nullptr, sizes, 2) == 0);
  CU_OK(api().cuLaunchKernel(reinterpret_cast<CUfunction>(k), 1, 1, 1, 1, 1, 1, 0, s.s, args,
                             nullptr));
  CHECK(read_int(buf.p, s.s) == 4);
  REQUIRE(register_kernel("bin_add", nullptr, nullptr, nullptr, 0) == 0);
}

TEST_CASE("emulator: kernel-node parameters outlive the library; unknown sizes give none",
          "[emu-only][library]") {
  REQUIRE_EMULATOR();
  LaunchFixture fx;
  CUlibrary lib = nullptr;
  CU_OK(api().cuLibraryLoadData(&lib, kLibraryPtx, nullptr, nullptr, 0, nullptr, nullptr, 0));
  CUkernel k = nullptr;
  CU_OK(api().cuLibraryGetKernel(&k, lib, "lib_add"));
  const unsigned char elf[] = {0x7f, 'E', 'L', 'F', 2, 1, 1, 0};
  LibraryHandle binary(reinterpret_cast<const char*>(elf));
  CUkernel unknown = binary.kernel("bin_anything");  // its parameters are not known here
  CU_OK(api().cuStreamBeginCapture(fx.s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU_OK(api().cuLaunchKernel(reinterpret_cast<CUfunction>(k), 1, 1, 1, 1, 1, 1, 0, fx.s, fx.args,
                             nullptr));
  CU_OK(api().cuLaunchKernel(reinterpret_cast<CUfunction>(unknown), 2, 1, 1, 1, 1, 1, 0, fx.s,
                             fx.args, nullptr));
  CUgraph g = nullptr;
  CU_OK(api().cuStreamEndCapture(fx.s, &g));
  CU_OK(api().cuLibraryUnload(lib));
  CUgraphNode nodes[2] = {};
  size_t count = 2;
  CU_OK(api().cuGraphGetNodes(g, nodes, &count));
  REQUIRE(count == 2);
  CUDA_KERNEL_NODE_PARAMS p{};
  CU_OK(api().cuGraphKernelNodeGetParams(nodes[0], &p));
  CHECK(p.gridDimX == 1);
  CHECK(p.kern == k);  // a stale handle now, as a driver's would be
  CHECK(p.func != nullptr);
  REQUIRE(p.kernelParams != nullptr);
  CHECK(lib_add_arguments(p.kernelParams) == std::make_pair(fx.buf.p, 1));
  CU_OK(api().cuGraphKernelNodeGetParams(nodes[1], &p));
  CHECK(p.gridDimX == 2);
  CHECK(p.kern == unknown);
  CHECK(p.kernelParams == nullptr);
  CU_OK(api().cuGraphDestroy(g));
}

TEST_CASE("emulator: libraries in the live-object count, and fault injection",
          "[emu-only][library]") {
  REQUIRE_EMULATOR();
  auto live = emu_control<long (*)()>("custream_emu_live_objects");
  auto idle = emu_control<int (*)(int)>("custream_emu_wait_idle");
  auto fail = emu_control<void (*)(const char*, int, CUresult)>("custream_emu_fail_call");
  auto reset = emu_control<void (*)()>("custream_emu_reset");
  REQUIRE(live);
  REQUIRE(idle);
  REQUIRE(fail);
  REQUIRE(reset);
  PrimaryScope scope;
  REQUIRE(idle(5000) == 1);
  const long before = live();
  {
    LibraryHandle lib;
    CHECK(live() == before + 1);  // the library; not its modules in contexts
    CUfunction f = nullptr;
    CU_OK(api().cuKernelGetFunction(&f, lib.kernel("lib_add")));
    CUcontext created = nullptr;
    CU_OK(api().cuCtxCreate(&created, 0, 0));
    CU_OK(api().cuKernelGetFunction(&f, lib.kernel("lib_add")));
    CHECK(live() == before + 2);  // and the created context
    CU_OK(api().cuCtxDestroy(created));
    CHECK(live() == before + 1);
  }
  CHECK(live() == before);

  // Every new entry point goes through fault injection: the injected error, no side effect.
  LibraryHandle lib;
  CUkernel k = lib.kernel("lib_add");
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  CUlibrary l = nullptr;
  CUkernel kk = nullptr;
  CUfunction f = nullptr;
  CUmodule m = nullptr;
  CUdeviceptr p = 0;
  const char* name = nullptr;
  unsigned count = 0;
  int v = 0;
  size_t offset = 0;
  CUlaunchConfig c = launch_config(s.s);
  // A kernel node (captured before the library's function was made: f stays NULL).
  CU_OK(api().cuStreamBeginCapture(s.s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU_OK(api().cuLaunchKernelEx(&c, reinterpret_cast<CUfunction>(k), nullptr, nullptr));
  CUgraph graph = nullptr;
  CU_OK(api().cuStreamEndCapture(s.s, &graph));
  CUgraphNode kernel_node = nullptr;
  size_t nodes = 1;
  CU_OK(api().cuGraphGetNodes(graph, &kernel_node, &nodes));
  CUDA_KERNEL_NODE_PARAMS node_params{};
  CUDA_KERNEL_NODE_PARAMS_v1 node_params_v1{};
  const long mid = live();
  const std::vector<std::pair<const char*, std::function<CUresult()>>> calls = {
      {"cuLibraryLoadData",
       [&] {
         return api().cuLibraryLoadData(&l, kLibraryPtx, nullptr, nullptr, 0, nullptr, nullptr, 0);
       }},
      {"cuLibraryLoadFromFile",
       [&] {
         return api().cuLibraryLoadFromFile(&l, "/nonexistent", nullptr, nullptr, 0, nullptr,
                                            nullptr, 0);
       }},
      {"cuLibraryUnload", [&] { return api().cuLibraryUnload(lib.lib); }},
      {"cuLibraryGetKernel", [&] { return api().cuLibraryGetKernel(&kk, lib.lib, "lib_add"); }},
      {"cuLibraryGetKernelCount", [&] { return api().cuLibraryGetKernelCount(&count, lib.lib); }},
      {"cuLibraryEnumerateKernels",
       [&] { return api().cuLibraryEnumerateKernels(&kk, 1, lib.lib); }},
      {"cuLibraryGetModule", [&] { return api().cuLibraryGetModule(&m, lib.lib); }},
      {"cuLibraryGetGlobal",
       [&] { return api().cuLibraryGetGlobal(&p, nullptr, lib.lib, "counter"); }},
      {"cuLibraryGetManaged",
       [&] { return api().cuLibraryGetManaged(&p, nullptr, lib.lib, "managed_value"); }},
      {"cuKernelGetFunction", [&] { return api().cuKernelGetFunction(&f, k); }},
      {"cuKernelGetName", [&] { return api().cuKernelGetName(&name, k); }},
      {"cuKernelGetLibrary", [&] { return api().cuKernelGetLibrary(&l, k); }},
      {"cuKernelGetAttribute",
       [&] { return api().cuKernelGetAttribute(&v, CU_FUNC_ATTRIBUTE_NUM_REGS, k, 0); }},
      {"cuKernelSetAttribute",
       [&] {
         return api().cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 0, k,
                                           0);
       }},
      {"cuKernelGetParamInfo", [&] { return api().cuKernelGetParamInfo(k, 0, &offset, nullptr); }},
      {"cuLaunchKernelEx",
       [&] {
         return api().cuLaunchKernelEx(&c, reinterpret_cast<CUfunction>(k), nullptr, nullptr);
       }},
      {"cuFuncGetAttribute",
       [&] {
         return api().cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_NUM_REGS,
                                         reinterpret_cast<CUfunction>(k));
       }},
      {"cuOccupancyMaxActiveBlocksPerMultiprocessor",
       [&] {
         return api().cuOccupancyMaxActiveBlocksPerMultiprocessor(
             &v, reinterpret_cast<CUfunction>(k), 32, 0);
       }},
      {"cuOccupancyMaxActiveClusters",
       [&] { return clusters_with(&v, reinterpret_cast<CUfunction>(k), c, {cluster_attr(1)}); }},
      {"cuGraphKernelNodeGetParams",
       [&] { return api().cuGraphKernelNodeGetParams(kernel_node, &node_params); }},
      {"cuGraphKernelNodeGetParams",
       [&] { return api().cuGraphKernelNodeGetParams_v1(kernel_node, &node_params_v1); }},
  };
  for (const auto& [entry, call] : calls) {
    INFO(entry);
    fail(entry, 1, CUDA_ERROR_LAUNCH_FAILED);
    CU_CHECK_EQ(call(), CUDA_ERROR_LAUNCH_FAILED);
    CHECK(live() == mid);
  }
  reset();
  CHECK(l == nullptr);
  CHECK(f == nullptr);
  CHECK(node_params.func == nullptr);
  CHECK(node_params_v1.func == nullptr);
  CU_OK(api().cuKernelGetName(&name, k));  // still loaded
  CHECK(std::string(name) == "lib_add");
  CU_OK(api().cuGraphDestroy(graph));
}

TEST_CASE("emulator: every served symbol has exactly the ABI versions of cudaTypedefs.h",
          "[emu-only]") {
  REQUIRE_EMULATOR();
  const std::string path = CUSTREAM_EMU_TYPEDEFS_H;
  std::ifstream in(path);
  if (path.empty() || !in) CUSTREAM_SKIP("cudaTypedefs.h not found at build time");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  // name -> versions, from "PFN_<name>_v<N>)" and "PFN_<name>_v<N>_pt??)".
  std::map<std::string, std::set<int>> versions;
  for (size_t pos = text.find("PFN_"); pos != std::string::npos; pos = text.find("PFN_", pos + 4)) {
    const size_t end = text.find_first_of(")(; ", pos);
    std::string id = text.substr(pos + 4, end - pos - 4);
    for (const char* suffix : {"_ptsz", "_ptds"})
      if (id.size() > 5 && id.compare(id.size() - 5, 5, suffix) == 0) id.resize(id.size() - 5);
    const size_t v = id.rfind("_v");
    if (v == std::string::npos || v + 2 >= id.size()) continue;
    const std::string digits = id.substr(v + 2);
    if (digits.find_first_not_of("0123456789") != std::string::npos) continue;
    versions[id.substr(0, v)].insert(std::stoi(digits));
  }
  REQUIRE(versions.size() > 100);
  auto gpa = driver().get_proc;
  int served = 0;
  for (const auto& [name, vs] : versions) {
    void* fn = nullptr;
    CUdriverProcAddressQueryResult st{};
    if (gpa(name.c_str(), &fn, 13000, 0, &st) != CUDA_SUCCESS || fn == nullptr) continue;
    ++served;
    INFO(name);
    CHECK(gpa(name.c_str(), &fn, *vs.begin() - 1, 0, &st) == CUDA_SUCCESS);
    CHECK(st == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    for (int v : vs) {
      CHECK(gpa(name.c_str(), &fn, v, 0, &st) == CUDA_SUCCESS);
      CHECK(fn != nullptr);
    }
  }
  CHECK(served > 60);
}

TEST_CASE("emulator: two devices of compute capability 9.0", "[emu-only]") {
  REQUIRE_EMULATOR();
  PrimaryScope scope;
  int count = 0;
  CU_OK(api().cuDeviceGetCount(&count));
  CHECK(count == driver().device_count);
  int major = 0;
  CU_OK(api().cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0));
  CHECK(major == 9);
}

TEST_CASE("emulator: a kernel runs its registered CPU implementation, eagerly and in a graph",
          "[emu-only]") {
  REQUIRE_EMULATOR();
  auto register_kernel =
      emu_control<decltype(&custream_emu_register_kernel)>("custream_emu_register_kernel");
  auto runs = emu_control<decltype(&custream_emu_kernel_runs)>("custream_emu_kernel_runs");
  REQUIRE(register_kernel != nullptr);
  REQUIRE(runs != nullptr);
  PrimaryScope scope;
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  CUmodule m = nullptr;
  CU_OK(api().cuModuleLoadData(&m, kKernelPtx));
  CUfunction add = nullptr;
  CU_OK(api().cuModuleGetFunction(&add, m, "add"));
  DeviceBuffer buf(sizeof(int));
  CU_OK(api().cuMemsetD32Async(buf.p, 0, 1, s.s));
  CUdeviceptr p = buf.p;
  int amount = 5;
  void* args[] = {&p, &amount};
  const long before = runs("add");
  // Unregistered: a no-op that still runs in stream order (and counts).
  CU_OK(api().cuLaunchKernel(add, 1, 1, 1, 32, 1, 1, 0, s.s, args, nullptr));
  CU_OK(api().cuStreamSynchronize(s.s));
  CHECK(runs("add") == before + 1);
  int host = -1;
  CU_OK(api().cuMemcpyDtoHAsync(&host, buf.p, sizeof host, s.s));
  CU_OK(api().cuStreamSynchronize(s.s));
  CHECK(host == 0);
  // Registered (sizes from the PTX): arguments are copied at launch.
  int factor = 1;
  REQUIRE(register_kernel("add", cpu_add, &factor, nullptr, 0) == 0);
  CU_OK(api().cuLaunchKernel(add, 2, 1, 1, 32, 1, 1, 0, s.s, args, nullptr));
  amount = 1000;  // after the launch: not seen
  CU_OK(api().cuStreamSynchronize(s.s));
  CU_OK(api().cuMemcpyDtoHAsync(&host, buf.p, sizeof host, s.s));
  CU_OK(api().cuStreamSynchronize(s.s));
  CHECK(host == 10);
  // Captured: a kernel node, run at every replay.
  amount = 1;
  CU_OK(api().cuStreamBeginCapture(s.s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU_OK(api().cuLaunchKernel(add, 1, 1, 1, 1, 1, 1, 0, s.s, args, nullptr));
  CUgraph g = nullptr;
  CU_OK(api().cuStreamEndCapture(s.s, &g));
  CUgraphNode node = nullptr;
  size_t n = 1;
  CU_OK(api().cuGraphGetNodes(g, &node, &n));
  CUgraphNodeType type{};
  CU_OK(api().cuGraphNodeGetType(node, &type));
  CHECK(type == CU_GRAPH_NODE_TYPE_KERNEL);
  CUgraphExec e = instantiate(g);
  for (int i = 0; i < 3; ++i) CU_OK(api().cuGraphLaunch(e, s.s));
  CU_OK(api().cuStreamSynchronize(s.s));
  CU_OK(api().cuMemcpyDtoHAsync(&host, buf.p, sizeof host, s.s));
  CU_OK(api().cuStreamSynchronize(s.s));
  CHECK(host == 13);
  // A binary image: any name resolves; a registered kernel needs its parameter sizes.
  const unsigned char elf[] = {0x7f, 'E', 'L', 'F', 2, 1, 1, 0};
  CUmodule bin = nullptr;
  CU_OK(api().cuModuleLoadData(&bin, elf));
  CUfunction add_bin = nullptr;
  CU_OK(api().cuModuleGetFunction(&add_bin, bin, "add"));
  CU_EQ(api().cuLaunchKernel(add_bin, 1, 1, 1, 1, 1, 1, 0, s.s, args, nullptr),
        CUDA_ERROR_NOT_SUPPORTED);
  const size_t sizes[] = {sizeof(CUdeviceptr), sizeof(int)};
  factor = 2;
  REQUIRE(register_kernel("add", cpu_add, &factor, sizes, 2) == 0);
  CU_OK(api().cuLaunchKernel(add_bin, 1, 1, 1, 1, 1, 1, 0, s.s, args, nullptr));
  CU_OK(api().cuStreamSynchronize(s.s));
  CU_OK(api().cuMemcpyDtoHAsync(&host, buf.p, sizeof host, s.s));
  CU_OK(api().cuStreamSynchronize(s.s));
  CHECK(host == 15);
  REQUIRE(register_kernel("add", nullptr, nullptr, nullptr, 0) == 0);  // a no-op again
  CU_OK(api().cuLaunchKernel(add, 1, 1, 1, 1, 1, 1, 0, s.s, args, nullptr));
  CU_OK(api().cuStreamSynchronize(s.s));
  CU_OK(api().cuMemcpyDtoHAsync(&host, buf.p, sizeof host, s.s));
  CU_OK(api().cuStreamSynchronize(s.s));
  CHECK(host == 15);
  CHECK(register_kernel(nullptr, cpu_add, nullptr, nullptr, 0) == -1);
  CHECK(register_kernel("add", cpu_add, nullptr, nullptr, 2) == -1);
  CU_OK(api().cuGraphExecDestroy(e));
  CU_OK(api().cuGraphDestroy(g));
  CU_OK(api().cuModuleUnload(bin));
  CU_OK(api().cuModuleUnload(m));
}

TEST_CASE("emulator: the entry points under the symbol names libcuda.so.1 exports", "[emu-only]") {
  REQUIRE_EMULATOR();
  // cuda.h 13.0 compiles a call of cuStreamDestroy to cuStreamDestroy_v2, cuMemAlloc to
  // cuMemAlloc_v2 and so on; a program linked against libcuda finds these symbols.
  for (const char* name : {"cuInit",
                           "cuGreenCtxCreate",
                           "cuStreamGetGreenCtx",
                           "cuCtxGetId",
                           "cuDeviceGet",
                           "cuCtxGetCurrent",
                           "cuDevicePrimaryCtxRetain",
                           "cuDevicePrimaryCtxRelease_v2",
                           "cuStreamCreate",
                           "cuStreamDestroy_v2",
                           "cuStreamGetCtx",
                           "cuStreamGetCtx_v2",
                           "cuStreamBeginCapture_v2",
                           "cuStreamGetCaptureInfo_v3",
                           "cuEventDestroy_v2",
                           "cuMemAlloc_v2",
                           "cuMemFree_v2",
                           "cuMemcpyHtoDAsync_v2",
                           "cuGraphExecUpdate_v2",
                           "cuGraphInstantiateWithParams",
                           "cuLaunchKernel",
                           "cuModuleLoadData",
                           "cuLibraryLoadData",
                           "cuKernelGetFunction",
                           "cuKernelGetParamInfo",
                           "cuLaunchKernelEx",
                           "cuFuncGetAttribute",
                           "cuOccupancyMaxActiveBlocksPerMultiprocessor",
                           "cuOccupancyMaxActiveClusters",
                           "cuGraphKernelNodeGetParams",
                           "cuGraphKernelNodeGetParams_v2",
                           "cuCtxGetDevice_v2"}) {
    INFO(name);
    CHECK(dlsym(driver().lib, name) != nullptr);
  }
  // The same function cuGetProcAddress serves for the current ABI: called through the
  // exported symbol, cuStreamGetCtx_v2 answers like the 12050 entry point.
  PrimaryScope scope;
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  auto get_ctx_v2 =
      reinterpret_cast<PFN_cuStreamGetCtx_v12050>(dlsym(driver().lib, "cuStreamGetCtx_v2"));
  REQUIRE(get_ctx_v2 != nullptr);
  CUcontext a = nullptr, b = nullptr;
  CUgreenCtx green = reinterpret_cast<CUgreenCtx>(1);
  CU_OK(get_ctx_v2(s.s, &a, &green));
  CU_OK(api().cuStreamGetCtx_v2(s.s, &b, nullptr));
  CHECK(a == b);
  CHECK(green == nullptr);
}

TEST_CASE("emulator: host-mapped memory in the live-object count; memory operations, faults",
          "[emu-only][memops]") {
  REQUIRE_EMULATOR();
  REQUIRE_MEMOPS();
  auto fail = emu_control<void (*)(const char*, int, CUresult)>("custream_emu_fail_call");
  auto live = emu_control<long (*)()>("custream_emu_live_objects");
  auto idle = emu_control<int (*)(int)>("custream_emu_wait_idle");
  REQUIRE(fail);
  REQUIRE(live);
  REQUIRE(idle);
  PrimaryScope scope;
  const long before = live();
  void* p = nullptr;
  CU_OK(api().cuMemHostAlloc(&p, 64, kMapped));
  CHECK(live() == before + 1);
  // Host memory is not cuMemAlloc's, and device memory not cuMemHostAlloc's.
  CU_EQ(api().cuMemFree(reinterpret_cast<CUdeviceptr>(p)), CUDA_ERROR_INVALID_VALUE);
  {
    DeviceBuffer dev(64);
    CUdeviceptr d = 0;
    CU_EQ(api().cuMemHostGetDevicePointer(&d, reinterpret_cast<void*>(dev.p), 0),
          CUDA_ERROR_INVALID_VALUE);
    CU_EQ(api().cuMemFreeHost(reinterpret_cast<void*>(dev.p)), CUDA_ERROR_INVALID_VALUE);
  }
  CU_OK(api().cuMemFreeHost(p));
  CHECK(live() == before);
  // 0 bytes: no error (the H200) and no allocation here.
  p = &p;  // overwritten
  CU_OK(api().cuMemHostAlloc(&p, 0, kMapped));
  CHECK(p == nullptr);
  CHECK(live() == before);
  fail("cuMemHostAlloc", 1, CUDA_ERROR_OUT_OF_MEMORY);
  p = nullptr;
  CU_EQ(api().cuMemHostAlloc(&p, 64, kMapped), CUDA_ERROR_OUT_OF_MEMORY);
  CHECK(p == nullptr);
  CHECK(live() == before);

  // The 32-bit ABI of cuMemHostGetDevicePointer (CUdeviceptr_v1: unsigned int, a type cuda.h
  // declares only for the driver's own build) cannot hold a host address.
  void* v1 = nullptr;
  CUdriverProcAddressQueryResult st{};
  CU_OK(driver().get_proc("cuMemHostGetDevicePointer", &v1, 2020, 0, &st));
  REQUIRE(v1 != nullptr);
  HostMapped m(64);
  unsigned int d32 = 1;
  using GetDevicePointer2020 = CUresult(CUDAAPI*)(unsigned int*, void*, unsigned int);
  CU_EQ(reinterpret_cast<GetDevicePointer2020>(v1)(&d32, m.p, 0), CUDA_ERROR_NOT_SUPPORTED);
  CHECK(d32 == 0);

  // An injected failure enqueues nothing: the word keeps its value.
  StreamHandle s(CU_STREAM_NON_BLOCKING), other(CU_STREAM_NON_BLOCKING);
  fail("cuStreamWriteValue64", 1, CUDA_ERROR_UNKNOWN);
  CU_EQ(api().cuStreamWriteValue64(s.s, m.d, 5, 0), CUDA_ERROR_UNKNOWN);
  fail("cuStreamWaitValue32", 1, CUDA_ERROR_UNKNOWN);
  CU_EQ(api().cuStreamWaitValue32(s.s, m.d + 8, 1, 0), CUDA_ERROR_UNKNOWN);
  CU_OK(api().cuStreamSynchronize(s.s));
  CHECK(load_word<uint64_t>(m.p, 0) == 0u);

  // A wait that is not satisfied holds its stream's worker and nothing else: other streams and
  // queries go on; the emulator is not idle until the word is written. (Frees wait for every
  // stream, as cuMemFree does: none may run before the wait is over.)
  DeviceBuffer dev(64), more(64);
  AtExit release{[&] {
    store_word<uint32_t>(m.p, 8, 1);
    api().cuStreamSynchronize(s.s);
  }};
  CU_OK(api().cuStreamWaitValue32(s.s, m.d + 8, 1, CU_STREAM_WAIT_VALUE_EQ));
  CU_OK(api().cuStreamWriteValue32(s.s, m.d + 16, 2, 0));
  CU_OK(api().cuMemsetD8Async(more.p, 1, 64, other.s));
  CU_OK(api().cuMemcpyAsync(dev.p, more.p, 64, other.s));
  CU_OK(api().cuStreamWriteValue64(other.s, m.d + 24, 3, 0));
  CU_OK(api().cuStreamSynchronize(other.s));
  CHECK(load_word<uint64_t>(m.p, 24) == 3u);
  CU_EQ(api().cuStreamQuery(s.s), CUDA_ERROR_NOT_READY);
  CHECK(idle(50) == 0);
  CHECK(load_word<uint32_t>(m.p, 16) == 0u);
  store_word<uint32_t>(m.p, 8, 1);
  CU_OK(api().cuStreamSynchronize(s.s));
  CHECK(load_word<uint32_t>(m.p, 16) == 2u);
  CHECK(idle(5000) == 1);
}

}  // namespace
}  // namespace conformance

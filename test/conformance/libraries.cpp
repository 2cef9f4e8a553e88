// Driver conformance: Context-independent loading (CUlibrary, CUkernel) and cuLaunchKernelEx (measured on the
// H200, driver 580, with the default lazy module loading)
#include "helpers.hpp"

namespace conformance {
namespace {

TEST_CASE("libraries: loading needs no context; kernels by name, count and enumeration",
          "[conformance][library]") {
  REQUIRE_LIBRARIES();
  CUcontext prev = nullptr;
  CU_OK(api().cuCtxGetCurrent(&prev));
  CU_OK(api().cuCtxSetCurrent(nullptr));  // none current: loading needs none
  CUlibrary lib = nullptr;
  CU_OK(api().cuLibraryLoadData(&lib, kLibraryPtx, nullptr, nullptr, 0, nullptr, nullptr, 0));
  CU_CHECK_EQ(
      api().cuLibraryLoadData(nullptr, kLibraryPtx, nullptr, nullptr, 0, nullptr, nullptr, 0),
      CUDA_ERROR_INVALID_VALUE);
  CUlibrary other = nullptr;
  CU_CHECK_EQ(api().cuLibraryLoadData(&other, nullptr, nullptr, nullptr, 0, nullptr, nullptr, 0),
              CUDA_ERROR_INVALID_VALUE);
  CU_CHECK_EQ(
      api().cuLibraryLoadData(&other, kLibraryPtx, nullptr, nullptr, 2, nullptr, nullptr, 0),
      CUDA_ERROR_INVALID_VALUE);

  // Kernels: the .entry directives (.visible or not), not .func; one handle per name.
  CUkernel k = nullptr, again = nullptr;
  CU_OK(api().cuLibraryGetKernel(&k, lib, "lib_add"));
  CU_OK(api().cuLibraryGetKernel(&again, lib, "lib_add"));
  CHECK(k == again);
  CU_OK(api().cuLibraryGetKernel(&again, lib, "lib_internal"));
  CU_CHECK_EQ(api().cuLibraryGetKernel(&again, lib, "helper"), CUDA_ERROR_NOT_FOUND);
  CU_CHECK_EQ(api().cuLibraryGetKernel(&again, lib, "no_such_kernel"), CUDA_ERROR_NOT_FOUND);
  CU_CHECK_EQ(api().cuLibraryGetKernel(&again, lib, nullptr), CUDA_ERROR_INVALID_VALUE);
  CU_CHECK_EQ(api().cuLibraryGetKernel(nullptr, lib, "lib_add"), CUDA_ERROR_INVALID_VALUE);
  CU_CHECK_EQ(api().cuLibraryGetKernel(&again, nullptr, "lib_add"), CUDA_ERROR_INVALID_HANDLE);

  // Count and enumeration (the H200 lists the last declared first; the order is not checked).
  unsigned count = 0;
  CU_OK(api().cuLibraryGetKernelCount(&count, lib));
  CHECK(count == 4);
  CHECK(kernel_names(lib) ==
        std::set<std::string>{"lib_add", "lib_mixed", "lib_shared", "lib_internal"});
  std::vector<CUkernel> all(count), first(1), more(count + 1, nullptr);
  CU_OK(api().cuLibraryEnumerateKernels(all.data(), count, lib));
  CHECK(std::find(all.begin(), all.end(), k) != all.end());
  CU_OK(api().cuLibraryEnumerateKernels(first.data(), 1, lib));
  CHECK(first[0] == all[0]);
  CU_OK(api().cuLibraryEnumerateKernels(more.data(), count + 1, lib));
  CHECK(more[count] == nullptr);
  CU_OK(api().cuLibraryEnumerateKernels(all.data(), 0, lib));
  CU_CHECK_EQ(api().cuLibraryEnumerateKernels(nullptr, count, lib), CUDA_ERROR_INVALID_VALUE);
  CU_CHECK_EQ(api().cuLibraryEnumerateKernels(all.data(), count, nullptr),
              CUDA_ERROR_INVALID_HANDLE);
  CU_CHECK_EQ(api().cuLibraryGetKernelCount(nullptr, lib), CUDA_ERROR_INVALID_VALUE);
  CU_CHECK_EQ(api().cuLibraryGetKernelCount(&count, nullptr), CUDA_ERROR_INVALID_HANDLE);

  // Name (a stable pointer) and library of a kernel.
  const char* name = nullptr;
  const char* name2 = nullptr;
  CU_OK(api().cuKernelGetName(&name, k));
  CU_OK(api().cuKernelGetName(&name2, k));
  CHECK(std::string(name) == "lib_add");
  CHECK(name == name2);
  CU_CHECK_EQ(api().cuKernelGetName(nullptr, k), CUDA_ERROR_INVALID_VALUE);
  CU_CHECK_EQ(api().cuKernelGetName(&name, nullptr), CUDA_ERROR_INVALID_VALUE);
  CUlibrary back = nullptr;
  CU_OK(api().cuKernelGetLibrary(&back, k));
  CHECK(back == lib);
  CU_CHECK_EQ(api().cuKernelGetLibrary(nullptr, k), CUDA_ERROR_INVALID_VALUE);
  CU_CHECK_EQ(api().cuKernelGetLibrary(&back, nullptr), CUDA_ERROR_INVALID_HANDLE);

  // The same image loaded twice: two libraries with their own kernels.
  LibraryHandle second;
  CHECK(second.lib != lib);
  CHECK(second.kernel("lib_add") != k);

  // Only PTX variables, no kernels.
  LibraryHandle globals_only(
      ".version 7.0\n.target sm_70\n.address_size 64\n"
      ".visible .global .align 4 .u32 lonely;\n");
  CU_OK(api().cuLibraryGetKernelCount(&count, globals_only.lib));
  CHECK(count == 0);

  CU_OK(api().cuLibraryUnload(lib));
  CU_CHECK_EQ(api().cuLibraryUnload(nullptr), CUDA_ERROR_INVALID_HANDLE);
  CU_OK(api().cuCtxSetCurrent(prev));
}

TEST_CASE("libraries: a bad image loads, and its first use reports it", "[conformance][library]") {
  REQUIRE_LIBRARIES();
  PrimaryScope scope;  // a context current changes nothing: loading is lazy
  // Not an image: loads; the error log says why; no kernels; a lookup answers INVALID_IMAGE.
  char log[1024];
  std::memset(log, 'X', sizeof log);
  CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void* values[] = {log, reinterpret_cast<void*>(static_cast<uintptr_t>(sizeof log))};
  CUlibrary garbage = nullptr;
  CU_OK(api().cuLibraryLoadData(&garbage, kGarbageImage, options, values, 2, nullptr, nullptr, 0));
  const size_t written = static_cast<size_t>(reinterpret_cast<uintptr_t>(values[1]));
  INFO(std::string(log, strnlen(log, sizeof log)));
  CHECK(written > 0);
  CHECK(strnlen(log, sizeof log) == written);
  unsigned count = 99;
  CU_OK(api().cuLibraryGetKernelCount(&count, garbage));
  CHECK(count == 0);
  CUkernel k = nullptr;
  CU_CHECK_EQ(api().cuLibraryGetKernel(&k, garbage, "lib_add"), CUDA_ERROR_INVALID_IMAGE);
  CUmodule m = nullptr;
  CU_CHECK_EQ(api().cuLibraryGetModule(&m, garbage), CUDA_ERROR_INVALID_IMAGE);
  CU_OK(api().cuLibraryUnload(garbage));
  // PTX that does not compile: loads, with an error log; INVALID_PTX at the first use.
  std::memset(log, 'X', sizeof log);
  values[1] = reinterpret_cast<void*>(static_cast<uintptr_t>(sizeof log));
  CUlibrary bad = nullptr;
  CU_OK(api().cuLibraryLoadData(&bad, kUnbalancedPtx, options, values, 2, nullptr, nullptr, 0));
  CHECK(reinterpret_cast<uintptr_t>(values[1]) > 0);
  CU_CHECK_EQ(api().cuLibraryGetKernel(&k, bad, "broken"), CUDA_ERROR_INVALID_PTX);
  CU_CHECK_EQ(api().cuLibraryGetModule(&m, bad), CUDA_ERROR_INVALID_PTX);
  CU_OK(api().cuLibraryGetKernelCount(&count, bad));
  CHECK(count == 0);
  CU_OK(api().cuLibraryUnload(bad));
  // A good image: the logs come back empty.
  values[1] = reinterpret_cast<void*>(static_cast<uintptr_t>(sizeof log));
  CUlibrary good = nullptr;
  CU_OK(api().cuLibraryLoadData(&good, kLibraryPtx, options, values, 2, nullptr, nullptr, 0));
  CU_OK(api().cuLibraryUnload(good));
}

TEST_CASE("libraries: an empty image, and the variables of a bad image", "[conformance][library]") {
  REQUIRE_LIBRARIES();
  PrimaryScope scope;
  CUlibrary garbage = nullptr;
  CU_OK(api().cuLibraryLoadData(&garbage, kGarbageImage, nullptr, nullptr, 0, nullptr, nullptr, 0));
  CUdeviceptr p = 0;
  CU_CHECK_EQ(api().cuLibraryGetGlobal(&p, nullptr, garbage, "counter"), CUDA_ERROR_INVALID_IMAGE);
  CU_CHECK_EQ(api().cuLibraryGetManaged(&p, nullptr, garbage, "counter"), CUDA_ERROR_INVALID_IMAGE);
  CU_OK(api().cuLibraryUnload(garbage));
  CUlibrary empty = nullptr;
  CU_OK(api().cuLibraryLoadData(&empty, "", nullptr, nullptr, 0, nullptr, nullptr, 0));
  CUkernel k = nullptr;
  CU_CHECK_EQ(api().cuLibraryGetKernel(&k, empty, "lib_add"), CUDA_ERROR_INVALID_IMAGE);
  CU_OK(api().cuLibraryUnload(empty));
}

TEST_CASE("libraries: loading from a file, and library options", "[conformance][library]") {
  REQUIRE_LIBRARIES();
  char path[] = "/tmp/custream-conformance-XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  const std::string text = kLibraryPtx;
  REQUIRE(write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()));
  close(fd);
  CUlibrary lib = nullptr;
  CU_OK(api().cuLibraryLoadFromFile(&lib, path, nullptr, nullptr, 0, nullptr, nullptr, 0));
  unlink(path);
  CHECK(kernel_names(lib).count("lib_add") == 1);
  CU_OK(api().cuLibraryUnload(lib));
  CU_CHECK_EQ(api().cuLibraryLoadFromFile(&lib, "/nonexistent/custream.ptx", nullptr, nullptr, 0,
                                          nullptr, nullptr, 0),
              CUDA_ERROR_FILE_NOT_FOUND);
  CU_CHECK_EQ(api().cuLibraryLoadFromFile(&lib, nullptr, nullptr, nullptr, 0, nullptr, nullptr, 0),
              CUDA_ERROR_INVALID_VALUE);
  // CU_LIBRARY_BINARY_IS_PRESERVED is accepted; an unknown option is not.
  CUlibraryOption preserved[] = {CU_LIBRARY_BINARY_IS_PRESERVED};
  void* one[] = {reinterpret_cast<void*>(1)};
  CU_OK(api().cuLibraryLoadData(&lib, kLibraryPtx, nullptr, nullptr, 0, preserved, one, 1));
  CU_OK(api().cuLibraryUnload(lib));
  CUlibraryOption unknown[] = {static_cast<CUlibraryOption>(77)};
  lib = nullptr;
  CU_CHECK_EQ(api().cuLibraryLoadData(&lib, kLibraryPtx, nullptr, nullptr, 0, unknown, one, 1),
              CUDA_ERROR_INVALID_VALUE);
  if (lib) api().cuLibraryUnload(lib);
}

TEST_CASE("a PTX module that does not parse is refused with INVALID_PTX and a JIT log",
          "[conformance][library]") {
  REQUIRE_LIBRARIES();
  PrimaryScope scope;
  CUmodule m = nullptr;
  CU_CHECK_EQ(api().cuModuleLoadData(&m, kUnbalancedPtx), CUDA_ERROR_INVALID_PTX);
  CU_CHECK_EQ(api().cuModuleLoadData(&m, ""), CUDA_ERROR_INVALID_IMAGE);
  char log[1024] = {};
  CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void* values[] = {log, reinterpret_cast<void*>(static_cast<uintptr_t>(sizeof log))};
  CU_CHECK_EQ(api().cuModuleLoadDataEx(&m, kGarbageImage, 2, options, values),
              CUDA_ERROR_INVALID_IMAGE);
  CHECK(reinterpret_cast<uintptr_t>(values[1]) == std::strlen(log));
  CHECK(std::strlen(log) > 0);
}

TEST_CASE("kernels: one function per context, loaded on first use; green contexts share it",
          "[conformance][library]") {
  REQUIRE_LIBRARIES();
  LibraryHandle lib;
  CUkernel k = lib.kernel("lib_add");
  CUcontext prev = nullptr;
  CU_OK(api().cuCtxGetCurrent(&prev));
  CU_OK(api().cuCtxSetCurrent(nullptr));
  CUfunction f = nullptr;
  CU_CHECK_EQ(api().cuKernelGetFunction(&f, k), CUDA_ERROR_INVALID_CONTEXT);
  CUmodule m = nullptr;
  CU_CHECK_EQ(api().cuLibraryGetModule(&m, lib.lib), CUDA_ERROR_INVALID_CONTEXT);
  CU_OK(api().cuCtxSetCurrent(prev));

  PrimaryScope scope;
  CU_OK(api().cuKernelGetFunction(&f, k));
  CHECK(f != nullptr);
  CHECK(f != reinterpret_cast<CUfunction>(k));
  CUfunction again = nullptr;
  CU_OK(api().cuKernelGetFunction(&again, k));
  CHECK(again == f);
  CU_CHECK_EQ(api().cuKernelGetFunction(nullptr, k), CUDA_ERROR_INVALID_VALUE);
  CU_CHECK_EQ(api().cuKernelGetFunction(&again, nullptr), CUDA_ERROR_INVALID_HANDLE);
  // The library's module in this context: its functions are the kernels' functions; it cannot
  // be unloaded on its own.
  CU_OK(api().cuLibraryGetModule(&m, lib.lib));
  CUmodule m2 = nullptr;
  CU_OK(api().cuLibraryGetModule(&m2, lib.lib));
  CHECK(m == m2);
  CUfunction from_module = nullptr;
  CU_OK(api().cuModuleGetFunction(&from_module, m, "lib_add"));
  CHECK(from_module == f);
  CU_CHECK_EQ(api().cuModuleUnload(m), CUDA_ERROR_NOT_PERMITTED);
  CU_OK(api().cuModuleGetFunction(&from_module, m, "lib_add"));
  CU_CHECK_EQ(api().cuLibraryGetModule(nullptr, lib.lib), CUDA_ERROR_INVALID_VALUE);
  CU_CHECK_EQ(api().cuLibraryGetModule(&m2, nullptr), CUDA_ERROR_INVALID_HANDLE);

  // Another context of the device: another function and module.
  CUcontext created = nullptr;
  CU_OK(api().cuCtxCreate(&created, 0, 0));
  CUfunction in_created = nullptr;
  CU_OK(api().cuKernelGetFunction(&in_created, k));
  CHECK(in_created != f);
  CU_OK(api().cuLibraryGetModule(&m2, lib.lib));
  CHECK(m2 != m);
  CU_OK(api().cuCtxDestroy(created));
  CU_OK(api().cuKernelGetFunction(&again, k));
  CHECK(again == f);

  // A green context: the primary context's function and module.
  if (!missing_optional_entry()) {
    GreenScope green;
    CU_OK(api().cuCtxSetCurrent(green.ctx()));
    CUfunction in_green = nullptr;
    CU_OK(api().cuKernelGetFunction(&in_green, k));
    CHECK(in_green == f);
    CU_OK(api().cuLibraryGetModule(&m2, lib.lib));
    CHECK(m2 == m);
    CU_OK(api().cuCtxSetCurrent(scope.ctx()));
  }
}

TEST_CASE("kernels: a CUkernel launches as a CUfunction, in the stream's context",
          "[conformance][library]") {
  REQUIRE_LIBRARIES();
  LibraryFixture fx;
  const auto cast = reinterpret_cast<CUfunction>(fx.k);
  CU_OK(api().cuLaunchKernel(fx.f, 1, 1, 1, 1, 1, 1, 0, fx.s, fx.args, nullptr));
  CU_OK(api().cuLaunchKernel(cast, 1, 1, 1, 1, 1, 1, 0, fx.s, fx.args, nullptr));
  CU_OK(api().cuStreamSynchronize(fx.s));
  CU_OK(api().cuLaunchKernel(cast, 1, 1, 1, 1, 1, 1, 0, nullptr, fx.args, nullptr));  // legacy
  CU_OK(api().cuStreamSynchronize(nullptr));
  CHECK(fx.value() == 3);

  // A created context's stream, with the primary context current: the kernel launches in the
  // stream's context; the primary context's function is refused there, and the created
  // context's on the primary context's stream.
  CUcontext created = nullptr;
  CU_OK(api().cuCtxCreate(&created, 0, 0));
  CUstream cs = nullptr;
  CU_OK(api().cuStreamCreate(&cs, CU_STREAM_NON_BLOCKING));
  CUfunction fc = nullptr;
  CU_OK(api().cuKernelGetFunction(&fc, fx.k));
  CU_OK(api().cuCtxPopCurrent(nullptr));
  CU_OK(api().cuLaunchKernel(cast, 1, 1, 1, 1, 1, 1, 0, cs, fx.args, nullptr));
  CU_CHECK_EQ(api().cuLaunchKernel(fx.f, 1, 1, 1, 1, 1, 1, 0, cs, fx.args, nullptr),
              CUDA_ERROR_INVALID_HANDLE);
  CU_CHECK_EQ(api().cuLaunchKernel(fc, 1, 1, 1, 1, 1, 1, 0, fx.s, fx.args, nullptr),
              CUDA_ERROR_INVALID_HANDLE);
  CU_OK(api().cuStreamSynchronize(cs));
  // No context current: a created stream names its context; the legacy stream has none.
  CU_OK(api().cuCtxSetCurrent(nullptr));
  CU_OK(api().cuLaunchKernel(cast, 1, 1, 1, 1, 1, 1, 0, fx.s, fx.args, nullptr));
  CU_CHECK_EQ(api().cuLaunchKernel(cast, 1, 1, 1, 1, 1, 1, 0, nullptr, fx.args, nullptr),
              CUDA_ERROR_INVALID_CONTEXT);
  CU_OK(api().cuStreamSynchronize(fx.s));
  CU_OK(api().cuCtxSetCurrent(fx.scope.ctx()));
  CHECK(fx.value() == 5);
  CU_OK(api().cuStreamDestroy(cs));
  CU_OK(api().cuCtxDestroy(created));

  // A green context's stream runs the primary context's function, and the kernel.
  if (!missing_optional_entry()) {
    GreenScope green;
    GreenStream gs(green.get());
    CU_OK(api().cuLaunchKernel(fx.f, 1, 1, 1, 1, 1, 1, 0, gs.s, fx.args, nullptr));
    CU_OK(api().cuLaunchKernel(cast, 1, 1, 1, 1, 1, 1, 0, gs.s, fx.args, nullptr));
    CU_OK(api().cuStreamSynchronize(gs.s));
    CHECK(fx.value() == 7);
  }
}

TEST_CASE("kernels: attributes per device; dynamic shared memory bounded by the opt-in maximum",
          "[conformance][library]") {
  REQUIRE_LIBRARIES();
  LibraryHandle lib;
  CUkernel add = lib.kernel("lib_add");
  CUkernel shared = lib.kernel("lib_shared");
  int v = -1;
  // No context needed.
  CU_OK(api().cuKernelGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, add, 0));
  CHECK(v == 1024);
  CU_OK(api().cuKernelGetAttribute(&v, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, add, 0));
  CHECK(v == 0);
  CU_OK(api().cuKernelGetAttribute(&v, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, shared, 0));
  CHECK(v == 1024);
  CU_OK(api().cuKernelGetAttribute(&v, CU_FUNC_ATTRIBUTE_NUM_REGS, add, 0));
  CHECK((v > 0 && v <= 255));
  CU_OK(api().cuKernelGetAttribute(&v, CU_FUNC_ATTRIBUTE_PTX_VERSION, add, 0));
  CHECK(v == 70);
  CU_OK(api().cuKernelGetAttribute(&v, CU_FUNC_ATTRIBUTE_BINARY_VERSION, add, 0));
  CHECK(v == 10 * compute_capability_major());
  CU_OK(api().cuKernelGetAttribute(&v, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, add, 0));
  CHECK(v == 0);
  CU_OK(api().cuKernelGetAttribute(&v, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, add, 0));
  CHECK(v == -1);
  // Dynamic shared memory: 48 KiB less the static shared memory by default, settable up to the
  // device's opt-in maximum less the static shared memory.
  CU_OK(api().cuKernelGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, add, 0));
  CHECK(v == 49152);
  CU_OK(api().cuKernelGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared, 0));
  CHECK(v == 49152 - 1024);
  int optin = 0;
  CU_OK(
      api().cuDeviceGetAttribute(&optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, 0));
  const auto dyn = CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
  CU_OK(api().cuKernelSetAttribute(dyn, 100000, add, 0));
  CU_OK(api().cuKernelGetAttribute(&v, dyn, add, 0));
  CHECK(v == 100000);
  CU_OK(api().cuKernelSetAttribute(dyn, optin, add, 0));
  CU_CHECK_EQ(api().cuKernelSetAttribute(dyn, optin + 1, add, 0), CUDA_ERROR_INVALID_VALUE);
  CU_CHECK_EQ(api().cuKernelSetAttribute(dyn, -1, add, 0), CUDA_ERROR_INVALID_VALUE);
  CU_OK(api().cuKernelGetAttribute(&v, dyn, add, 0));
  CHECK(v == optin);
  CU_OK(api().cuKernelSetAttribute(dyn, optin - 1024, shared, 0));
  CU_CHECK_EQ(api().cuKernelSetAttribute(dyn, optin - 1023, shared, 0), CUDA_ERROR_INVALID_VALUE);
  // Read-only attributes; carveout percentages; errors.
  CU_CHECK_EQ(api().cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_NUM_REGS, 10, add, 0),
              CUDA_ERROR_INVALID_VALUE);
  CU_CHECK_EQ(api().cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 128, add, 0),
              CUDA_ERROR_INVALID_VALUE);
  CU_CHECK_EQ(api().cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, 128, add, 0),
              CUDA_ERROR_INVALID_VALUE);
  CU_OK(api().cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 50, add, 0));
  CU_CHECK_EQ(
      api().cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 101, add, 0),
      CUDA_ERROR_INVALID_VALUE);
  int count = 0;
  CU_OK(api().cuDeviceGetCount(&count));
  CU_CHECK_EQ(api().cuKernelGetAttribute(&v, CU_FUNC_ATTRIBUTE_NUM_REGS, add, count),
              CUDA_ERROR_INVALID_DEVICE);
  CU_CHECK_EQ(api().cuKernelGetAttribute(&v, CU_FUNC_ATTRIBUTE_NUM_REGS, add, -1),
              CUDA_ERROR_INVALID_DEVICE);
  CU_CHECK_EQ(api().cuKernelSetAttribute(dyn, 1000, add, count), CUDA_ERROR_INVALID_DEVICE);
  CU_CHECK_EQ(api().cuKernelGetAttribute(nullptr, CU_FUNC_ATTRIBUTE_NUM_REGS, add, 0),
              CUDA_ERROR_INVALID_VALUE);
  CU_CHECK_EQ(api().cuKernelGetAttribute(&v, CU_FUNC_ATTRIBUTE_NUM_REGS, nullptr, 0),
              CUDA_ERROR_INVALID_HANDLE);
  CU_CHECK_EQ(api().cuKernelGetAttribute(&v, static_cast<CUfunction_attribute>(99), add, 0),
              CUDA_ERROR_INVALID_VALUE);
  CU_CHECK_EQ(api().cuKernelSetAttribute(dyn, 1000, nullptr, 0), CUDA_ERROR_INVALID_HANDLE);

  // Launches are bounded by the kernel's dynamic shared memory on the stream's device.
  LaunchFixture fx;
  CUfunction fs = nullptr;
  CU_OK(api().cuKernelGetFunction(&fs, shared));
  CU_OK(api().cuLaunchKernel(fs, 1, 1, 1, 1, 1, 1, optin - 1024, fx.s, fx.args, nullptr));
  CU_CHECK_EQ(api().cuLaunchKernel(fs, 1, 1, 1, 1, 1, 1, optin - 1023, fx.s, fx.args, nullptr),
              CUDA_ERROR_INVALID_VALUE);
  CU_OK(api().cuKernelSetAttribute(dyn, 0, shared, 0));
  CU_CHECK_EQ(api().cuLaunchKernel(fs, 1, 1, 1, 1, 1, 1, 1, fx.s, fx.args, nullptr),
              CUDA_ERROR_INVALID_VALUE);
  CU_OK(api().cuLaunchKernel(fs, 1, 1, 1, 1, 1, 1, 0, fx.s, fx.args, nullptr));
  // A kernel left at its default: 48 KiB.
  LibraryHandle fresh;
  CUfunction fa = nullptr;
  CU_OK(api().cuKernelGetFunction(&fa, fresh.kernel("lib_add")));
  CU_OK(api().cuLaunchKernel(fa, 1, 1, 1, 1, 1, 1, 49152, fx.s, fx.args, nullptr));
  CU_CHECK_EQ(api().cuLaunchKernel(fa, 1, 1, 1, 1, 1, 1, 49153, fx.s, fx.args, nullptr),
              CUDA_ERROR_INVALID_VALUE);
  CU_OK(api().cuStreamSynchronize(fx.s));
}

TEST_CASE("kernels: parameter offsets and sizes from the PTX", "[conformance][library]") {
  REQUIRE_LIBRARIES();
  LibraryHandle lib;
  CUkernel add = lib.kernel("lib_add");
  size_t offset = 777, size = 777;
  CU_CHECK_EQ(api().cuKernelGetParamInfo(add, 0, nullptr, &size), CUDA_ERROR_INVALID_VALUE);
  CU_CHECK_EQ(api().cuKernelGetParamInfo(nullptr, 0, &offset, &size), CUDA_ERROR_INVALID_VALUE);
  CUcontext prev = nullptr;
  CU_OK(api().cuCtxGetCurrent(&prev));
  CU_OK(api().cuCtxSetCurrent(nullptr));  // the H200 needs a context here
  CU_CHECK_EQ(api().cuKernelGetParamInfo(add, 0, &offset, &size), CUDA_ERROR_INVALID_CONTEXT);
  CU_OK(api().cuCtxSetCurrent(prev));
  PrimaryScope scope;
  CU_OK(api().cuKernelGetParamInfo(add, 0, &offset, &size));
  CHECK(offset == 0);
  CHECK(size == 8);
  CU_OK(api().cuKernelGetParamInfo(add, 1, &offset, &size));
  CHECK(offset == 8);
  CHECK(size == 4);
  CU_OK(api().cuKernelGetParamInfo(add, 1, &offset, nullptr));
  CHECK(offset == 8);
  CU_CHECK_EQ(api().cuKernelGetParamInfo(add, 2, &offset, &size), CUDA_ERROR_INVALID_VALUE);
}

TEST_CASE("kernels: parameter offsets follow the PTX alignment", "[conformance][library]") {
  REQUIRE_LIBRARIES();
  LibraryHandle lib;
  // (.u32 a, .u64 b, .align 8 .b8 s[12], .u16 c)
  check_param_layout(lib.kernel("lib_mixed"), {{0, 4}, {8, 8}, {16, 12}, {28, 2}});
}

TEST_CASE("libraries: variables per context, managed variables for every context",
          "[conformance][library]") {
  REQUIRE_LIBRARIES();
  LibraryHandle lib;
  CUdeviceptr p = 0;
  size_t bytes = 0;
  CUcontext prev = nullptr;
  CU_OK(api().cuCtxGetCurrent(&prev));
  CU_OK(api().cuCtxSetCurrent(nullptr));
  CU_CHECK_EQ(api().cuLibraryGetGlobal(&p, &bytes, lib.lib, "counter"), CUDA_ERROR_INVALID_CONTEXT);
  CUdeviceptr managed = 0;
  CU_OK(api().cuLibraryGetManaged(&managed, &bytes, lib.lib, "managed_value"));  // no context
  CHECK(managed != 0);
  CHECK(bytes == 4);
  CU_OK(api().cuCtxSetCurrent(prev));

  PrimaryScope scope;
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  CU_OK(api().cuLibraryGetGlobal(&p, &bytes, lib.lib, "counter"));
  CHECK(bytes == 4);
  CHECK(read_int(p, s.s) == 0);
  CUdeviceptr p2 = 0;
  CU_OK(api().cuLibraryGetGlobal(&p2, nullptr, lib.lib, "counter"));
  CHECK(p2 == p);
  CU_OK(api().cuLibraryGetGlobal(nullptr, &bytes, lib.lib, "counter"));
  CU_CHECK_EQ(api().cuLibraryGetGlobal(nullptr, nullptr, lib.lib, "counter"),
              CUDA_ERROR_INVALID_VALUE);
  CU_OK(api().cuLibraryGetGlobal(&p2, &bytes, lib.lib, "initialized"));
  CHECK(bytes == 4);
  CHECK(read_int(p2, s.s) == 7);
  CU_OK(api().cuLibraryGetGlobal(&p2, &bytes, lib.lib, "table"));
  CHECK(bytes == 12);
  int table[3] = {};
  CU_OK(api().cuMemcpyDtoHAsync(table, p2, sizeof table, s.s));
  CU_OK(api().cuStreamSynchronize(s.s));
  CHECK((table[0] == 1 && table[1] == 2 && table[2] == 3));
  CU_OK(api().cuLibraryGetGlobal(&p2, &bytes, lib.lib, "hidden_var"));  // not .visible
  CHECK(bytes == 4);
  CU_CHECK_EQ(api().cuLibraryGetGlobal(&p2, &bytes, lib.lib, "no_such_variable"),
              CUDA_ERROR_NOT_FOUND);
  CU_CHECK_EQ(api().cuLibraryGetGlobal(&p2, &bytes, lib.lib, "lib_add"), CUDA_ERROR_INVALID_VALUE);
  CU_CHECK_EQ(api().cuLibraryGetGlobal(&p2, &bytes, lib.lib, nullptr), CUDA_ERROR_INVALID_VALUE);
  CU_CHECK_EQ(api().cuLibraryGetGlobal(&p2, &bytes, nullptr, "counter"), CUDA_ERROR_INVALID_HANDLE);
  // The managed variable: also a global, the same address; other names are not managed.
  CU_OK(api().cuLibraryGetGlobal(&p2, &bytes, lib.lib, "managed_value"));
  CHECK(p2 == managed);
  CU_CHECK_EQ(api().cuLibraryGetManaged(&p2, &bytes, lib.lib, "counter"), CUDA_ERROR_NOT_FOUND);
  CU_CHECK_EQ(api().cuLibraryGetManaged(&p2, &bytes, lib.lib, "no_such_variable"),
              CUDA_ERROR_NOT_FOUND);
  // Written here, read back.
  const int value = 42;
  CU_OK(api().cuMemcpyHtoDAsync(p, &value, sizeof value, s.s));
  CHECK(read_int(p, s.s) == 42);

  // Another context: its own variables (initialized from the image); a green context: the
  // primary context's.
  CUcontext created = nullptr;
  CU_OK(api().cuCtxCreate(&created, 0, 0));
  CUdeviceptr in_created = 0;
  CU_OK(api().cuLibraryGetGlobal(&in_created, nullptr, lib.lib, "counter"));
  CHECK(in_created != p);
  {
    StreamHandle cs(CU_STREAM_NON_BLOCKING);
    CHECK(read_int(in_created, cs.s) == 0);
    CU_OK(api().cuLibraryGetGlobal(&p2, nullptr, lib.lib, "managed_value"));
    CHECK(p2 == managed);
  }
  CU_OK(api().cuCtxDestroy(created));
  if (!missing_optional_entry()) {
    GreenScope green;
    CU_OK(api().cuCtxSetCurrent(green.ctx()));
    CU_OK(api().cuLibraryGetGlobal(&p2, nullptr, lib.lib, "counter"));
    CHECK(p2 == p);
    CU_OK(api().cuCtxSetCurrent(scope.ctx()));
  }
}

TEST_CASE("cuLaunchKernelEx: launches, configuration checks and cluster dimensions",
          "[conformance][library]") {
  REQUIRE_LIBRARIES();
  LibraryFixture fx;
  CUlaunchConfig c = launch_config(fx.s);
  CU_OK(api().cuLaunchKernelEx(&c, fx.f, fx.args, nullptr));
  CU_OK(api().cuLaunchKernelEx(&c, reinterpret_cast<CUfunction>(fx.k), fx.args, nullptr));
  CU_OK(api().cuStreamSynchronize(fx.s));  // a non-blocking stream: the legacy one does not wait
  CUlaunchConfig legacy = launch_config(nullptr);
  CU_OK(api().cuLaunchKernelEx(&legacy, fx.f, fx.args, nullptr));
  CU_OK(api().cuStreamSynchronize(nullptr));
  CHECK(fx.value() == 3);

  CU_CHECK_EQ(api().cuLaunchKernelEx(nullptr, fx.f, fx.args, nullptr), CUDA_ERROR_INVALID_VALUE);
  CU_CHECK_EQ(api().cuLaunchKernelEx(&c, nullptr, fx.args, nullptr), CUDA_ERROR_INVALID_HANDLE);
  CUlaunchConfig no_attrs = c;
  no_attrs.numAttrs = 1;
  CU_CHECK_EQ(api().cuLaunchKernelEx(&no_attrs, fx.f, fx.args, nullptr), CUDA_ERROR_INVALID_VALUE);
  CUlaunchConfig bad = launch_config(fx.s, 0);
  CU_CHECK_EQ(api().cuLaunchKernelEx(&bad, fx.f, fx.args, nullptr), CUDA_ERROR_INVALID_VALUE);
  bad = launch_config(fx.s, 1, 1025);
  CU_CHECK_EQ(api().cuLaunchKernelEx(&bad, fx.f, fx.args, nullptr), CUDA_ERROR_INVALID_VALUE);
  bad = launch_config(fx.s);
  bad.sharedMemBytes = 49153;
  CU_CHECK_EQ(api().cuLaunchKernelEx(&bad, fx.f, fx.args, nullptr), CUDA_ERROR_INVALID_VALUE);

  // The attributes a launch takes; a stream attribute and an unknown one are refused.
  CUlaunchAttribute a{};
  a.id = CU_LAUNCH_ATTRIBUTE_IGNORE;
  CU_OK(launch_ex_with(fx.f, c, a, fx.args));
  a.id = CU_LAUNCH_ATTRIBUTE_PRIORITY;
  for (int priority : {-3, 100, -100}) {
    a.value.priority = priority;
    CU_OK(launch_ex_with(fx.f, c, a, fx.args));
  }
  a = {};
  a.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  a.value.programmaticStreamSerializationAllowed = 1;
  CU_OK(launch_ex_with(fx.f, c, a, fx.args));
  a = {};
  a.id = CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN;
  a.value.memSyncDomain = CU_LAUNCH_MEM_SYNC_DOMAIN_REMOTE;
  CU_OK(launch_ex_with(fx.f, c, a, fx.args));
  a.value.memSyncDomain = static_cast<CUlaunchMemSyncDomain>(7);
  CU_CHECK_EQ(launch_ex_with(fx.f, c, a, fx.args), CUDA_ERROR_INVALID_VALUE);
  a = {};
  a.id = CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY;
  a.value.syncPolicy = CU_SYNC_POLICY_AUTO;
  CU_CHECK_EQ(launch_ex_with(fx.f, c, a, fx.args), CUDA_ERROR_INVALID_VALUE);
  a = {};
  a.id = static_cast<CUlaunchAttributeID>(99);
  CU_CHECK_EQ(launch_ex_with(fx.f, c, a, fx.args), CUDA_ERROR_INVALID_VALUE);

  // Clusters: each dimension divides the grid; all zero means none; at most 8 blocks unless the
  // kernel allows a non-portable size (16 on the H200).
  CU_OK(launch_ex_with(fx.f, launch_config(fx.s, 4), cluster_attr(2), fx.args));
  CU_CHECK_EQ(launch_ex_with(fx.f, launch_config(fx.s, 3), cluster_attr(2), fx.args),
              CUDA_ERROR_INVALID_CLUSTER_SIZE);
  CU_CHECK_EQ(launch_ex_with(fx.f, launch_config(fx.s, 4), cluster_attr(0), fx.args),
              CUDA_ERROR_INVALID_CLUSTER_SIZE);
  CU_OK(launch_ex_with(fx.f, launch_config(fx.s, 4), cluster_attr(0, 0, 0), fx.args));
  CU_CHECK_EQ(launch_ex_with(fx.f, launch_config(fx.s, 4), cluster_attr(2, 2), fx.args),
              CUDA_ERROR_INVALID_CLUSTER_SIZE);
  CU_OK(launch_ex_with(fx.f, launch_config(fx.s, 16), cluster_attr(8), fx.args));
  CU_CHECK_EQ(launch_ex_with(fx.f, launch_config(fx.s, 16), cluster_attr(16), fx.args),
              CUDA_ERROR_INVALID_CLUSTER_SIZE);
  CU_CHECK_EQ(launch_ex_with(fx.f, launch_config(fx.s, 32), cluster_attr(32), fx.args),
              CUDA_ERROR_INVALID_CLUSTER_SIZE);
  CU_OK(api().cuStreamSynchronize(fx.s));
}

TEST_CASE("cuLaunchKernelEx: a non-portable cluster size once the kernel allows it",
          "[conformance][library]") {
  REQUIRE_LIBRARIES();
  LibraryFixture fx("lib_internal");  // no parameters
  CU_CHECK_EQ(launch_ex_with(fx.f, launch_config(fx.s, 16), cluster_attr(16), nullptr),
              CUDA_ERROR_INVALID_CLUSTER_SIZE);
  CU_OK(
      api().cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1, fx.k, 0));
  CU_OK(launch_ex_with(fx.f, launch_config(fx.s, 16), cluster_attr(16), nullptr));
  CU_CHECK_EQ(launch_ex_with(fx.f, launch_config(fx.s, 32), cluster_attr(32), nullptr),
              CUDA_ERROR_INVALID_CLUSTER_SIZE);
  // Any value is taken (the H200).
  CU_OK(
      api().cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 2, fx.k, 0));
  CU_OK(api().cuStreamSynchronize(fx.s));
}

TEST_CASE("cuLaunchKernelEx: cooperative launches are bounded by the co-resident blocks",
          "[conformance][library]") {
  REQUIRE_LIBRARIES();
  LibraryFixture fx;
  int sms = 0;
  CU_OK(api().cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0));
  const unsigned n = static_cast<unsigned>(sms);
  CUlaunchAttribute a{};
  a.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
  a.value.cooperative = 1;
  // 2,048 threads and 32 blocks per SM (a small kernel): 2 blocks of 1,024 threads, 32 of 32.
  CU_OK(launch_ex_with(fx.f, launch_config(fx.s, 2 * n, 1024), a, fx.args));
  CU_CHECK_EQ(launch_ex_with(fx.f, launch_config(fx.s, 2 * n + 1, 1024), a, fx.args),
              CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE);
  CU_OK(launch_ex_with(fx.f, launch_config(fx.s, 32 * n, 32), a, fx.args));
  CU_CHECK_EQ(launch_ex_with(fx.f, launch_config(fx.s, 32 * n + 1, 32), a, fx.args),
              CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE);
  a.value.cooperative = 0;  // not cooperative: any grid
  CU_OK(launch_ex_with(fx.f, launch_config(fx.s, 64 * n, 32), a, fx.args));
  // Cooperative and clustered together.
  CUlaunchAttribute both[2] = {cluster_attr(2), {}};
  both[1].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
  both[1].value.cooperative = 1;
  CUlaunchConfig c = launch_config(fx.s, 4);
  c.attrs = both;
  c.numAttrs = 2;
  CU_OK(api().cuLaunchKernelEx(&c, fx.f, fx.args, nullptr));
  CU_OK(api().cuStreamSynchronize(fx.s));
}

TEST_CASE("cuLaunchKernelEx: captured as a kernel node; a refused launch invalidates the capture",
          "[conformance][library]") {
  REQUIRE_LIBRARIES();
  LibraryFixture fx;
  fx.amount = 2;
  CU_OK(api().cuStreamBeginCapture(fx.s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU_OK(launch_ex_with(fx.f, launch_config(fx.s), cluster_attr(1), fx.args));
  CUgraph g = nullptr;
  CU_OK(api().cuStreamEndCapture(fx.s, &g));
  REQUIRE(g != nullptr);
  CUgraphNode node = nullptr;
  size_t n = 1;
  CU_OK(api().cuGraphGetNodes(g, &node, &n));
  REQUIRE(n == 1);
  CUgraphNodeType type{};
  CU_OK(api().cuGraphNodeGetType(node, &type));
  CHECK(type == CU_GRAPH_NODE_TYPE_KERNEL);
  CUgraphExec exec = instantiate(g);
  CU_OK(api().cuGraphLaunch(exec, fx.s));
  CU_OK(api().cuGraphLaunch(exec, fx.s));
  CHECK(fx.value() == 4);
  CU_OK(api().cuGraphExecDestroy(exec));
  CU_OK(api().cuGraphDestroy(g));
  // A bad cluster size in a capture: refused, and the capture is invalidated.
  CU_OK(api().cuStreamBeginCapture(fx.s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU_CHECK_EQ(launch_ex_with(fx.f, launch_config(fx.s, 3), cluster_attr(2), fx.args),
              CUDA_ERROR_INVALID_CLUSTER_SIZE);
  CHECK(capture_status(fx.s) == CU_STREAM_CAPTURE_STATUS_INVALIDATED);
  CHECK(end_capture_result(fx.s) == nm(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED));
}

TEST_CASE("a refused cuLaunchKernel invalidates the capture", "[conformance][library]") {
  REQUIRE_LIBRARIES();
  LibraryFixture fx;
  CU_OK(api().cuStreamBeginCapture(fx.s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU_CHECK_EQ(api().cuLaunchKernel(fx.f, 1, 1, 1, 1025, 1, 1, 0, fx.s, fx.args, nullptr),
              CUDA_ERROR_INVALID_VALUE);
  CHECK(capture_status(fx.s) == CU_STREAM_CAPTURE_STATUS_INVALIDATED);
  CHECK(end_capture_result(fx.s) == nm(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED));
  for (unsigned shared : {0u, 49153u}) {
    CU_OK(api().cuStreamBeginCapture(fx.s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CU_CHECK_EQ(
        api().cuLaunchKernel(fx.f, shared ? 1 : 0, 1, 1, 1, 1, 1, shared, fx.s, fx.args, nullptr),
        CUDA_ERROR_INVALID_VALUE);
    CHECK(capture_status(fx.s) == CU_STREAM_CAPTURE_STATUS_INVALIDATED);
    CHECK(end_capture_result(fx.s) == nm(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED));
  }
  // A refused launch attribute, though, leaves the capture valid.
  CU_OK(api().cuStreamBeginCapture(fx.s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CUlaunchAttribute unknown{};
  unknown.id = static_cast<CUlaunchAttributeID>(99);
  CU_CHECK_EQ(launch_ex_with(fx.f, launch_config(fx.s), unknown, fx.args),
              CUDA_ERROR_INVALID_VALUE);
  CHECK(capture_status(fx.s) == CU_STREAM_CAPTURE_STATUS_ACTIVE);
  CHECK(end_capture_result(fx.s) == nm(CUDA_SUCCESS));
}

TEST_CASE("lazy loading while a stream captures keeps the capture valid, in every mode",
          "[conformance][library]") {
  REQUIRE_LIBRARIES();
  LaunchFixture fx;
  for (CUstreamCaptureMode mode :
       {CU_STREAM_CAPTURE_MODE_GLOBAL, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
        CU_STREAM_CAPTURE_MODE_RELAXED}) {
    INFO("mode " << mode);
    // The first cuKernelGetFunction in this context (here and from another thread), the first
    // variable: the capture stays valid and records nothing.
    {
      LibraryHandle lib;
      CUkernel k = lib.kernel("lib_add");
      CUkernel other = lib.kernel("lib_shared");
      CU_OK(api().cuStreamBeginCapture(fx.s, mode));
      CUfunction f = nullptr;
      CU_OK(api().cuKernelGetFunction(&f, k));
      CUresult from_thread = CUDA_ERROR_UNKNOWN;
      std::thread t([&] {
        CUfunction g = nullptr;
        if (api().cuCtxSetCurrent(fx.scope.ctx()) == CUDA_SUCCESS)
          from_thread = api().cuKernelGetFunction(&g, other);
      });
      t.join();
      CU_CHECK_EQ(from_thread, CUDA_SUCCESS);
      CUdeviceptr var = 0;
      CU_OK(api().cuLibraryGetGlobal(&var, nullptr, lib.lib, "counter"));
      CHECK(capture_status(fx.s) == CU_STREAM_CAPTURE_STATUS_ACTIVE);
      CUgraph g = nullptr;
      CU_OK(api().cuStreamEndCapture(fx.s, &g));
      REQUIRE(g != nullptr);
      CHECK(node_count(g) == 0);
      CU_OK(api().cuGraphDestroy(g));
      CUfunction again = nullptr;
      CU_OK(api().cuKernelGetFunction(&again, k));
      CHECK(again == f);
    }
    // A launch of a kernel not loaded in this context yet (cuLaunchKernel, cuLaunchKernelEx):
    // loaded, captured as kernel nodes that run at each replay.
    {
      LibraryHandle lib;
      CUkernel k = lib.kernel("lib_add");
      CU_OK(api().cuStreamBeginCapture(fx.s, mode));
      CU_OK(api().cuLaunchKernel(reinterpret_cast<CUfunction>(k), 1, 1, 1, 1, 1, 1, 0, fx.s,
                                 fx.args, nullptr));
      CUlaunchConfig c = launch_config(fx.s);
      CU_OK(api().cuLaunchKernelEx(&c, reinterpret_cast<CUfunction>(k), fx.args, nullptr));
      CHECK(capture_status(fx.s) == CU_STREAM_CAPTURE_STATUS_ACTIVE);
      CUgraph g = nullptr;
      CU_OK(api().cuStreamEndCapture(fx.s, &g));
      REQUIRE(g != nullptr);
      CHECK(node_count(g) == 2);
      const int before = fx.value();
      CUgraphExec exec = instantiate(g);
      CU_OK(api().cuGraphLaunch(exec, fx.s));
      CHECK(fx.value() == before + 2);
      CU_OK(api().cuGraphExecDestroy(exec));
      CU_OK(api().cuGraphDestroy(g));
    }
    // Loading a library during a capture is allowed too.
    {
      CU_OK(api().cuStreamBeginCapture(fx.s, mode));
      CUlibrary lib = nullptr;
      CU_OK(api().cuLibraryLoadData(&lib, kLibraryPtx, nullptr, nullptr, 0, nullptr, nullptr, 0));
      CUkernel k = nullptr;
      CU_OK(api().cuLibraryGetKernel(&k, lib, "lib_add"));
      CHECK(capture_status(fx.s) == CU_STREAM_CAPTURE_STATUS_ACTIVE);
      CHECK(end_capture_result(fx.s) == nm(CUDA_SUCCESS));
      CU_OK(api().cuLibraryUnload(lib));
    }
  }
}

TEST_CASE("cuLibraryUnload during a global or thread-local capture is unsupported and invalidates",
          "[conformance][library]") {
  REQUIRE_LIBRARIES();
  LaunchFixture fx;
  for (CUstreamCaptureMode mode :
       {CU_STREAM_CAPTURE_MODE_GLOBAL, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL}) {
    INFO("mode " << mode);
    CUlibrary lib = nullptr;
    CU_OK(api().cuLibraryLoadData(&lib, kLibraryPtx, nullptr, nullptr, 0, nullptr, nullptr, 0));
    CUfunction f = nullptr;
    CUkernel k = nullptr;
    CU_OK(api().cuLibraryGetKernel(&k, lib, "lib_add"));
    CU_OK(api().cuKernelGetFunction(&f, k));
    CU_OK(api().cuStreamBeginCapture(fx.s, mode));
    CU_CHECK_EQ(api().cuLibraryUnload(lib), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    CHECK(capture_status(fx.s) == CU_STREAM_CAPTURE_STATUS_INVALIDATED);
    CHECK(end_capture_result(fx.s) == nm(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED));
    // Refused: the library is still loaded.
    CU_OK(api().cuLibraryGetKernel(&k, lib, "lib_add"));
    CU_OK(api().cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, fx.s, fx.args, nullptr));
    CU_OK(api().cuStreamSynchronize(fx.s));
    CU_OK(api().cuLibraryUnload(lib));
  }
  CHECK(fx.value() == 2);
  const auto load = [] {
    CUlibrary lib = nullptr;
    CU_OK(api().cuLibraryLoadData(&lib, kLibraryPtx, nullptr, nullptr, 0, nullptr, nullptr, 0));
    return lib;
  };
  // Relaxed: allowed.
  CU_OK(api().cuStreamBeginCapture(fx.s, CU_STREAM_CAPTURE_MODE_RELAXED));
  CU_OK(api().cuLibraryUnload(load()));
  CHECK(capture_status(fx.s) == CU_STREAM_CAPTURE_STATUS_ACTIVE);
  CHECK(end_capture_result(fx.s) == nm(CUDA_SUCCESS));
  // From another thread: refused during a global capture, allowed during a thread-local one.
  for (CUstreamCaptureMode mode :
       {CU_STREAM_CAPTURE_MODE_GLOBAL, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL}) {
    INFO("other thread, mode " << mode);
    CUlibrary lib = load();
    CU_OK(api().cuStreamBeginCapture(fx.s, mode));
    CUresult r = CUDA_ERROR_UNKNOWN;
    std::thread t([&] { r = api().cuLibraryUnload(lib); });
    t.join();
    const bool global = mode == CU_STREAM_CAPTURE_MODE_GLOBAL;
    CU_CHECK_EQ(r, global ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS);
    CHECK(capture_status(fx.s) ==
          (global ? CU_STREAM_CAPTURE_STATUS_INVALIDATED : CU_STREAM_CAPTURE_STATUS_ACTIVE));
    CHECK(end_capture_result(fx.s) ==
          nm(global ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_SUCCESS));
    if (global) CU_OK(api().cuLibraryUnload(lib));
  }
  // A thread whose own capture mode is relaxed may unload during its own global capture.
  CUlibrary lib = load();
  CU_OK(api().cuStreamBeginCapture(fx.s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  CU_OK(api().cuThreadExchangeStreamCaptureMode(&mode));
  CU_OK(api().cuLibraryUnload(lib));
  CU_OK(api().cuThreadExchangeStreamCaptureMode(&mode));
  CHECK(capture_status(fx.s) == CU_STREAM_CAPTURE_STATUS_ACTIVE);
  CHECK(end_capture_result(fx.s) == nm(CUDA_SUCCESS));
}

TEST_CASE("cuLibraryUnload: its functions become invalid handles; launches in flight complete",
          "[conformance][library]") {
  REQUIRE_LIBRARIES();
  LaunchFixture fx;
  CUlibrary lib = nullptr;
  CU_OK(api().cuLibraryLoadData(&lib, kLibraryPtx, nullptr, nullptr, 0, nullptr, nullptr, 0));
  CUkernel k = nullptr;
  CU_OK(api().cuLibraryGetKernel(&k, lib, "lib_add"));
  CUfunction f = nullptr;
  CU_OK(api().cuKernelGetFunction(&f, k));
  CUmodule m = nullptr;
  CU_OK(api().cuLibraryGetModule(&m, lib));
  // Launches in flight when the library is unloaded complete. (A graph executable holding a
  // launch of its kernels must not be launched afterwards: the H200 crashed once in two runs;
  // the emulator answers CUDA_ERROR_INVALID_HANDLE, [emu-only] case.)
  CU_OK(api().cuLaunchHostFunc(fx.s, sleep_20ms, nullptr));
  for (int i = 0; i < 10; ++i)
    CU_OK(api().cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, fx.s, fx.args, nullptr));
  CU_OK(api().cuLibraryUnload(lib));
  CU_OK(api().cuStreamSynchronize(fx.s));
  CHECK(fx.value() == 10);
  // What the H200 answers after the unload (other calls on the library or its kernels crash
  // it: see the [emu-only] case).
  CU_CHECK_EQ(api().cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, fx.s, fx.args, nullptr),
              CUDA_ERROR_INVALID_HANDLE);
  CUlaunchConfig c = launch_config(fx.s);
  CU_CHECK_EQ(api().cuLaunchKernelEx(&c, f, fx.args, nullptr), CUDA_ERROR_INVALID_HANDLE);
  CUfunction from_module = nullptr;
  CU_CHECK_EQ(api().cuModuleGetFunction(&from_module, m, "lib_add"), CUDA_ERROR_INVALID_HANDLE);
  CU_CHECK_EQ(api().cuModuleUnload(m), CUDA_ERROR_INVALID_HANDLE);
  CU_OK(api().cuStreamSynchronize(fx.s));
  CHECK(fx.value() == 10);
}

}  // namespace
}  // namespace conformance

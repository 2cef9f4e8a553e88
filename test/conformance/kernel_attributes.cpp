// Driver conformance: Occupancy, function attributes and kernel-node parameters: what custream asks of a kernel
// before it launches it, and of a graph's kernel nodes when it instantiates the graph
#include "helpers.hpp"

namespace conformance {
namespace {

TEST_CASE("kernels: cuKernelGetParamInfo of (.u64, .u32, .f32, .u64) parameters",
          "[conformance][library]") {
  REQUIRE_LIBRARIES();
  LibraryHandle lib(kParamsPtx);
  check_param_layout(lib.kernel("lib_params"), {{0, 8}, {8, 4}, {12, 4}, {16, 8}});
}

TEST_CASE("cuFuncGetAttribute: a library's function answers its kernel's attributes",
          "[conformance][library]") {
  REQUIRE_LIBRARIES();
  LibraryFixture fx;
  CUfunction shared = nullptr;
  CU_OK(api().cuKernelGetFunction(&shared, fx.lib.kernel("lib_shared")));
  CHECK(func_attribute(fx.f, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK) == 1024);
  CHECK(func_attribute(fx.f, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES) == 0);
  CHECK(func_attribute(shared, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES) == 1024);
  const int regs = func_attribute(fx.f, CU_FUNC_ATTRIBUTE_NUM_REGS);
  CHECK((regs > 0 && regs <= 255));
  CHECK(func_attribute(fx.f, CU_FUNC_ATTRIBUTE_PTX_VERSION) == 70);
  CHECK(func_attribute(fx.f, CU_FUNC_ATTRIBUTE_BINARY_VERSION) == 10 * compute_capability_major());
  CHECK(func_attribute(fx.f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) == 49152);
  CHECK(func_attribute(shared, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) == 49152 - 1024);
  // What cuKernelGetAttribute answers for the function's device, also once set there.
  CU_OK(
      api().cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 100000, fx.k, 0));
  CU_OK(
      api().cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1, fx.k, 0));
  for (CUfunction_attribute a :
       {CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
        CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES,
        CU_FUNC_ATTRIBUTE_NUM_REGS, CU_FUNC_ATTRIBUTE_PTX_VERSION, CU_FUNC_ATTRIBUTE_BINARY_VERSION,
        CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
        CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
        CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED,
        CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH}) {
    INFO("attribute " << a);
    int v = -1;
    CU_OK(api().cuKernelGetAttribute(&v, a, fx.k, 0));
    CHECK(func_attribute(fx.f, a) == v);
  }
  CHECK(func_attribute(fx.f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) == 100000);
  CHECK(func_attribute(fx.f, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED) == 1);
  // A CUkernel cast to a CUfunction is no function here (unlike the launch and occupancy calls).
  int v = -1;
  CU_CHECK_EQ(api().cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                       reinterpret_cast<CUfunction>(fx.k)),
              CUDA_ERROR_INVALID_HANDLE);
  CU_CHECK_EQ(api().cuFuncGetAttribute(nullptr, CU_FUNC_ATTRIBUTE_NUM_REGS, fx.f),
              CUDA_ERROR_INVALID_VALUE);
  CU_CHECK_EQ(api().cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_NUM_REGS, nullptr),
              CUDA_ERROR_INVALID_HANDLE);
  CU_CHECK_EQ(api().cuFuncGetAttribute(&v, static_cast<CUfunction_attribute>(99), fx.f),
              CUDA_ERROR_INVALID_VALUE);
  // A module's function: 48 KiB of dynamic shared memory, as no attribute was set.
  CUmodule m = nullptr;
  CU_OK(api().cuModuleLoadData(&m, kKernelPtx));
  CUfunction add = nullptr;
  CU_OK(api().cuModuleGetFunction(&add, m, "add"));
  CHECK(func_attribute(add, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK) == 1024);
  CHECK(func_attribute(add, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES) == 0);
  CHECK(func_attribute(add, CU_FUNC_ATTRIBUTE_PTX_VERSION) == 70);
  CHECK(func_attribute(add, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) == 49152);
  CU_OK(api().cuModuleUnload(m));
}

TEST_CASE("occupancy: blocks per SM, exactly the bound of a cooperative launch",
          "[conformance][library]") {
  REQUIRE_LIBRARIES();
  LibraryFixture fx;
  CUfunction shared = nullptr;  // 1 KiB of static shared memory
  CU_OK(api().cuKernelGetFunction(&shared, fx.lib.kernel("lib_shared")));
  // At most 32 blocks and 2,048 threads (whole warps) per SM; 228 KiB of shared memory per SM,
  // of which each block takes its own, 1 KiB more, in 128-byte units.
  CHECK(occupancy_of(fx.f, 1024, 0) == "2");
  CHECK(occupancy_of(fx.f, 1000, 0) == "2");
  CHECK(occupancy_of(fx.f, 256, 0) == "8");
  CHECK(occupancy_of(fx.f, 32, 0) == "32");
  CHECK(occupancy_of(fx.f, 1, 0) == "32");
  CHECK(occupancy_of(fx.f, 32, 22316) == "9");  // 23,340 bytes with the KiB, 23,424 allocated
  CHECK(occupancy_of(shared, 32, 20000) == "10");
  CHECK(occupancy_of(fx.f, 32, 49152) == "4");
  CHECK(occupancy_of(fx.f, 32, 49153) == "0");  // more than the kernel may ask for
  // A CUkernel cast to a CUfunction: its function in the current context.
  const auto cast = reinterpret_cast<CUfunction>(fx.k);
  CHECK(occupancy_of(cast, 256, 0) == "8");
  // Block sizes the calculator refuses, or that fit no block.
  CHECK(occupancy_of(fx.f, 0, 0) == nm(CUDA_ERROR_INVALID_VALUE));
  CHECK(occupancy_of(fx.f, -1, 0) == nm(CUDA_ERROR_INVALID_VALUE));
  CHECK(occupancy_of(fx.f, 1025, 0) == "0");
  int n = -1;
  CU_CHECK_EQ(api().cuOccupancyMaxActiveBlocksPerMultiprocessor(nullptr, fx.f, 32, 0),
              CUDA_ERROR_INVALID_VALUE);
  CU_CHECK_EQ(api().cuOccupancyMaxActiveBlocksPerMultiprocessor(&n, nullptr, 32, 0),
              CUDA_ERROR_INVALID_HANDLE);
  // A context must be current, for a function too.
  CU_OK(api().cuCtxSetCurrent(nullptr));
  CHECK(occupancy_of(fx.f, 32, 0) == nm(CUDA_ERROR_INVALID_CONTEXT));
  CHECK(occupancy_of(cast, 32, 0) == nm(CUDA_ERROR_INVALID_CONTEXT));
  CU_OK(api().cuCtxSetCurrent(fx.scope.ctx()));

  // A cooperative launch takes exactly the occupancy times the SMs.
  const unsigned sms = static_cast<unsigned>(sm_count());
  CUlaunchAttribute coop{};
  coop.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
  coop.value.cooperative = 1;
  const std::pair<unsigned, unsigned> configs[] = {{1024, 0}, {32, 0}, {32, 22316}, {256, 40000}};
  for (const auto& [block, dynamic_shared] : configs) {
    INFO(block << " threads, " << dynamic_shared << " bytes");
    const unsigned limit = static_cast<unsigned>(occupancy(fx.f, block, dynamic_shared)) * sms;
    CUlaunchConfig c = launch_config(fx.s, limit, block);
    c.sharedMemBytes = dynamic_shared;
    CU_CHECK_EQ(launch_ex_with(fx.f, c, coop, fx.args), CUDA_SUCCESS);
    c.gridDimX = limit + 1;
    CU_CHECK_EQ(launch_ex_with(fx.f, c, coop, fx.args), CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE);
  }
  CU_OK(api().cuStreamSynchronize(fx.s));
}

// The H200 answered 528, 30 and 14 clusters for the three sizes below: fewer than the SMs
// would hold, as its GPCs (at most 18 SMs) bound them; the emulator answers that upper bound.
TEST_CASE("occupancy: the clusters that can co-exist on the device", "[conformance][library]") {
  REQUIRE_LIBRARIES();
  LibraryFixture fx("lib_internal");  // no parameters
  const auto cast = reinterpret_cast<CUfunction>(fx.k);
  const int sms = sm_count();
  // At most the groups of cluster-size SMs times the blocks an SM holds.
  const auto check_clusters = [&](unsigned size, unsigned block, const char* what) {
    INFO(what);
    int n = -1;
    CU_CHECK_EQ(clusters_with(&n, fx.f, launch_config(fx.s, 16, block), {cluster_attr(size)}),
                CUDA_SUCCESS);
    CHECK(n > 0);
    CHECK(n <= sms / static_cast<int>(size) * occupancy(fx.f, static_cast<int>(block), 0));
    fact(what, n);
    return n;
  };
  check_clusters(2, 128, "clusters of 2 blocks of 128 threads");
  const int eights = check_clusters(8, 1024, "clusters of 8 blocks of 1024 threads");
  // A CUkernel: its function in the configuration's stream's context.
  int n = -1;
  CU_CHECK_EQ(clusters_with(&n, cast, launch_config(fx.s, 16, 1024), {cluster_attr(8)}),
              CUDA_SUCCESS);
  CHECK(n == eights);
  // Refused as a launch would be: over 8 blocks without the kernel's non-portable attribute; a
  // cluster that does not divide the grid.
  n = -1;
  CU_CHECK_EQ(clusters_with(&n, fx.f, launch_config(fx.s, 16, 1024), {cluster_attr(16)}),
              CUDA_ERROR_INVALID_CLUSTER_SIZE);
  CU_CHECK_EQ(clusters_with(&n, fx.f, launch_config(fx.s, 3, 128), {cluster_attr(2)}),
              CUDA_ERROR_INVALID_CLUSTER_SIZE);
  CHECK(n == -1);
  // No cluster size: none fits (not an error).
  CU_CHECK_EQ(clusters_with(&n, fx.f, launch_config(fx.s, 16, 128), {}), CUDA_SUCCESS);
  CHECK(n == 0);
  // 16 blocks once the kernel allows a non-portable size; 32, none.
  CU_OK(
      api().cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1, fx.k, 0));
  check_clusters(16, 1024, "clusters of 16 non-portable blocks of 1024 threads");
  n = -1;
  CU_CHECK_EQ(clusters_with(&n, fx.f, launch_config(fx.s, 32, 128), {cluster_attr(32)}),
              CUDA_SUCCESS);
  CHECK(n == 0);
  CUlaunchConfig c = launch_config(fx.s, 16, 128);
  CU_CHECK_EQ(api().cuOccupancyMaxActiveClusters(nullptr, fx.f, &c), CUDA_ERROR_INVALID_VALUE);
  CU_CHECK_EQ(api().cuOccupancyMaxActiveClusters(&n, fx.f, nullptr), CUDA_ERROR_INVALID_VALUE);
}

TEST_CASE(
    "cuLaunchKernelEx: a cluster that does not divide the grid is refused and invalidates "
    "the capture",
    "[conformance][library]") {
  REQUIRE_LIBRARIES();
  LibraryFixture fx;
  const auto cast = reinterpret_cast<CUfunction>(fx.k);
  CUlaunchConfig c = launch_config(fx.s, 4);
  c.gridDimY = 3;  // 2 x 2 clusters: the height does not divide
  for (CUfunction f : {fx.f, cast}) {
    CU_CHECK_EQ(launch_ex_with(f, c, cluster_attr(2, 2), fx.args), CUDA_ERROR_INVALID_CLUSTER_SIZE);
    CU_OK(api().cuStreamBeginCapture(fx.s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CU_CHECK_EQ(launch_ex_with(f, c, cluster_attr(2, 2), fx.args), CUDA_ERROR_INVALID_CLUSTER_SIZE);
    CHECK(capture_status(fx.s) == CU_STREAM_CAPTURE_STATUS_INVALIDATED);
    CHECK(end_capture_result(fx.s) == nm(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED));
  }
  c.gridDimY = 4;
  CU_OK(launch_ex_with(fx.f, c, cluster_attr(2, 2), fx.args));
  CU_OK(api().cuStreamSynchronize(fx.s));
}

TEST_CASE("cuGraphKernelNodeGetParams: captured launches of a library's kernel",
          "[conformance][library]") {
  REQUIRE_LIBRARIES();
  LibraryFixture fx;
  fx.amount = 3;
  const auto cast = reinterpret_cast<CUfunction>(fx.k);
  CUmodule m = nullptr;
  CU_OK(api().cuModuleLoadData(&m, kKernelPtx));
  CUfunction add = nullptr;
  CU_OK(api().cuModuleGetFunction(&add, m, "add"));
  // Each launch has a grid width of its own, which finds its node below: the function, then
  // the CUkernel cast to a CUfunction, each with cuLaunchKernel and cuLaunchKernelEx; a module's
  // function.
  CU_OK(api().cuStreamBeginCapture(fx.s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU_OK(api().cuMemsetD32Async(fx.buf.p, 0, 1, fx.s));
  CU_OK(api().cuLaunchKernel(fx.f, 1, 1, 1, 32, 1, 1, 0, fx.s, fx.args, nullptr));
  CUlaunchConfig c = launch_config(fx.s, 2, 64);
  c.sharedMemBytes = 128;
  CU_OK(api().cuLaunchKernelEx(&c, fx.f, fx.args, nullptr));
  CU_OK(api().cuLaunchKernel(cast, 3, 1, 1, 1, 1, 1, 0, fx.s, fx.args, nullptr));
  c.gridDimX = 4;
  CU_OK(api().cuLaunchKernelEx(&c, cast, fx.args, nullptr));
  CU_OK(api().cuLaunchKernel(add, 5, 1, 1, 1, 1, 1, 0, fx.s, fx.args, nullptr));
  CUgraph g = nullptr;
  CU_OK(api().cuStreamEndCapture(fx.s, &g));
  REQUIRE(g != nullptr);
  fx.amount = 99;  // after the launches: the nodes hold copies
  size_t count = 0;
  CU_OK(api().cuGraphGetNodes(g, nullptr, &count));
  REQUIRE(count == 6);
  std::vector<CUgraphNode> nodes(count);
  CU_OK(api().cuGraphGetNodes(g, nodes.data(), &count));
  std::map<unsigned, CUDA_KERNEL_NODE_PARAMS> by_grid;
  CUgraphNode memset_node = nullptr, kernel_node = nullptr;
  for (CUgraphNode node : nodes) {
    CUgraphNodeType type{};
    CU_OK(api().cuGraphNodeGetType(node, &type));
    if (type != CU_GRAPH_NODE_TYPE_KERNEL) {
      memset_node = node;
      continue;
    }
    kernel_node = node;
    CUDA_KERNEL_NODE_PARAMS p{};
    CU_OK(api().cuGraphKernelNodeGetParams(node, &p));
    // The CUDA 10.0 ABI: the same, without the kernel and the context.
    CUDA_KERNEL_NODE_PARAMS_v1 v1{};
    CU_OK(api().cuGraphKernelNodeGetParams_v1(node, &v1));
    CHECK(v1.func == p.func);
    CHECK(v1.gridDimX == p.gridDimX);
    CHECK(v1.kernelParams == p.kernelParams);
    by_grid[p.gridDimX] = p;
  }
  REQUIRE(by_grid.size() == 5);
  REQUIRE(memset_node != nullptr);
  for (const auto& [grid, p] : by_grid) {
    INFO("the launch of grid " << grid);
    CHECK((p.gridDimY == 1 && p.gridDimZ == 1 && p.blockDimY == 1 && p.blockDimZ == 1));
    CHECK(p.extra == nullptr);
    REQUIRE(p.kernelParams != nullptr);
    CHECK(p.kernelParams != fx.args);
    CHECK(lib_add_arguments(p.kernelParams) == std::make_pair(fx.buf.p, 3));
  }
  CHECK(by_grid[1].blockDimX == 32);
  CHECK(by_grid[1].sharedMemBytes == 0);
  CHECK(by_grid[2].blockDimX == 64);
  CHECK(by_grid[2].sharedMemBytes == 128);
  // As the H200 reports them: func is the function launched, for a CUkernel its function in
  // the stream's context; kern is the library's kernel of that function, however it was
  // launched (NULL for a module's function); ctx is the stream's context.
  for (unsigned grid : {1u, 2u, 3u, 4u}) {
    INFO("the launch of grid " << grid);
    CHECK(by_grid[grid].func == fx.f);
    CHECK(by_grid[grid].kern == fx.k);
  }
  CHECK(by_grid[5].func == add);
  CHECK(by_grid[5].kern == nullptr);
  for (const auto& [grid, p] : by_grid) CHECK(p.ctx == fx.scope.ctx());
  // Another kind of node; NULL arguments.
  CUDA_KERNEL_NODE_PARAMS p{};
  CU_CHECK_EQ(api().cuGraphKernelNodeGetParams(memset_node, &p), CUDA_ERROR_INVALID_VALUE);
  CU_CHECK_EQ(api().cuGraphKernelNodeGetParams(kernel_node, nullptr), CUDA_ERROR_INVALID_VALUE);
  CU_CHECK_EQ(api().cuGraphKernelNodeGetParams(nullptr, &p), CUDA_ERROR_INVALID_VALUE);
  // The graph runs; its nodes answer the same afterwards.
  CUgraphExec exec = instantiate(g);
  CU_OK(api().cuGraphLaunch(exec, fx.s));
  CU_OK(api().cuStreamSynchronize(fx.s));
  CU_OK(api().cuGraphExecDestroy(exec));
  CU_OK(api().cuGraphKernelNodeGetParams(kernel_node, &p));
  CHECK(by_grid.count(p.gridDimX) == 1);
  CHECK(lib_add_arguments(p.kernelParams) == std::make_pair(fx.buf.p, 3));
  CU_OK(api().cuGraphDestroy(g));
  CU_OK(api().cuModuleUnload(m));
}

}  // namespace
}  // namespace conformance

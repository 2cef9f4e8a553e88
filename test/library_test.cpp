// custream::Library and LibraryKernel: context-independent loading, kernels on every device and
// every kind of context, the content-addressed cache, globals, attributes, errors, lifetimes.
// Design: docs/design/libraries.md.
#include "custream/library.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "custream/capture_info.hpp"
#include "custream/capture_mode.hpp"
#include "custream/context.hpp"
#include "custream/context_scope.hpp"
#include "custream/device.hpp"
#include "custream/device_buffer.hpp"
#include "custream/graph.hpp"
#include "custream/kernel.hpp"
#include "custream/launch_config.hpp"
#include "custream/library_kernel.hpp"
#include "custream/module.hpp"
#include "custream/sm_resource.hpp"
#include "custream/stream.hpp"
#include "emu_control.h"
#include "test_support.hpp"

using custream::Context;
using custream::Device;
using custream::Library;
using custream::LibraryCache;
using custream::LibraryKernel;
using custream::Stream;
using custream::StreamFlags;
using custream_test::expect_error;

namespace {

// Two kernels and a global; `tag` makes images of different bytes.
std::string ptx(int tag = 0) {
  return R"(
.version 7.0
.target sm_70
.address_size 64

.visible .global .align 4 .u32 library_counter;

.visible .entry library_add(
  .param .u64 data,
  .param .u32 value
)
{
  .reg .b32 %r<4>;
  .reg .b64 %rd<3>;
  ld.param.u64 %rd1, [data];
  ld.param.u32 %r1, [value];
  cvta.to.global.u64 %rd2, %rd1;
  ld.global.u32 %r2, [%rd2];
  add.s32 %r3, %r2, %r1;
  st.global.u32 [%rd2], %r3;
  ret;
}

.visible .entry library_noop()
{
  ret;
}
// tag )" +
         std::to_string(tag) + "\n";
}

void cpu_add(const custream_emu_kernel_launch* l) {
  int* data = nullptr;
  int value = 0;
  std::memcpy(&data, l->params[0], sizeof data);
  std::memcpy(&value, l->params[1], sizeof value);
  *data += value;
}

void register_add() {
  if (!custream_test::emulated()) return;
  auto reg = custream_test::emu_symbol<decltype(&custream_emu_register_kernel)>(
      "custream_emu_register_kernel");
  REQUIRE(reg != nullptr);
  REQUIRE(reg("library_add", cpu_add, nullptr, nullptr, 0) == 0);
}

bool has_libraries() {
  const auto& api = custream::detail::api();
  return api.cuLibraryLoadData != nullptr && api.cuKernelGetFunction != nullptr &&
         api.cuLibraryGetKernelCount != nullptr;
}

// Adds `value` to a fresh cell on `s` with `k`, and returns the cell's value.
int add_on(const LibraryKernel& k, const Stream& s, int start, int value) {
  custream::DeviceBuffer cell(sizeof(int), s);
  s.memset32(cell.get(), static_cast<std::uint32_t>(start), 1);
  k.launch(s, {1}, {1}, 0, cell.get(), value);
  int host = 0;
  s.copy(&host, cell.get(), sizeof host);
  s.synchronize();
  return host;
}

}  // namespace

TEST_CASE("a library: its kernels by name, launched on every device", "[library][gpu]") {
  REQUIRE_DRIVER();
  if (!has_libraries()) CUSTREAM_SKIP("the driver has no libraries (CUDA 12.4 to enumerate)");
  register_add();
  const Library lib = Library::from_ptx(ptx(), LibraryCache::bypass);
  REQUIRE(lib);
  CHECK(lib.handle() != nullptr);
  std::vector<std::string> names = lib.kernel_names();
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"library_add", "library_noop"});
  const LibraryKernel add = lib.kernel("library_add");
  CHECK(add.name() == "library_add");
  CHECK(add.library() == lib);
  CHECK(lib.kernel("library_add").handle() == add.handle());
  expect_error([&] { (void)lib.kernel("missing"); }, CUDA_ERROR_NOT_FOUND,
               "the library's kernels: library_");
  for (int d = 0; d < Device::count(); ++d) {
    INFO("device " << d);
    const Stream s(Device(d), StreamFlags::non_blocking);
    CHECK(add_on(add, s, 40, 2) == 42);
    CHECK(add_on(add, s, 1, 2) == 3);  // the cached function
    const CUfunction f = add.function(Device(d).primary_context());
    CHECK(f != nullptr);
    CHECK(add.function(Device(d).primary_context()) == f);
  }
  if (Device::count() > 1) {
    CHECK(add.function(Device(0).primary_context()) != add.function(Device(1).primary_context()));
  }
  // Captured and replayed.
  const Stream s(Device(0), StreamFlags::non_blocking);
  custream::DeviceBuffer cell(sizeof(int), Device(0));
  s.memset32(cell.get(), 0, 1);
  s.begin_capture();
  add.launch(s, {1}, {1}, 0, cell.get(), 5);
  custream::Graph g = s.end_capture();
  g.launch(s);
  g.launch(s);
  int host = 0;
  s.copy(&host, cell.get(), sizeof host);
  s.synchronize();
  CHECK(host == 10);
}

TEST_CASE("a library kernel on streams of created and green contexts", "[library][context][gpu]") {
  REQUIRE_DRIVER();
  if (!has_libraries()) CUSTREAM_SKIP("the driver has no libraries");
  register_add();
  const Library lib = Library::from_ptx(ptx(), LibraryCache::bypass);
  const LibraryKernel add = lib.kernel("library_add");
  Device(0).make_current();
  const auto& api = custream::detail::api();
  if (api.cuCtxCreate != nullptr) {
    const Context created = Context::create(Device(0));
    const Stream s(created, StreamFlags::non_blocking);
    CHECK(add_on(add, s, 1, 1) == 2);
    CHECK(add_on(add, s, 2, 1) == 3);
    CHECK(add.function(created) != add.function(Device(0).primary_context()));
  }
  if (api.cuGreenCtxStreamCreate != nullptr && api.cuDeviceGetDevResource != nullptr) {
    const Context green = Context::create_green(Device(0).split_sms(1, 1).groups.at(0));
    const Stream s(green);
    CHECK(add_on(add, s, 5, 1) == 6);
  }
  CUcontext now = nullptr;
  REQUIRE(api.cuCtxGetCurrent(&now) == CUDA_SUCCESS);
  CHECK(now == Device(0).primary_context().handle());
}

TEST_CASE("the library cache: the same image is loaded once, bounded, bypassable",
          "[library][gpu]") {
  REQUIRE_DRIVER();
  if (!has_libraries()) CUSTREAM_SKIP("the driver has no libraries");
  Library::clear_cache();
  CHECK(Library::cached_count() == 0);
  const Library a = Library::from_ptx(ptx(1));
  const Library b = Library::from_ptx(ptx(1));
  CHECK(a == b);  // no second driver load
  CHECK(a.handle() == b.handle());
  CHECK(Library::cached_count() == 1);
  const Library c = Library::from_ptx(ptx(2));
  CHECK(c != a);
  CHECK(Library::cached_count() == 2);
  const Library d = Library::from_ptx(ptx(1), LibraryCache::bypass);
  CHECK(d != a);
  CHECK(Library::cached_count() == 2);
  // Bounded: the 64 most recent images.
  for (int i = 0; i < 70; ++i) (void)Library::from_ptx(ptx(100 + i));
  CHECK(Library::cached_count() == 64);
  CHECK(Library::from_ptx(ptx(1)) != a);  // evicted: loaded again
  Library::clear_cache();
  CHECK(Library::cached_count() == 0);
  CHECK(a.kernel("library_noop").handle() != nullptr);  // still loaded: referred to
}

TEST_CASE("the library cache under 16 threads loading the same and different images",
          "[library][gpu][threads]") {
  REQUIRE_DRIVER();
  if (!has_libraries()) CUSTREAM_SKIP("the driver has no libraries");
  Library::clear_cache();
  std::vector<std::thread> threads;
  std::vector<Library> same(16), own(16);
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([&, t] {
      same[t] = Library::from_ptx(ptx(7));
      own[t] = Library::from_ptx(ptx(1000 + t));
    });
  }
  for (auto& t : threads) t.join();
  // Racing first loads of one image load it once: every thread has the cached library.
  const Library cached = Library::from_ptx(ptx(7));
  int matches = 0;
  for (int t = 0; t < 16; ++t) {
    matches += same[t] == cached;
    CHECK(own[t]);
    for (int u = 0; u < t; ++u) CHECK(own[t] != own[u]);
  }
  CHECK(matches == 16);
  CHECK(Library::cached_count() == 17);
  Library::clear_cache();
}

TEST_CASE("library globals, attributes and preloading", "[library][gpu]") {
  REQUIRE_DRIVER();
  if (!has_libraries()) CUSTREAM_SKIP("the driver has no libraries");
  const Library lib = Library::from_ptx(ptx(), LibraryCache::bypass);
  const Context primary = Device(0).primary_context();
  lib.preload(Device(0));
  const custream::LibraryGlobal g = lib.global("library_counter", primary);
  CHECK(g.address != 0);
  CHECK(g.bytes == 4);
  const Stream s(Device(0), StreamFlags::non_blocking);
  s.memset32(g.address, 9, 1);
  std::uint32_t host = 0;
  s.copy(&host, g.address, sizeof host);
  s.synchronize();
  CHECK(host == 9);
  expect_error([&] { (void)lib.global("missing", primary); }, CUDA_ERROR_NOT_FOUND, "missing");
  const LibraryKernel add = lib.kernel("library_add");
  CHECK(add.attribute(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 0) > 0);
  add.set_attribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 1024, 0);
  CHECK(add.attribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 0) == 1024);
  expect_error(
      [&] { add.set_attribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 1 << 30, 0); },
      CUDA_ERROR_INVALID_VALUE, "library_add");
}

TEST_CASE("library errors: bad images, files, empty handles; kernels keep the library",
          "[library][gpu]") {
  REQUIRE_DRIVER();
  if (!has_libraries()) CUSTREAM_SKIP("the driver has no libraries");
  // A bad image is refused at load, or, where the driver loads lazily (the H200 does), it
  // loads with no kernels, and a lookup fails with the driver's error and the JIT's log.
  const char garbage[] = "this is not a module image";
  try {
    const Library bad = Library::from_image(garbage, sizeof garbage, LibraryCache::bypass);
    CHECK(bad.kernel_names().empty());
    CHECK_FALSE(bad.jit_error_log().empty());
    expect_error([&] { (void)bad.kernel("library_add"); }, CUDA_ERROR_INVALID_IMAGE,
                 "JIT error log:\n" + bad.jit_error_log());
  } catch (const custream::Error& e) {
    CHECK(std::string(e.what()).find("cuLibraryLoadData") != std::string::npos);
  }
  expect_error([&] { (void)Library::from_image(nullptr, 8); }, CUDA_ERROR_INVALID_VALUE, "null");
  expect_error([] { (void)Library::from_file("/no/such/file.ptx"); }, CUDA_ERROR_FILE_NOT_FOUND,
               "/no/such/file.ptx");
  expect_error([] { (void)Library().kernel("x"); }, CUDA_ERROR_INVALID_HANDLE, "empty");
  const std::string path = "/tmp/custream-library-test.ptx";
  {
    std::ofstream out(path);
    out << ptx(3);
  }
  LibraryKernel noop;
  {
    const Library lib = Library::from_file(path, LibraryCache::bypass);
    noop = lib.kernel("library_noop");
  }  // the kernel keeps the library loaded
  const Stream s(Device(0), StreamFlags::non_blocking);
  noop.launch(s, {1}, {1}, 0);
  s.synchronize();
  std::remove(path.c_str());
}

namespace {
// The kernel node's library must outlive the library's handles: on the emulator, the objects
// the driver holds (a loaded library is some) are counted.
long live_objects() { return custream_test::emulated() ? custream_test::emu_live_objects() : 0; }
}  // namespace

TEST_CASE("a graph holds the libraries of its kernels; unload() refuses while one needs it",
          "[library][graph][gpu]") {
  REQUIRE_DRIVER();
  if (!has_libraries()) CUSTREAM_SKIP("the driver has no libraries");
  register_add();
  const Stream s(Device(0), StreamFlags::non_blocking);
  custream::DeviceBuffer cell(sizeof(int), Device(0));
  s.memset32(cell.get(), 0, 1);
  s.synchronize();
  const long before = live_objects();
  custream::Graph g;
  {
    const Library lib = Library::from_ptx(ptx(7), LibraryCache::bypass);
    const LibraryKernel add = lib.kernel("library_add");
    s.begin_capture();
    add.launch(s, {1}, {1}, 0, cell.get(), 3);
    g = s.end_capture();
  }  // every handle gone: the graph keeps the code loaded
  if (custream_test::emulated()) CHECK(live_objects() > before);
  for (int i = 0; i < 3; ++i) g.launch(s);
  int host = 0;
  s.copy(&host, cell.get(), sizeof host);
  s.synchronize();
  CHECK(host == 9);
  g = custream::Graph();  // the last holder: unloaded now
  if (custream_test::emulated()) CHECK(live_objects() == before);

  // A captured launch through a special handle (the CUkernel itself) is traced too.
  {
    Device(0).make_current();
    const Library lib = Library::from_ptx(ptx(8), LibraryCache::bypass);
    const Stream per_thread = Stream::per_thread();
    s.memset32(cell.get(), 0, 1);
    s.synchronize();
    custream::Graph traced;
    {
      const LibraryKernel add = lib.kernel("library_add");
      per_thread.begin_capture();
      add.launch(per_thread, {1}, {1}, 0, cell.get(), 4);
      traced = per_thread.end_capture();
    }
    Library copy = lib;
    // Refused while the graph needs it, and while other references exist.
    expect_error([&] { copy.unload(); }, CUDA_ERROR_NOT_PERMITTED, "1 graph(s)");
    traced.launch(s);
    s.copy(&host, cell.get(), sizeof host);
    s.synchronize();
    CHECK(host == 4);
    traced = custream::Graph();
    expect_error([&] { copy.unload(); }, CUDA_ERROR_NOT_PERMITTED, "1 other reference(s)");
  }

  // unload() with nothing else referring: the code is gone now and the handle empty.
  Library lone = Library::from_ptx(ptx(9));  // cached: the cache's reference is dropped too
  const std::size_t cached = Library::cached_count();
  const long loaded = live_objects();
  lone.unload();
  CHECK_FALSE(lone);
  CHECK(lone.handle() == nullptr);
  CHECK(Library::cached_count() == cached - 1);
  if (custream_test::emulated()) CHECK(live_objects() < loaded);
  expect_error([&] { lone.unload(); }, CUDA_ERROR_INVALID_HANDLE, "empty");
  CHECK(Library::from_ptx(ptx(9)) != Library());  // loads again
}

TEST_CASE("typed library launches are checked against the kernel's parameters", "[library][gpu]") {
  REQUIRE_DRIVER();
  if (!has_libraries()) CUSTREAM_SKIP("the driver has no libraries");
  if (custream::detail::api().cuKernelGetParamInfo == nullptr) {
    CUSTREAM_SKIP("the driver cannot report parameters (CUDA 12.4)");
  }
  register_add();
  const Library lib = Library::from_ptx(ptx(10), LibraryCache::bypass);
  const LibraryKernel add = lib.kernel("library_add");
  const LibraryKernel noop = lib.kernel("library_noop");
  const Stream s(Device(0), StreamFlags::non_blocking);
  custream::DeviceBuffer cell(sizeof(int), s);
  s.memset32(cell.get(), 1, 1);
  expect_error([&] { add.launch(s, {1}, {1}, 0, cell.get()); }, CUDA_ERROR_INVALID_VALUE,
               "the kernel has 2 parameter(s), the launch gave 1 argument(s)");
  expect_error([&] { add.launch(s, {1}, {1}, 0, cell.get(), std::int64_t{1}); },
               CUDA_ERROR_INVALID_VALUE, "argument 1 has 8 bytes, parameter 1 takes 4");
  expect_error([&] { noop.launch(s, {1}, {1}, 0, 1); }, CUDA_ERROR_INVALID_VALUE,
               "its parameters take no bytes");
  expect_error([&] { add.launch(s, custream::LaunchConfig({1}, {1}), cell.get()); },
               CUDA_ERROR_INVALID_VALUE, "launch gave 1");
  // Refused before the driver: a capture goes on, valid.
  s.begin_capture();
  expect_error([&] { add.launch(s, {1}, {1}, 0, std::int32_t{0}, 1); }, CUDA_ERROR_INVALID_VALUE,
               "argument 0 has 4 bytes, parameter 0 takes 8");
  add.launch(s, {1}, {1}, 0, cell.get(), 2);
  custream::Graph g = s.end_capture();
  g.launch(s);
  int host = 0;
  s.copy(&host, cell.get(), sizeof host);
  s.synchronize();
  CHECK(host == 3);
  // launch_raw is not checked: the pointers' sizes are unknown.
  std::int32_t value = 5;
  CUdeviceptr p = cell.get();
  void* params[] = {&p, &value};
  add.launch_raw(s, {1}, {1}, 0, params);
  s.copy(&host, cell.get(), sizeof host);
  s.synchronize();
  CHECK(host == 8);
}

TEST_CASE("library launches with attributes, checked before the driver", "[library][gpu]") {
  REQUIRE_DRIVER();
  if (!has_libraries()) CUSTREAM_SKIP("the driver has no libraries");
  if (custream::detail::api().cuLaunchKernelEx == nullptr) CUSTREAM_SKIP("no cuLaunchKernelEx");
  register_add();
  const Library lib = Library::from_ptx(ptx(11), LibraryCache::bypass);
  const LibraryKernel add = lib.kernel("library_add");
  const LibraryKernel noop = lib.kernel("library_noop");
  const Stream s(Device(0), StreamFlags::non_blocking);
  custream::DeviceBuffer cell(sizeof(int), s);
  s.memset32(cell.get(), 0, 1);

  custream::LaunchConfig config({1}, {1});
  config.priority = -1;
  config.mem_sync_domain = CU_LAUNCH_MEM_SYNC_DOMAIN_REMOTE;
  config.programmatic_serialization = true;
  config.cluster = custream::Dim3{1};
  add.launch(s, config, cell.get(), 6);
  int host = 0;
  s.copy(&host, cell.get(), sizeof host);
  s.synchronize();
  CHECK(host == 6);

  // Clusters: two blocks per cluster on a grid of four; dimensions that do not divide the grid,
  // or a zero, are refused by custream, so a capture goes on valid.
  custream::LaunchConfig clusters({4}, {32});
  clusters.cluster = custream::Dim3{2};
  noop.launch(s, clusters);
  s.begin_capture();
  clusters.cluster = custream::Dim3{3};
  expect_error([&] { noop.launch(s, clusters); }, CUDA_ERROR_INVALID_CLUSTER_SIZE,
               "cluster dimensions 3x1x1 do not divide the grid 4x1x1");
  clusters.cluster = custream::Dim3{0};
  expect_error([&] { noop.launch(s, clusters); }, CUDA_ERROR_INVALID_CLUSTER_SIZE, "at least 1");
  add.launch(s, config, cell.get(), 1);
  custream::Graph g = s.end_capture();
  g.launch(s);
  s.copy(&host, cell.get(), sizeof host);
  s.synchronize();
  CHECK(host == 7);

  // More than 8 blocks per cluster needs the kernel's permission.
  custream::LaunchConfig big({16}, {32});
  big.cluster = custream::Dim3{16};
  if (noop.attribute(CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 0) == 0) {
    expect_error([&] { noop.launch(s, big); }, CUDA_ERROR_INVALID_CLUSTER_SIZE,
                 "8 is the portable limit");
  }
  noop.set_attribute(CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1, 0);
  noop.launch(s, big);  // the H200 schedules clusters of 16
  big.grid = custream::Dim3{32};
  big.cluster = custream::Dim3{32};
  expect_error([&] { noop.launch(s, big); }, CUDA_ERROR_INVALID_CLUSTER_SIZE,
               "cannot schedule a cluster of 32 blocks");

  // Cooperative: exactly the device's co-resident blocks pass, one more is refused, naming the
  // limit.
  const auto& api = custream::detail::api();
  const CUfunction f = noop.function(Device(0).primary_context());
  int per_sm = 0;
  REQUIRE(api.cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, f, 256, 0) == CUDA_SUCCESS);
  const int sms = Device(0).attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  REQUIRE(per_sm > 0);
  custream::LaunchConfig cooperative({static_cast<unsigned>(per_sm * sms)}, {256});
  cooperative.cooperative = true;
  noop.launch(s, cooperative);
  cooperative.grid = custream::Dim3{static_cast<unsigned>(per_sm * sms + 1)};
  expect_error([&] { noop.launch(s, cooperative); }, CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE,
               "exceeds the " + std::to_string(per_sm * sms) + " blocks the device can run");
  s.synchronize();

  // A module's kernel takes the same configurations.
  const custream::Module m = custream::Module::from_ptx(ptx(12), Device(0).primary_context());
  const custream::Kernel module_add = m.kernel("library_add");
  module_add.launch(s, config, cell.get(), 3);
  s.copy(&host, cell.get(), sizeof host);
  s.synchronize();
  CHECK(host == 10);
  expect_error([&] { m.kernel("library_noop").launch(s, clusters); },
               CUDA_ERROR_INVALID_CLUSTER_SIZE, "at least 1");
}

TEST_CASE("graphs hold the libraries they may launch: raw handles, foreign captures, precision",
          "[library][graph][gpu]") {
  REQUIRE_DRIVER();
  if (!has_libraries()) CUSTREAM_SKIP("the driver has no libraries");
  register_add();
  const auto& api = custream::detail::api();
  const Stream s(Device(0), StreamFlags::non_blocking);
  custream::DeviceBuffer cell(sizeof(int), Device(0));
  s.memset32(cell.get(), 0, 1);
  s.synchronize();
  CUdeviceptr p = cell.get();
  int value = 2;
  void* params[] = {&p, &value};

  // A function taken with function() and launched raw into a custream capture.
  custream::Graph raw_graph;
  {
    const Library lib = Library::from_ptx(ptx(20), LibraryCache::bypass);
    const CUfunction f = lib.kernel("library_add").function(Device(0).primary_context());
    s.begin_capture();
    REQUIRE(api.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s.handle(), params, nullptr) ==
            CUDA_SUCCESS);
    raw_graph = s.end_capture();
  }
  // A LibraryKernel launched into a capture custream did not begin, adopted afterwards.
  custream::Graph adopted;
  {
    const Library lib = Library::from_ptx(ptx(21), LibraryCache::bypass);
    REQUIRE(api.cuStreamBeginCapture(s.handle(), CU_STREAM_CAPTURE_MODE_RELAXED) == CUDA_SUCCESS);
    lib.kernel("library_add").launch(s, {1}, {1}, 0, cell.get(), 3);
    CUgraph g = nullptr;
    REQUIRE(api.cuStreamEndCapture(s.handle(), &g) == CUDA_SUCCESS);
    adopted = custream::Graph::adopt(g, custream::InstantiateFlags::upload, s);
  }
  raw_graph.launch(s);
  adopted.launch(s);
  int host = 0;
  s.copy(&host, cell.get(), sizeof host);
  s.synchronize();
  CHECK(host == 5);

  // Precision: a library launched before a capture, not in it, is not held by its graph.
  Library before = Library::from_ptx(ptx(22), LibraryCache::bypass);
  before.kernel("library_add").launch(s, {1}, {1}, 0, cell.get(), 1);
  s.begin_capture();
  s.memset32(cell.get(), 7, 1);
  custream::Graph unrelated = s.end_capture();
  before.unload();  // no graph may launch it
  CHECK_FALSE(before);
  unrelated.launch(s);
  s.copy(&host, cell.get(), sizeof host);
  s.synchronize();
  CHECK(host == 7);
}

TEST_CASE("loading, launching, capturing and unloading libraries many times leaks nothing",
          "[library][graph][gpu]") {
  REQUIRE_DRIVER();
  if (!has_libraries()) CUSTREAM_SKIP("the driver has no libraries");
  register_add();
  const Stream s(Device(0), StreamFlags::non_blocking);
  custream::DeviceBuffer cell(sizeof(int), Device(0));
  s.memset32(cell.get(), 0, 1);
  s.synchronize();
  const long before = live_objects();
  for (int i = 0; i < 200; ++i) {
    custream::Graph g;
    {
      Library lib = Library::from_ptx(ptx(1000 + i % 3), LibraryCache::bypass);
      s.begin_capture();
      lib.kernel("library_add").launch(s, {1}, {1}, 0, cell.get(), 1);
      g = s.end_capture();
    }
    g.launch(s);
  }
  s.synchronize();
  int host = 0;
  s.copy(&host, cell.get(), sizeof host);
  s.synchronize();
  CHECK(host == 200);
  if (custream_test::emulated()) CHECK(live_objects() == before);
}

TEST_CASE("library calls refuse an empty Context, naming the call", "[library][lifetime]") {
  REQUIRE_DRIVER();
  if (!has_libraries()) CUSTREAM_SKIP("the driver has no libraries");
  const Library lib = Library::from_ptx(ptx(), LibraryCache::bypass);
  const LibraryKernel& noop = lib.kernel("library_noop");
  Context moved = Device(0).primary_context();
  const Context taken = std::move(moved);
  const Context none;
  for (const Context* empty : {&none, static_cast<const Context*>(&moved)}) {
    const Context& context = *empty;
    expect_error([&] { lib.preload(context); }, CUDA_ERROR_INVALID_CONTEXT,
                 "custream::Library::preload");
    expect_error([&] { lib.preload(context); }, CUDA_ERROR_INVALID_CONTEXT, "holds no context");
    expect_error([&] { (void)noop.function(context); }, CUDA_ERROR_INVALID_CONTEXT,
                 "custream::LibraryKernel::function");
    expect_error([&] { (void)noop.function(context); }, CUDA_ERROR_INVALID_CONTEXT,
                 "holds no context");
  }
  CHECK(noop.function(taken) != nullptr);
}

TEST_CASE("library launches refuse more than 4 GiB of dynamic shared memory", "[library][launch]") {
  REQUIRE_DRIVER();
  if (!has_libraries()) CUSTREAM_SKIP("the driver has no libraries");
  const Library lib = Library::from_ptx(ptx(), LibraryCache::bypass);
  const LibraryKernel& noop = lib.kernel("library_noop");
  const Stream s(Device(0), StreamFlags::non_blocking);
  const std::size_t huge = (std::size_t{1} << 32) + 16;  // 16 once truncated to 32 bits
  const std::string value = std::to_string(huge);
  for (const std::string& text : {value, std::string("4294967295"), std::string("without")}) {
    expect_error([&] { noop.launch(s, {1}, {1}, huge); }, CUDA_ERROR_INVALID_VALUE, text);
    expect_error([&] { noop.launch_raw(s, {1}, {1}, huge, nullptr); }, CUDA_ERROR_INVALID_VALUE,
                 text);
    const custream::LaunchConfig config({1}, {1}, huge);
    expect_error([&] { noop.launch(s, config); }, CUDA_ERROR_INVALID_VALUE, text);
    expect_error([&] { noop.launch_raw(s, config, nullptr); }, CUDA_ERROR_INVALID_VALUE, text);
  }
  noop.launch(s, {1}, {1}, 16);  // the limit is the driver's 32 bits, not a smaller one
  s.synchronize();
}

TEST_CASE("Library::from_file: an unreadable path is an Error naming it and why",
          "[library][file]") {
  REQUIRE_DRIVER();
  if (!has_libraries()) CUSTREAM_SKIP("the driver has no libraries");
  expect_error([] { (void)Library::from_file("/tmp"); }, CUDA_ERROR_FILE_NOT_FOUND, "/tmp");
  expect_error([] { (void)Library::from_file("/tmp"); }, CUDA_ERROR_FILE_NOT_FOUND,
               "Is a directory");
  expect_error([] { (void)Library::from_file("/no/such/file.ptx"); }, CUDA_ERROR_FILE_NOT_FOUND,
               "No such file or directory");
  expect_error([] { (void)Library::from_file(""); }, CUDA_ERROR_FILE_NOT_FOUND,
               "No such file or directory");
  const std::string path = "/tmp/custream-library-unreadable-" + std::to_string(getpid()) + ".ptx";
  {
    std::ofstream out(path);
    out << ptx(4);
  }
  REQUIRE(chmod(path.c_str(), 0) == 0);
  if (geteuid() != 0) {  // root reads it anyway
    expect_error([&] { (void)Library::from_file(path); }, CUDA_ERROR_FILE_NOT_FOUND, path);
    expect_error([&] { (void)Library::from_file(path); }, CUDA_ERROR_FILE_NOT_FOUND,
                 "Permission denied");
  }
  std::remove(path.c_str());
}

namespace {
// PTX whose parenthesis never closes: the driver's JIT refuses it.
const char kBrokenPtx[] =
    ".version 7.0\n.target sm_70\n.address_size 64\n"
    ".visible .entry broken(\n  .param .u32 x\n{\n  ret;\n}\n";
}  // namespace

TEST_CASE("a library of bad PTX: its JIT log reaches the first failing use; never cached",
          "[library][jit]") {
  REQUIRE_DRIVER();
  if (!has_libraries()) CUSTREAM_SKIP("the driver has no libraries");
  Library::clear_cache();
  Library lib;
  try {
    lib = Library::from_ptx(kBrokenPtx);
  } catch (const custream::Error& e) {  // a driver that loads eagerly refuses it now
    CHECK(std::string(e.what()).find("JIT error log") != std::string::npos);
    return;
  }
  // Loaded lazily (the H200 and the emulator): the log is kept, and the library not cached.
  CHECK(Library::cached_count() == 0);
  CHECK(Library::from_ptx(kBrokenPtx) != lib);  // loaded again, not from the cache
  CHECK(Library::cached_count() == 0);
  expect_error([&] { (void)lib.kernel("broken"); }, CUDA_ERROR_INVALID_PTX, "JIT error log");
  const std::string log = lib.jit_error_log();
  REQUIRE_FALSE(log.empty());
  expect_error([&] { (void)lib.kernel("broken"); }, CUDA_ERROR_INVALID_PTX, log);
  expect_error([&] { (void)lib.kernel("broken"); }, CUDA_ERROR_INVALID_PTX, "cuLibraryGetKernel");
  expect_error([&] { lib.preload(Device(0)); }, CUDA_ERROR_INVALID_IMAGE, log);
  expect_error([&] { lib.preload(Device(0)); }, CUDA_ERROR_INVALID_IMAGE, "did not compile");
  expect_error([&] { (void)lib.global("x", Device(0).primary_context()); }, CUDA_ERROR_INVALID_PTX,
               log);
  // A good image has no error log, and is cached.
  const Library good = Library::from_ptx(ptx(5));
  CHECK(good.jit_error_log().empty());
  CHECK(Library::cached_count() == 1);
  Library::clear_cache();
}

TEST_CASE("the cache's unloads leave another thread's global capture valid and leak nothing",
          "[library][capture][threads]") {
  REQUIRE_DRIVER();
  if (!has_libraries()) CUSTREAM_SKIP("the driver has no libraries");
  Library::clear_cache();
  const Stream s(Device(0), StreamFlags::non_blocking);
  const long before = live_objects();
  SECTION("clear_cache") {
    (void)Library::from_ptx(ptx(3000));  // only the cache holds it
    s.begin_capture(custream::CaptureMode::global);
    custream_test::on_fresh_thread([] { Library::clear_cache(); });
    CHECK(Library::cached_count() == 0);
  }
  SECTION("an eviction") {
    (void)Library::from_ptx(ptx(3001));  // only the cache holds it; evicted below
    s.begin_capture(custream::CaptureMode::global);
    custream_test::on_fresh_thread([] {
      for (int i = 0; i < 64; ++i) (void)Library::from_ptx(ptx(3100 + i));
    });
    CHECK(Library::cached_count() == 64);
  }
  CHECK(s.capture_info().status == custream::CaptureStatus::active);
  { const custream::Graph g = s.end_capture(); }  // an invalidated capture throws here
  Library::clear_cache();
  if (custream_test::emulated()) CHECK(live_objects() == before);  // every library unloaded
}

TEST_CASE("racing first loads of one image: one driver load, one cache entry",
          "[library][cache][threads]") {
  REQUIRE_DRIVER();
  if (!has_libraries()) CUSTREAM_SKIP("the driver has no libraries");
  Library::clear_cache();
  const long before = live_objects();
  constexpr int kThreads = 16, kRounds = 8;
  for (int round = 0; round < kRounds; ++round) {
    const std::string text = ptx(2000 + round);
    std::vector<Library> got(kThreads);
    std::atomic<int> ready{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        ready.fetch_add(1);
        while (ready.load() < kThreads) std::this_thread::yield();
        got[t] = Library::from_ptx(text);
      });
    }
    for (auto& t : threads) t.join();
    int same = 0;
    for (int t = 0; t < kThreads; ++t) same += got[t] == got[0];
    CHECK(same == kThreads);
    CHECK(Library::cached_count() == static_cast<std::size_t>(round + 1));
    if (custream_test::emulated()) CHECK(live_objects() == before + round + 1);
  }
  Library::clear_cache();
  if (custream_test::emulated()) CHECK(live_objects() == before);
}

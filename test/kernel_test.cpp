// Modules and kernels from PTX text, launched directly and from captured graphs. On a real GPU
// ([real-gpu]); on the emulator, kernels run the CPU implementation a test registers
// (emu_control.h). The PTX is written for sm_70 so the JIT compiles it for the H200 (sm_90).
#include "custream/kernel.hpp"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "custream/capture.hpp"
#include "custream/context_scope.hpp"
#include "custream/device_buffer.hpp"
#include "custream/graph.hpp"
#include "custream/host_function.hpp"
#include "custream/module.hpp"
#include "custream/stream.hpp"
#include "driver.hpp"
#include "emu_control.h"
#include "graph_support.hpp"
#include "test_support.hpp"

using custream::Graph;
using custream::Kernel;
using custream::Module;
using custream::Stream;
using custream_test::eventually;
using custream_test::Payload;
using custream_test::Probe;

namespace {

// add_one(int* data, unsigned n): data[i] += 1 for i < n.
// spin(unsigned long long ns): busy-waits `ns` nanoseconds of %globaltimer.
constexpr const char* kPtx = R"(
.version 7.0
.target sm_70
.address_size 64

.visible .entry add_one(
  .param .u64 data,
  .param .u32 n
)
{
  .reg .pred %p<2>;
  .reg .b32 %r<8>;
  .reg .b64 %rd<5>;
  ld.param.u64 %rd1, [data];
  ld.param.u32 %r1, [n];
  mov.u32 %r2, %ctaid.x;
  mov.u32 %r3, %ntid.x;
  mov.u32 %r4, %tid.x;
  mad.lo.s32 %r5, %r2, %r3, %r4;
  setp.ge.u32 %p1, %r5, %r1;
  @%p1 bra DONE;
  cvta.to.global.u64 %rd2, %rd1;
  mul.wide.u32 %rd3, %r5, 4;
  add.s64 %rd4, %rd2, %rd3;
  ld.global.u32 %r6, [%rd4];
  add.s32 %r7, %r6, 1;
  st.global.u32 [%rd4], %r7;
DONE:
  ret;
}

.visible .entry spin(
  .param .u64 ns
)
{
  .reg .pred %p<2>;
  .reg .b64 %rd<5>;
  ld.param.u64 %rd1, [ns];
  mov.u64 %rd2, %globaltimer;
LOOP:
  mov.u64 %rd3, %globaltimer;
  sub.s64 %rd4, %rd3, %rd2;
  setp.lt.u64 %p1, %rd4, %rd1;
  @%p1 bra LOOP;
  ret;
}
)";

constexpr unsigned kCount = 1000;

std::vector<int> read(const Stream& s, const custream::DeviceBuffer& b) {
  std::vector<int> host(b.size() / sizeof(int));
  s.copy(host.data(), b.get(), b.size());
  s.synchronize();
  return host;
}

}  // namespace

// add_one on the CPU, registered with the emulator: data[i] += 1 for i < n, over the grid.
void cpu_add_one(const custream_emu_kernel_launch* l) {
  int* data = nullptr;
  unsigned n = 0;
  std::memcpy(&data, l->params[0], sizeof data);
  std::memcpy(&n, l->params[1], sizeof n);
  const unsigned threads = l->grid[0] * l->block[0];
  for (unsigned i = 0; i < threads && i < n; ++i) ++data[i];
}

namespace {

// On the emulator, cpu_add_one runs every add_one (a real driver runs the PTX).
void register_add_one() {
  if (!custream_test::emulated()) return;
  auto register_kernel = custream_test::emu_symbol<decltype(&custream_emu_register_kernel)>(
      "custream_emu_register_kernel");
  REQUIRE(register_kernel("add_one", cpu_add_one, nullptr, nullptr, 0) == 0);
}

// What the update tests share: add_one registered, a stream, a zeroed word of device memory.
// Make it after REQUIRE_DRIVER().
struct FreshModules {
  FreshModules() {
    register_add_one();
    s.memset32(data.get(), 0, 1);
  }
  // Captures add_one of a newly loaded module over the word, and calls `end` to end the capture
  // while the module is loaded; every handle of it goes on return.
  void capture(const std::function<void()>& end) const {
    Kernel k = Module::from_ptx(kPtx).kernel("add_one");
    s.begin_capture();
    k.launch(s, {1}, {1}, 0, data.get(), 1u);
    end();
  }
  // Once the stream's work and custream's releases are done: the emulator's live objects (0 on
  // a GPU, which cannot count them).
  long live() const {
    s.synchronize();
    CHECK(custream::testing::wait_for_releases(std::chrono::seconds(10)));
    if (!emulated) return 0;
    CHECK(custream_test::emu_wait_idle());
    return custream_test::emu_live_objects();
  }
  int word() const { return read(s, data)[0]; }

  const bool emulated = custream_test::emulated();
  Stream s{custream::StreamFlags::non_blocking};
  custream::DeviceBuffer data{sizeof(int)};
};

}  // namespace

TEST_CASE("on the emulator a kernel runs its registered CPU implementation",
          "[gpu][kernel][emu-only]") {
  REQUIRE_EMULATOR();
  auto register_kernel = custream_test::emu_symbol<decltype(&custream_emu_register_kernel)>(
      "custream_emu_register_kernel");
  REQUIRE(register_kernel != nullptr);
  REQUIRE(register_kernel("add_one", cpu_add_one, nullptr, nullptr, 0) == 0);
  Stream s(custream::StreamFlags::non_blocking);
  Module m = Module::from_ptx(kPtx);
  Kernel add_one = m.kernel("add_one");
  custream::DeviceBuffer data(kCount * sizeof(int));
  s.memset32(data.get(), 41, kCount);
  add_one.launch(s, {(kCount + 255) / 256}, {256}, 0, data.get(), kCount - 1);
  auto v = read(s, data);
  CHECK(v[0] == 42);
  CHECK(v[kCount - 2] == 42);
  CHECK(v[kCount - 1] == 41);
  // Captured with custream and replayed.
  s.begin_capture();
  add_one.launch(s, {1}, {32}, 0, data.get(), 1u);
  Graph g = s.end_capture();
  CHECK(g.node_count() == 1);
  g.launch(s);
  g.launch(s);
  v = read(s, data);
  CHECK(v[0] == 44);
  CHECK(v[1] == 42);
  try {
    (void)m.kernel("no_such_kernel");
    FAIL("no throw");
  } catch (const custream::Error& e) {
    CHECK(e.result() == CUDA_ERROR_NOT_FOUND);
    CHECK(e.call() == "cuModuleGetFunction");
    CHECK(std::string(e.what()).find("no_such_kernel") != std::string::npos);
  }
  REQUIRE(register_kernel("add_one", nullptr, nullptr, nullptr, 0) == 0);
}

// As LibraryKernel's: custream refuses before the driver could truncate or misread, naming its
// own operation (it called no driver entry).
TEST_CASE("module kernels: shared memory over 32 bits and unreadable files are refused",
          "[gpu][kernel]") {
  REQUIRE_DRIVER();
  Stream s(custream::StreamFlags::non_blocking);
  Module m = Module::from_ptx(kPtx);
  Kernel add_one = m.kernel("add_one");
  custream::DeviceBuffer data(kCount * sizeof(int));
  const std::size_t huge = (std::size_t{1} << 32) + 16;  // 16 once truncated to 32 bits
  for (const char* text : {"custream::Kernel::launch", "4294967312", "4294967295"}) {
    custream_test::expect_error([&] { add_one.launch(s, {1}, {1}, huge, data.get(), 1u); },
                                CUDA_ERROR_INVALID_VALUE, text);
  }
  for (const char* text : {"custream::Module::from_file", "/tmp", "Is a directory"}) {
    custream_test::expect_error([] { (void)Module::from_file("/tmp"); }, CUDA_ERROR_FILE_NOT_FOUND,
                                text);
  }
  custream_test::expect_error([] { (void)Module::from_file("/no/such/module.ptx"); },
                              CUDA_ERROR_FILE_NOT_FOUND, "No such file or directory");
  s.synchronize();
}

// As LibraryKernel's: the count and sizes of a typed launch's arguments are checked against
// the kernel's parameters (cuFuncGetParamInfo) before the driver is called. A missing argument
// went through silently (the driver reads past the array).
TEST_CASE("module kernels: typed launches with the wrong arguments are refused, naming the kernel",
          "[gpu][kernel]") {
  REQUIRE_DRIVER();
  if (custream::detail::api().cuFuncGetParamInfo == nullptr) {
    CUSTREAM_SKIP("the driver has no cuFuncGetParamInfo (CUDA 12.4)");
  }
  Stream s(custream::StreamFlags::non_blocking);
  Module m = Module::from_ptx(kPtx);
  Kernel add_one = m.kernel("add_one");
  custream::DeviceBuffer data(kCount * sizeof(int));
  for (const char* text : {"custream::Kernel::launch", "kernel \"add_one\"",
                           "the kernel has 2 parameter(s), the launch gave 1 argument(s)",
                           "its parameters take 8, 4 bytes", "without calling the driver"}) {
    custream_test::expect_error([&] { add_one.launch(s, {1}, {1}, 0, data.get()); },
                                CUDA_ERROR_INVALID_VALUE, text);
  }
  custream_test::expect_error([&] { add_one.launch(s, {1}, {1}, 0, data.get(), std::size_t{1}); },
                              CUDA_ERROR_INVALID_VALUE,
                              "argument 1 has 8 bytes, parameter 1 takes 4");
  custream_test::expect_error(
      [&] { add_one.launch(s, custream::LaunchConfig({1}, {1}), data.get(), 1u, 2u); },
      CUDA_ERROR_INVALID_VALUE, "the launch gave 3 argument(s)");
  add_one.launch(s, {1}, {1}, 0, data.get(), 0u);  // the right ones: launched
  s.synchronize();
}

// What custream's check cannot see (a raw launch): the emulator refuses a launch that gives too
// few arguments, and says which kernel, where a driver would read past the array.
TEST_CASE("the emulator refuses a raw launch with too few arguments", "[gpu][kernel][emu-only]") {
  REQUIRE_EMULATOR();
  Stream s(custream::StreamFlags::non_blocking);
  Module m = Module::from_ptx(kPtx);
  Kernel add_one = m.kernel("add_one");
  custream::DeviceBuffer data(kCount * sizeof(int));
  CUdeviceptr p = data.get();
  void* params[] = {&p, nullptr};
  custream_test::expect_error([&] { add_one.launch_raw(s, {1}, {1}, 0, params); },
                              CUDA_ERROR_INVALID_VALUE, "cuLaunchKernel");
}

TEST_CASE("a PTX kernel launched with typed arguments", "[kernel][real-gpu]") {
  REQUIRE_REAL_GPU();
  Stream s(custream::StreamFlags::non_blocking);
  Module m = Module::from_ptx(kPtx);
  CHECK(m.handle() != nullptr);
  CHECK(m.device_id() == custream::Device::current().ordinal());
  Kernel add_one = m.kernel("add_one");
  CHECK(add_one.handle() != nullptr);
  custream::DeviceBuffer data(kCount * sizeof(int));
  s.memset32(data.get(), 41, kCount);
  add_one.launch(s, {(kCount + 255) / 256}, {256}, 0, data.get(), kCount - 1);
  const auto v = read(s, data);
  CHECK(v[0] == 42);
  CHECK(v[kCount - 2] == 42);
  CHECK(v[kCount - 1] == 41);  // n excludes the last element
}

TEST_CASE("a kernel keeps its module loaded", "[kernel][real-gpu]") {
  REQUIRE_REAL_GPU();
  Stream s(custream::StreamFlags::non_blocking);
  Kernel add_one = Module::from_ptx(kPtx).kernel("add_one");  // the Module handle is gone
  custream::DeviceBuffer data(kCount * sizeof(int));
  s.memset32(data.get(), 0, kCount);
  add_one.launch(s, {(kCount + 255) / 256}, {256}, 0, data.get(), kCount);
  CHECK(read(s, data)[kCount - 1] == 1);
}

TEST_CASE("module errors carry the JIT log and the kernel name", "[kernel][real-gpu]") {
  REQUIRE_REAL_GPU();
  try {
    (void)Module::from_ptx(
        ".version 7.0\n.target sm_70\n.address_size 64\n"
        ".visible .entry broken() { this is not ptx; }\n");
    FAIL("no throw");
  } catch (const custream::Error& e) {
    CHECK(e.call() == "cuModuleLoadDataEx");
    CHECK(e.result() == CUDA_ERROR_INVALID_PTX);
    CHECK(std::string(e.what()).find("JIT error log") != std::string::npos);
  }
  Module m = Module::from_ptx(kPtx);
  try {
    (void)m.kernel("no_such_kernel");
    FAIL("no throw");
  } catch (const custream::Error& e) {
    CHECK(e.result() == CUDA_ERROR_NOT_FOUND);
    CHECK(std::string(e.what()).find("\"no_such_kernel\"") != std::string::npos);
  }
  try {
    (void)Module::from_file("/nonexistent/custream.ptx");
    FAIL("no throw");
  } catch (const custream::Error& e) {
    CHECK(std::string(e.what()).find("/nonexistent/custream.ptx") != std::string::npos);
  }
}

TEST_CASE("modules from a file and from an image", "[kernel][real-gpu]") {
  REQUIRE_REAL_GPU();
  char path[] = "/tmp/custream-kernel-XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  close(fd);
  {
    std::ofstream out(path);
    out << kPtx;
  }
  Module from_file = Module::from_file(path);
  unlink(path);
  Module from_image = Module::from_image(kPtx);
  Stream s(custream::StreamFlags::non_blocking);
  custream::DeviceBuffer data(kCount * sizeof(int));
  s.memset32(data.get(), 0, kCount);
  from_file.kernel("add_one").launch(s, {(kCount + 255) / 256}, {256}, 0, data.get(), kCount);
  from_image.kernel("add_one").launch(s, {(kCount + 255) / 256}, {256}, 0, data.get(), kCount);
  CHECK(read(s, data)[17] == 2);
}

TEST_CASE("captured kernel launches replay; DOT names the kernel", "[kernel][graph][real-gpu]") {
  REQUIRE_REAL_GPU();
  Stream s(custream::StreamFlags::non_blocking), other(custream::StreamFlags::non_blocking);
  Kernel add_one = Module::from_ptx(kPtx).kernel("add_one");
  custream::DeviceBuffer data(kCount * sizeof(int));
  s.memset32(data.get(), 0, kCount);
  s.synchronize();
  s.begin_capture();
  for (int i = 0; i < 3; ++i) {
    add_one.launch(s, {(kCount + 255) / 256}, {256}, 0, data.get(), kCount);
  }
  Graph g = s.end_capture();
  CHECK(read(s, data)[0] == 0);  // capture ran nothing
  CHECK(g.node_count() == 3);
  g.launch(s);
  s.synchronize();
  g.launch(other);
  other.synchronize();
  CHECK(read(s, data)[kCount - 1] == 6);
  const std::string plain = g.dot(), verbose = g.dot(true);
  CHECK(plain.find("add_one") != std::string::npos);
  CHECK(verbose != plain);
}

TEST_CASE("graphs hold the modules they may launch: captured, raw handles, foreign captures",
          "[kernel][graph][lifetime][gpu]") {
  REQUIRE_DRIVER();
  register_add_one();
  const auto& api = custream::detail::api();
  Stream s(custream::StreamFlags::non_blocking);
  custream::DeviceBuffer data(sizeof(int));
  s.memset32(data.get(), 0, 1);
  CUdeviceptr p = data.get();
  unsigned n = 1;
  void* params[] = {&p, &n};
  // Every handle of each module is dropped before its graph launches: without the graph's
  // reference the module is unloaded, and the launch reads freed code (a GPU crashes in
  // cuGraphLaunch; the emulator answers CUDA_ERROR_INVALID_HANDLE).
  Graph captured, raw, adopted;
  {
    Kernel k = Module::from_ptx(kPtx).kernel("add_one");
    s.begin_capture();
    k.launch(s, {1}, {1}, 0, data.get(), 1u);
    captured = s.end_capture();
  }
  {
    const Kernel k = Module::from_ptx(kPtx).kernel("add_one");
    const CUfunction f = k.handle();  // exposed: launched raw below
    s.begin_capture();
    REQUIRE(api.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s.handle(), params, nullptr) ==
            CUDA_SUCCESS);
    raw = s.end_capture();
  }
  {
    Kernel k = Module::from_ptx(kPtx).kernel("add_one");
    REQUIRE(api.cuStreamBeginCapture(s.handle(), CU_STREAM_CAPTURE_MODE_RELAXED) == CUDA_SUCCESS);
    k.launch(s, {1}, {1}, 0, data.get(), 1u);
    CUgraph g = nullptr;
    REQUIRE(api.cuStreamEndCapture(s.handle(), &g) == CUDA_SUCCESS);
    adopted = Graph::adopt(g, custream::InstantiateFlags::upload, s);
  }
  for (const Graph* g : {&captured, &raw, &adopted}) g->launch(s);
  CHECK(read(s, data)[0] == 3);

  // Precision: a module launched before a capture, not in it, and never exposed, is not held
  // by the graph: it is unloaded with its last handle.
  Graph unrelated;
  long with_module = 0;
  {
    Kernel before = Module::from_ptx(kPtx).kernel("add_one");
    before.launch(s, {1}, {1}, 0, data.get(), 1u);
    s.begin_capture();
    s.memset32(data.get(), 7, 1);
    unrelated = s.end_capture();
    s.synchronize();
    if (custream_test::emulated()) {
      CHECK(custream_test::emu_wait_idle());  // nothing an earlier case left is still going
      with_module = custream_test::emu_live_objects();
    }
  }
  if (custream_test::emulated()) CHECK(custream_test::emu_live_objects() == with_module - 1);
  unrelated.launch(s);
  CHECK(read(s, data)[0] == 7);
}

// A per-step loop that loads new code each step (a JIT specializing a kernel) and updates one
// Graph to it: the Graph holds the code of its own graph and of the one its executable now
// runs, not every module it ever ran, and a replaced module stays loaded until the launches
// enqueued before the update are done.
TEST_CASE("updates release the modules a graph no longer launches, after its earlier launches",
          "[kernel][graph][update][lifetime][gpu]") {
  REQUIRE_DRIVER();
  FreshModules f;
  const Stream& s = f.s;
  Graph g;
  f.capture([&] { g = s.end_capture(); });
  g.launch(s);
  const long start = f.live();  // g, its graph, executable and one module
  constexpr int kSteps = 6;
  for (int i = 0; i < kSteps; ++i) {
    f.capture([&] {
      if (i % 2 == 0) {
        g.update(s.end_capture());  // the newer Graph and its references go at once
      } else {
        g.update_from_capture(s);
      }
    });
    g.launch(s);  // the replaced module is released after this launch
  }
  // The first graph's module (g's own graph keeps it) and the last step's, not kSteps + 1.
  if (f.emulated) CHECK(f.live() == start + 1);
  CHECK(f.word() == kSteps + 1);
}

// Never earlier: with the stream parked behind a host function, a launch of the old module, an
// update to a new one and a launch of that are enqueued; the old module goes only after both
// launches ran (the emulator checks it while parked). The gate opens once that check is done,
// or after 2 s: a real driver's cuGraphExecUpdate may wait for the parked launch.
TEST_CASE("an update never releases code a launch enqueued before it still runs",
          "[kernel][graph][update][lifetime][gpu]") {
  REQUIRE_DRIVER();
  FreshModules f;
  const Stream& s = f.s;
  Graph g;
  f.capture([&] { g = s.end_capture(); });
  f.capture([&] { g.update_from_capture(s); });  // g's own module, and B runs
  g.launch(s);
  const long start = f.live();
  Kernel next = Module::from_ptx(kPtx).kernel("add_one");  // loaded before the stream parks
  std::atomic<bool> open{false}, checked{false};
  std::thread opener([&] {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (!checked.load() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    open = true;
  });
  struct Opened {  // on every way out, before `open` goes
    std::thread& opener;
    std::atomic<bool>& checked;
    const Stream& s;
    ~Opened() {
      checked = true;
      opener.join();
      s.synchronize();
    }
  } opened{opener, checked, s};
  s.launch_host_func([&open] {
    while (!open.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  g.launch(s);  // runs B
  s.begin_capture();
  next.launch(s, {1}, {1}, 0, f.data.get(), 1u);
  g.update_from_capture(s);  // B retired
  next = Kernel();           // the Graph holds its module now
  g.launch(s);
  if (f.emulated) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    CHECK(custream_test::emu_live_objects() == start + 1);  // B still loaded, and next's
  }
  checked = true;
  if (f.emulated) CHECK(f.live() == start);  // B released after both launches
  CHECK(f.word() == 3);
}

// What an update does not replace: the graph a Graph was made from (graph(), and the kernels
// per-node updates read from it) keeps its code, also when updates moved the executable to
// other modules; and update(newer) gives the executable newer's own graph, whose code the
// Graph then holds, whatever newer was updated to since.
TEST_CASE("a Graph keeps the code of the graph it was made from through updates",
          "[kernel][graph][update][lifetime][gpu]") {
  REQUIRE_DRIVER();
  FreshModules f;
  const Stream& s = f.s;
  Graph g, a;
  f.capture([&] { g = s.end_capture(); });  // module A
  f.capture([&] { a = s.end_capture(); });  // module C
  const std::vector<custream::GraphNode> nodes = g.nodes();
  REQUIRE(nodes.size() == 1);
  f.capture([&] { g.update_from_capture(s); });  // module B
  g.launch(s);                                   // A's release would follow it
  f.capture([&] { a.update_from_capture(s); });  // module D
  a.launch(s);
  (void)f.live();
  // A per-node update reads the node's kernel from g's own graph: A's, still loaded.
  g.update_kernel(nodes[0], custream::LaunchConfig{{1}, {1}}, f.data.get(), 1u);
  g.launch(s);
  // g runs a's own graph (C), not what a was updated to (D).
  g.update(a);
  a = Graph();  // C stays loaded only if g holds it
  g.launch(s);
  (void)f.live();
  CHECK(f.word() == 4);     // one add_one a launch
  CHECK(!g.dot().empty());  // g's own graph is intact
}

// The release after a launch on a special handle from a thread with no current context:
// launch() gets there by retrying with the device's primary context current, and so does the
// release of what an update replaced (else it stayed pending, one module a step).
TEST_CASE("code an update replaced is released after a launch on the legacy stream",
          "[kernel][graph][update][lifetime][gpu]") {
  REQUIRE_DRIVER();
  FreshModules f;
  const Stream& s = f.s;
  Graph g;
  f.capture([&] { g = s.end_capture(); });
  f.capture([&] { g.update_from_capture(s); });  // B runs
  g.launch(s);
  const long before = f.live();                                          // g's own module and B
  f.capture([&] { g.update_from_capture(s); });                          // C runs, B retired
  std::thread([&] { g.launch(custream::StreamRef::legacy()); }).join();  // no context current
  {
    const custream::ContextScope context(s.context());
    REQUIRE(custream::detail::api().cuCtxSynchronize() == CUDA_SUCCESS);
  }
  if (f.emulated) CHECK(f.live() == before);  // B released, C held
  CHECK(f.word() == 2);                       // two launches
}

TEST_CASE("graph destroyed while a long kernel and a host node are in flight",
          "[kernel][graph][real-gpu]") {
  REQUIRE_REAL_GPU();
  Stream s(custream::StreamFlags::non_blocking);
  Kernel spin = Module::from_ptx(kPtx).kernel("spin");
  auto probe = std::make_shared<Probe>();
  const unsigned long long ns = 300'000'000ull;  // 300 ms
  {
    s.begin_capture();
    spin.launch(s, {1}, {1}, 0, ns);
    s.launch_host_func(Payload(probe));
    Graph g = s.end_capture();
    g.launch(s);
  }  // graph and executable destroyed while the kernel spins
  CHECK(probe->runs == 0);
  CHECK(probe->destroyed == 0);
  s.synchronize();
  CHECK(probe->runs == 1);
  CHECK(eventually([&] { return probe->destroyed == 1; }));
}

TEST_CASE("kernel launch costs one driver call: same result with no context current",
          "[kernel][real-gpu]") {
  REQUIRE_REAL_GPU();
  Stream s(custream::StreamFlags::non_blocking);
  Kernel add_one = Module::from_ptx(kPtx).kernel("add_one");
  custream::DeviceBuffer data(kCount * sizeof(int));
  s.memset32(data.get(), 0, kCount);
  std::thread([&] {  // a fresh thread has no current context
    add_one.launch(s, {(kCount + 255) / 256}, {256}, 0, data.get(), kCount);
  })
      .join();
  CHECK(read(s, data)[5] == 1);
}

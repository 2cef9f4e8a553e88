// The library cases of `custream bench` (docs/performance.md, "Libraries"): a launch through a
// library kernel against cuLaunchKernel with the per-device function, the same with launch
// attributes against cuLaunchKernelEx, a kernel lookup by name, a cache hit against the driver
// load it saves, and capture + instantiate + first launch of 1,000 library kernels. Device 0.
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bench_cases.hpp"
#include "custream/custream.hpp"
#include "custream/testing.hpp"
#include "trivial_ptx.hpp"

namespace custream_bench {
namespace {

volatile long g_sink = 0;

/// PTX of `kernels` empty kernels (k0, k1, …): an image of some size for the cache rows.
std::string many_kernels(int kernels) {
  std::string text = ".version 7.0\n.target sm_70\n.address_size 64\n";
  for (int i = 0; i < kernels; ++i) {
    text += ".visible .entry k" + std::to_string(i) + "(\n  .param .u64 p\n)\n{\n  ret;\n}\n";
  }
  return text;
}

/// What the library cases share, made by the first that runs (never destroyed).
struct LibraryState {
  custream::Stream stream{custream::Device(0), custream::StreamFlags::non_blocking};
  custream::Library library =
      custream::Library::from_ptx(kTrivialPtx, custream::LibraryCache::bypass);
  custream::LibraryKernel noop = library.kernel("noop");
  std::string image = many_kernels(512);  // ~30 KiB of PTX
  custream::Library cached;
  KeptGraphs kept;  // the 1,000-kernel graphs
};

LibraryState& state() {
  static LibraryState* s = [] {
    custream::Device(0).make_current();
    auto* st = new LibraryState;
    st->cached = custream::Library::from_image(st->image.c_str(), st->image.size() + 1);
    return st;
  }();
  return *s;
}

}  // namespace

void add_library_cases(std::vector<Case>& cases) {
  Case launch{"library kernel launch (empty kernel, 1x1)",         {}, {}, {}, 256, 61, {},
              "cuLaunchKernel (the kernel's function on device 0)"};
  launch.needs_kernels = true;
  launch.prepare = [](Case& c) {
    LibraryState& st = state();
    const auto& api = custream::testing::driver();
    const CUfunction f = st.noop.function(custream::Device(0).primary_context());
    c.raw = [&api, s = st.stream.handle(), f](int n) {
      for (int i = 0; i < n; ++i) {
        void* params[1] = {nullptr};
        api.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, params, nullptr);
      }
    };
    c.ours = [](int n) {
      LibraryState& st = state();
      for (int i = 0; i < n; ++i) st.noop.launch(st.stream, 1, 1, 0);
    };
    time_parked(c, st.stream.handle());
  };
  cases.push_back(std::move(launch));

  // With attributes: clusters of one block and a priority, the cheap attributes (checked
  // without a driver call), against cuLaunchKernelEx with the same configuration.
  Case with_attributes{
      "library kernel launch with attributes (cluster, priority)", {}, {}, {}, 256, 61, {},
      "cuLaunchKernelEx (the kernel's function, same attributes)"};
  with_attributes.needs_kernels = true;
  with_attributes.prepare = [](Case& c) {
    LibraryState& st = state();
    const auto& api = custream::testing::driver();
    const CUfunction f = st.noop.function(custream::Device(0).primary_context());
    c.raw = [&api, s = st.stream.handle(), f](int n) {
      for (int i = 0; i < n; ++i) {
        CUlaunchAttribute attributes[2] = {};
        attributes[0].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
        attributes[0].value.clusterDim = {1, 1, 1};
        attributes[1].id = CU_LAUNCH_ATTRIBUTE_PRIORITY;
        attributes[1].value.priority = 0;
        CUlaunchConfig config{};
        config.gridDimX = config.gridDimY = config.gridDimZ = 1;
        config.blockDimX = config.blockDimY = config.blockDimZ = 1;
        config.hStream = s;
        config.attrs = attributes;
        config.numAttrs = 2;
        void* params[1] = {nullptr};
        api.cuLaunchKernelEx(&config, f, params, nullptr);
      }
    };
    c.ours = [](int n) {
      LibraryState& st = state();
      for (int i = 0; i < n; ++i) {
        custream::LaunchConfig config(custream::Dim3{1}, custream::Dim3{1});
        config.cluster = custream::Dim3{1};
        config.priority = 0;
        st.noop.launch(st.stream, config);
      }
    };
    time_parked(c, st.stream.handle());
  };
  cases.push_back(std::move(with_attributes));

  Case lookup{"library kernel lookup by name", {}, {}, {Target::Kind::absolute, 20, 0}, 256, 21, {},
              "cuLibraryGetKernel (reference)"};
  lookup.prepare = [](Case& c) {
    LibraryState& st = state();
    const auto& api = custream::testing::driver();
    c.raw = [&api, lib = st.library.handle()](int n) {
      long sum = 0;
      for (int i = 0; i < n; ++i) {
        CUkernel k = nullptr;
        api.cuLibraryGetKernel(&k, lib, "noop");
        sum += k != nullptr;
      }
      g_sink = sum;
    };
    c.ours = [](int n) {
      LibraryState& st = state();
      const std::string name = "noop";
      long sum = 0;
      for (int i = 0; i < n; ++i) sum += st.library.kernel(name).handle() != nullptr;
      g_sink = sum;
    };
  };
  cases.push_back(std::move(lookup));

  // A cache hit (hash + compare of the image) against the driver load + unload it saves.
  Case hit{
      "library cache hit (30 KiB PTX image)", {}, {}, {Target::Kind::ratio, 0, 0.01}, 4, 21, {},
      "cuLibraryLoadData + cuLibraryUnload"};
  hit.prepare = [](Case& c) {
    LibraryState& st = state();
    const auto& api = custream::testing::driver();
    c.raw = [&api, image = st.image.c_str()](int n) {
      for (int i = 0; i < n; ++i) {
        CUlibrary lib = nullptr;
        api.cuLibraryLoadData(&lib, image, nullptr, nullptr, 0, nullptr, nullptr, 0);
        api.cuLibraryUnload(lib);
      }
    };
    c.ours = [](int n) {
      LibraryState& st = state();
      long sum = 0;
      for (int i = 0; i < n; ++i) {
        sum += custream::Library::from_image(st.image.c_str(), st.image.size() + 1) == st.cached;
      }
      g_sink = sum;
    };
    c.note = [](const Case&) {  // the hit's throughput: it hashes and compares the image
      LibraryState& st = state();
      const std::size_t bytes = st.image.size() + 1;
      constexpr int kHits = 2000;
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < kHits; ++i) (void)custream::Library::from_image(st.image.c_str(), bytes);
      const double ns =
          std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start)
              .count() /
          kHits;
      char text[160];
      std::snprintf(text, sizeof text,
                    "image %zu bytes; a hit takes %.0f ns: %.1f GB/s of image hashed and compared",
                    bytes, ns, static_cast<double>(bytes) / ns);
      return std::string(text);
    };
  };
  cases.push_back(std::move(hit));

  // Capture, instantiate (the graph holds the library: invariant 5 of
  // docs/design/libraries.md), upload and first launch of 1,000 library kernels, against the
  // same with the function raw.
  Case graph{"capture + instantiate + launch (1,000 library kernels)",
             {},
             {},
             {Target::Kind::ratio, 0, 1.02},
             2,
             21,
             {},
             "capture, instantiate+upload, launch, sync"};
  graph.needs_kernels = true;
  graph.prepare = [](Case& c) {
    LibraryState& st = state();
    const CUfunction f = st.noop.function(custream::Device(0).primary_context());
    set_capture_bodies(c, st.stream, f, st.kept, [] {
      LibraryState& st = state();
      st.stream.begin_capture();
      for (int k = 0; k < kGraphKernels; ++k) st.noop.launch(st.stream, 1, 1, 0);
      return st.stream.end_capture();
    });
  };
  cases.push_back(std::move(graph));
}

}  // namespace custream_bench

// Example 5: NCCL all-reduce on custream streams, one communicator per GPU in one process.
//
// NCCL is loaded at run time (dlopen of $CUSTREAM_NCCL, else libnccl.so.2). The `nvidia-nccl-cu13`
// Python package ships a copy:
//   export CUSTREAM_NCCL=$(python3 -c "import nvidia.nccl, os;
//     print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib', 'libnccl.so.2'))")
// (one line).
//
// Per device d, each step: a producer kernel on its own stream adds d + 1 to every element of
// the send buffer; a custream event orders the all-reduce (sum, on the device's reduce stream)
// after it; the result is copied to pinned host memory, and a host function on the reduce
// stream checks every element. custream::Completions futures tell the host thread when each
// device's step is done (no synchronize, no host function of its own). Then the whole step,
// fork and join of the two streams included, is captured into one graph per device (the
// all-reduces of all devices between ncclGroupStart and ncclGroupEnd, as NCCL requires from one
// thread) and replayed; the captured host function checks every replay.
//
// With one GPU the communicator has one rank (the all-reduce is a copy): it says so. The timing
// lines (1 MiB and 256 MiB) compare the all-reduce enqueued on custream's streams with the
// same on raw driver streams, in alternating rounds, and with a captured graph's replay.
//
// Exit status: 0 PASS, 77 SKIP (no driver, no device or no NCCL), 1 FAIL.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <custream/custream.hpp>
#include <custream/testing.hpp>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "example_support.hpp"

namespace {

// The part of NCCL's C API the example uses (nccl.h, stable since NCCL 2.0).
using ncclComm_t = struct ncclComm*;
using ncclResult_t = int;  // ncclSuccess = 0
constexpr int kNcclFloat32 = 7;
constexpr int kNcclSum = 0;
struct Nccl {
  ncclResult_t (*get_version)(int*);
  ncclResult_t (*comm_init_all)(ncclComm_t*, int, const int*);
  ncclResult_t (*comm_destroy)(ncclComm_t);
  ncclResult_t (*all_reduce)(const void*, void*, std::size_t, int, int, ncclComm_t, CUstream);
  ncclResult_t (*group_start)();
  ncclResult_t (*group_end)();
  const char* (*error_string)(ncclResult_t);
};

// p[i] += v for i < n (grid-stride), driver-JIT compiled for every device (custream::Library).
constexpr const char* kPtx = R"(
.version 7.0
.target sm_70
.address_size 64
.visible .entry add(.param .u64 p, .param .u32 n, .param .f32 v)
{
  .reg .pred %q;
  .reg .b32 %r<8>;
  .reg .f32 %f<3>;
  .reg .b64 %rd<5>;
  ld.param.u64 %rd1, [p];
  ld.param.u32 %r1, [n];
  ld.param.f32 %f1, [v];
  cvta.to.global.u64 %rd2, %rd1;
  mov.u32 %r2, %ctaid.x;
  mov.u32 %r3, %ntid.x;
  mov.u32 %r4, %tid.x;
  mad.lo.s32 %r5, %r2, %r3, %r4;
  mov.u32 %r6, %nctaid.x;
  mul.lo.s32 %r7, %r6, %r3;
LOOP:
  setp.ge.u32 %q, %r5, %r1;
  @%q bra DONE;
  mul.wide.u32 %rd3, %r5, 4;
  add.s64 %rd4, %rd2, %rd3;
  ld.global.f32 %f2, [%rd4];
  add.f32 %f2, %f2, %f1;
  st.global.f32 [%rd4], %f2;
  add.s32 %r5, %r5, %r7;
  bra LOOP;
DONE:
  ret;
}
)";

constexpr int kReplays = 20;
constexpr std::size_t kN = (1u << 20) / sizeof(float);  // 1 MiB: the checked step's size

// Pinned host memory (custream has no host-buffer type: the entry points custream loaded).
struct Pinned {
  void* p = nullptr;
  explicit Pinned(std::size_t bytes) {
    const CUresult r =
        custream::testing::driver().cuMemHostAlloc(&p, bytes, CU_MEMHOSTALLOC_PORTABLE);
    if (r != CUDA_SUCCESS) {
      throw custream::Error(r, "cuMemHostAlloc", std::to_string(bytes) + " bytes of pinned memory");
    }
  }
  ~Pinned() { custream::testing::driver().cuMemFreeHost(p); }
  Pinned(const Pinned&) = delete;
  Pinned& operator=(const Pinned&) = delete;
};

// One device's rank: its streams, buffers, and what its host function found.
struct Rank {
  Rank(int d, std::size_t n, bool with_host = true)
      : device(d),
        produce(custream::Device(d), custream::StreamFlags::non_blocking),
        reduce(custream::Device(d), custream::StreamFlags::non_blocking),
        send(n * sizeof(float), custream::Device(d)),
        recv(n * sizeof(float), custream::Device(d)),
        host(with_host ? n * sizeof(float) : 1) {}
  int device;
  custream::Stream produce, reduce;
  custream::DeviceBuffer send, recv;
  Pinned host;
  int steps = 0;                // steps checked by the host function (its thread only)
  std::atomic<long> wrong{0};   // elements that were not the expected sum
  std::atomic<int> checked{0};  // steps checked
};

std::string nccl_error(const Nccl& nccl, ncclResult_t r) {
  return std::string(nccl.error_string != nullptr ? nccl.error_string(r) : "?") + " (" +
         std::to_string(r) + ")";
}

int run() {
  if (!custream::driver_available()) return example::skip("no CUDA driver");
  const int devices = custream::Device::count();
  if (devices == 0) return example::skip("no device");
  if (custream::driver_info().library.find("emu") != std::string::npos) {
    return example::skip("the CPU driver emulator (NCCL needs a GPU)");
  }
  example::Library lib("CUSTREAM_NCCL", {"libnccl.so.2", "libnccl.so"});
  if (!lib) {
    return example::skip("no NCCL (" + lib.tried +
                         "); set CUSTREAM_NCCL to a libnccl.so.2, e.g. the nvidia-nccl-cu13 "
                         "Python package's (see the top of this example)");
  }
  Nccl nccl{lib.get<decltype(Nccl::get_version)>("ncclGetVersion"),
            lib.get<decltype(Nccl::comm_init_all)>("ncclCommInitAll"),
            lib.get<decltype(Nccl::comm_destroy)>("ncclCommDestroy"),
            lib.get<decltype(Nccl::all_reduce)>("ncclAllReduce"),
            lib.get<decltype(Nccl::group_start)>("ncclGroupStart"),
            lib.get<decltype(Nccl::group_end)>("ncclGroupEnd"),
            lib.get<decltype(Nccl::error_string)>("ncclGetErrorString")};
  if (!nccl.get_version || !nccl.comm_init_all || !nccl.comm_destroy || !nccl.all_reduce ||
      !nccl.group_start || !nccl.group_end) {
    return example::fail(lib.path + " lacks an NCCL entry point");
  }
  int version = 0;
  nccl.get_version(&version);
  std::printf("NCCL %d from %s; %d GPU%s%s\n", version, lib.path.c_str(), devices,
              devices == 1 ? "" : "s",
              devices == 1 ? ": a 1-GPU communicator (the all-reduce is a copy; two GPUs "
                             "exercise the reduction)"
                           : "");

  std::vector<int> list(static_cast<std::size_t>(devices));
  for (int d = 0; d < devices; ++d) list[static_cast<std::size_t>(d)] = d;
  std::vector<ncclComm_t> comms(static_cast<std::size_t>(devices));
  if (const ncclResult_t r = nccl.comm_init_all(comms.data(), devices, list.data()); r != 0) {
    return example::fail("ncclCommInitAll: " + nccl_error(nccl, r));
  }
  struct Destroy {
    const Nccl& nccl;
    std::vector<ncclComm_t>& comms;
    ~Destroy() {
      for (ncclComm_t c : comms) nccl.comm_destroy(c);
    }
  } destroy{nccl, comms};

  const custream::Library code = custream::Library::from_ptx(kPtx);
  const custream::LibraryKernel& add = code.kernel("add");
  custream::Completions completions;
  const float ranks_sum = static_cast<float>(devices * (devices + 1) / 2);  // sum of d + 1

  // One all-reduce of `n` floats on every device, the group NCCL wants from one thread: on
  // each rank's custream stream, or on `raw[d]` when given.
  auto all_reduce = [&](std::vector<std::unique_ptr<Rank>>& ranks, std::size_t n,
                        const std::vector<CUstream>* raw = nullptr) {
    if (const ncclResult_t r = nccl.group_start(); r != 0) {
      throw std::runtime_error("ncclGroupStart: " + nccl_error(nccl, r));
    }
    for (auto& rank : ranks) {
      const ncclResult_t r = nccl.all_reduce(
          reinterpret_cast<const void*>(rank->send.get()),
          reinterpret_cast<void*>(rank->recv.get()), n, kNcclFloat32, kNcclSum,
          comms[static_cast<std::size_t>(rank->device)],
          raw != nullptr ? (*raw)[static_cast<std::size_t>(rank->device)] : rank->reduce.handle());
      if (r != 0) throw std::runtime_error("ncclAllReduce: " + nccl_error(nccl, r));
    }
    if (const ncclResult_t r = nccl.group_end(); r != 0) {
      throw std::runtime_error("ncclGroupEnd: " + nccl_error(nccl, r));
    }
  };

  // The step on every device (also what is captured): produce, order, reduce, copy, check.
  std::vector<std::unique_ptr<Rank>> ranks;
  for (int d = 0; d < devices; ++d) ranks.push_back(std::make_unique<Rank>(d, kN));
  auto step = [&] {
    for (auto& rank : ranks) {
      // Fork: the producer waits for the reduce stream (a no-op eagerly; in a capture it pulls
      // the producer stream into the graph).
      rank->produce.wait(rank->reduce);
      add.launch(rank->produce, {256}, {256}, 0, rank->send.get(), static_cast<unsigned>(kN),
                 static_cast<float>(rank->device + 1));
      rank->reduce.wait_event(rank->produce.record());  // the all-reduce after the producer
    }
    all_reduce(ranks, kN);
    for (auto& rank : ranks) {
      Rank* r = rank.get();
      r->reduce.copy(r->host.p, r->recv.get(), kN * sizeof(float));
      r->reduce.launch_host_func([r, ranks_sum] {
        const float expected = ranks_sum * static_cast<float>(++r->steps);
        const float* got = static_cast<const float*>(r->host.p);
        long wrong = 0;
        for (std::size_t i = 0; i < kN; ++i) wrong += got[i] != expected;
        r->wrong += wrong;
        r->checked++;
      });
    }
  };

  // Eagerly, told by completion futures.
  for (auto& rank : ranks) rank->reduce.memset32(rank->send.get(), 0, kN);
  step();
  for (auto& rank : ranks) completions.future(rank->reduce).get();

  // Captured: one graph per device, the all-reduces of every device in one group.
  for (auto& rank : ranks) rank->reduce.begin_capture();
  step();
  std::vector<custream::Graph> graphs;
  for (auto& rank : ranks) graphs.push_back(rank->reduce.end_capture());
  for (int i = 0; i < kReplays; ++i) {
    for (std::size_t d = 0; d < ranks.size(); ++d) graphs[d].launch(ranks[d]->reduce);
    for (auto& rank : ranks) completions.future(rank->reduce).get();
  }
  long wrong = 0;
  bool all_checked = true;
  for (auto& rank : ranks) {
    wrong += rank->wrong.load();
    all_checked = all_checked && rank->checked.load() == 1 + kReplays;
    std::printf("device %d: %d steps checked by the host function, %ld wrong elements\n",
                rank->device, rank->checked.load(), rank->wrong.load());
  }
  if (wrong != 0 || !all_checked) return example::fail("a sum was wrong or a check did not run");

  // Timing: the all-reduce alone, enqueued on custream's streams and on raw driver streams
  // (made here with cuStreamCreate) in alternating rounds, and a captured graph's replay.
  const auto& driver = custream::testing::driver();
  std::vector<CUstream> raw(static_cast<std::size_t>(devices));
  struct DestroyRaw {
    const custream::detail::DriverApi& driver;
    std::vector<CUstream>& raw;
    ~DestroyRaw() {
      for (CUstream h : raw) {
        if (h != nullptr) driver.cuStreamDestroy(h);
      }
    }
  } destroy_raw{driver, raw};
  for (int d = 0; d < devices; ++d) {
    custream::ContextScope scope(custream::Device(d).primary_context());
    if (driver.cuStreamCreate(&raw[static_cast<std::size_t>(d)], CU_STREAM_NON_BLOCKING) !=
        CUDA_SUCCESS) {
      return example::fail("cuStreamCreate");
    }
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  for (const std::size_t bytes : {std::size_t{1} << 20, std::size_t{256} << 20}) {
    const std::size_t n = bytes / sizeof(float);
    std::vector<std::unique_ptr<Rank>> big;
    for (int d = 0; d < devices; ++d) big.push_back(std::make_unique<Rank>(d, n, false));
    const int reps = bytes > (1u << 20) ? 10 : 100;
    auto sync_all = [&] {
      for (auto& rank : big) rank->reduce.synchronize();
      for (CUstream h : raw) driver.cuStreamSynchronize(h);
    };
    auto time_us = [&](const std::function<void()>& once) {
      sync_all();
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < reps; ++i) once();
      sync_all();
      return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                 .count() /
             reps;
    };
    const std::function<void()> ours = [&] { all_reduce(big, n); };
    const std::function<void()> theirs = [&] { all_reduce(big, n, &raw); };
    ours();  // warm-up
    theirs();
    std::vector<double> on_custream, on_raw, ratio;
    for (int round = 0; round < 11; ++round) {  // the order alternates
      const bool raw_first = round % 2 == 1;
      const double first = time_us(raw_first ? theirs : ours);
      const double second = time_us(raw_first ? ours : theirs);
      on_custream.push_back(raw_first ? second : first);
      on_raw.push_back(raw_first ? first : second);
      ratio.push_back(on_custream.back() / on_raw.back());
    }
    for (auto& rank : big) rank->reduce.begin_capture();
    all_reduce(big, n);
    std::vector<custream::Graph> g;
    for (auto& rank : big) g.push_back(rank->reduce.end_capture());
    const std::function<void()> replay_once = [&] {
      for (std::size_t d = 0; d < big.size(); ++d) g[d].launch(big[d]->reduce);
    };
    replay_once();
    std::vector<double> replay;
    for (int round = 0; round < 11; ++round) replay.push_back(time_us(replay_once));
    std::printf(
        "all-reduce of %zu MiB on %d GPU%s, us per step (medians of 11 rounds): custream stream "
        "%.1f, raw stream %.1f (custream / raw %.3f), graph replay %.1f\n",
        bytes >> 20, devices, devices == 1 ? "" : "s", median(on_custream), median(on_raw),
        median(ratio), median(replay));
  }
  std::printf("PASS: NCCL all-reduce on custream streams, eager and %d graph replays\n", kReplays);
  return example::exit_pass;
}

}  // namespace

int main() {
  try {
    return run();
  } catch (const std::exception& e) {
    return example::fail(e.what());
  }
}

// NCCL on custream streams (examples/nccl_allreduce has the whole step): collectives on every
// visible device, on custream streams and on foreign streams wrapped with ExternalStream, and a
// stream of another device refused before NCCL is called. NCCL is loaded with dlopen
// ($CUSTREAM_NCCL, else libnccl.so.2); without it, or without a real GPU, the cases skip.
#include <dlfcn.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "custream/completions.hpp"
#include "custream/context_scope.hpp"
#include "custream/device.hpp"
#include "custream/device_buffer.hpp"
#include "custream/external_stream.hpp"
#include "custream/stream.hpp"
#include "driver.hpp"
#include "test_support.hpp"

using custream::Device;
using custream::Stream;

namespace {

// The part of nccl.h the cases use (stable since NCCL 2.0).
using ncclComm_t = struct ncclComm*;
constexpr int kNcclFloat32 = 7;
constexpr int kNcclSum = 0;
constexpr std::size_t kCount = 1 << 16;  // floats per all-reduce

struct Nccl {
  void* handle = nullptr;
  std::string why;
  int (*comm_init_all)(ncclComm_t*, int, const int*) = nullptr;
  int (*comm_destroy)(ncclComm_t) = nullptr;
  int (*all_reduce)(const void*, void*, std::size_t, int, int, ncclComm_t, CUstream) = nullptr;
  int (*group_start)() = nullptr;
  int (*group_end)() = nullptr;
  int calls = 0;  // all-reduces enqueued through enqueue() below

  Nccl() {
    const char* from_env = std::getenv("CUSTREAM_NCCL");
    for (const char* name : {from_env, "libnccl.so.2"}) {
      if (name == nullptr || *name == '\0' || handle != nullptr) continue;
      handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (handle == nullptr) why += std::string(why.empty() ? "" : "; ") + dlerror();
    }
    if (handle == nullptr) return;
    comm_init_all = reinterpret_cast<decltype(comm_init_all)>(dlsym(handle, "ncclCommInitAll"));
    comm_destroy = reinterpret_cast<decltype(comm_destroy)>(dlsym(handle, "ncclCommDestroy"));
    all_reduce = reinterpret_cast<decltype(all_reduce)>(dlsym(handle, "ncclAllReduce"));
    group_start = reinterpret_cast<decltype(group_start)>(dlsym(handle, "ncclGroupStart"));
    group_end = reinterpret_cast<decltype(group_end)>(dlsym(handle, "ncclGroupEnd"));
    if (!comm_init_all || !comm_destroy || !all_reduce || !group_start || !group_end) {
      why = "an NCCL entry point is missing";
      handle = nullptr;
    }
  }

  // An all-reduce of `count` floats for the communicator of device `device`, on the stream
  // `stream` names: custream wraps it for that device first, which refuses (naming both
  // devices) a stream of another one before NCCL sees it.
  void enqueue(int device, ncclComm_t comm, CUstream stream, CUdeviceptr send, CUdeviceptr recv,
               std::size_t count) {
    const custream::ExternalStream checked(stream, device);
    ++calls;
    REQUIRE(all_reduce(reinterpret_cast<const void*>(send), reinterpret_cast<void*>(recv), count,
                       kNcclFloat32, kNcclSum, comm, checked.handle()) == 0);
  }
};

// Skips unless a real GPU and NCCL are here.
#define REQUIRE_NCCL(nccl)                                                                     \
  do {                                                                                         \
    REQUIRE_REAL_GPU();                                                                        \
    if ((nccl).handle == nullptr) {                                                            \
      CUSTREAM_SKIP("needs NCCL (" << (nccl).why << "): set CUSTREAM_NCCL to a libnccl.so.2"); \
    }                                                                                          \
  } while (false)

// One communicator per visible device, destroyed at the end.
struct Comms {
  Nccl& nccl;
  std::vector<ncclComm_t> comms;
  explicit Comms(Nccl& n) : nccl(n), comms(static_cast<std::size_t>(Device::count())) {
    std::vector<int> devices;
    for (int d = 0; d < Device::count(); ++d) devices.push_back(d);
    REQUIRE(nccl.comm_init_all(comms.data(), static_cast<int>(comms.size()), devices.data()) == 0);
  }
  ~Comms() {
    for (ncclComm_t c : comms) nccl.comm_destroy(c);
  }
};

std::uint32_t bits(float f) {
  std::uint32_t u = 0;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

}  // namespace

TEST_CASE("NCCL all-reduce on every device: custream streams and wrapped foreign streams",
          "[gpu][real-gpu][nccl]") {
  Nccl nccl;
  REQUIRE_NCCL(nccl);
  Comms comms(nccl);
  const int n = Device::count();
  const float expected = static_cast<float>(n * (n + 1) / 2);  // the sum of d + 1
  custream::Completions completions;
  struct Rank {
    Stream own;
    CUstream foreign = nullptr;  // made with the driver: not custream's
    custream::DeviceBuffer send, recv;
    std::vector<float> out = std::vector<float>(kCount);
  };
  std::vector<std::unique_ptr<Rank>> ranks;
  for (int d = 0; d < n; ++d) {
    auto r = std::make_unique<Rank>(Rank{Stream(Device(d), custream::StreamFlags::non_blocking),
                                         nullptr, custream::DeviceBuffer(kCount * 4, Device(d)),
                                         custream::DeviceBuffer(kCount * 4, Device(d))});
    custream::ContextScope scope(Device(d).primary_context());
    REQUIRE(custream::detail::api().cuStreamCreate(&r->foreign, CU_STREAM_NON_BLOCKING) ==
            CUDA_SUCCESS);
    // Wrapped with no device given: inferred from the stream's context.
    CHECK(custream::ExternalStream(r->foreign).device_id() == d);
    ranks.push_back(std::move(r));
  }
  for (const bool foreign : {false, true}) {
    INFO((foreign ? "foreign streams wrapped with ExternalStream" : "custream streams"));
    for (int d = 0; d < n; ++d) {
      Rank& r = *ranks[static_cast<std::size_t>(d)];
      r.own.memset32(r.send.get(), bits(static_cast<float>(d + 1)), kCount);
      r.own.memset32(r.recv.get(), 0, kCount);
      r.own.synchronize();
    }
    REQUIRE(nccl.group_start() == 0);
    for (int d = 0; d < n; ++d) {
      Rank& r = *ranks[static_cast<std::size_t>(d)];
      nccl.enqueue(d, comms.comms[static_cast<std::size_t>(d)],
                   foreign ? r.foreign : r.own.handle(), r.send.get(), r.recv.get(), kCount);
    }
    REQUIRE(nccl.group_end() == 0);
    for (int d = 0; d < n; ++d) {
      Rank& r = *ranks[static_cast<std::size_t>(d)];
      const custream::ExternalStream s(foreign ? r.foreign : r.own.handle());
      s.copy(r.out.data(), r.recv.get(), kCount * 4);
      completions.future(s).get();  // the copy is synchronous for pageable memory; told anyway
      long wrong = 0;
      for (float v : r.out) wrong += v != expected;
      CHECK(wrong == 0);
    }
  }
  CHECK(nccl.calls == 2 * n);
  for (auto& r : ranks) {
    custream::ContextScope scope(Device(r->own.device_id()).primary_context());
    custream::detail::api().cuStreamDestroy(r->foreign);
  }
}

TEST_CASE("NCCL: a stream of another device is refused before NCCL is called, naming both",
          "[gpu][real-gpu][nccl]") {
  Nccl nccl;
  REQUIRE_NCCL(nccl);
  if (Device::count() < 2) CUSTREAM_SKIP("needs 2 devices; this machine has 1");
  Comms comms(nccl);
  const Stream on_1(Device(1), custream::StreamFlags::non_blocking);
  custream::DeviceBuffer send(4096, Device(0)), recv(4096, Device(0));
  custream_test::expect_error(
      [&] { nccl.enqueue(0, comms.comms[0], on_1.handle(), send.get(), recv.get(), 1024); },
      CUDA_ERROR_INVALID_DEVICE, "given device 0 but belongs to device 1");
  CHECK(nccl.calls == 0);
}

// Driver conformance: Host-mapped memory and stream memory operations
#include "helpers.hpp"

namespace conformance {
namespace {

TEST_CASE("host-mapped memory: cuMemHostAlloc, its device pointer, cuMemFreeHost",
          "[conformance][memops]") {
  REQUIRE_MEMOPS();
  PrimaryScope scope;
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  constexpr size_t kBytes = 4096;
  DeviceBuffer dev(kBytes);
  for (unsigned flags :
       {kMapped, unsigned{CU_MEMHOSTALLOC_DEVICEMAP}, kMapped | CU_MEMHOSTALLOC_WRITECOMBINED}) {
    INFO("flags " << flags);
    void* p = nullptr;
    CU_OK(api().cuMemHostAlloc(&p, kBytes, flags));
    REQUIRE(p != nullptr);
    std::memset(p, 0xab, kBytes);  // host memory
    CUdeviceptr d = 0;
    CU_OK(api().cuMemHostGetDevicePointer(&d, p, 0));
    // Unified addressing (and every device the H200's process sees can use host pointers):
    // the device pointer is the host address, for every address inside the allocation.
    CHECK(d == reinterpret_cast<CUdeviceptr>(p));
    CUdeviceptr inner = 0;
    CU_OK(api().cuMemHostGetDevicePointer(&inner, static_cast<char*>(p) + 256, 0));
    CHECK(inner == d + 256);
    // The device pointer is device memory to memset and memcpy, in stream order.
    std::vector<uint32_t> out(kBytes / 4);
    CU_OK(api().cuMemsetD32Async(d, 0x01020304u, kBytes / 4, s.s));
    CU_OK(api().cuMemcpyAsync(dev.p, d, kBytes, s.s));
    CU_OK(api().cuMemsetD8Async(d + 8, 0, kBytes - 8, s.s));
    CU_OK(api().cuMemcpyDtoHAsync(out.data(), dev.p, kBytes, s.s));
    CU_OK(api().cuStreamSynchronize(s.s));
    CHECK(out == std::vector<uint32_t>(kBytes / 4, 0x01020304u));
    const auto* words = static_cast<const uint32_t*>(p);
    CHECK(words[0] == 0x01020304u);
    CHECK(words[1] == 0x01020304u);
    CHECK(words[2] == 0u);
    CHECK(words[kBytes / 4 - 1] == 0u);
    CU_OK(api().cuMemFreeHost(p));
  }
}

TEST_CASE("stream memory operations: the device attributes", "[conformance][memops]") {
  REQUIRE_MEMOPS();
  const std::pair<CUdevice_attribute, const char*> attributes[] = {
      {CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, "CAN_MAP_HOST_MEMORY"},
      {CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, "UNIFIED_ADDRESSING"},
      {CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM,
       "CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM"},
      {CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1, "CAN_USE_STREAM_MEM_OPS_V1"},
      {CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS_V1, "CAN_USE_64_BIT_STREAM_MEM_OPS_V1"},
      {CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR_V1, "CAN_USE_STREAM_WAIT_VALUE_NOR_V1"},
      {CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES, "CAN_FLUSH_REMOTE_WRITES"},
      {CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, "CAN_USE_64_BIT_STREAM_MEM_OPS"},
      {CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR, "CAN_USE_STREAM_WAIT_VALUE_NOR"},
  };
  std::map<std::string, int> got;
  for (const auto& [a, name] : attributes) {
    got[name] = device_attribute(a);
    fact(std::string("attribute ") + name, got[name]);
  }
  CHECK(got["CAN_MAP_HOST_MEMORY"] == 1);
  CHECK(got["UNIFIED_ADDRESSING"] == 1);
  CHECK(got["CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM"] == 1);
  // The v1 operations (CUDA 8.0 / 9.0 ABIs) need a kernel-module option; the v2 ones,
  // cuStreamWriteValue64 included, work whatever these say.
  CHECK(got["CAN_USE_STREAM_MEM_OPS_V1"] == 0);
  CHECK(got["CAN_USE_64_BIT_STREAM_MEM_OPS_V1"] == 0);
  CHECK(got["CAN_USE_STREAM_WAIT_VALUE_NOR_V1"] == 0);
  CHECK(got["CAN_FLUSH_REMOTE_WRITES"] == 0);
  CHECK(got["CAN_USE_64_BIT_STREAM_MEM_OPS"] == 1);
  CHECK(got["CAN_USE_STREAM_WAIT_VALUE_NOR"] == 1);
}

TEST_CASE("cuStreamWriteValue32/64 write when the stream reaches them, not before",
          "[conformance][memops]") {
  REQUIRE_MEMOPS();
  PrimaryScope scope;
  HostMapped m(4096);
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  Gate gate;
  CU_OK(api().cuMemsetD32Async(m.d, 7, 4, s.s));  // words 0..3
  CU_OK(launch(s.s, &gate.fn));
  CU_OK(api().cuStreamWriteValue32(s.s, m.d, 42, 0));
  CU_OK(api().cuStreamWriteValue64(s.s, m.d + 8, 0x1122334455667788ull, 0));
  REQUIRE(wait_until([&] { return gate.entered.load(); }));
  // The memset before the host function has run; the writes after it have not.
  CHECK(load_word<uint32_t>(m.p, 0) == 7u);
  std::this_thread::sleep_for(50ms);
  CHECK(load_word<uint32_t>(m.p, 0) == 7u);
  CHECK(load_word<uint64_t>(m.p, 8) == 0x0000000700000007ull);
  CU_EQ(api().cuStreamQuery(s.s), CUDA_ERROR_NOT_READY);
  gate.open = true;
  // A watcher sees them with plain acquire loads, without synchronizing with the stream.
  CHECK(wait_until([&] { return load_word<uint64_t>(m.p, 8) == 0x1122334455667788ull; }));
  CHECK(load_word<uint32_t>(m.p, 0) == 42u);
  CHECK(load_word<uint32_t>(m.p, 4) == 7u);  // a 32-bit write writes 32 bits
  CU_OK(api().cuStreamSynchronize(s.s));
  // On the legacy and per-thread streams too, and through a device pointer of device memory.
  DeviceBuffer dev(16);
  uint64_t back[2] = {};
  CU_OK(api().cuMemsetD8Async(dev.p, 0, 16, CU_STREAM_LEGACY));
  CU_OK(api().cuStreamWriteValue64(CU_STREAM_LEGACY, dev.p, 0xfedcba9876543210ull, 0));
  CU_OK(api().cuStreamWriteValue32(CU_STREAM_PER_THREAD, dev.p + 8, 0x5a5a5a5au, 0));
  CU_OK(api().cuMemcpyDtoHAsync(back, dev.p, 16, CU_STREAM_PER_THREAD));
  CU_OK(api().cuStreamSynchronize(CU_STREAM_PER_THREAD));
  CHECK(back[0] == 0xfedcba9876543210ull);
  CHECK(back[1] == 0x5a5a5a5aull);
}

TEST_CASE("a watcher that reads the written sequence number sees the stream's earlier work",
          "[conformance][memops]") {
  REQUIRE_MEMOPS();
  PrimaryScope scope;
  // Word 0: the sequence number; from byte 256 on, one 256-byte slot per round, filled by a
  // memset before the round's write (the completion engine's pattern: work, then a number).
  constexpr uint64_t kRounds = 200;
  constexpr size_t kSlot = 256;
  HostMapped m(kSlot * (kRounds + 1));
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  std::atomic<int> stale{0};
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> last{0};
  std::thread watcher([&] {
    uint64_t seen = 0;
    while (seen < kRounds && !stop.load()) {
      const uint64_t now = load_word<uint64_t>(m.p, 0);
      if (now == seen) {
        std::this_thread::yield();
        continue;
      }
      if (now < seen) stale.fetch_add(1);  // the numbers only grow
      // Every round up to `now` has finished its memset.
      for (uint64_t r = seen + 1; r <= now && r <= kRounds; ++r) {
        const auto* slot = reinterpret_cast<const uint32_t*>(static_cast<char*>(m.p) + kSlot * r);
        for (size_t i = 0; i < kSlot / 4; ++i)
          if (slot[i] != static_cast<uint32_t>(r)) stale.fetch_add(1);
      }
      seen = now;
      last = now;
    }
  });
  AtExit join{[&] {
    stop = true;
    watcher.join();
  }};
  for (uint64_t r = 1; r <= kRounds; ++r) {
    CU_OK(api().cuMemsetD32Async(m.d + kSlot * r, static_cast<unsigned>(r), kSlot / 4, s.s));
    CU_OK(api().cuStreamWriteValue64(s.s, m.d, r, 0));
  }
  CHECK(wait_until([&] { return last.load() == kRounds; }));
  CU_OK(api().cuStreamSynchronize(s.s));
  CHECK(stale.load() == 0);
}

TEST_CASE("cuStreamWaitValue32/64 hold the stream until the word satisfies the condition",
          "[conformance][memops]") {
  REQUIRE_MEMOPS();
  PrimaryScope scope;
  const bool nor = device_attribute(CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR) == 1;
  struct Case {
    const char* name;
    bool wide;
    unsigned flags;
    uint64_t value, initial, still_blocked, releases;
  };
  const Case cases[] = {
      {"GEQ 32", false, CU_STREAM_WAIT_VALUE_GEQ, 10, 3, 9, 11},
      // Cyclic: (int32_t)(word - value) >= 0.
      {"GEQ 32 cyclic", false, CU_STREAM_WAIT_VALUE_GEQ, 0xfffffff0u, 0x7ffffff0u, 0xffffffe0u, 5},
      {"EQ 32", false, CU_STREAM_WAIT_VALUE_EQ, 77, 0, 78, 77},
      {"AND 32", false, CU_STREAM_WAIT_VALUE_AND, 0x10, 0, 0x0f, 0x30},
      {"NOR 32", false, CU_STREAM_WAIT_VALUE_NOR, 0xffff0000u, 0x0000ffffu, 0x0001ffffu,
       0x0000ff00u},
      {"GEQ 64", true, CU_STREAM_WAIT_VALUE_GEQ, 1ull << 40, 0, (1ull << 40) - 1, (1ull << 40) + 1},
      {"GEQ 64 cyclic", true, CU_STREAM_WAIT_VALUE_GEQ, ~0ull - 15, 1ull << 63, ~0ull - 31, 5},
      {"EQ 64", true, CU_STREAM_WAIT_VALUE_EQ, 0x1234567800000000ull, 0, 0x1234567800000001ull,
       0x1234567800000000ull},
      {"AND 64", true, CU_STREAM_WAIT_VALUE_AND, 1ull << 40, 0xffffffffull,
       0xffffffffull | (1ull << 39), 1ull << 40},
      {"NOR 64", true, CU_STREAM_WAIT_VALUE_NOR, 0xffffffff00000000ull, 0xffffffffull,
       0x1ffffffffull, 0},
  };
  constexpr size_t kCases = sizeof cases / sizeof cases[0];
  HostMapped m(8 * kCases);
  std::vector<std::unique_ptr<StreamHandle>> streams;
  std::vector<std::unique_ptr<std::atomic<bool>>> ran;
  std::vector<std::function<void()>> after(kCases);
  std::vector<bool> enqueued(kCases, false);
  for (size_t i = 0; i < kCases; ++i) {
    streams.push_back(std::make_unique<StreamHandle>(CU_STREAM_NON_BLOCKING));
    ran.push_back(std::make_unique<std::atomic<bool>>(false));
    after[i] = [flag = ran.back().get()] { *flag = true; };
  }
  // Whatever happens, every word ends up satisfying its wait before the streams go.
  AtExit release{[&] {
    for (size_t i = 0; i < kCases; ++i) {
      if (cases[i].wide) {
        store_word<uint64_t>(m.p, 8 * i, cases[i].releases);
      } else {
        store_word<uint32_t>(m.p, 8 * i, static_cast<uint32_t>(cases[i].releases));
      }
    }
    for (auto& s : streams) api().cuStreamSynchronize(s->s);
  }};
  auto write = [&](size_t i, uint64_t v) {
    if (cases[i].wide) {
      store_word<uint64_t>(m.p, 8 * i, v);
    } else {
      store_word<uint32_t>(m.p, 8 * i, static_cast<uint32_t>(v));
    }
  };
  for (size_t i = 0; i < kCases; ++i) {
    INFO(cases[i].name);
    write(i, cases[i].initial);
    const CUstream s = streams[i]->s;
    const CUresult r =
        cases[i].wide
            ? api().cuStreamWaitValue64(s, m.d + 8 * i, cases[i].value, cases[i].flags)
            : api().cuStreamWaitValue32(s, m.d + 8 * i, static_cast<cuuint32_t>(cases[i].value),
                                        cases[i].flags);
    if (cases[i].flags == CU_STREAM_WAIT_VALUE_NOR && !nor) {
      CU_CHECK_EQ(r, CUDA_ERROR_NOT_SUPPORTED);
      continue;
    }
    CU_CHECK_EQ(r, CUDA_SUCCESS);
    if (r != CUDA_SUCCESS) continue;
    enqueued[i] = true;
    CU_OK(launch(s, &after[i]));
  }
  std::this_thread::sleep_for(30ms);
  for (size_t i = 0; i < kCases; ++i) {
    if (!enqueued[i]) continue;
    INFO(cases[i].name << ": initial word");
    CHECK(!ran[i]->load());
    CU_CHECK_EQ(api().cuStreamQuery(streams[i]->s), CUDA_ERROR_NOT_READY);
    write(i, cases[i].still_blocked);
  }
  std::this_thread::sleep_for(30ms);
  for (size_t i = 0; i < kCases; ++i) {
    if (!enqueued[i]) continue;
    INFO(cases[i].name << ": still blocked");
    CHECK(!ran[i]->load());
  }
  // Released one at a time: each stream goes on by itself, the others stay held.
  for (size_t i = 0; i < kCases; ++i) {
    if (!enqueued[i]) continue;
    INFO(cases[i].name << ": released");
    write(i, cases[i].releases);
    CHECK(wait_until([&] { return ran[i]->load(); }));
    CU_CHECK_EQ(api().cuStreamSynchronize(streams[i]->s), CUDA_SUCCESS);
    for (size_t j = i + 1; j < kCases; ++j)
      if (enqueued[j]) CHECK(!ran[j]->load());
  }
}

TEST_CASE("a wait on one stream is released by a write on another", "[conformance][memops]") {
  REQUIRE_MEMOPS();
  PrimaryScope scope;
  DeviceBuffer word(8);
  CU_OK(api().cuMemsetD8Async(word.p, 0, 8, CU_STREAM_LEGACY));
  CU_OK(api().cuStreamSynchronize(CU_STREAM_LEGACY));
  StreamHandle waiter(CU_STREAM_NON_BLOCKING), writer(CU_STREAM_NON_BLOCKING);
  Gate gate;
  std::atomic<bool> ran{false};
  std::function<void()> mark = [&] { ran = true; };
  CU_OK(launch(writer.s, &gate.fn));
  CU_OK(api().cuStreamWriteValue64(writer.s, word.p, 3, 0));
  CU_OK(api().cuStreamWaitValue64(waiter.s, word.p, 3, CU_STREAM_WAIT_VALUE_EQ));
  CU_OK(launch(waiter.s, &mark));
  REQUIRE(wait_until([&] { return gate.entered.load(); }));
  std::this_thread::sleep_for(30ms);
  CHECK(!ran.load());
  CU_EQ(api().cuStreamQuery(waiter.s), CUDA_ERROR_NOT_READY);
  gate.open = true;
  CHECK(wait_until([&] { return ran.load(); }));
  CU_OK(api().cuStreamSynchronize(waiter.s));
  CU_OK(api().cuStreamSynchronize(writer.s));
}

TEST_CASE("captured writes and waits are memory-operation nodes, replayed by each launch",
          "[conformance][memops]") {
  REQUIRE_MEMOPS();
  PrimaryScope scope;
  HostMapped m(64);
  StreamHandle cap(CU_STREAM_NON_BLOCKING), run(CU_STREAM_NON_BLOCKING);
  CU_OK(api().cuStreamBeginCapture(cap.s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  const CUresult wait = api().cuStreamWaitValue32(cap.s, m.d + 16, 1, CU_STREAM_WAIT_VALUE_GEQ);
  const CUresult w32 = api().cuStreamWriteValue32(cap.s, m.d, 5, 0);
  const CUresult w64 = api().cuStreamWriteValue64(cap.s, m.d + 8, 6, 0);
  fact("captured cuStreamWaitValue32", wait);
  fact("captured cuStreamWriteValue32", w32);
  fact("captured cuStreamWriteValue64", w64);
  CUgraph g = nullptr;
  const CUresult end = api().cuStreamEndCapture(cap.s, &g);
  fact("cuStreamEndCapture after memory operations", end);
  CU_CHECK_EQ(wait, CUDA_SUCCESS);
  CU_CHECK_EQ(w32, CUDA_SUCCESS);
  CU_CHECK_EQ(w64, CUDA_SUCCESS);
  CU_EQ(end, CUDA_SUCCESS);
  REQUIRE(g != nullptr);
  CHECK(load_word<uint32_t>(m.p, 0) == 0u);  // nothing ran during the capture
  const size_t n = node_count(g);
  fact("nodes of 3 captured memory operations", static_cast<long long>(n));
  CHECK(n == 3);
  std::vector<CUgraphNode> nodes(n);
  size_t got = n;
  CU_OK(api().cuGraphGetNodes(g, nodes.data(), &got));
  for (CUgraphNode node : nodes) {
    CUgraphNodeType t{};
    CU_OK(api().cuGraphNodeGetType(node, &t));
    fact("captured memory operation node type", t);
    CHECK(t == CU_GRAPH_NODE_TYPE_BATCH_MEM_OP);
  }
  CUgraphExec e = instantiate(g);
  AtExit release{[&] {
    store_word<uint32_t>(m.p, 16, 1);
    api().cuStreamSynchronize(run.s);
    api().cuGraphExecDestroy(e);
    api().cuGraphDestroy(g);
  }};
  // The word waited on is 0: the launch is held, then goes on when the host writes it.
  std::atomic<bool> ran{false};
  std::function<void()> mark = [&] { ran = true; };
  CU_OK(api().cuGraphLaunch(e, run.s));
  CU_OK(launch(run.s, &mark));
  std::this_thread::sleep_for(30ms);
  CHECK(!ran.load());
  CHECK(load_word<uint32_t>(m.p, 0) == 0u);
  store_word<uint32_t>(m.p, 16, 1);
  CHECK(wait_until([&] { return ran.load(); }));
  CU_OK(api().cuStreamSynchronize(run.s));
  CHECK(load_word<uint32_t>(m.p, 0) == 5u);
  CHECK(load_word<uint64_t>(m.p, 8) == 6u);
  // A second launch writes again.
  store_word<uint32_t>(m.p, 0, 0);
  store_word<uint64_t>(m.p, 8, 0);
  CU_OK(api().cuGraphLaunch(e, run.s));
  CU_OK(api().cuStreamSynchronize(run.s));
  CHECK(load_word<uint32_t>(m.p, 0) == 5u);
  CHECK(load_word<uint64_t>(m.p, 8) == 6u);
}

// Measured on the H200 (driver 580.159.04), like the two cases after it.
TEST_CASE("host-mapped memory and memory operations: errors", "[conformance][memops]") {
  REQUIRE_MEMOPS();
  PrimaryScope scope;
  HostMapped m(64);
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  auto probe = [](const char* what, CUresult got, CUresult expected) {
    fact(what, got);
    INFO(what);
    CU_CHECK_EQ(got, expected);
  };
  void* p = nullptr;
  probe("cuMemHostAlloc(NULL)", api().cuMemHostAlloc(nullptr, 64, kMapped),
        CUDA_ERROR_INVALID_VALUE);
  const CUresult bad_flags = api().cuMemHostAlloc(&p, 64, 0x80);
  if (bad_flags == CUDA_SUCCESS) api().cuMemFreeHost(p);
  probe("cuMemHostAlloc(flags 0x80)", bad_flags, CUDA_ERROR_INVALID_VALUE);
  // 0 bytes is no error, unlike cuMemAlloc's (the pointer the H200 gave was not recorded).
  p = nullptr;
  const CUresult zero = api().cuMemHostAlloc(&p, 0, kMapped);
  if (zero == CUDA_SUCCESS && p) api().cuMemFreeHost(p);
  probe("cuMemHostAlloc(0 bytes)", zero, CUDA_SUCCESS);
  CUdeviceptr d = 0;
  probe("cuMemHostGetDevicePointer(NULL, p)", api().cuMemHostGetDevicePointer(nullptr, m.p, 0),
        CUDA_ERROR_INVALID_VALUE);
  probe("cuMemHostGetDevicePointer(&d, NULL)", api().cuMemHostGetDevicePointer(&d, nullptr, 0),
        CUDA_ERROR_INVALID_VALUE);
  probe("cuMemHostGetDevicePointer(flags 1)", api().cuMemHostGetDevicePointer(&d, m.p, 1),
        CUDA_ERROR_INVALID_VALUE);
  std::vector<uint64_t> pageable(8);
  probe("cuMemHostGetDevicePointer(pageable memory)",
        api().cuMemHostGetDevicePointer(&d, pageable.data(), 0), CUDA_ERROR_INVALID_VALUE);
  {
    DeviceBuffer dev(64);
    probe("cuMemHostGetDevicePointer(device memory)",
          api().cuMemHostGetDevicePointer(&d, reinterpret_cast<void*>(dev.p), 0),
          CUDA_ERROR_INVALID_VALUE);
  }
  // Host memory allocated without CU_MEMHOSTALLOC_DEVICEMAP is mapped all the same (unified
  // addressing).
  void* unmapped = nullptr;
  CU_OK(api().cuMemHostAlloc(&unmapped, 64, 0));
  d = 0;
  probe("cuMemHostGetDevicePointer(no DEVICEMAP)", api().cuMemHostGetDevicePointer(&d, unmapped, 0),
        CUDA_SUCCESS);
  CHECK(d == reinterpret_cast<CUdeviceptr>(unmapped));
  CU_OK(api().cuMemFreeHost(unmapped));
  probe("cuMemFreeHost(NULL)", api().cuMemFreeHost(nullptr), CUDA_SUCCESS);

  // No current context: the special stream handles, and the allocation calls.
  void* alloc = m.p;
  std::thread([&] {
    probe("no context: cuStreamWriteValue32(NULL stream)",
          api().cuStreamWriteValue32(nullptr, m.d, 1, 0), CUDA_ERROR_INVALID_CONTEXT);
    probe("no context: cuStreamWaitValue64(legacy stream)",
          api().cuStreamWaitValue64(CU_STREAM_LEGACY, m.d + 8, 0, 0), CUDA_ERROR_INVALID_CONTEXT);
    void* q = nullptr;
    const CUresult r = api().cuMemHostAlloc(&q, 64, kMapped);
    probe("no context: cuMemHostAlloc", r, CUDA_ERROR_INVALID_CONTEXT);
    if (r == CUDA_SUCCESS) alloc = q;
    CUdeviceptr dq = 0;
    probe("no context: cuMemHostGetDevicePointer", api().cuMemHostGetDevicePointer(&dq, m.p, 0),
          CUDA_ERROR_INVALID_CONTEXT);
  }).join();
  if (alloc != m.p) api().cuMemFreeHost(alloc);
  // Freeing needs no context (the memory is the process's, portable or not).
  void* f = nullptr;
  CU_OK(api().cuMemHostAlloc(&f, 64, kMapped));
  CUresult freed = CUDA_ERROR_UNKNOWN;
  std::thread([&] { freed = api().cuMemFreeHost(f); }).join();
  if (freed != CUDA_SUCCESS) api().cuMemFreeHost(f);
  probe("no context: cuMemFreeHost", freed, CUDA_SUCCESS);

  // Flags: writes take none (cuda.h: no NO_MEMORY_BARRIER in the v2 API); waits one of the four
  // conditions, and no remote-write flush on this device.
  probe("cuStreamWriteValue32(NO_MEMORY_BARRIER)",
        api().cuStreamWriteValue32(s.s, m.d, 1, CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER),
        CUDA_ERROR_INVALID_VALUE);
  probe("cuStreamWriteValue64(flags 2)", api().cuStreamWriteValue64(s.s, m.d + 8, 1, 2),
        CUDA_ERROR_INVALID_VALUE);
  probe("cuStreamWaitValue32(flags 4)", api().cuStreamWaitValue32(s.s, m.d, 0, 4),
        CUDA_ERROR_INVALID_VALUE);
  probe("cuStreamWaitValue64(FLUSH)",
        api().cuStreamWaitValue64(s.s, m.d + 8, 0,
                                  CU_STREAM_WAIT_VALUE_GEQ | CU_STREAM_WAIT_VALUE_FLUSH),
        CUDA_ERROR_NOT_SUPPORTED);
  // Had the driver accepted one of them, its operation might never complete: the stream is
  // drained with a bound, and the memory left allocated if it does not drain.
  const bool drained =
      wait_until([&] { return api().cuStreamQuery(s.s) != CUDA_ERROR_NOT_READY; }, 2000ms);
  fact("stream drained after the flag probes", drained);
  CHECK(drained);
  if (!drained) m.p = nullptr;
}

TEST_CASE("host-mapped memory and memory operations: invalid addresses", "[conformance][memops]") {
  // Separate from the other errors: a driver that accepted one of these would fault on the
  // GPU, and the fault would end every later case of the process (the H200 refuses them all).
  REQUIRE_MEMOPS();
  PrimaryScope scope;
  HostMapped m(64);
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  auto probe = [](const char* what, CUresult got, CUresult expected) {
    fact(what, got);
    INFO(what);
    CU_CHECK_EQ(got, expected);
  };
  probe("cuStreamWriteValue32(address 0)", api().cuStreamWriteValue32(s.s, 0, 1, 0),
        CUDA_ERROR_INVALID_VALUE);
  probe("cuStreamWaitValue32(address 0)", api().cuStreamWaitValue32(s.s, 0, 0, 0),
        CUDA_ERROR_INVALID_VALUE);
  probe("cuStreamWriteValue32(address % 4 == 2)", api().cuStreamWriteValue32(s.s, m.d + 2, 1, 0),
        CUDA_ERROR_INVALID_VALUE);
  probe("cuStreamWriteValue64(address % 8 == 4)", api().cuStreamWriteValue64(s.s, m.d + 4, 1, 0),
        CUDA_ERROR_INVALID_VALUE);
  probe("cuStreamWaitValue64(address % 8 == 4)", api().cuStreamWaitValue64(s.s, m.d + 4, 0, 0),
        CUDA_ERROR_INVALID_VALUE);
  probe("cuStreamSynchronize after them", api().cuStreamSynchronize(s.s), CUDA_SUCCESS);
  std::vector<uint64_t> pageable(8);
  probe("cuMemFreeHost(pageable memory)", api().cuMemFreeHost(pageable.data()),
        CUDA_ERROR_INVALID_VALUE);
  {
    DeviceBuffer dev(64);
    probe("cuMemFreeHost(device memory)", api().cuMemFreeHost(reinterpret_cast<void*>(dev.p)),
          CUDA_ERROR_INVALID_VALUE);
  }
  void* twice = nullptr;
  CU_OK(api().cuMemHostAlloc(&twice, 64, kMapped));
  CU_OK(api().cuMemFreeHost(twice));
  probe("cuMemFreeHost twice", api().cuMemFreeHost(twice), CUDA_ERROR_INVALID_VALUE);
}

// The v1 ABIs need the kernel module's NVreg_EnableStreamMemOPs=1, which
// CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1 reports (0 on the H200).
TEST_CASE("the CUDA 8.0 / 9.0 memory operations are not supported", "[conformance][memops]") {
  REQUIRE_MEMOPS();
  PrimaryScope scope;
  HostMapped m(64);
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  store_word<uint64_t>(m.p, 8, 1);  // any wait below is satisfied
  const CUresult w32 = api().cuStreamWriteValue32_v1(s.s, m.d, 9, 0);
  const CUresult w64 = api().cuStreamWriteValue64_v1(s.s, m.d + 16, 9, 0);
  const CUresult a32 = api().cuStreamWaitValue32_v1(s.s, m.d + 8, 1, CU_STREAM_WAIT_VALUE_GEQ);
  const CUresult a64 = api().cuStreamWaitValue64_v1(s.s, m.d + 8, 1, CU_STREAM_WAIT_VALUE_GEQ);
  fact("cuStreamWriteValue32 at 8000", w32);
  fact("cuStreamWriteValue64 at 9000", w64);
  fact("cuStreamWaitValue32 at 8000", a32);
  fact("cuStreamWaitValue64 at 9000", a64);
  CU_OK(api().cuStreamSynchronize(s.s));
  fact("word written by the 8000 ABI", load_word<uint32_t>(m.p, 0));
  CU_CHECK_EQ(w32, CUDA_ERROR_NOT_SUPPORTED);
  CU_CHECK_EQ(w64, CUDA_ERROR_NOT_SUPPORTED);
  CU_CHECK_EQ(a32, CUDA_ERROR_NOT_SUPPORTED);
  CU_CHECK_EQ(a64, CUDA_ERROR_NOT_SUPPORTED);
  CHECK(load_word<uint32_t>(m.p, 0) == 0u);
}

}  // namespace
}  // namespace conformance

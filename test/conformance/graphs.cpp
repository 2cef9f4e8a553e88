// Driver conformance: Graphs
#include "helpers.hpp"

namespace conformance {
namespace {

TEST_CASE("graph replay of captured memset, memcpy and host nodes", "[conformance]") {
  REQUIRE_DRIVER_LOADED();
  PrimaryScope scope;
  constexpr size_t kN = 4096;
  DeviceBuffer a(kN * 4), b(kN * 4);
  StreamHandle cap(CU_STREAM_NON_BLOCKING), run(CU_STREAM_NON_BLOCKING);
  std::vector<uint32_t> src(kN), out(kN);
  for (size_t i = 0; i < kN; ++i) src[i] = static_cast<uint32_t>(i * 3);
  std::atomic<int> calls{0};
  std::function<void()> count = [&] { calls.fetch_add(1); };

  CU_OK(api().cuStreamBeginCapture(cap.s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU_OK(api().cuMemsetD32Async(a.p, 5, kN, cap.s));
  CU_OK(api().cuMemcpyDtoDAsync(b.p, a.p, kN * 4, cap.s));
  CU_OK(api().cuMemcpyHtoDAsync(a.p, src.data(), kN * 4, cap.s));
  CU_OK(launch(cap.s, &count));
  CUgraph g = nullptr;
  CU_OK(api().cuStreamEndCapture(cap.s, &g));
  REQUIRE(g != nullptr);
  CHECK(node_count(g) == 4);
  std::vector<CUgraphNode> nodes(4);
  size_t n = nodes.size();
  CU_OK(api().cuGraphGetNodes(g, nodes.data(), &n));
  REQUIRE(n == 4);
  std::vector<CUgraphNodeType> types;
  for (CUgraphNode node : nodes) {
    CUgraphNodeType t{};
    CU_OK(api().cuGraphNodeGetType(node, &t));
    types.push_back(t);
  }
  std::sort(types.begin(), types.end());
  std::vector<CUgraphNodeType> expected = {CU_GRAPH_NODE_TYPE_MEMCPY, CU_GRAPH_NODE_TYPE_MEMCPY,
                                           CU_GRAPH_NODE_TYPE_MEMSET, CU_GRAPH_NODE_TYPE_HOST};
  std::sort(expected.begin(), expected.end());
  CHECK(types == expected);
  CHECK(calls.load() == 0);  // nothing ran during capture

  CUDA_GRAPH_INSTANTIATE_PARAMS params{};
  params.flags = CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD;
  params.hUploadStream = run.s;
  CUgraphExec e = nullptr;
  CU_OK(api().cuGraphInstantiateWithParams(&e, g, &params));
  CHECK(params.result_out == CUDA_GRAPH_INSTANTIATE_SUCCESS);
  for (int i = 0; i < 3; ++i) {
    CU_OK(api().cuMemsetD32Async(a.p, 0, kN, run.s));
    CU_OK(api().cuMemsetD32Async(b.p, 0, kN, run.s));
    CU_OK(api().cuGraphLaunch(e, run.s));
    CU_OK(api().cuMemcpyDtoHAsync(out.data(), b.p, kN * 4, run.s));
    CU_OK(api().cuStreamSynchronize(run.s));
    CHECK(out == std::vector<uint32_t>(kN, 5));
    CU_OK(api().cuMemcpyDtoHAsync(out.data(), a.p, kN * 4, run.s));
    CU_OK(api().cuStreamSynchronize(run.s));
    CHECK(out == src);
  }
  CHECK(calls.load() == 3);
  CU_OK(api().cuGraphUpload(e, cap.s));
  CU_OK(api().cuGraphLaunch(e, cap.s));  // also on the capturing stream, now idle
  CU_OK(api().cuStreamSynchronize(cap.s));
  CHECK(calls.load() == 4);
  CU_OK(api().cuGraphExecDestroy(e));
  CU_OK(api().cuGraphDestroy(g));
}

TEST_CASE("explicit graphs: host and empty nodes in dependency order", "[conformance]") {
  REQUIRE_DRIVER_LOADED();
  PrimaryScope scope;
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  CUgraph g = nullptr;
  CU_OK(api().cuGraphCreate(&g, 0));
  Log log;
  std::function<void()> f1 = [&] { log.add(1); }, f2 = [&] { log.add(2); };
  CUDA_HOST_NODE_PARAMS p1{call_function, &f1}, p2{call_function, &f2};
  CUgraphNode n1 = nullptr, n2 = nullptr, empty = nullptr;
  CU_OK(api().cuGraphAddHostNode(&n1, g, nullptr, 0, &p1));
  CU_OK(api().cuGraphAddEmptyNode(&empty, g, &n1, 1));
  CU_OK(api().cuGraphAddHostNode(&n2, g, &empty, 1, &p2));
  CHECK(node_count(g) == 3);
  CUgraphExec e = instantiate(g);
  for (int i = 0; i < 3; ++i) CU_OK(api().cuGraphLaunch(e, s.s));
  CU_OK(api().cuStreamSynchronize(s.s));
  CHECK(log.get() == std::vector<int>{1, 2, 1, 2, 1, 2});
  CU_OK(api().cuGraphExecDestroy(e));
  CU_OK(api().cuGraphDestroy(g));
}

TEST_CASE("executable update: same topology succeeds", "[conformance]") {
  REQUIRE_DRIVER_LOADED();
  PrimaryScope scope;
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  Log log;
  std::function<void()> f1 = [&] { log.add(1); }, f2 = [&] { log.add(2); };
  auto capture_one = [&](std::function<void()>* f) {
    CU_OK(api().cuStreamBeginCapture(s.s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CU_OK(launch(s.s, f));
    CUgraph g = nullptr;
    CU_OK(api().cuStreamEndCapture(s.s, &g));
    return g;
  };
  CUgraph g1 = capture_one(&f1);
  CUgraph g2 = capture_one(&f2);
  CUgraphExec e = instantiate(g1);
  CUgraphExecUpdateResultInfo info{};
  CU_OK(api().cuGraphExecUpdate(e, g2, &info));
  CHECK(info.result == CU_GRAPH_EXEC_UPDATE_SUCCESS);
  CU_OK(api().cuGraphLaunch(e, s.s));
  CU_OK(api().cuStreamSynchronize(s.s));
  CHECK(log.get() == std::vector<int>{2});
  CU_OK(api().cuGraphExecDestroy(e));
  CU_OK(api().cuGraphDestroy(g1));
  CU_OK(api().cuGraphDestroy(g2));
}

TEST_CASE("executable update: node type and topology changes are refused",
          "[conformance][unsure]") {
  REQUIRE_DRIVER_LOADED();
  PrimaryScope scope;
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  DeviceBuffer buf(4096);
  std::function<void()> f = [] {};
  CU_OK(api().cuStreamBeginCapture(s.s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU_OK(launch(s.s, &f));
  CUgraph host = nullptr;
  CU_OK(api().cuStreamEndCapture(s.s, &host));
  CU_OK(api().cuStreamBeginCapture(s.s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU_OK(api().cuMemsetD32Async(buf.p, 1, 1024, s.s));
  CUgraph memset = nullptr;
  CU_OK(api().cuStreamEndCapture(s.s, &memset));
  CU_OK(api().cuStreamBeginCapture(s.s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU_OK(launch(s.s, &f));
  CU_OK(launch(s.s, &f));
  CUgraph two = nullptr;
  CU_OK(api().cuStreamEndCapture(s.s, &two));

  CUgraphExec e = instantiate(host);
  CUgraphExecUpdateResultInfo info{};
  CU_CHECK_EQ(api().cuGraphExecUpdate(e, memset, &info), CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
  CHECK(info.result == CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED);
  CHECK(info.errorNode != nullptr);
  info = {};
  CU_CHECK_EQ(api().cuGraphExecUpdate(e, two, &info), CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
  CHECK(info.result == CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED);
  CU_OK(api().cuGraphExecDestroy(e));
  for (CUgraph g : {host, memset, two}) CU_OK(api().cuGraphDestroy(g));
}

TEST_CASE("graph DOT output", "[conformance]") {
  REQUIRE_DRIVER_LOADED();
  PrimaryScope scope;
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  DeviceBuffer buf(4096);
  std::function<void()> f = [] {};
  CU_OK(api().cuStreamBeginCapture(s.s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU_OK(launch(s.s, &f));
  CU_OK(api().cuMemsetD32Async(buf.p, 1, 1024, s.s));
  CUgraph g = nullptr;
  CU_OK(api().cuStreamEndCapture(s.s, &g));
  char tmpl[] = "/tmp/custream-dot-XXXXXX";
  const int fd = mkstemp(tmpl);
  REQUIRE(fd >= 0);
  close(fd);
  auto read = [&](unsigned flags) {
    CU_OK(api().cuGraphDebugDotPrint(g, tmpl, flags));
    std::ifstream in(tmpl);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  const std::string plain = read(0);
  const std::string verbose = read(CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE);
  std::remove(tmpl);
  CHECK(plain.rfind("digraph", 0) == 0);
  CHECK(verbose.rfind("digraph", 0) == 0);
  CHECK(plain != verbose);
  CHECK(plain.find("->") != std::string::npos);
  CU_OK(api().cuGraphDestroy(g));
}

TEST_CASE("user object: destructor once, after graph and executable are gone", "[conformance]") {
  REQUIRE_DRIVER_LOADED();
  PrimaryScope scope;
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  std::atomic<int> destroyed{0};
  Log log;
  const auto me = std::this_thread::get_id();
  std::function<void()> f = [&] { log.add(1); };
  CU_OK(api().cuStreamBeginCapture(s.s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU_OK(launch(s.s, &f));
  CUstreamCaptureStatus st{};
  CUgraph capture_graph = nullptr;
  CU_OK(api().cuStreamGetCaptureInfo_v2(s.s, &st, nullptr, &capture_graph, nullptr, nullptr));
  CUuserObject obj = nullptr;
  CU_OK(api().cuUserObjectCreate(&obj, new Payload{&destroyed, &log}, destroy_payload, 1,
                                 CU_USER_OBJECT_NO_DESTRUCTOR_SYNC));
  CU_OK(api().cuGraphRetainUserObject(capture_graph, obj, 1, CU_GRAPH_USER_OBJECT_MOVE));
  CUgraph g = nullptr;
  CU_OK(api().cuStreamEndCapture(s.s, &g));
  CUgraphExec e = instantiate(g);
  CU_OK(api().cuGraphDestroy(g));
  for (int i = 0; i < 4; ++i) CU_OK(api().cuGraphLaunch(e, s.s));
  CU_OK(api().cuStreamSynchronize(s.s));
  std::this_thread::sleep_for(50ms);
  CHECK(destroyed.load() == 0);  // the executable holds its own reference
  CU_OK(api().cuGraphExecDestroy(e));
  CHECK(wait_until([&] { return destroyed.load() == 1; }));
  std::this_thread::sleep_for(100ms);
  CHECK(destroyed.load() == 1);
  CHECK(log.get() == std::vector<int>{1, 1, 1, 1, -1});
  CHECK(log.threads.back() != me);
}

TEST_CASE("end of a global capture from another thread: wrong thread, and the capture is over",
          "[conformance]") {
  REQUIRE_DRIVER_LOADED();
  PrimaryScope scope;
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  std::atomic<int> destroyed{0};
  Log log;
  capture_with_payload(s.s, &destroyed, &log);
  CUresult end = CUDA_SUCCESS;
  CUgraph g = nullptr;
  std::thread([&] { end = api().cuStreamEndCapture(s.s, &g); }).join();
  CHECK(end == CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD);
  CHECK(g == nullptr);
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  CU_OK(api().cuStreamIsCapturing(s.s, &st));
  CHECK(st == CU_STREAM_CAPTURE_STATUS_NONE);  // measured on the H200: over, not still running
  CHECK(wait_until([&] { return destroyed.load() == 1; }));  // the graph was discarded
  CHECK(api().cuStreamEndCapture(s.s, &g) == CUDA_ERROR_ILLEGAL_STATE);
}

TEST_CASE("destroying a stream while it captures discards the capture and its user objects",
          "[conformance]") {
  REQUIRE_DRIVER_LOADED();
  PrimaryScope scope;
  std::atomic<int> destroyed{0};
  Log log;
  CUstream s = nullptr;
  CU_OK(api().cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  capture_with_payload(s, &destroyed, &log);
  CU_OK(api().cuStreamDestroy(s));
  CHECK(wait_until([&] { return destroyed.load() == 1; }));
  std::this_thread::sleep_for(50ms);
  CHECK(destroyed.load() == 1);
}

TEST_CASE(
    "executable update: the executable takes the newer graph's user objects and drops its "
    "old ones once launches before the update are done",
    "[conformance]") {
  REQUIRE_DRIVER_LOADED();
  PrimaryScope scope;
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  std::atomic<int> gone1{0}, gone2{0}, gone3{0};
  Log log;
  std::atomic<bool> open{false};
  std::function<void()> gate = [&] {
    while (!open.load()) std::this_thread::sleep_for(1ms);
  };
  std::function<void()> f1 = [&] { log.add(1); }, f2 = [&] { log.add(2); },
                        f3 = [&] { log.add(3); };
  CUgraph g1 = host_graph_with_payload(&f1, &gone1, &log);
  CUgraph g2 = host_graph_with_payload(&f2, &gone2, &log);
  CUgraphExec e = instantiate(g1);
  CUgraphExecUpdateResultInfo info{};
  CU_OK(api().cuGraphExecUpdate(e, g2, &info));
  CU_OK(api().cuGraphDestroy(g2));  // the executable holds its own references to g2's objects
  CU_OK(api().cuGraphDestroy(g1));  // and none of g1's any more
  CHECK(wait_until([&] { return gone1.load() == 1; }));
  std::this_thread::sleep_for(50ms);
  CHECK(gone2.load() == 0);

  CU_OK(launch(s.s, &gate));
  CU_OK(api().cuGraphLaunch(e, s.s));  // pending behind the gate: will run f2
  CUgraph g3 = host_graph_with_payload(&f3, &gone3, &log);
  info = {};
  CU_OK(api().cuGraphExecUpdate(e, g3, &info));
  CU_OK(api().cuGraphDestroy(g3));
  std::this_thread::sleep_for(100ms);
  CHECK(gone2.load() == 0);  // the pending launch still holds g2's objects
  open = true;
  CU_OK(api().cuStreamSynchronize(s.s));
  CHECK(wait_until([&] { return gone2.load() == 1; }));
  CHECK(gone3.load() == 0);
  CU_OK(api().cuGraphLaunch(e, s.s));
  CU_OK(api().cuStreamSynchronize(s.s));
  CU_OK(api().cuGraphExecDestroy(e));
  CHECK(wait_until([&] { return gone3.load() == 1; }));
  std::this_thread::sleep_for(50ms);
  CHECK(gone1.load() == 1);
  CHECK(gone2.load() == 1);
  CHECK(gone3.load() == 1);
  CHECK(log.get() == std::vector<int>{-1, 2, -1, 3, -1});
}

TEST_CASE("a graph launch on a capturing stream is refused and invalidates the capture",
          "[conformance]") {
  REQUIRE_DRIVER_LOADED();
  PrimaryScope scope;
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  std::atomic<int> gone{0};
  Log log;
  std::function<void()> f = [&] { log.add(1); };
  CUgraph g = host_graph_with_payload(&f, &gone, &log);
  CUgraphExec e = instantiate(g);
  CU_OK(api().cuStreamBeginCapture(s.s, CU_STREAM_CAPTURE_MODE_RELAXED));
  // Measured on the H200 (driver 580): no child-graph node, the capture is invalidated.
  CU_CHECK_EQ(api().cuGraphLaunch(e, s.s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CUstreamCaptureStatus st{};
  CU_OK(api().cuStreamIsCapturing(s.s, &st));
  CHECK(st == CU_STREAM_CAPTURE_STATUS_INVALIDATED);
  CUgraph outer = nullptr;
  CU_CHECK_EQ(api().cuStreamEndCapture(s.s, &outer), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  CHECK(outer == nullptr);
  // The executable is untouched: it still launches, and holds its payload.
  CU_OK(api().cuGraphLaunch(e, s.s));
  CU_OK(api().cuStreamSynchronize(s.s));
  CU_OK(api().cuGraphDestroy(g));
  std::this_thread::sleep_for(50ms);
  CHECK(gone.load() == 0);
  CU_OK(api().cuGraphExecDestroy(e));
  CHECK(wait_until([&] { return gone.load() == 1; }));
  CHECK(log.get() == std::vector<int>{1, -1});
}

TEST_CASE(
    "a created context: current once made, its own streams and events; another context's "
    "event cannot be recorded on its stream but can be waited on",
    "[conformance]") {
  REQUIRE_DRIVER_LOADED();
  PrimaryScope scope;
  CUcontext primary = nullptr, created = nullptr, now = nullptr;
  CU_OK(api().cuCtxGetCurrent(&primary));
  REQUIRE(primary != nullptr);
  CU_OK(api().cuCtxCreate(&created, 0, 0));
  CU_OK(api().cuCtxGetCurrent(&now));
  CHECK(now == created);  // pushed onto the thread's stack
  CHECK(created != primary);
  CUstream in_created = nullptr;
  CU_OK(api().cuStreamCreate(&in_created, CU_STREAM_NON_BLOCKING));
  CUevent created_event = nullptr;
  CU_OK(api().cuEventCreate(&created_event, CU_EVENT_DISABLE_TIMING));
  CUcontext popped = nullptr;
  CU_OK(api().cuCtxPopCurrent(&popped));
  CHECK(popped == created);
  CU_OK(api().cuCtxGetCurrent(&now));
  CHECK(now == primary);
  CUcontext of_stream = nullptr;
  CU_OK(api().cuStreamGetCtx(in_created, &of_stream));
  CHECK(of_stream == created);
  CUdevice device = -1;
  CU_OK(api().cuCtxGetDevice_v2(&device, created));
  CHECK(device == 0);
  {
    StreamHandle in_primary(CU_STREAM_NON_BLOCKING);
    EventHandle primary_event;
    // Recorded across contexts: refused. Waited on across contexts: allowed.
    CU_CHECK_EQ(api().cuEventRecord(primary_event.e, in_created), CUDA_ERROR_INVALID_HANDLE);
    CU_CHECK_EQ(api().cuEventRecord(created_event, in_primary.s), CUDA_ERROR_INVALID_HANDLE);
    CU_OK(api().cuEventRecord(created_event, in_created));
    CU_OK(api().cuStreamWaitEvent(in_primary.s, created_event, 0));
    CU_OK(api().cuEventRecord(primary_event.e, in_primary.s));
    CU_OK(api().cuStreamWaitEvent(in_created, primary_event.e, 0));
    CU_OK(api().cuStreamSynchronize(in_created));
    CU_OK(api().cuStreamSynchronize(in_primary.s));
    CU_OK(api().cuEventQuery(created_event));
  }
  CU_OK(api().cuEventDestroy(created_event));
  CU_OK(api().cuStreamDestroy(in_created));
  CU_OK(api().cuCtxDestroy(created));
  CU_OK(api().cuCtxGetCurrent(&now));
  CHECK(now == primary);
  // Destroying the current context pops it: the one below becomes current again.
  CUcontext second = nullptr;
  CU_OK(api().cuCtxCreate(&second, 0, 0));
  CU_OK(api().cuCtxDestroy(second));
  CU_OK(api().cuCtxGetCurrent(&now));
  CHECK(now == primary);
}

TEST_CASE("an event cannot be recorded on another device's stream; it can be waited on",
          "[conformance]") {
  REQUIRE_DRIVER_LOADED();
  int n = 0;
  CU_OK(api().cuDeviceGetCount(&n));
  if (n < 2) CUSTREAM_SKIP("needs 2 devices");
  // Device 1's primary context stays retained for the whole case: its last release would
  // destroy it and e1 with it (the H200 then answers CUDA_ERROR_CONTEXT_IS_DESTROYED).
  PrimaryScope one(1);
  CUevent e1 = nullptr;
  CU_OK(api().cuEventCreate(&e1, CU_EVENT_DISABLE_TIMING));
  {
    PrimaryScope zero(0);
    StreamHandle s0(CU_STREAM_NON_BLOCKING);
    CU_CHECK_EQ(api().cuEventRecord(e1, s0.s), CUDA_ERROR_INVALID_HANDLE);
    CU_CHECK_EQ(api().cuEventRecord(e1, nullptr), CUDA_ERROR_INVALID_HANDLE);  // device 0's
    CU_CHECK_EQ(api().cuStreamWaitEvent(s0.s, e1, 0), CUDA_SUCCESS);
    CU_OK(api().cuStreamSynchronize(s0.s));
  }
  CU_OK(api().cuEventRecord(e1, nullptr));  // device 1's null stream: its own context
  CU_OK(api().cuEventSynchronize(e1));
  CU_OK(api().cuEventDestroy(e1));
}

TEST_CASE("destroying graph and executable while a launch is in flight", "[conformance]") {
  REQUIRE_DRIVER_LOADED();
  PrimaryScope scope;
  StreamHandle s(CU_STREAM_NON_BLOCKING);
  std::atomic<int> destroyed{0};
  Log log;
  std::function<void()> slow = [&] {
    std::this_thread::sleep_for(200ms);
    log.add(1);
  };
  CUgraph g = nullptr;
  CU_OK(api().cuGraphCreate(&g, 0));
  CUDA_HOST_NODE_PARAMS p{call_function, &slow};
  CUgraphNode node = nullptr;
  CU_OK(api().cuGraphAddHostNode(&node, g, nullptr, 0, &p));
  CUuserObject obj = nullptr;
  CU_OK(api().cuUserObjectCreate(&obj, new Payload{&destroyed, &log}, destroy_payload, 1,
                                 CU_USER_OBJECT_NO_DESTRUCTOR_SYNC));
  CU_OK(api().cuGraphRetainUserObject(g, obj, 1, CU_GRAPH_USER_OBJECT_MOVE));
  CUgraphExec e = instantiate(g);
  CU_OK(api().cuGraphLaunch(e, s.s));
  CU_OK(api().cuGraphExecDestroy(e));
  CU_OK(api().cuGraphDestroy(g));
  CU_OK(api().cuStreamSynchronize(s.s));
  CHECK(wait_until([&] { return destroyed.load() == 1; }));
  CHECK(log.get() == std::vector<int>{1, -1});
}

}  // namespace
}  // namespace conformance

// Marking the stream for a registration, out of line: the rare cases of mark() (the first
// word registration of a device, a created context's stream, a special handle), whether a
// device serves written words, and the refusals and failures. Contract: marks.hpp.
// Design: docs/design/completions.md, invariants 1, 3 and 9.
#include "marks.hpp"

#include <optional>
#include <string>

#include "custream/context_scope.hpp"
#include "driver.hpp"

namespace custream::detail {

std::array<std::atomic<MemoryWrites>, kMaxProbes> g_memory_writes{};

namespace {

[[noreturn, gnu::cold]] void refuse_capture(const StreamRef& s, CUstreamCaptureStatus status) {
  throw_stream_error(
      CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "custream::Completions", s,
      std::string(status == CU_STREAM_CAPTURE_STATUS_ACTIVE ? "the stream is capturing"
                                                            : "the stream's capture was "
                                                              "invalidated") +
          ": a completion is of work launched now, not of a graph's nodes; register after "
          "graph.launch(stream), or put a host function (launch_host_func) in the graph for a "
          "notification inside it (custream refused it without calling the driver)");
}

// A special handle is the current context's stream: with none current, the registration is
// refused (the driver's special-handle retry would put it on the current device's primary
// context).
[[gnu::cold]] void need_current_context(const StreamRef& s) {
  CUcontext current = nullptr;
  if (const CUresult r = try_call<&DriverApi::cuCtxGetCurrent>(&current); r != CUDA_SUCCESS) {
    throw_stream_error(r, EntryInfo<&DriverApi::cuCtxGetCurrent>::name, s,
                       "registering a completion");
  }
  if (current != nullptr) return;
  throw_stream_error(CUDA_ERROR_INVALID_CONTEXT, "custream::Completions", s,
                     "no context is current in this thread, and a special handle is the "
                     "current context's stream: make one current (DeviceScope, ContextScope) "
                     "or register on a stream of a device (custream refused it once the "
                     "driver said none is current)");
}

// The written word of a registration on `s` (a primary context's stream of a device that
// serves words): the device's probe first, made by its first word registration, where a
// failure can be thrown (invariant 9).
Mark write_word(const Loaded& l, const StreamRef& s, int device, Probes& probes) {
  if (probes[static_cast<std::size_t>(device)].load(std::memory_order_acquire) == nullptr) {
    make_probe(l, device, probes);
  }
  Mark m;
  m.word = take_word(l, device);
  const CUresult r = l.api.cuStreamWriteValue64(  // raw: as mark()'s, errors named below
      s.handle(), reinterpret_cast<CUdeviceptr>(m.word), 1, 0u);
  if (r != CUDA_SUCCESS) write_failed(s, m, r);
  return m;
}

}  // namespace

bool memory_writes_supported(const Loaded& l, int device) {
  if (device < 0 || device >= l.device_count || static_cast<std::size_t>(device) >= kMaxProbes) {
    return false;
  }
  std::atomic<MemoryWrites>& known = g_memory_writes[static_cast<std::size_t>(device)];
  MemoryWrites k = known.load(std::memory_order_relaxed);
  if (k == MemoryWrites::unasked) {
    const auto attribute = [&](CUdevice_attribute a) {
      int v = 0;
      call<&DriverApi::cuDeviceGetAttribute>(device_subject(device), &v, a,
                                             l.devices[static_cast<std::size_t>(device)].device);
      return v != 0;
    };
    k = l.api.cuStreamWriteValue64 != nullptr && l.api.cuMemHostAlloc != nullptr &&
                l.api.cuMemHostGetDevicePointer != nullptr && l.api.cuMemFreeHost != nullptr &&
                attribute(CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS) &&
                attribute(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING)
            ? MemoryWrites::yes
            : MemoryWrites::no;
    known.store(k, std::memory_order_relaxed);
  }
  return k == MemoryWrites::yes;
}

Mark mark_any(const StreamRef& s, bool memory, Probes& probes) {
  const Loaded& l = loaded();
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  const bool special = s.is_special();
  if (special) need_current_context(s);
  CUresult r = l.api.cuStreamIsCapturing(s.handle(), &status);  // raw: named below
  if (r != CUDA_SUCCESS) throw_stream_error(r, EntryInfo<&DriverApi::cuStreamIsCapturing>::name, s);
  if (status != CU_STREAM_CAPTURE_STATUS_NONE) refuse_capture(s, status);
  const int device = special ? -1 : s.device_id();
  Mark m;
  // The word (invariant 9), or the event: a primary-context one from the pool (green-context
  // streams use them too), else one made in the stream's context and destroyed after
  // (invariant 3).
  if (!special && s.context_kind() != ContextKind::created) {
    // Words only for primary contexts: the probe is a primary-context event, and whether a
    // green context's failure shows there was not measured (invariant 9).
    if (memory && s.context_kind() == ContextKind::primary && memory_writes_supported(l, device)) {
      return write_word(l, s, device, probes);
    }
    m.event = take_event(l, device);
    m.pooled = true;
  } else {
    std::optional<ContextScope> own;
    if (!special) own.emplace(s.context());
    call<&DriverApi::cuEventCreate>({Subject::What::stream, s.handle(), device}, &m.event,
                                    static_cast<unsigned>(CU_EVENT_DISABLE_TIMING));
  }
  r = l.api.cuEventRecord(m.event, s.handle());  // raw: as mark()'s, errors named below
  if (r != CUDA_SUCCESS) record_failed(s, m, r);
  return m;
}

void write_failed(const StreamRef& s, const Mark& m, CUresult r) {
  release_word(m.word);  // nothing was enqueued: it stays 0
  throw_stream_error(r, EntryInfo<&DriverApi::cuStreamWriteValue64>::name, s,
                     "registering a completion");
}

void record_failed(const StreamRef& s, const Mark& m, CUresult r) {
  release_event(m.event, m.pooled, s.is_special() ? -1 : s.device_id());
  throw_stream_error(r, EntryInfo<&DriverApi::cuEventRecord>::name, s, "registering a completion");
}

void refuse_mark(const StreamRef& s, CUresult r, CUstreamCaptureStatus status) {
  if (r != CUDA_SUCCESS) throw_stream_error(r, EntryInfo<&DriverApi::cuStreamIsCapturing>::name, s);
  refuse_capture(s, status);
}

}  // namespace custream::detail

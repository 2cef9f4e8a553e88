// Stream memory operations: cuStreamWriteValue32/64 and cuStreamWaitValue32/64 (invariant 12).
// They are stream work like a memset: executed by the stream's worker in stream order, or
// captured as a graph node (CU_GRAPH_NODE_TYPE_BATCH_MEM_OP, as the H200 captures them).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <thread>
#include <type_traits>

#include "emu.hpp"

namespace emu {
namespace {

constexpr unsigned kWaitConditions = CU_STREAM_WAIT_VALUE_GEQ | CU_STREAM_WAIT_VALUE_EQ |
                                     CU_STREAM_WAIT_VALUE_AND | CU_STREAM_WAIT_VALUE_NOR;

bool wide(CUstreamBatchMemOpType op) {
  return op == CU_STREAM_MEM_OP_WAIT_VALUE_64 || op == CU_STREAM_MEM_OP_WRITE_VALUE_64;
}

// The wait condition of cuda.h's CUstreamWaitValue_flags on the word's current value, in the
// operation's width (GEQ is cyclic: the difference read as a signed number).
template <class U>
bool condition_holds(U word, U value, unsigned flags) {
  using S = std::make_signed_t<U>;
  switch (flags & kWaitConditions) {
    case CU_STREAM_WAIT_VALUE_EQ:
      return word == value;
    case CU_STREAM_WAIT_VALUE_AND:
      return (word & value) != 0;
    case CU_STREAM_WAIT_VALUE_NOR:
      return static_cast<U>(~(word | value)) != 0;
    default:  // CU_STREAM_WAIT_VALUE_GEQ
      return static_cast<S>(static_cast<U>(word - value)) >= 0;
  }
}

template <class U>
void wait_for(const Work& w) {
  const auto* word = reinterpret_cast<const U*>(w.dst);
  const auto value = static_cast<U>(w.memop_value);
  // A few yields first (another stream's write usually lands soon), then sleeps that grow to
  // 200 us, so that a word the host writes much later costs no CPU. No lock is held: the
  // writer may be a host function, another stream or any thread.
  auto pause = std::chrono::microseconds(1);
  for (int spins = 0;
       !condition_holds(__atomic_load_n(word, __ATOMIC_ACQUIRE), value, w.memop_flags);) {
    if (spins < 64) {
      ++spins;
      std::this_thread::yield();
      continue;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(200));
  }
}

// Checks common to every operation, then enqueues it (an Op, or a node while capturing).
CUresult enqueue_mem_op(CUstream h, CUdeviceptr addr, CUstreamBatchMemOpType op, cuuint64_t value,
                        unsigned flags) {
  // The word is accessed atomically: it must be naturally aligned.
  if (!addr || addr % (wide(op) ? 8 : 4)) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(state().mu);
  Stream* st = nullptr;
  if (CUresult r = resolve_stream(h, &st)) return r;
  Work w;
  w.type = CU_GRAPH_NODE_TYPE_BATCH_MEM_OP;
  w.dst = addr;
  w.memop = op;
  w.memop_value = value;
  w.memop_flags = flags;
  return enqueue(st, std::move(w));
}

// cuda.h: CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER "is not supported in the v2 API".
CUresult check_write_flags(unsigned flags) {
  return flags == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

// One of the four conditions; CU_STREAM_WAIT_VALUE_FLUSH needs remote-write flushing, which the
// device does not have (CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES is 0, as on the H200).
CUresult check_wait_flags(unsigned flags) {
  if (flags & ~(kWaitConditions | CU_STREAM_WAIT_VALUE_FLUSH)) return CUDA_ERROR_INVALID_VALUE;
  if (flags & CU_STREAM_WAIT_VALUE_FLUSH) return CUDA_ERROR_NOT_SUPPORTED;
  return CUDA_SUCCESS;
}

CUresult write_value32(CUstream h, CUdeviceptr addr, cuuint32_t value, unsigned int flags) {
  EMU_ENTER("cuStreamWriteValue32");
  if (CUresult r = check_write_flags(flags)) return r;
  return enqueue_mem_op(h, addr, CU_STREAM_MEM_OP_WRITE_VALUE_32, value, flags);
}

CUresult write_value64(CUstream h, CUdeviceptr addr, cuuint64_t value, unsigned int flags) {
  EMU_ENTER("cuStreamWriteValue64");
  if (CUresult r = check_write_flags(flags)) return r;
  return enqueue_mem_op(h, addr, CU_STREAM_MEM_OP_WRITE_VALUE_64, value, flags);
}

CUresult wait_value32(CUstream h, CUdeviceptr addr, cuuint32_t value, unsigned int flags) {
  EMU_ENTER("cuStreamWaitValue32");
  if (CUresult r = check_wait_flags(flags)) return r;
  return enqueue_mem_op(h, addr, CU_STREAM_MEM_OP_WAIT_VALUE_32, value, flags);
}

CUresult wait_value64(CUstream h, CUdeviceptr addr, cuuint64_t value, unsigned int flags) {
  EMU_ENTER("cuStreamWaitValue64");
  if (CUresult r = check_wait_flags(flags)) return r;
  return enqueue_mem_op(h, addr, CU_STREAM_MEM_OP_WAIT_VALUE_64, value, flags);
}

// The CUDA 8.0 / 9.0 ABIs (the "v1" memory operations): a driver serves them only where
// CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1 is 1; on the H200 (0) all four answer this.
CUresult write_value32_v1(CUstream, CUdeviceptr, cuuint32_t, unsigned int) {
  EMU_ENTER("cuStreamWriteValue32");
  return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult write_value64_v1(CUstream, CUdeviceptr, cuuint64_t, unsigned int) {
  EMU_ENTER("cuStreamWriteValue64");
  return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult wait_value32_v1(CUstream, CUdeviceptr, cuuint32_t, unsigned int) {
  EMU_ENTER("cuStreamWaitValue32");
  return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult wait_value64_v1(CUstream, CUdeviceptr, cuuint64_t, unsigned int) {
  EMU_ENTER("cuStreamWaitValue64");
  return CUDA_ERROR_NOT_SUPPORTED;
}

}  // namespace

void run_mem_op(const Work& w) {
  switch (w.memop) {
    case CU_STREAM_MEM_OP_WRITE_VALUE_32:
      // Release: the stream's earlier work happened on this worker (or was waited for by it),
      // so a thread that acquire-loads the value sees that work's results too.
      __atomic_store_n(reinterpret_cast<uint32_t*>(w.dst), static_cast<uint32_t>(w.memop_value),
                       __ATOMIC_RELEASE);
      break;
    case CU_STREAM_MEM_OP_WRITE_VALUE_64:
      __atomic_store_n(reinterpret_cast<uint64_t*>(w.dst), static_cast<uint64_t>(w.memop_value),
                       __ATOMIC_RELEASE);
      break;
    case CU_STREAM_MEM_OP_WAIT_VALUE_32:
      wait_for<uint32_t>(w);
      break;
    case CU_STREAM_MEM_OP_WAIT_VALUE_64:
      wait_for<uint64_t>(w);
      break;
    default:
      break;
  }
}

void register_memop_entries(std::vector<Entry>& out) {
  out.insert(out.end(), {
                            EMU_ENTRY(cuStreamWriteValue32, 8000, write_value32_v1),
                            EMU_ENTRY(cuStreamWriteValue32, 11070, write_value32),
                            EMU_ENTRY(cuStreamWriteValue64, 9000, write_value64_v1),
                            EMU_ENTRY(cuStreamWriteValue64, 11070, write_value64),
                            EMU_ENTRY(cuStreamWaitValue32, 8000, wait_value32_v1),
                            EMU_ENTRY(cuStreamWaitValue32, 11070, wait_value32),
                            EMU_ENTRY(cuStreamWaitValue64, 9000, wait_value64_v1),
                            EMU_ENTRY(cuStreamWaitValue64, 11070, wait_value64),
                        });
}

}  // namespace emu

// custream's set-condition kernel (docs/design/graphs.md, "Conditional nodes", C4):
// sets a conditional handle to the 32-bit value at `value`. Built at build time with the
// toolkit's nvcc (-rdc, device-linked with libcudadevrt) into a fatbin of cubins that
// libcustream embeds (embed.py); lib/graph_builder/set_condition.cpp loads it on first use.
// The emulator runs a CPU twin registered under the same entry name.
#include <cuda_runtime.h>

extern "C" __global__ void custream_set_condition(cudaGraphConditionalHandle handle,
                                                  const unsigned* value) {
  cudaGraphSetConditional(handle, *value);
}

// custream::Kernel: launching a function of a loaded Module. Design: docs/design/modules.md.
#include "custream/kernel.hpp"

#include <string>

#include "custream/context_scope.hpp"
#include "driver.hpp"
#include "module.hpp"

namespace custream {

void Kernel::launch_raw(StreamRef stream, Dim3 grid, Dim3 block, std::size_t shared_bytes,
                        void** params) const {
  const CUresult r = detail::api().cuLaunchKernel(
      function_, grid.x, grid.y, grid.z, block.x, block.y, block.z,
      static_cast<unsigned>(shared_bytes), stream.handle(), params, nullptr);
  if (r != CUDA_SUCCESS) launch_failed(r, stream, grid, block, shared_bytes, params);
}

void Kernel::launch_failed(CUresult r, StreamRef stream, Dim3 grid, Dim3 block,
                           std::size_t shared_bytes, void** params) const {
  if (r == CUDA_ERROR_INVALID_CONTEXT && module_.owner_) {  // invariant 4
    ContextScope scope(module_.owner_.get()->context);
    r = detail::api().cuLaunchKernel(function_, grid.x, grid.y, grid.z, block.x, block.y, block.z,
                                     static_cast<unsigned>(shared_bytes), stream.handle(), params,
                                     nullptr);
    if (r == CUDA_SUCCESS) return;
  }
  auto dims = [](Dim3 d) {
    return std::to_string(d.x) + "x" + std::to_string(d.y) + "x" + std::to_string(d.z);
  };
  detail::throw_stream_error(r, "cuLaunchKernel", stream,
                             "kernel " + detail::pointer_text(function_) + ", grid " + dims(grid) +
                                 ", block " + dims(block) + ", " + std::to_string(shared_bytes) +
                                 " bytes of shared memory");
}

}  // namespace custream

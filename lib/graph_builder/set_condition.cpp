// The set-condition node: GraphBuilder::add_set_condition, a kernel node running custream's own
// custream_set_condition (lib/graph_builder/device/set_condition.cu) that sets a conditional
// handle from a 32-bit value in device memory. Design: docs/design/graphs.md, "Conditional
// nodes", invariants 4 and 5.
//
// Contract: the image is loaded once per process (set_condition_kernel), never unloaded; the
// node is an ordinary kernel node of the builder (add_kernel with a LibraryKernel), so a body
// accepts it and the builder holds its library like any other. The handle must belong to this
// builder's graph or one of its bodies (conditional.cpp, check_condition_of).
#include "error.hpp"
#include "set_condition.hpp"

#include <algorithm>
#include <mutex>
#include <string>
#include <vector>

#include "conditional.hpp"
#include "custream/error.hpp"
#include "custream/graph_builder.hpp"
#include "custream/library.hpp"

namespace custream {
namespace detail {

namespace {
// The entry and its parameters alone, for a driver that reads no cubin (see below).
constexpr const char* kSetConditionStub = R"(
.version 7.0
.target sm_70
.address_size 64
.visible .entry custream_set_condition(.param .u64 handle, .param .u64 value)
{
  ret;
}
)";
}  // namespace

bool have_set_condition_kernel() noexcept { return kSetConditionImageBytes != 0; }

const LibraryKernel& set_condition_kernel(const char* call) {
  if (!have_set_condition_kernel()) {
    detail::throw_error(CUDA_ERROR_NOT_SUPPORTED, call, "custream's set-condition kernel",
                "custream refused it without calling the driver: this libcustream was built "
                "without nvcc, so it carries no custream_set_condition kernel (it needs "
                "device-runtime code, cudaGraphSetConditional, compiled and linked at build "
                "time). Rebuild custream with the CUDA toolkit present (-Dtoolkit_root=/path/"
                "to/cuda), or set the condition from your own kernel with "
                "cudaGraphSetConditional (docs/guide.md, \"Graphs as programs\")");
  }
  static std::mutex* mutex = new std::mutex;  // leaked: no static destructor
  static LibraryKernel* kernel = nullptr;     // leaked: loaded for the life of the process
  std::lock_guard<std::mutex> lock(*mutex);
  if (kernel == nullptr) {
    Library library =
        Library::from_image(kSetConditionImage, kSetConditionImageBytes, LibraryCache::bypass);
    const std::vector<std::string> names = library.kernel_names();
    if (std::find(names.begin(), names.end(), kSetConditionEntry) == names.end()) {
      // A driver that lists no kernel of the fatbin reads no cubin: custream's CPU emulator,
      // whose built-in twin runs by entry name and needs only the parameters. A real driver
      // always lists the entry (invariant 5), so it never gets here.
      library = Library::from_ptx(kSetConditionStub, LibraryCache::bypass);
    }
    kernel = new LibraryKernel(std::move(library).kernel(kSetConditionEntry));
  }
  return *kernel;
}

}  // namespace detail

GraphNode GraphBuilder::add_set_condition(GraphDependencies after, ConditionalHandle condition,
                                          CUdeviceptr value) {
  static constexpr const char* call = "custream::GraphBuilder::add_set_condition";
  detail::check_condition_of(*this, condition, call, /*same_graph=*/false);
  const LibraryKernel& kernel = detail::set_condition_kernel(call);
  const CUgraphConditionalHandle handle = condition.handle();
  return add_kernel(after, kernel, LaunchConfig(Dim3(1), Dim3(1)), handle, value);
}

}  // namespace custream

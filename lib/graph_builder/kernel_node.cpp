// GraphBuilder's kernel nodes, of a Module's Kernel or a Library's kernel: the argument check
// and the LaunchConfig attributes of a launch (lib/launch.cpp, launch_attributes; the same code
// serves both), then one cuGraphAddNode, and the attributes the node needs
// (cuGraphKernelNodeSetAttribute, only for a configuration that has any). Contract:
// include/custream/graph_builder.hpp; design: docs/design/graphs.md, "Builders" (B3, B9).
#include <algorithm>
#include <string>

#include "add.hpp"
#include "conditional.hpp"
#include "context.hpp"
#include "custream/graph_builder.hpp"
#include "custream/kernel.hpp"
#include "custream/library_kernel.hpp"
#include "driver.hpp"
#include "launch.hpp"
#include "library.hpp"
#include "module.hpp"
#include "node_params.hpp"
#include "owner.hpp"
#include "refuse.hpp"

namespace custream {

using detail::DriverApi;

namespace {

constexpr const char* kCall = "custream::GraphBuilder::add_kernel";

// Refuses `config` for a kernel node: more shared memory than 32 bits say, or programmatic
// dependent launch (a graph expresses it as an edge).
[[noreturn, gnu::cold]] void refuse_config(const detail::LaunchSite& site, CUfunction function,
                                           const LaunchConfig& config, const std::string& name) {
  const std::string what =
      name.empty() ? "kernel " + detail::pointer_text(function) : "kernel \"" + name + "\"";
  if (config.shared_bytes > detail::kMaxSharedBytes) {
    site.refuse(CUDA_ERROR_INVALID_VALUE,
                what + ": " + std::to_string(config.shared_bytes) +
                    " bytes of dynamic shared memory exceed the driver's 32 bits (custream "
                    "refused it without calling the driver; the builder is unchanged)");
  }
  site.refuse(CUDA_ERROR_NOT_SUPPORTED,
              what +
                  ": programmatic dependent launch is not a kernel node attribute (a graph "
                  "expresses it as a programmatic edge); custream refused it without calling "
                  "the driver; the builder is unchanged");
}

// The kernel node of `function` with `config`, refusing what a graph expresses otherwise.
CUgraphNodeParams kernel_params(const detail::LaunchSite& site, CUfunction function,
                                const LaunchConfig& config, void** params, const std::string& name,
                                CUlaunchAttribute (&attributes)[6], unsigned* count) {
  if (config.shared_bytes > detail::kMaxSharedBytes || config.programmatic_serialization ||
      config.programmatic_event) {
    refuse_config(site, function, config, name);  // cold: no text is built otherwise
  }
  *count = detail::has_attributes(config)
               ? detail::launch_attributes(site, function, config, name, attributes)
               : 0;
  if (*count > 0) {  // a driver without it: refused before the node is added
    (void)detail::entry<&DriverApi::cuGraphKernelNodeSetAttribute>(detail::api());
  }
  CUgraphNodeParams p = detail::node_params(CU_GRAPH_NODE_TYPE_KERNEL);
  p.kernel.func = function;
  p.kernel.gridDimX = config.grid.x, p.kernel.gridDimY = config.grid.y;
  p.kernel.gridDimZ = config.grid.z;
  p.kernel.blockDimX = config.block.x, p.kernel.blockDimY = config.block.y;
  p.kernel.blockDimZ = config.block.z;
  p.kernel.sharedMemBytes = static_cast<unsigned>(config.shared_bytes);
  p.kernel.kernelParams = params;
  p.kernel.ctx = site.context();
  return p;
}

// Gives `node` its `count` (> 0) attributes, with the builder's context current as for the
// add (graphs.md B10).
void set_attributes(CUgraphNode node, CUgraph graph, CUcontext context,
                    const CUlaunchAttribute* attributes, unsigned count) {
  const detail::MakeCurrent current(context);
  for (unsigned i = 0; i < count; ++i) {
    detail::call<&DriverApi::cuGraphKernelNodeSetAttribute>(detail::graph_subject(graph), node,
                                                            attributes[i].id, &attributes[i].value);
  }
}

}  // namespace

GraphNode GraphBuilder::add_kernel_node(GraphDependencies after, const Kernel& kernel,
                                        const LaunchConfig& config, void** params,
                                        const std::size_t* sizes, std::size_t count) {
  // First: a refused dependency leaves the builder unchanged (add.hpp, inline).
  detail::check_dependencies(graph_, owner_.get(), after, kCall);
  detail::BuilderOwner& owner = *owner_.get();
  const CUcontext loaded_in = kernel.module_.context();
  if (graph_ != owner.root()) {  // a root is no body: no call on the root's adds
    detail::check_body_context(owner, graph_, loaded_in, kCall);  // conditional.hpp
  }
  if (kernel.function_ == nullptr) {
    detail::refuse_builder(CUDA_ERROR_INVALID_HANDLE, kCall, graph_,
                           "the Kernel is empty (default-constructed or moved from)");
  }
  const CUcontext context = owner.context.handle();
  if (loaded_in != context) {  // invariant B9
    detail::refuse_builder(
        CUDA_ERROR_INVALID_CONTEXT, kCall, graph_,
        "kernel " + detail::pointer_text(kernel.function_) + ": its module was loaded in context " +
            detail::pointer_text(loaded_in) + ", the builder's nodes run in " +
            owner.context.to_string() + ": load the module into the builder's context");
  }
  const detail::LaunchSite site{kCall, nullptr, graph_, context, owner.context.device_id()};
  if (detail::KernelParams* kp = kernel.params_) {  // the check of a typed launch (6)
    const auto known = kp->sizes.known.load(std::memory_order_acquire);
    if (known != detail::ParamSizes::Known::unknown &&
        !(known == detail::ParamSizes::Known::known &&
          detail::arguments_match(kp->sizes, sizes, count))) {
      detail::check_kernel_arguments(*kp, kernel.function_, context, kCall, site.subject(), sizes,
                                     count);
    }
  }
  CUlaunchAttribute attributes[6];
  unsigned n = 0;
  CUgraphNodeParams p = kernel_params(site, kernel.function_, config, params, {}, attributes, &n);
  const bool known = std::any_of(owner.modules.begin(), owner.modules.end(), [&](const Module& m) {
    return m.owner_.get() == kernel.module_.owner_.get();
  });
  if (!known) owner.modules.reserve(owner.modules.size() + 1);
  const GraphNode node = add_checked_node(after, p, GraphNodeKind::kernel, kCall);
  if (!known) owner.modules.push_back(kernel.module_);  // reserved: no throw (B3)
  if (n > 0) set_attributes(node.handle(), graph_, context, attributes, n);
  return node;
}

GraphNode GraphBuilder::add_kernel_node(GraphDependencies after, const LibraryKernel& kernel,
                                        const LaunchConfig& config, void** params,
                                        const std::size_t* sizes, std::size_t count) {
  // First: a refused dependency leaves the builder unchanged (add.hpp, inline).
  detail::check_dependencies(graph_, owner_.get(), after, kCall);
  detail::BuilderOwner& owner = *owner_.get();
  if (kernel.state_ == nullptr) {
    detail::refuse_builder(CUDA_ERROR_INVALID_HANDLE, kCall, graph_,
                           "the LibraryKernel is empty (default-constructed or moved from)");
  }
  detail::KernelState& state = *kernel.state_;
  const CUcontext context = owner.context.handle();
  const detail::LaunchSite site{kCall, nullptr, graph_, context, owner.context.device_id()};
  const CUfunction function = kernel.resolve(owner.context);  // its function in the context
  const auto known = state.params.known.load(std::memory_order_acquire);
  if (known != detail::ParamSizes::Known::unknown &&
      !(known == detail::ParamSizes::Known::known &&
        detail::arguments_match(state.params, sizes, count))) {
    detail::check_library_arguments(state, context, kCall, site.subject(), sizes, count);
  }
  CUlaunchAttribute attributes[6];
  unsigned n = 0;
  CUgraphNodeParams p = kernel_params(site, function, config, params, state.name, attributes, &n);
  owner.code.hold(kernel.library_.owner_.get());  // loaded while the graph lives (B3)
  const GraphNode node = add_checked_node(after, p, GraphNodeKind::kernel, kCall);
  if (n > 0) set_attributes(node.handle(), graph_, context, attributes, n);
  return node;
}

}  // namespace custream

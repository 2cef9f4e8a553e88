// GraphBuilder's host nodes: a callable owned by the graph through a driver user object, by
// the code that owns a captured host function's payload (lib/host_function.cpp,
// detail::give_to_graph). Contract: include/custream/graph_builder.hpp; design:
// docs/design/graphs.md, "Builders" (invariant B2).
#include <memory>
#include <string>

#include "custream/graph_builder.hpp"
#include "driver.hpp"
#include "host_function.hpp"
#include "conditional.hpp"
#include "node_params.hpp"
#include "add.hpp"
#include "owner.hpp"

namespace custream {

GraphNode GraphBuilder::add_host_task(GraphDependencies after, detail::HostTask* raw) {
  struct Free {
    void operator()(detail::HostTask* t) const noexcept { t->destroy(t); }
  };
  std::unique_ptr<detail::HostTask, Free> task(raw);  // freed here until a user object owns it
  static constexpr const char* call = "custream::GraphBuilder::add_host";
  check_add(after, call);
  detail::BuilderOwner& owner = *owner_.get();
  detail::check_body_accepts(owner, graph_, GraphNodeKind::host);  // conditional.hpp
  owner.objects.reserve(owner.objects.size() + 1);
  task->captured = true;  // replayed: its errors say "graph replay"
  // The root graph owns the payload from here on (also when adding the node fails: it is then
  // destroyed with the graph, never run), the same user object as a captured host function's.
  const detail::Attached attached = detail::give_to_graph(owner.root(), raw, true);
  if (attached.object_made) (void)task.release();
  if (attached.result != CUDA_SUCCESS) {
    detail::throw_call_error(attached.result, attached.call, detail::graph_subject(owner.root()),
                             "the host node was not added; its callable is destroyed");
  }
  owner.objects.push_back(attached.object);  // reserved: no throw
  CUgraphNodeParams p = detail::node_params(CU_GRAPH_NODE_TYPE_HOST);
  p.host.fn = &detail::run_host_task_replayable;
  p.host.userData = raw;
  return add_node(after, p, GraphNodeKind::host, call);
}

}  // namespace custream

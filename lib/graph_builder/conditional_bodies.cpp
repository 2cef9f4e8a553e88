// Conditional bodies: the registry of the body graphs custream's conditional nodes got from the
// driver, and the rules for what a body accepts (conditional.hpp). Design: docs/design/graphs.md,
// "Conditional nodes", C1-C3.
//
// Contract: a body is registered with its root graph from its conditional node's creation until
// the root's BuilderOwner forgets it (forget_bodies_of) before destroying the root. Every check
// here refuses before the driver is called, so a refused add leaves the graph as it was.
#include <algorithm>
#include <mutex>
#include <unordered_map>

#include "conditional.hpp"
#include "custream/error.hpp"
#include "custream/graph_builder.hpp"
#include "custream/stream_ref.hpp"
#include "driver.hpp"
#include "error.hpp"
#include "graph/nodes.hpp"
#include "owner.hpp"

namespace custream {
namespace detail {
namespace {

// The registered bodies (conditional.hpp), under one mutex; never destroyed.
struct Bodies {
  std::mutex mutex;
  std::unordered_map<CUgraph, BodyInfo> by_graph;
  std::unordered_map<CUgraphNode, std::vector<CUgraph>> by_node;
};
Bodies& bodies() {
  static auto* b = new Bodies;  // leaked: no static destructor
  return *b;
}

const char* body_role(const BodyInfo& b) noexcept {
  if (b.type == CU_GRAPH_COND_TYPE_IF && b.size == 2) return b.index == 0 ? " (then)" : " (else)";
  return "";
}

// The name of a node kind a body refuses (and of the others, for completeness).
const char* kind_name(GraphNodeKind kind) noexcept {
  switch (kind) {
    case GraphNodeKind::empty:
      return "empty";
    case GraphNodeKind::kernel:
      return "kernel";
    case GraphNodeKind::memset:
      return "memset";
    case GraphNodeKind::memcpy:
      return "memcpy";
    case GraphNodeKind::host:
      return "host";
    case GraphNodeKind::event_record:
      return "event_record";
    case GraphNodeKind::event_wait:
      return "event_wait";
    case GraphNodeKind::child_graph:
      return "child_graph";
    case GraphNodeKind::mem_alloc:
      return "mem_alloc";
    case GraphNodeKind::mem_free:
      return "mem_free";
    case GraphNodeKind::conditional:
      return "conditional";
  }
  return "unknown";
}

// The add_… call that makes a node of `kind`.
std::string add_call(GraphNodeKind kind) {
  switch (kind) {
    case GraphNodeKind::mem_alloc:
      return "custream::GraphBuilder::add_alloc";
    case GraphNodeKind::mem_free:
      return "custream::GraphBuilder::add_free";
    case GraphNodeKind::child_graph:
      return "custream::GraphBuilder::add_child";
    default:
      return std::string("custream::GraphBuilder::add_") + kind_name(kind);
  }
}

bool body_accepts(GraphNodeKind kind) noexcept {
  switch (kind) {
    case GraphNodeKind::host:
    case GraphNodeKind::event_record:
    case GraphNodeKind::event_wait:
    case GraphNodeKind::mem_alloc:
    case GraphNodeKind::mem_free:
      return false;
    default:
      return true;
  }
}

constexpr const char* kBodyRule =
    "a conditional body accepts only kernel, memset, memcpy, empty, child-graph and conditional "
    "nodes, also inside its child graphs (CUDA_CONDITIONAL_NODE_PARAMS; the driver adds other "
    "nodes, then fails the graph's instantiation with CUDA_ERROR_INVALID_VALUE)";

[[noreturn, gnu::cold]] void refuse_in_body(const std::string& call, const BodyInfo& body,
                                            const std::string& what) {
  detail::throw_error(CUDA_ERROR_NOT_SUPPORTED, call.c_str(), body_text(body),
                      "custream refused it without calling the driver: " + what + "; " + kBodyRule);
}

// The node kinds custream names, from a driver node type (those a body refuses and others).
const char* type_kind(CUgraphNodeType type) noexcept {
  switch (type) {
    case CU_GRAPH_NODE_TYPE_HOST:
      return "host";
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
      return "event wait";
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
      return "event record";
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
      return "memory allocation";
    case CU_GRAPH_NODE_TYPE_MEM_FREE:
      return "memory free";
    case CU_GRAPH_NODE_TYPE_EXT_SEMAS_SIGNAL:
      return "external semaphore signal";
    case CU_GRAPH_NODE_TYPE_EXT_SEMAS_WAIT:
      return "external semaphore wait";
    case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP:
      return "batch memory operation";
    default:
      return nullptr;  // accepted
  }
}

// The first node of `graph` (or of its child graphs) a body does not accept, as its kind's
// name; nullptr when there is none.
const char* first_refused(CUgraph graph) {
  for (CUgraphNode node : graph_nodes(graph)) {
    CUgraphNodeType type{};
    call<&DriverApi::cuGraphNodeGetType>(graph_subject(graph), node, &type);
    if (const char* kind = type_kind(type)) return kind;
    if (type == CU_GRAPH_NODE_TYPE_GRAPH) {
      CUgraph inner = nullptr;
      call<&DriverApi::cuGraphChildGraphNodeGetGraph>(graph_subject(graph), node, &inner);
      if (const char* kind = first_refused(inner)) return kind;
    }
  }
  return nullptr;
}

// The first conditional or memory allocation node of `graph` or of its child graphs, as its
// kind's name; nullptr when there is none.
const char* first_single_executable(CUgraph graph) {
  for (CUgraphNode node : graph_nodes(graph)) {
    CUgraphNodeType type{};
    call<&DriverApi::cuGraphNodeGetType>(graph_subject(graph), node, &type);
    if (type == CU_GRAPH_NODE_TYPE_CONDITIONAL) return "conditional";
    if (type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) return "memory allocation";
    if (type == CU_GRAPH_NODE_TYPE_GRAPH) {
      CUgraph inner = nullptr;
      call<&DriverApi::cuGraphChildGraphNodeGetGraph>(graph_subject(graph), node, &inner);
      if (const char* kind = first_single_executable(inner)) return kind;
    }
  }
  return nullptr;
}

}  // namespace

void register_bodies(const BodyInfo& info, const CUgraph* graphs) {
  Bodies& b = bodies();
  std::lock_guard<std::mutex> lock(b.mutex);
  std::vector<CUgraph> list(graphs, graphs + info.size);
  b.by_graph.reserve(b.by_graph.size() + list.size());
  auto& slot = b.by_node[info.node];  // may throw: nothing registered yet
  for (unsigned i = 0; i < info.size; ++i) {
    BodyInfo body = info;
    body.index = i;
    b.by_graph[graphs[i]] = body;  // no rehash: reserved
  }
  slot = std::move(list);
}

std::optional<BodyInfo> find_body(CUgraph graph) {
  Bodies& b = bodies();
  std::lock_guard<std::mutex> lock(b.mutex);
  const auto it = b.by_graph.find(graph);
  if (it == b.by_graph.end()) return std::nullopt;
  return it->second;
}

std::vector<CUgraph> bodies_of(CUgraphNode node) {
  Bodies& b = bodies();
  std::lock_guard<std::mutex> lock(b.mutex);
  const auto it = b.by_node.find(node);
  return it == b.by_node.end() ? std::vector<CUgraph>() : it->second;
}

void forget_bodies_of(CUgraph root) noexcept {
  Bodies& b = bodies();
  std::lock_guard<std::mutex> lock(b.mutex);
  for (auto it = b.by_graph.begin(); it != b.by_graph.end();) {
    if (it->second.root == root) {
      b.by_node.erase(it->second.node);
      it = b.by_graph.erase(it);
    } else {
      ++it;
    }
  }
}

const char* conditional_name(CUgraphConditionalNodeType type, unsigned size) noexcept {
  switch (type) {
    case CU_GRAPH_COND_TYPE_IF:
      return size == 2 ? "IF/ELSE" : "IF";
    case CU_GRAPH_COND_TYPE_WHILE:
      return "WHILE";
    default:
      return "SWITCH";
  }
}

std::string body_text(const BodyInfo& body) {
  return "body " + std::to_string(body.index) + body_role(body) + " of the " +
         conditional_name(body.type, body.size) + " node " + pointer_text(body.node) +
         " in graph " + pointer_text(body.parent);
}

void check_body_accepts(const BuilderOwner& owner, CUgraph graph, GraphNodeKind kind) {
  if (body_accepts(kind) || graph == owner.root()) return;  // a root is no body: no lookup
  const std::optional<BodyInfo> body = find_body(graph);
  if (!body) return;
  refuse_in_body(add_call(kind), *body, std::string("a ") + kind_name(kind) + " node");
}

void check_body_accepts_child(const BuilderOwner& owner, CUgraph graph, CUgraph child) {
  if (graph == owner.root()) return;  // a root is no body
  const std::optional<BodyInfo> body = find_body(graph);
  if (!body) return;
  if (const char* kind = first_refused(child)) {
    refuse_in_body(add_call(GraphNodeKind::child_graph), *body,
                   "the child graph " + pointer_text(child) + " holds a " + kind + " node");
  }
}

std::string body_rule_hint(CUgraph graph) noexcept {
  try {
    for (CUgraphNode node : graph_nodes(graph)) {
      for (CUgraph body : bodies_of(node)) {  // custream's conditional nodes only
        const std::optional<BodyInfo> info = find_body(body);
        if (!info) continue;
        if (const char* kind = first_refused(body)) {
          return "; " + body_text(*info) + " holds a " + kind + " node: " + kBodyRule;
        }
        std::string inner = body_rule_hint(body);  // nested conditional nodes
        if (!inner.empty()) return inner;
      }
    }
  } catch (...) {  // a hint, not the error: none when the graph cannot be read
  }
  return {};
}

std::string one_executable_hint(CUgraph graph) noexcept {
  try {
    if (const char* kind = first_single_executable(graph)) {
      return std::string("; the graph holds a ") + kind +
             " node, and the driver makes one executable of such a graph at a time: if another "
             "executable of it lives, destroy that Graph first, or update it in place";
    }
  } catch (...) {  // a hint, not the error: none when the graph cannot be read
  }
  return {};
}

void check_body_context(const BuilderOwner& owner, CUgraph graph, CUcontext context,
                        const char* call) {
  if (graph == owner.root()) return;  // a root is no body: no lookup (no lock) on its adds
  const std::optional<BodyInfo> body = find_body(graph);
  if (!body || body->context == context) return;
  detail::throw_error(
      CUDA_ERROR_INVALID_CONTEXT, call, body_text(*body),
      "custream refused it without calling the driver: the kernel belongs to context " +
          pointer_text(context) + ", the conditional node to context " +
          pointer_text(body->context) +
          "; every kernel of a conditional body (and of its nested bodies and child "
          "graphs) must belong to the conditional node's context");
}

void check_capture_accepts_host(CUgraph graph, const StreamRef& stream, const char* call) {
  const std::optional<BodyInfo> body = find_body(graph);
  if (!body) return;
  throw_stream_error(CUDA_ERROR_NOT_SUPPORTED, call, stream,
                     "custream refused it without calling the driver: the stream captures into " +
                         body_text(*body) + ", and a host function would be a host node; " +
                         kBodyRule + ". Run the host work before or after the conditional node");
}

void check_condition_of(const GraphBuilder& builder, const ConditionalHandle& condition,
                        const char* call, bool same_graph) {
  const CUgraph graph = builder.handle();
  std::string why;
  if (!condition) {
    why = "the ConditionalHandle is empty (make one with add_condition)";
  } else if (same_graph && condition.graph() != graph) {
    why = "the ConditionalHandle belongs to graph " + pointer_text(condition.graph()) +
          ", not to this one: a conditional node tests a handle made by add_condition of the "
          "builder it is added to";
  } else if (!same_graph && condition.graph() != graph) {
    const std::optional<BodyInfo> here = find_body(graph);
    const std::optional<BodyInfo> there = find_body(condition.graph());
    const CUgraph root = here ? here->root : graph;
    const CUgraph handle_root = there ? there->root : condition.graph();
    if (root != handle_root) {
      why = "the ConditionalHandle belongs to graph " + pointer_text(condition.graph()) +
            ", which is neither this graph nor part of it";
    }
  }
  if (why.empty()) return;
  detail::throw_error(CUDA_ERROR_INVALID_VALUE, call, "graph " + pointer_text(graph),
                      "custream refused it without calling the driver: " + why);
}

void check_conditional_driver(int driver_version, CUgraphConditionalNodeType type, unsigned size,
                              const char* call) {
  const bool needs_12_8 = type == CU_GRAPH_COND_TYPE_SWITCH || size == 2;
  const int needed = needs_12_8 ? 12080 : 12030;
  if (driver_version >= needed) return;
  detail::throw_error(
      CUDA_ERROR_NOT_SUPPORTED, call, {},
      std::string("custream refused it without calling the driver: ") +
          conditional_name(type, size) + " nodes need a CUDA driver >= " + version_text(needed) +
          "; the loaded driver is " + version_text(driver_version) +
          (needs_12_8 ? " (IF and WHILE nodes need 12.3: nest an IF per case instead)" : ""));
}

}  // namespace detail
}  // namespace custream

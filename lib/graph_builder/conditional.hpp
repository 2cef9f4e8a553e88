// Conditional bodies and the rules for what goes into them: what the builder's add path, the
// set-condition node, GraphCaptureScope and host functions need of conditional.cpp. Internal.
// Design: docs/design/graphs.md, "Conditional nodes", C1-C3.
//
// Contract: every body graph a conditional node of a GraphBuilder gets from the driver is
// registered here (register_bodies) with its root graph, until that root's BuilderOwner goes
// (forget_bodies_of, called before the root graph is destroyed). The checks below refuse, before
// the driver is called, what a body does not accept, naming the call, the body and the rule.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "custream/conditional_handle.hpp"
#include "custream/graph_node.hpp"

namespace custream {
class GraphBuilder;
class StreamRef;
}  // namespace custream

namespace custream::detail {

struct BuilderOwner;

/// What custream knows of one conditional body graph.
struct BodyInfo {
  CUgraph root = nullptr;      ///< the builder's graph, whose BuilderOwner keeps the body alive
  CUgraph parent = nullptr;    ///< the graph holding the conditional node (root or a body)
  CUgraphNode node = nullptr;  ///< the conditional node
  CUgraphConditionalNodeType type = CU_GRAPH_COND_TYPE_IF;
  unsigned size = 1;            ///< how many bodies the node has
  unsigned index = 0;           ///< which of them this is
  CUcontext context = nullptr;  ///< the context all its kernels must belong to
};

/// Registers `bodies` (info.size of them, body i with index i) of the conditional node
/// `info.node`. @throws std::bad_alloc (nothing registered then).
void register_bodies(const BodyInfo& info, const CUgraph* bodies);
/// What is known of `graph` when it is a registered body.
std::optional<BodyInfo> find_body(CUgraph graph);
/// The bodies of the conditional node `node` (empty for one custream did not make).
std::vector<CUgraph> bodies_of(CUgraphNode node);
/// Forgets every body of `root` (and of its bodies). Called by the BuilderOwner of `root`
/// before it destroys the graph. Never throws.
void forget_bodies_of(CUgraph root) noexcept;

/// "body 1 (else) of the IF/ELSE node 0x… in graph 0x…".
std::string body_text(const BodyInfo& body);
/// "IF", "IF/ELSE", "WHILE", "SWITCH" for a node of `type` with `size` bodies.
const char* conditional_name(CUgraphConditionalNodeType type, unsigned size) noexcept;

/// Refuses (Error CUDA_ERROR_NOT_SUPPORTED, without calling the driver) a node of `kind`
/// added to `graph` when `graph` is a conditional body that does not accept it: host, event
/// record and wait, memory allocation and free nodes (CUDA_CONDITIONAL_NODE_PARAMS: a body
/// holds kernel, empty, child-graph, memset, memcpy and conditional nodes). Returns otherwise.
/// The builder's add path calls it before the driver.
void check_body_accepts(const BuilderOwner& owner, CUgraph graph, GraphNodeKind kind);
/// As check_body_accepts for a child-graph node of `child` added to `graph`: when `graph` is a
/// body, every node of `child` (and of its child graphs) must be one a body accepts.
/// @throws also Error naming a failing driver query.
void check_body_accepts_child(const BuilderOwner& owner, CUgraph graph, CUgraph child);
/// When a body of one of custream's conditional nodes in `graph` (or nested in its bodies)
/// holds a node a body does not accept (added around custream's checks: a raw host function
/// captured into it, say), "; body … holds a host node: <the rule>"; else empty. What a failed
/// instantiation (CUDA_ERROR_INVALID_VALUE) adds to its message. Never throws.
std::string body_rule_hint(CUgraph graph) noexcept;
/// When `graph` (or a child graph of it) holds a conditional or memory allocation node,
/// "; the graph holds a … node: <the one-executable rule>"; else empty. What a failed
/// instantiation (CUDA_ERROR_NOT_SUPPORTED) adds to its message. Never throws.
std::string one_executable_hint(CUgraph graph) noexcept;
/// Refuses (Error CUDA_ERROR_INVALID_CONTEXT, without calling the driver) a kernel of
/// `context` added to `graph` when `graph` is a body of another context's conditional node.
/// Returns at once (no registry lookup) when `graph` is `owner`'s root.
void check_body_context(const BuilderOwner& owner, CUgraph graph, CUcontext context,
                        const char* call);
/// Refuses (Error CUDA_ERROR_NOT_SUPPORTED, without calling the driver) a host function or
/// callback enqueued on `stream` while it captures into the conditional body `graph`
/// (GraphCaptureScope); returns when `graph` is not a body. Cold: only capturing enqueues ask.
void check_capture_accepts_host(CUgraph graph, const StreamRef& stream, const char* call);

/// Refuses (Error CUDA_ERROR_INVALID_VALUE, without calling the driver) an empty handle, or a
/// handle of another graph: with `same_graph`, `condition` must be of `builder`'s own graph
/// (a conditional node's handle); else of its root graph or any body of that root (a
/// set-condition node sets its graph's or an enclosing graph's handle).
void check_condition_of(const GraphBuilder& builder, const ConditionalHandle& condition,
                        const char* call, bool same_graph);

/// Refuses (Error CUDA_ERROR_NOT_SUPPORTED, without calling the driver) a conditional node the
/// driver of `driver_version` cannot make: IF and WHILE need 12.3, IF/ELSE and SWITCH 12.8.
void check_conditional_driver(int driver_version, CUgraphConditionalNodeType type, unsigned size,
                              const char* call);

}  // namespace custream::detail

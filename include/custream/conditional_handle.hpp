/// @file
/// custream::ConditionalHandle: the value a conditional node of a graph tests.
#pragma once

#include "custream/detail/cuda.hpp"

namespace custream {

class GraphBuilder;

/// A conditional handle (CUgraphConditionalHandle, driver >= 12.3) of one GraphBuilder's
/// graph: the 32-bit value an IF, IF/ELSE, WHILE or SWITCH node of that graph tests. Made by
/// GraphBuilder::add_condition; set on the device by a set-condition node
/// (GraphBuilder::add_set_condition) or by the user's own kernel (cudaGraphSetConditional,
/// docs/guide.md "Graphs as programs"). A value: it owns nothing (the driver keeps the handle
/// as long as the graph).
class ConditionalHandle {
 public:
  /// No handle.
  ConditionalHandle() noexcept = default;

  /// The CUgraphConditionalHandle (0 for no handle).
  CUgraphConditionalHandle handle() const noexcept { return handle_; }
  /// The graph it belongs to.
  CUgraph graph() const noexcept { return graph_; }
  /// The value given at every launch when assign_default(), else at the first launch.
  unsigned default_value() const noexcept { return default_value_; }
  /// True when every launch starts with default_value() (CU_GRAPH_COND_ASSIGN_DEFAULT).
  bool assign_default() const noexcept { return assign_default_; }
  /// False for no handle.
  explicit operator bool() const noexcept { return graph_ != nullptr; }

 private:
  friend class GraphBuilder;
  ConditionalHandle(CUgraphConditionalHandle handle, CUgraph graph, unsigned default_value,
                    bool assign_default) noexcept
      : handle_(handle), graph_(graph), default_value_(default_value),
        assign_default_(assign_default) {}

  CUgraphConditionalHandle handle_ = 0;
  CUgraph graph_ = nullptr;
  unsigned default_value_ = 0;
  bool assign_default_ = false;
};

}  // namespace custream

/// @file
/// custream::GraphUpdateError: an executable graph that could not be updated.
#pragma once

#include "custream/detail/cuda.hpp"

#include <string>

#include "custream/error.hpp"

namespace custream {

/// Thrown when cuGraphExecUpdate refuses an update. The message names the reason (e.g.
/// CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED), the failing node and its type. The
/// executable is unchanged and still usable.
class GraphUpdateError : public Error {
 public:
  /// An update failure with the driver's `result` and its result info; `subject` and
  /// `detail` as for Error.
  GraphUpdateError(CUresult result, const CUgraphExecUpdateResultInfo& info, std::string subject,
                   std::string detail)
      : Error(result, "cuGraphExecUpdate", std::move(subject), std::move(detail)), info_(info) {}

  /// Why the update failed.
  CUgraphExecUpdateResult update_result() const noexcept { return info_.result; }
  /// The failing node (of the newer graph), or null when the failure is not about one node.
  CUgraphNode error_node() const noexcept { return info_.errorNode; }
  /// For a changed edge, the node it comes from; otherwise null.
  CUgraphNode error_from_node() const noexcept { return info_.errorFromNode; }

 private:
  CUgraphExecUpdateResultInfo info_;
};

}  // namespace custream

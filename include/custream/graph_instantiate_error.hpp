/// @file
/// custream::GraphInstantiateError: a graph that could not be instantiated.
#pragma once

#include "custream/detail/cuda.hpp"

#include <string>

#include "custream/error.hpp"

namespace custream {

/// Thrown when cuGraphInstantiateWithParams fails. The message names the driver's error,
/// the instantiate result (e.g. CUDA_GRAPH_INSTANTIATE_NODE_OPERATION_NOT_SUPPORTED) and the
/// offending node when the driver names one.
class GraphInstantiateError : public Error {
 public:
  /// An instantiation failure with the driver's `result`, its `instantiate_result` and the
  /// node it blamed (may be null); `subject` and `detail` as for Error.
  GraphInstantiateError(CUresult result, CUgraphInstantiateResult instantiate_result,
                        CUgraphNode error_node, std::string subject, std::string detail)
      : Error(result, "cuGraphInstantiateWithParams", std::move(subject), std::move(detail)),
        instantiate_result_(instantiate_result),
        error_node_(error_node) {}

  /// Why instantiation failed, as the driver classified it.
  CUgraphInstantiateResult instantiate_result() const noexcept { return instantiate_result_; }
  /// The node that made it fail, or null when the driver named none.
  CUgraphNode error_node() const noexcept { return error_node_; }

 private:
  CUgraphInstantiateResult instantiate_result_;
  CUgraphNode error_node_;
};

}  // namespace custream

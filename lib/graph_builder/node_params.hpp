// detail::node_params: the zeroed CUgraphNodeParams every GraphBuilder add starts from.
// Internal. Design: docs/design/graphs.md, "Builders".
#pragma once

#include <cuda.h>

namespace custream::detail {

/// A CUgraphNodeParams of `type`, every other byte zero (the driver reads the reserved fields).
/// Copied from a zeroed object, which g++ does with 16-byte moves, as the raw loop copies its
/// parameters; cleared in place it is one `rep stos`, slow to start, on every add.
inline CUgraphNodeParams node_params(CUgraphNodeType type) noexcept {
  static const CUgraphNodeParams zero{};
  const CUgraphNodeParams* from = &zero;
  asm("" : "+r"(from));  // the compiler no longer knows the bytes: it copies, never clears
  CUgraphNodeParams p = *from;
  p.type = type;
  return p;
}

}  // namespace custream::detail

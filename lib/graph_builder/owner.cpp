// detail::BuilderOwner: the root graph and what a builder's nodes own. Contract on top of
// owner.hpp; design: docs/design/graphs.md, "Builders".
#include "owner.hpp"

#include <algorithm>

#include "conditional.hpp"
#include "driver.hpp"

namespace custream::detail {

BuilderOwner::~BuilderOwner() {
  // The root (and with it its bodies, and its references to host payloads' user objects: an
  // executable instantiated from it holds its own, invariant B2). Then the members: the
  // children's owners, events, modules, libraries and the context.
  if (CUgraph g = root(); g != nullptr) {
    forget_bodies_of(g);  // its conditional bodies go with it (conditional.hpp)
    release_call<&DriverApi::cuGraphDestroy>("graph", g, g);
  }
}
template struct Refs<BuilderOwner>;

bool BuilderOwner::owns(CUgraph graph) const noexcept {
  return graph != nullptr && std::find(graphs.begin(), graphs.end(), graph) != graphs.end();
}

void BuilderOwner::add_body(CUgraph body) {
  if (!owns(body)) graphs.push_back(body);
}

bool BuilderOwner::holds(const BuilderOwner* other) const noexcept {
  if (other == this) return true;
  for (const Shared<BuilderOwner>& child : children) {
    if (child.get()->holds(other)) return true;
  }
  return false;
}

}  // namespace custream::detail

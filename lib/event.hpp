// Event helpers shared with streams and contexts (defined in event.cpp). Internal. Design:
// docs/design/events.md.
#pragma once

#include <string>

#include "custream/event.hpp"

namespace custream::detail {

/// "event 0x… (device N) of context 0x… (primary)": an event and the context it was made in.
std::string event_text(const Event& event);

}  // namespace custream::detail

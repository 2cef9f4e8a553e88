// Context helpers shared by devices, streams and events. Design: docs/design/contexts.md.
#pragma once

#include <cuda.h>

#include "custream/context_scope.hpp"
#include "driver.hpp"

/// @file
/// Everything custream offers, in one include.
#pragma once

#include "custream/context_scope.hpp"
#include "custream/device.hpp"
#include "custream/device_scope.hpp"
#include "custream/driver.hpp"
#include "custream/error.hpp"

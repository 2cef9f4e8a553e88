/// @file
/// Everything custream offers, in one include.
#pragma once

#include "custream/context_scope.hpp"
#include "custream/current_stream.hpp"
#include "custream/device.hpp"
#include "custream/device_buffer.hpp"
#include "custream/device_scope.hpp"
#include "custream/driver.hpp"
#include "custream/error.hpp"
#include "custream/event.hpp"
#include "custream/external_stream.hpp"
#include "custream/stream.hpp"
#include "custream/stream_scope.hpp"

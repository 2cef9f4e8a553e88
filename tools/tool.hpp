// Shared pieces of the `custream` command (tools/main.cpp): what the driver is, and the
// subcommands.
#pragma once

#include <string>

namespace custream_tool {

/// A one-line description of the loaded driver: "<path> (version 13000 = CUDA 13.0)", plus
/// "— the CPU driver emulator" when it is custream's emulator library.
std::string driver_line();

/// True when the loaded driver is custream's CPU emulator (it exports custream_emu_reset).
bool driver_is_emulator();

/// `custream info`: the driver and every device. Returns the exit status.
int info();

/// `custream selftest`: every capability on every device, one row per check. Returns the exit
/// status (0 when nothing failed; skipped checks are not failures).
int selftest();

}  // namespace custream_tool

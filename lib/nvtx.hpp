// Names of streams, events and contexts, kept by custream and sent to NVTX (Nsight Systems).
// Internal: not part of custream's API. Design: docs/design/streams.md, "Names".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace custream::detail {

/// What kind of driver handle a name belongs to (the handle values of different kinds may be
/// equal, e.g. on the emulator).
enum class Named : std::uint8_t { stream, event, context };

/// Keeps `name` for `handle` and sends it to NVTX (nvtxNameCuStreamA / EventA / ContextA) when
/// custream was built with nvtx3. An empty name forgets the handle's name (and sends the empty
/// name). The only place custream calls NVTX for names: nothing calls it for an unnamed object.
/// @throws std::bad_alloc.
void set_name(Named kind, const void* handle, std::string_view name);
/// The name kept for `handle`, empty when none. @throws std::bad_alloc.
std::string name_of(Named kind, const void* handle);
/// Forgets `handle`'s name (its owner destroys it; no NVTX call). Never throws.
void forget_name(Named kind, const void* handle) noexcept;
/// Forgets a name kept for `handle` from before the driver reused the value (a foreign handle
/// named, then destroyed by its owner): called for every handle custream creates. Costs one
/// relaxed atomic load while no name is kept. Never throws.
void forget_stale_name(Named kind, const void* handle) noexcept;


}  // namespace custream::detail

// Does a module image declare module-scope data: __device__ or __constant__ variables, texture,
// surface or sampler references? Their values live in the loaded module, so a loaded instance
// can be handed to the next tenant only when there are none (server/gpu/module_pool).
#pragma once

#include <cstdint>
#include <span>

namespace tally::fatbin {

// `image` is an ELF cubin or PTX text (what tallyd loads). True also when unsure: malformed
// or unknown images count as declaring data.
bool declaresModuleData(std::span<const uint8_t> image);

}  // namespace tally::fatbin

// Kernel arguments as the application hands them over (`void** args`, one pointer per
// parameter) packed into the buffer tallyd gives the driver: each parameter at the offset and
// size cuFuncGetParamInfo reported, padding zeroed.
#pragma once

#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

namespace tally::client {

inline std::vector<uint8_t> packArguments(const std::vector<std::pair<uint32_t, uint32_t>>& params, size_t paramBytes,
                                          void* const* args) {
  std::vector<uint8_t> buffer(paramBytes, 0);
  for (size_t i = 0; i < params.size(); ++i) {
    auto [offset, size] = params[i];
    if (args == nullptr || args[i] == nullptr || offset + size > paramBytes) continue;
    std::memcpy(buffer.data() + offset, args[i], size);
  }
  return buffer;
}

}  // namespace tally::client

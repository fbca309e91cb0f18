// 128-bit content hash identifying module images across the wire and in tallyd's cache.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace tally::hash {

using ContentHash = std::array<uint8_t, 16>;

ContentHash contentHash(const void* data, size_t size);
std::string toHex(const ContentHash& hash);

}  // namespace tally::hash

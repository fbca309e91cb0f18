// SHA-256 (OpenSSL): what identifies a module image across the wire and in tallyd's caches,
// and what tenant tokens are stored as. Cryptographic because tenants choose the bytes: a
// crafted image with the hash of another tenant's module must not be able to stand in for it
// in the shared module store or the variant cache.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace tally::hash {

using Sha256 = std::array<uint8_t, 32>;
using ContentHash = Sha256;

Sha256 sha256(const void* data, size_t size);
inline ContentHash contentHash(const void* data, size_t size) { return sha256(data, size); }
std::string toHex(const ContentHash& hash);

}  // namespace tally::hash

#include "common/hash/content_hash.h"

#include <xxhash.h>

#include <cstring>

namespace tally::hash {

ContentHash contentHash(const void* data, size_t size) {
  XXH128_canonical_t canonical;
  XXH128_canonicalFromHash(&canonical, XXH3_128bits(data, size));
  ContentHash out;
  std::memcpy(out.data(), canonical.digest, out.size());
  return out;
}

std::string toHex(const ContentHash& hash) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (uint8_t byte : hash) {
    out.push_back(kDigits[byte >> 4]);
    out.push_back(kDigits[byte & 15]);
  }
  return out;
}

}  // namespace tally::hash

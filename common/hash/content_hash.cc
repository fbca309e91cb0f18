#include "common/hash/content_hash.h"

#include <openssl/evp.h>

#include <stdexcept>

namespace tally::hash {

Sha256 sha256(const void* data, size_t size) {
  Sha256 digest{};
  unsigned length = 0;
  if (EVP_Digest(data, size, digest.data(), &length, EVP_sha256(), nullptr) != 1 || length != digest.size()) {
    throw std::runtime_error("EVP_Digest(SHA-256) failed");
  }
  return digest;
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

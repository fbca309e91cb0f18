// MD2 (RFC 1319) and HMAC over it (RFC 2104, 16-byte blocks). Obsolete as cryptography; here only
// because a CUDA runtime linked into an application checks its driver with HMAC-MD2
// (client/api/export_tables.cc). OpenSSL 3 no longer ships MD2, so it is written out here.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>

namespace tally::hash {

using Md2Digest = std::array<uint8_t, 16>;

class Md2 {
 public:
  void update(const void* data, size_t size);
  Md2Digest finish();  // the object is spent afterwards

 private:
  void compress(const uint8_t* block);
  std::array<uint8_t, 48> state_{};
  std::array<uint8_t, 16> checksum_{};
  std::array<uint8_t, 16> pending_{};
  size_t pendingBytes_ = 0;
};

Md2Digest md2(const void* data, size_t size);

// HMAC-MD2 with a key of exactly one block, over the concatenation of `parts`.
struct ByteSpan {
  const void* data;
  size_t size;
};
Md2Digest hmacMd2(const std::array<uint8_t, 16>& key, std::initializer_list<ByteSpan> parts);

}  // namespace tally::hash

// MD2 against RFC 1319's test suite, and HMAC-MD2's construction (RFC 2104) spelled out.
#include "common/hash/md2.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

namespace tally::hash {
namespace {

std::string hex(const Md2Digest& d) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  for (uint8_t b : d) {
    s += kHex[b >> 4];
    s += kHex[b & 15];
  }
  return s;
}

std::string md2Hex(const std::string& text) { return hex(md2(text.data(), text.size())); }

TEST(Md2, Rfc1319TestSuite) {
  EXPECT_EQ(md2Hex(""), "8350e5a3e24c153df2275c9f80692773");
  EXPECT_EQ(md2Hex("a"), "32ec01ec4a6dac72c0ab96fb34c0b5d1");
  EXPECT_EQ(md2Hex("abc"), "da853b0d3f88d99b30283a69e6ded6bb");
  EXPECT_EQ(md2Hex("message digest"), "ab4f496bfb2a530b219ff33031fe06b0");
  EXPECT_EQ(md2Hex("abcdefghijklmnopqrstuvwxyz"), "4e8ddff3650292ab5a4108c3aa47940b");
  EXPECT_EQ(md2Hex("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"),
            "da33def2a42df13975352846c30338cd");
  EXPECT_EQ(md2Hex("12345678901234567890123456789012345678901234567890123456789012345678901234567890"),
            "d5976f79d83d3a0dc9806c3c66f3efd8");
}

TEST(Md2, UpdatesInPiecesEqualOneUpdate) {
  std::string text = "a message longer than one sixteen-byte block, cut at odd places";
  Md2 h;
  h.update(text.data(), 5);
  h.update(text.data() + 5, 17);
  h.update(text.data() + 22, text.size() - 22);
  EXPECT_EQ(hex(h.finish()), md2Hex(text));
}

TEST(Md2, HmacIsTheTwoNestedHashesOfRfc2104) {
  std::array<uint8_t, 16> key;
  for (size_t i = 0; i < key.size(); ++i) key[i] = static_cast<uint8_t>(i * 7 + 1);
  std::string message = "the runtime's view of the process";
  std::string inner, outer;
  for (uint8_t k : key) inner += static_cast<char>(k ^ 0x36);
  for (uint8_t k : key) outer += static_cast<char>(k ^ 0x5c);
  Md2Digest innerDigest = md2((inner + message).data(), inner.size() + message.size());
  std::string outerInput = outer + std::string(innerDigest.begin(), innerDigest.end());
  Md2Digest expected = md2(outerInput.data(), outerInput.size());
  EXPECT_EQ(hex(hmacMd2(key, {{message.data(), 10}, {message.data() + 10, message.size() - 10}})), hex(expected));
}

}  // namespace
}  // namespace tally::hash

// Argument packing: every parameter lands at its reported offset, whatever its size, and
// padding between parameters is zero (no stack garbage crosses the wire).
#include "client/runtime/arguments.h"

#include <gtest/gtest.h>

#include <array>
#include <cstring>

namespace tally::client {
namespace {

struct Big {
  double values[16];
  int tag;
};

TEST(PackArguments, PlacesScalarsPointersAndStructsAtTheirOffsets) {
  // A kernel (float* out, int n, char c, Big big) as cuFuncGetParamInfo lays it out.
  std::vector<std::pair<uint32_t, uint32_t>> params = {{0, 8}, {8, 4}, {12, 1}, {16, sizeof(Big)}};
  size_t total = 16 + sizeof(Big);
  float* out = reinterpret_cast<float*>(0x7f0012345678);
  int n = 1000;
  char c = 'q';
  Big big{};
  for (int i = 0; i < 16; ++i) big.values[i] = i * 1.5;
  big.tag = -7;
  void* args[] = {&out, &n, &c, &big};
  std::vector<uint8_t> packed = packArguments(params, total, args);
  ASSERT_EQ(packed.size(), total);
  float* gotOut;
  std::memcpy(&gotOut, packed.data(), 8);
  EXPECT_EQ(gotOut, out);
  int gotN;
  std::memcpy(&gotN, packed.data() + 8, 4);
  EXPECT_EQ(gotN, 1000);
  EXPECT_EQ(packed[12], 'q');
  EXPECT_EQ(packed[13], 0);  // padding
  EXPECT_EQ(packed[15], 0);
  Big gotBig;
  std::memcpy(&gotBig, packed.data() + 16, sizeof(Big));
  EXPECT_EQ(gotBig.values[15], 22.5);
  EXPECT_EQ(gotBig.tag, -7);
}

TEST(PackArguments, HandlesTheLargestParameterBuffer) {
  std::array<uint8_t, 32764> blob;
  for (size_t i = 0; i < blob.size(); ++i) blob[i] = static_cast<uint8_t>(i * 31);
  std::vector<std::pair<uint32_t, uint32_t>> params = {{0, 4}, {4, static_cast<uint32_t>(blob.size())}};
  int first = 42;
  void* args[] = {&first, blob.data()};
  std::vector<uint8_t> packed = packArguments(params, 4 + blob.size(), args);
  ASSERT_EQ(packed.size(), 32768u);
  EXPECT_EQ(std::memcmp(packed.data() + 4, blob.data(), blob.size()), 0);
}

TEST(PackArguments, KernelWithoutParametersPacksNothing) {
  EXPECT_TRUE(packArguments({}, 0, nullptr).empty());
}

TEST(PackArguments, IgnoresALayoutThatWouldOverflowTheBuffer) {
  std::vector<std::pair<uint32_t, uint32_t>> params = {{0, 4}, {4, 8}};
  int a = 1;
  double b = 2;
  void* args[] = {&a, &b};
  std::vector<uint8_t> packed = packArguments(params, 8, args);  // too small for the second
  ASSERT_EQ(packed.size(), 8u);
  int gotA;
  std::memcpy(&gotA, packed.data(), 4);
  EXPECT_EQ(gotA, 1);
  EXPECT_EQ(packed[4], 0);
}

}  // namespace
}  // namespace tally::client

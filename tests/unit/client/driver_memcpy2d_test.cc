// cuMemcpy2D's parameter block (client/api/memory.cc): a device-to-host copy fills WidthInBytes
// of each row at the destination's (x, y) and pitch and nothing between the rows; a side that
// names no array of ours is refused before anything is sent (array copies: array_client_test.cc).
// The fake tallyd answers device-to-host bytes with 0xAB.
#include "fake_tallyd.h"

#include <cuda.h>
#include <gtest/gtest.h>

#include <vector>

namespace {

[[maybe_unused]] auto* const server = &tally::testing::processFakeTallyd();

TEST(DriverMemcpy2D, DeviceToHostLandsRowByRowAtTheOffset) {
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  CUdeviceptr device = 0;
  ASSERT_EQ(cuMemAlloc(&device, 4096), CUDA_SUCCESS);
  std::vector<unsigned char> host(8 * 32, 0);
  CUDA_MEMCPY2D p{};
  p.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  p.srcDevice = device;
  p.srcPitch = 64;
  p.dstMemoryType = CU_MEMORYTYPE_HOST;
  p.dstHost = host.data();
  p.dstPitch = 32;
  p.dstXInBytes = 4;
  p.dstY = 1;
  p.WidthInBytes = 8;
  p.Height = 3;
  ASSERT_EQ(cuMemcpy2D(&p), CUDA_SUCCESS);
  for (size_t row = 0; row < 8; ++row) {
    for (size_t col = 0; col < 32; ++col) {
      bool copied = row >= 1 && row < 4 && col >= 4 && col < 12;
      ASSERT_EQ(host[row * 32 + col], copied ? 0xAB : 0) << "row " << row << " column " << col;
    }
  }
  EXPECT_EQ(cuMemFree(device), CUDA_SUCCESS);
}

TEST(DriverMemcpy2D, AnArraySideMustBeAnArray) {
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  CUDA_MEMCPY2D p{};
  p.srcMemoryType = CU_MEMORYTYPE_ARRAY;
  p.dstMemoryType = CU_MEMORYTYPE_HOST;
  p.WidthInBytes = 4;
  p.Height = 1;
  EXPECT_EQ(cuMemcpy2D(&p), CUDA_ERROR_INVALID_VALUE);  // a null array
  EXPECT_EQ(cuMemcpy2D(nullptr), CUDA_ERROR_INVALID_VALUE);
}

}  // namespace

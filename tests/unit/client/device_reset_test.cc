// cudaDeviceReset and cuDevicePrimaryCtxReset through libtally_client.so, against the fake
// tallyd: the application's allocations on the device are freed in tallyd (once), the client
// forgets them, and the device stays usable.
#include "fake_tallyd.h"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

namespace {

using tally::testing::FakeTallyd;
using Call = tally::wire::Call;

FakeTallyd* const server = &tally::testing::processFakeTallyd();

TEST(DeviceReset, FreesTheApplicationsAllocationsOnce) {
  void* plain = nullptr;
  void* other = nullptr;
  ASSERT_EQ(cudaMalloc(&plain, 1024), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&other, 4096), cudaSuccess);
  const uint64_t frees = server->callsOf(Call::MEM_FREE);
  ASSERT_EQ(cudaDeviceReset(), cudaSuccess);
  EXPECT_EQ(server->callsOf(Call::MEM_FREE), frees + 2);
  cudaPointerAttributes attributes{};
  ASSERT_EQ(cudaPointerGetAttributes(&attributes, plain), cudaSuccess);
  EXPECT_EQ(attributes.type, cudaMemoryTypeUnregistered) << "the client still knows a freed allocation";
  ASSERT_EQ(cudaDeviceReset(), cudaSuccess);
  EXPECT_EQ(server->callsOf(Call::MEM_FREE), frees + 2) << "freed twice";
  void* again = nullptr;
  ASSERT_EQ(cudaMalloc(&again, 64), cudaSuccess);  // the device is usable after a reset
  ASSERT_EQ(cuDevicePrimaryCtxReset(0), CUDA_SUCCESS);
  EXPECT_EQ(server->callsOf(Call::MEM_FREE), frees + 3);
  EXPECT_EQ(cuDevicePrimaryCtxReset(99), CUDA_ERROR_INVALID_DEVICE);
}

}  // namespace

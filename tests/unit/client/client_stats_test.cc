// tallyClientStats: what the client sent to tallyd (messages, round trips, bytes), for
// benchmarks that report calls per training step. Counted against the fake tallyd.
#include "fake_tallyd.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>

extern "C" int tallyClientStats(uint64_t* out);

namespace {

TEST(ClientStats, CountMessagesRoundTripsAndBytesAsTheyAreSent) {
  void* device = nullptr;
  ASSERT_EQ(cudaMalloc(&device, 4096), cudaSuccess);  // connects
  uint64_t before[3], after[3];
  ASSERT_EQ(tallyClientStats(before), 0);
  ASSERT_EQ(cudaMemsetAsync(device, 0, 64, nullptr), cudaSuccess);  // one-way
  char host[64];
  ASSERT_EQ(cudaMemcpy(host, device, sizeof host, cudaMemcpyDeviceToHost), cudaSuccess);  // round trip
  ASSERT_EQ(tallyClientStats(after), 0);
  EXPECT_EQ(after[0] - before[0], 2u);
  EXPECT_EQ(after[1] - before[1], 1u);
  EXPECT_GT(after[2], before[2]);
  EXPECT_EQ(tallyClientStats(nullptr), -1);
}

}  // namespace

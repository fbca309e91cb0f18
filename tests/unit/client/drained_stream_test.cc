// A stream a reply has already drained is synced without a round trip (PyTorch's .item(): a copy
// to the host, then a sync of the same stream), and only then: any message sent since — on any
// stream, from any thread — makes the next sync ask tallyd again. Counted at the fake tallyd.
#include "fake_tallyd.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <thread>
#include <vector>

namespace {

using tally::testing::FakeTallyd;

FakeTallyd* const server = &tally::testing::processFakeTallyd();

class DrainedStream : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(cudaMalloc(&device_, 4096), cudaSuccess);
    ASSERT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
  }
  // A copy to pageable host memory: the call waits for the data, so the stream is drained.
  void copyToHost(cudaStream_t s) { ASSERT_EQ(cudaMemcpyAsync(host_, device_, 4, cudaMemcpyDeviceToHost, s), cudaSuccess); }
  void* device_ = nullptr;
  cudaStream_t stream_ = nullptr;
  char host_[4] = {};
};

TEST_F(DrainedStream, ASyncRightAfterADrainingCopyStaysInTheClient) {
  copyToHost(stream_);
  uint64_t before = server->calls();
  EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  EXPECT_EQ(cudaStreamQuery(stream_), cudaSuccess);
  EXPECT_EQ(server->calls(), before);
}

TEST_F(DrainedStream, WorkSentSinceOnAnyStreamMakesTheSyncAskAgain) {
  copyToHost(stream_);
  uint64_t before = server->calls();  // settled: the copy waited for its reply
  ASSERT_EQ(cudaMemsetAsync(device_, 0, 16, nullptr), cudaSuccess);  // another stream, one-way
  EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  EXPECT_EQ(server->calls(), before + 2);  // the memset and the sync
  // ...and that sync drained it again.
  EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  EXPECT_EQ(server->calls(), before + 2);
}

TEST_F(DrainedStream, AnotherThreadsWorkCountsToo) {
  copyToHost(stream_);
  uint64_t before = server->calls();
  std::thread other([&] { ASSERT_EQ(cudaMemsetAsync(device_, 1, 16, stream_), cudaSuccess); });
  other.join();
  EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  EXPECT_EQ(server->calls(), before + 2);
}

TEST_F(DrainedStream, ADrainOfOneStreamSaysNothingOfAnother) {
  cudaStream_t second = nullptr;
  ASSERT_EQ(cudaStreamCreate(&second), cudaSuccess);
  copyToHost(stream_);
  uint64_t before = server->calls();
  EXPECT_EQ(cudaStreamSynchronize(second), cudaSuccess);
  EXPECT_EQ(server->calls(), before + 1);
  ASSERT_EQ(cudaStreamDestroy(second), cudaSuccess);
}

}  // namespace

// The per-thread default stream exports (what `--default-stream per-thread` programs call),
// through libtally_client.so against the fake tallyd: a twin queues its work where its base would
// with cudaStreamPerThread, a null stream outside a twin is still the legacy one, and the legacy
// stream named explicitly stays legacy inside a twin.
#include "fake_tallyd.h"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <thread>

// Declared by cuda_runtime_api.h only under CUDA_API_PER_THREAD_DEFAULT_STREAM.
extern "C" cudaError_t CUDARTAPI cudaMemsetAsync_ptsz(void* devPtr, int value, size_t count, cudaStream_t stream);

namespace {

using tally::testing::FakeTallyd;

FakeTallyd* const server = &tally::testing::processFakeTallyd();

class PerThreadStream : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(cudaMalloc(&buffer_, 256), cudaSuccess); }
  void TearDown() override { cudaFree(buffer_); }
  // The wire stream a memset on `stream` went to, through `memset`.
  template <typename Memset>
  uint64_t memsetStream(Memset memset, cudaStream_t stream) {
    EXPECT_EQ(memset(buffer_, 0, 256, stream), cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the memset is one-way: let it arrive
    return server->lastMemsetStream();
  }
  void* buffer_ = nullptr;
};

TEST_F(PerThreadStream, ATwinsNullStreamIsThePerThreadStream) {
  const uint64_t legacy = memsetStream(cudaMemsetAsync, nullptr);
  const uint64_t perThread = memsetStream(cudaMemsetAsync, cudaStreamPerThread);
  ASSERT_NE(legacy, perThread);
  EXPECT_EQ(memsetStream(cudaMemsetAsync_ptsz, nullptr), perThread);
  EXPECT_EQ(memsetStream(cudaMemsetAsync_ptsz, cudaStreamLegacy), legacy);  // named: stays legacy
  EXPECT_EQ(memsetStream(cudaMemsetAsync, nullptr), legacy);  // the scope ended with the call
}

TEST_F(PerThreadStream, EachThreadHasItsOwn) {
  const uint64_t mine = memsetStream(cudaMemsetAsync_ptsz, nullptr);
  uint64_t theirs = 0;
  std::thread other([&] { theirs = memsetStream(cudaMemsetAsync_ptsz, nullptr); });
  other.join();
  EXPECT_NE(theirs, 0u);
  EXPECT_NE(theirs, mine);
}

}  // namespace

// Stream attributes through libtally_client.so, against the fake tallyd: kept per stream by the
// client (hints that reach no one else), the driver's defaults before anything is set, the
// stream's own priority, copies between streams, and the native errors; nothing goes on the wire.
#include "fake_tallyd.h"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

namespace {

using tally::testing::FakeTallyd;

FakeTallyd* const server = &tally::testing::processFakeTallyd();

class StreamAttributes : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(cudaStreamCreateWithPriority(&a_, cudaStreamNonBlocking, -1), cudaSuccess);
    ASSERT_EQ(cudaStreamCreate(&b_), cudaSuccess);
  }
  void TearDown() override {
    (void)cudaGetLastError();
    cudaStreamDestroy(a_);
    cudaStreamDestroy(b_);
  }
  cudaStream_t a_ = nullptr;
  cudaStream_t b_ = nullptr;
};

TEST_F(StreamAttributes, DefaultsThenWhatWasSet) {
  cudaStreamAttrValue v{};
  ASSERT_EQ(cudaStreamGetAttribute(a_, cudaStreamAttributeSynchronizationPolicy, &v), cudaSuccess);
  EXPECT_EQ(v.syncPolicy, cudaSyncPolicyAuto);
  ASSERT_EQ(cudaStreamGetAttribute(a_, cudaLaunchAttributeMemSyncDomainMap, &v), cudaSuccess);
  EXPECT_EQ(v.memSyncDomainMap.remote, 1);

  uint64_t before = server->calls();
  cudaStreamAttrValue window{};
  window.accessPolicyWindow.base_ptr = reinterpret_cast<void*>(0x1000);
  window.accessPolicyWindow.num_bytes = 4096;
  window.accessPolicyWindow.hitRatio = 0.5f;
  window.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
  ASSERT_EQ(cudaStreamSetAttribute(a_, cudaStreamAttributeAccessPolicyWindow, &window), cudaSuccess);
  cudaStreamAttrValue got{};
  ASSERT_EQ(cudaStreamGetAttribute(a_, cudaStreamAttributeAccessPolicyWindow, &got), cudaSuccess);
  EXPECT_EQ(got.accessPolicyWindow.num_bytes, 4096u);
  EXPECT_EQ(got.accessPolicyWindow.hitProp, cudaAccessPropertyPersisting);
  ASSERT_EQ(cudaStreamGetAttribute(b_, cudaStreamAttributeAccessPolicyWindow, &got), cudaSuccess);
  EXPECT_EQ(got.accessPolicyWindow.num_bytes, 0u) << "another stream's attribute";
  EXPECT_EQ(server->calls(), before) << "an attribute went to tallyd";
}

TEST_F(StreamAttributes, ThePriorityIsTheStreams) {
  cudaStreamAttrValue v{};
  ASSERT_EQ(cudaStreamGetAttribute(a_, cudaStreamAttributePriority, &v), cudaSuccess);
  int priority = 0;
  ASSERT_EQ(cudaStreamGetPriority(a_, &priority), cudaSuccess);
  EXPECT_EQ(v.priority, priority);
  v.priority = 0;
  EXPECT_EQ(cudaStreamSetAttribute(a_, cudaStreamAttributePriority, &v), cudaErrorNotSupported);
}

TEST_F(StreamAttributes, CopiesAndTheDriverAgree) {
  cudaStreamAttrValue policy{};
  policy.syncPolicy = cudaSyncPolicyBlockingSync;
  ASSERT_EQ(cudaStreamSetAttribute(a_, cudaStreamAttributeSynchronizationPolicy, &policy), cudaSuccess);
  ASSERT_EQ(cudaStreamCopyAttributes(b_, a_), cudaSuccess);
  CUstreamAttrValue got{};
  ASSERT_EQ(cuStreamGetAttribute(reinterpret_cast<CUstream>(b_), CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY, &got),
            CUDA_SUCCESS);
  EXPECT_EQ(got.syncPolicy, CU_SYNC_POLICY_BLOCKING_SYNC);
}

TEST_F(StreamAttributes, NativeErrors) {
  cudaStreamAttrValue v{};
  EXPECT_EQ(cudaStreamGetAttribute(a_, cudaLaunchAttributeCooperative, &v), cudaErrorInvalidValue);  // launches only
  EXPECT_EQ(cudaStreamGetAttribute(a_, cudaStreamAttributeAccessPolicyWindow, nullptr), cudaErrorInvalidValue);
  int notAStream = 0;
  EXPECT_NE(cudaStreamGetAttribute(reinterpret_cast<cudaStream_t>(&notAStream), cudaStreamAttributePriority, &v),
            cudaSuccess);
}

}  // namespace

// Driver-API contexts in the client (client/api/context.cc): cuCtxCreate pushes a new context
// on the calling thread, push/pop/set work per thread, a destroyed context is refused, and the
// profiler switches succeed as natively without a profiler. Against the fake tallyd.
#include "fake_tallyd.h"

#include <cuda.h>
#include <cuda_profiler_api.h>
#include <cudaProfiler.h>
#include <gtest/gtest.h>

#include <thread>

namespace {

[[maybe_unused]] auto* const server = &tally::testing::processFakeTallyd();

class Contexts : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(cuInit(0), CUDA_SUCCESS); }
};

TEST_F(Contexts, ACreatedContextIsCurrentUntilDestroyed) {
  CUcontext primary = nullptr, created = nullptr, current = nullptr;
  ASSERT_EQ(cuCtxGetCurrent(&primary), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxCreate(&created, nullptr, CU_CTX_SCHED_BLOCKING_SYNC, 0), CUDA_SUCCESS);
  EXPECT_NE(created, primary);
  ASSERT_EQ(cuCtxGetCurrent(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, created);
  unsigned int flags = 0;
  ASSERT_EQ(cuCtxGetFlags(&flags), CUDA_SUCCESS);
  EXPECT_EQ(flags, static_cast<unsigned int>(CU_CTX_SCHED_BLOCKING_SYNC));
  unsigned long long a = 0, b = 0;
  ASSERT_EQ(cuCtxGetId(created, &a), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxGetId(primary, &b), CUDA_SUCCESS);
  EXPECT_NE(a, b);
  ASSERT_EQ(cuCtxDestroy(created), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxGetCurrent(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, primary);  // popped
  EXPECT_EQ(cuCtxPushCurrent(created), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuCtxDestroy(created), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuCtxGetId(created, &a), CUDA_ERROR_INVALID_CONTEXT);
}

TEST_F(Contexts, EachThreadHasItsOwnStack) {
  CUcontext created = nullptr, primary = nullptr;
  ASSERT_EQ(cuCtxCreate(&created, nullptr, 0, 0), CUDA_SUCCESS);
  CUcontext popped = nullptr;
  ASSERT_EQ(cuCtxPopCurrent(&popped), CUDA_SUCCESS);
  EXPECT_EQ(popped, created);
  ASSERT_EQ(cuCtxGetCurrent(&primary), CUDA_SUCCESS);
  std::thread other([&] {
    CUcontext seen = nullptr;
    EXPECT_EQ(cuCtxPushCurrent(created), CUDA_SUCCESS);
    EXPECT_EQ(cuCtxGetCurrent(&seen), CUDA_SUCCESS);
    EXPECT_EQ(seen, created);
    EXPECT_EQ(cuCtxPopCurrent(&seen), CUDA_SUCCESS);
    EXPECT_EQ(cuCtxPopCurrent(&seen), CUDA_ERROR_INVALID_CONTEXT);  // empty stack
  });
  other.join();
  CUcontext mine = nullptr;
  ASSERT_EQ(cuCtxGetCurrent(&mine), CUDA_SUCCESS);
  EXPECT_EQ(mine, primary);
  EXPECT_EQ(cuCtxDestroy(created), CUDA_SUCCESS);
}

TEST_F(Contexts, SetCurrentNullUnbinds) {
  CUcontext created = nullptr, current = nullptr, primary = nullptr;
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&primary, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxCreate(&created, nullptr, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSetCurrent(nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxGetCurrent(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, primary);
  ASSERT_EQ(cuCtxSetCurrent(created), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxGetCurrent(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, created);
  EXPECT_EQ(cuCtxDestroy(created), CUDA_SUCCESS);
}

TEST_F(Contexts, BadArgumentsGetTheNativeErrors) {
  CUcontext ctx = nullptr;
  EXPECT_EQ(cuCtxCreate(nullptr, nullptr, 0, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuCtxCreate(&ctx, nullptr, 0, 99), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(cuCtxPushCurrent(reinterpret_cast<CUcontext>(0x1234)), CUDA_ERROR_INVALID_CONTEXT);
  CUcontext primary = nullptr;
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&primary, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxDestroy(primary), CUDA_ERROR_INVALID_CONTEXT);
}

TEST(Profiler, StartAndStopSucceedWithoutAProfiler) {
  EXPECT_EQ(cuProfilerStart(), CUDA_SUCCESS);
  EXPECT_EQ(cuProfilerStop(), CUDA_SUCCESS);
  EXPECT_EQ(cudaProfilerStart(), cudaSuccess);
  EXPECT_EQ(cudaProfilerStop(), cudaSuccess);
}

}  // namespace

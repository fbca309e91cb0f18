// The client library's entry points against bad application input (issue 13): null,
// unreadable and unwritable host pointers, overflowing sizes and unknown handles get the
// native error, nothing reaches tallyd, and the next call still works. Also: a HostFuncReady
// naming anything but an id the client issued runs nothing. libtally_client.so talks to an
// in-process fake tallyd; no GPU needed.
#include "fake_tallyd.h"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <thread>
#include <vector>

namespace {

using tally::testing::FakeTallyd;

FakeTallyd* const server = &tally::testing::processFakeTallyd();
const size_t kPage = static_cast<size_t>(::sysconf(_SC_PAGESIZE));

void* pages(int protection) {
  void* p = ::mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ::mprotect(p, kPage, protection);
  return p;
}

class BadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(cudaMalloc(&device_, 1 << 20), cudaSuccess);
    callsBefore_ = server->calls();
  }
  // Nothing of the refused calls reached tallyd, and the connection still carries calls.
  void expectNothingSentAndStillConnected() {
    EXPECT_EQ(server->calls(), callsBefore_) << "a refused call reached tallyd";
    expectStillConnected();
  }
  void expectStillConnected() {
    std::vector<char> host(64, 1);
    EXPECT_EQ(cudaMemcpy(device_, host.data(), host.size(), cudaMemcpyHostToDevice), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(host.data(), device_, host.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(static_cast<unsigned char>(host[0]), 0xAB);
  }
  void* device_ = nullptr;
  uint64_t callsBefore_ = 0;
};

TEST_F(BadInput, NullHostPointersAreInvalidValue) {
  EXPECT_EQ(cudaMemcpy(device_, nullptr, 64, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(nullptr, device_, 64, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpyAsync(device_, nullptr, 64, cudaMemcpyHostToDevice, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuMemcpyHtoD(reinterpret_cast<CUdeviceptr>(device_), nullptr, 64), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyDtoH(nullptr, reinterpret_cast<CUdeviceptr>(device_), 64), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cudaMemset(nullptr, 0, 64), cudaErrorInvalidValue);
  EXPECT_EQ(cuMemsetD8(0, 0, 64), CUDA_ERROR_INVALID_VALUE);
  expectNothingSentAndStillConnected();
}

TEST_F(BadInput, UnreadableSourceAndUnwritableDestinationAreInvalidValue) {
  void* none = pages(PROT_NONE);
  void* readOnly = pages(PROT_READ);
  EXPECT_EQ(cudaMemcpy(device_, none, 64, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  EXPECT_EQ(cuMemcpyHtoDAsync(reinterpret_cast<CUdeviceptr>(device_), none, 64, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cudaMemcpy2D(device_, 64, none, 64, 64, 2, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(readOnly, none, 64, cudaMemcpyHostToHost), cudaErrorInvalidValue);  // would SIGSEGV
  expectNothingSentAndStillConnected();
  ::munmap(none, kPage);
  ::munmap(readOnly, kPage);
}

// A device-to-host destination is not probed before the call (issue 14: two system calls on every
// small copy); the bytes that arrive for it are dropped where they would land, and the copy fails.
TEST_F(BadInput, UnwritableDeviceToHostDestinationFailsTheCopy) {
  void* readOnly = pages(PROT_READ);
  void* none = pages(PROT_NONE);
  EXPECT_EQ(cudaMemcpy(readOnly, device_, 64, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_EQ(cuMemcpyDtoH(none, reinterpret_cast<CUdeviceptr>(device_), 64), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cudaMemcpyAsync(readOnly, device_, 64, cudaMemcpyDeviceToHost, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy2D(readOnly, 128, device_, 64, 64, 2, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
  EXPECT_EQ(*static_cast<const unsigned char*>(readOnly), 0) << "bytes landed in a read-only page";
  expectStillConnected();
  ::munmap(none, kPage);
  ::munmap(readOnly, kPage);
}

TEST_F(BadInput, OverflowingSizesAreRefused) {
  std::vector<char> host(4096);
  // pitch * (height - 1) + width wraps around 2^64.
  EXPECT_EQ(cudaMemcpy2D(device_, SIZE_MAX / 2 + 1, host.data(), 64, 64, 3, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy2D(device_, 32, host.data(), 64, 64, 3, cudaMemcpyHostToDevice), cudaErrorInvalidPitchValue);
  EXPECT_EQ(cudaMemcpy(device_, host.data(), SIZE_MAX, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  // count * elementSize wraps: 2^62 four-byte elements are 0 bytes without the check.
  EXPECT_EQ(cuMemsetD32(reinterpret_cast<CUdeviceptr>(device_), 0, size_t{1} << 62), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemsetD2D32(reinterpret_cast<CUdeviceptr>(device_), SIZE_MAX / 2, 0, 16, 3), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cudaMemset2D(device_, SIZE_MAX / 2 + 1, 0, 16, 3), cudaErrorInvalidValue);
  expectNothingSentAndStillConnected();
}

TEST_F(BadInput, UnknownHandlesAreInvalidResourceHandle) {
  auto madeUp = reinterpret_cast<void*>(0x1234);  // would fault if dereferenced
  EXPECT_EQ(cudaStreamSynchronize(static_cast<cudaStream_t>(madeUp)), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaMemcpyAsync(device_, device_, 64, cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(madeUp)),
            cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaEventRecord(static_cast<cudaEvent_t>(madeUp), nullptr), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cuStreamQuery(static_cast<CUstream>(madeUp)), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuEventSynchronize(static_cast<CUevent>(madeUp)), CUDA_ERROR_INVALID_HANDLE);
  CUfunction function = nullptr;
  EXPECT_EQ(cuModuleGetFunction(&function, static_cast<CUmodule>(madeUp), "kernel"), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuLaunchKernel(static_cast<CUfunction>(madeUp), 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr),
            CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(device_), 0, 64, static_cast<CUstream>(madeUp)),
            CUDA_ERROR_INVALID_HANDLE);
  expectNothingSentAndStillConnected();
}

TEST_F(BadInput, DestroyedHandlesAreInvalidResourceHandle) {
  cudaStream_t stream = nullptr;
  cudaEvent_t event = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&event), cudaSuccess);
  ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);
  ASSERT_EQ(cudaEventDestroy(event), cudaSuccess);
  // The destroys are one-way calls, written with the next batch: a round trip makes sure tallyd
  // has counted them before the count the refused calls must leave unchanged is taken.
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  callsBefore_ = server->calls();
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaStreamDestroy(stream), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaEventQuery(event), cudaErrorInvalidResourceHandle);
  expectNothingSentAndStillConnected();
}

std::atomic<int> trapRuns{0};
void trap(void*) { trapRuns.fetch_add(1); }
void mark(void* flag) { static_cast<std::atomic<int>*>(flag)->store(1); }

TEST_F(BadInput, HostCallbackNoticesNameOnlyIssuedIds) {
  std::atomic<int> ran{0};
  ASSERT_EQ(cudaLaunchHostFunc(nullptr, mark, &ran), cudaSuccess);
  for (int i = 0; i < 500 && server->hostFuncCallbacks().empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ASSERT_EQ(server->hostFuncCallbacks().size(), 1u);
  uint64_t issued = server->hostFuncCallbacks()[0];
  // A hostile tallyd names a code address (what the wire used to carry), then an unknown id.
  server->sendHostFuncReady(1, reinterpret_cast<uint64_t>(&trap));
  server->sendHostFuncReady(1, issued + 1);
  server->sendHostFuncReady(1, issued);
  server->sendHostFuncReady(1, issued);  // replayed: runs once only
  for (int i = 0; i < 500 && ran.load() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_EQ(ran.load(), 1);
  EXPECT_EQ(trapRuns.load(), 0);
  expectStillConnected();
}

// No capture begun, so no stream is capturing: the queries PyTorch's allocator makes with every
// allocation say so for real streams and refuse what is not one; the per-thread capture mode is
// swapped as the runtime swaps it. (Captures: graph_client_test.cc.)
TEST(StreamCapture, QueriesSayNoStreamIsCapturing) {
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  for (cudaStream_t s : {cudaStream_t{}, cudaStreamLegacy, stream}) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusActive;
    EXPECT_EQ(cudaStreamIsCapturing(s, &status), cudaSuccess);
    EXPECT_EQ(status, cudaStreamCaptureStatusNone);
  }
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusActive;
  unsigned long long id = 42;
  size_t dependencies = 7;
  EXPECT_EQ(cudaStreamGetCaptureInfo(stream, &status, &id, nullptr, nullptr, nullptr, &dependencies), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusNone);
  EXPECT_EQ(id, 0u);
  EXPECT_EQ(dependencies, 0u);
  CUstreamCaptureStatus driverStatus = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  EXPECT_EQ(cuStreamIsCapturing(reinterpret_cast<CUstream>(stream), &driverStatus), CUDA_SUCCESS);
  EXPECT_EQ(driverStatus, CU_STREAM_CAPTURE_STATUS_NONE);

  auto* bogus = reinterpret_cast<cudaStream_t>(uintptr_t{0x1000});
  EXPECT_EQ(cudaStreamIsCapturing(bogus, &status), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaStreamIsCapturing(stream, nullptr), cudaErrorInvalidValue);
  (void)cudaGetLastError();
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

TEST(StreamCapture, CaptureModeIsPerThreadAndSwapped) {
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  ASSERT_EQ(cudaThreadExchangeStreamCaptureMode(&mode), cudaSuccess);
  EXPECT_EQ(mode, cudaStreamCaptureModeGlobal);  // the default
  std::thread([] {
    cudaStreamCaptureMode other = cudaStreamCaptureModeThreadLocal;
    EXPECT_EQ(cudaThreadExchangeStreamCaptureMode(&other), cudaSuccess);
    EXPECT_EQ(other, cudaStreamCaptureModeGlobal);  // another thread's own default
  }).join();
  ASSERT_EQ(cudaThreadExchangeStreamCaptureMode(&mode), cudaSuccess);
  EXPECT_EQ(mode, cudaStreamCaptureModeRelaxed);  // what this thread set
  auto invalid = static_cast<cudaStreamCaptureMode>(7);
  EXPECT_EQ(cudaThreadExchangeStreamCaptureMode(&invalid), cudaErrorInvalidValue);
  (void)cudaGetLastError();
}

TEST_F(BadInput, TensorMapsNeedAMapARankAndItsArrays) {
  alignas(64) CUtensorMap map;
  cuuint64_t dims[2] = {64, 64}, strides[1] = {256};
  cuuint32_t box[2] = {16, 16}, elementStrides[2] = {1, 1};
  auto encode = [&](CUtensorMap* m, cuuint32_t rank, const cuuint64_t* s) {
    return cuTensorMapEncodeTiled(m, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, rank, device_, dims, s, box, elementStrides,
                                  CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                                  CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  };
  EXPECT_EQ(encode(nullptr, 2, strides), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(encode(&map, 0, strides), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(encode(&map, 6, strides), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(encode(&map, 2, nullptr), CUDA_ERROR_INVALID_VALUE);  // rank 2 needs one stride
  expectNothingSentAndStillConnected();
}

}  // namespace

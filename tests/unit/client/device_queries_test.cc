// Device and stream queries the client answers itself (client/api/device.cc,
// client/api/stream_event.cc): PCI bus ids both ways, the cache and shared-memory preferences,
// device choice, peer queries on one GPU, stream ids and devices. Against the fake tallyd.
#include "fake_tallyd.h"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

// cudaDeviceGetSharedMemConfig is deprecated but still exported; programs still call it.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace {

[[maybe_unused]] auto* const server = &tally::testing::processFakeTallyd();

TEST(DeviceQueries, APciBusIdNamesItsDevice) {
  char id[32] = {};
  ASSERT_EQ(cudaDeviceGetPCIBusId(id, sizeof id, 0), cudaSuccess);
  int device = -1;
  EXPECT_EQ(cudaDeviceGetByPCIBusId(&device, id), cudaSuccess);
  EXPECT_EQ(device, 0);
  CUdevice driverDevice = -1;
  EXPECT_EQ(cuDeviceGetByPCIBusId(&driverDevice, id), CUDA_SUCCESS);
  EXPECT_EQ(driverDevice, 0);
  EXPECT_EQ(cudaDeviceGetByPCIBusId(&device, "0000:ff:1f.0"), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaDeviceGetByPCIBusId(&device, "not a bus id"), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaDeviceGetByPCIBusId(nullptr, id), cudaErrorInvalidValue);
}

TEST(DeviceQueries, PreferencesReadBackWhatWasSet) {
  ASSERT_EQ(cudaDeviceSetCacheConfig(cudaFuncCachePreferShared), cudaSuccess);
  cudaFuncCache cache = cudaFuncCachePreferNone;
  ASSERT_EQ(cudaDeviceGetCacheConfig(&cache), cudaSuccess);
  EXPECT_EQ(cache, cudaFuncCachePreferShared);
  CUfunc_cache driverCache = CU_FUNC_CACHE_PREFER_NONE;
  ASSERT_EQ(cuCtxGetCacheConfig(&driverCache), CUDA_SUCCESS);
  EXPECT_EQ(driverCache, CU_FUNC_CACHE_PREFER_SHARED);
  EXPECT_EQ(cudaDeviceSetCacheConfig(static_cast<cudaFuncCache>(9)), cudaErrorInvalidValue);
  cudaSharedMemConfig bank = cudaSharedMemBankSizeDefault;
  EXPECT_EQ(cudaDeviceGetSharedMemConfig(&bank), cudaSuccess);
  EXPECT_EQ(bank, cudaSharedMemBankSizeFourByte);
}

TEST(DeviceQueries, ChoosingAndValidDevices) {
  cudaDeviceProp want{};
  want.major = 9;
  int device = -1;
  EXPECT_EQ(cudaChooseDevice(&device, &want), cudaSuccess);
  EXPECT_EQ(device, 0);
  int valid[] = {0};
  EXPECT_EQ(cudaSetValidDevices(valid, 1), cudaSuccess);
  int invalid[] = {0, 7};
  EXPECT_EQ(cudaSetValidDevices(invalid, 2), cudaErrorInvalidDevice);
}

TEST(DeviceQueries, OneGpuHasNoPeer) {
  int value = -1;
  EXPECT_EQ(cudaDeviceGetP2PAttribute(&value, cudaDevP2PAttrAccessSupported, 0, 0), cudaErrorInvalidDevice);
  int can = -1;
  EXPECT_EQ(cuDeviceCanAccessPeer(&can, 0, 0), CUDA_SUCCESS);
  EXPECT_EQ(can, 0);
  EXPECT_EQ(cuDeviceCanAccessPeer(&can, 0, 5), CUDA_ERROR_INVALID_DEVICE);
}

TEST(StreamQueries, IdsAreDistinctAndDevicesKnown) {
  cudaStream_t a = nullptr, b = nullptr;
  ASSERT_EQ(cudaStreamCreate(&a), cudaSuccess);
  ASSERT_EQ(cudaStreamCreate(&b), cudaSuccess);
  unsigned long long idA = 0, idB = 0, idLegacy = 0;
  ASSERT_EQ(cudaStreamGetId(a, &idA), cudaSuccess);
  ASSERT_EQ(cudaStreamGetId(b, &idB), cudaSuccess);
  ASSERT_EQ(cudaStreamGetId(nullptr, &idLegacy), cudaSuccess);
  EXPECT_NE(idA, idB);
  EXPECT_NE(idA, idLegacy);
  unsigned long long driverId = 0;
  ASSERT_EQ(cuStreamGetId(reinterpret_cast<CUstream>(a), &driverId), CUDA_SUCCESS);
  EXPECT_EQ(driverId, idA);
  int device = -1;
  ASSERT_EQ(cudaStreamGetDevice(a, &device), cudaSuccess);
  EXPECT_EQ(device, 0);
  EXPECT_EQ(cudaStreamGetId(reinterpret_cast<cudaStream_t>(0x1234), &idA), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaStreamDestroy(a), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(b), cudaSuccess);
}

}  // namespace

namespace {

// cuPointerGetAttributes answers a pointer the driver knows like the singular call, and gives a
// pointer it does not know the zero defaults instead of an error (as natively).
TEST(DeviceQueries, PointerAttributesOfKnownAndUnknownPointers) {
  void* device = nullptr;
  ASSERT_EQ(cudaMalloc(&device, 256), cudaSuccess);
  CUpointer_attribute which[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                 CU_POINTER_ATTRIBUTE_CONTEXT, CU_POINTER_ATTRIBUTE_IS_MANAGED};
  unsigned type = 0, managed = 7;
  int ordinal = -1;
  CUcontext ctx = nullptr;
  void* out[] = {&type, &ordinal, &ctx, &managed};
  ASSERT_EQ(cuPointerGetAttributes(4, which, out, reinterpret_cast<CUdeviceptr>(device)), CUDA_SUCCESS);
  EXPECT_EQ(type, static_cast<unsigned>(CU_MEMORYTYPE_DEVICE));
  EXPECT_EQ(ordinal, 0);
  CUcontext primary = nullptr;
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&primary, 0), CUDA_SUCCESS);
  EXPECT_EQ(ctx, primary);
  EXPECT_EQ(managed, 0u);
  unsigned singular = 0;
  EXPECT_EQ(cuPointerGetAttribute(&singular, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, reinterpret_cast<CUdeviceptr>(device)),
            CUDA_SUCCESS);
  EXPECT_EQ(singular, type);
  // The allocation's range, from inside it.
  CUdeviceptr inside = reinterpret_cast<CUdeviceptr>(device) + 100, base = 0;
  size_t size = 0;
  unsigned mapped = 0;
  EXPECT_EQ(cuPointerGetAttribute(&base, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, inside), CUDA_SUCCESS);
  EXPECT_EQ(cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, inside), CUDA_SUCCESS);
  EXPECT_EQ(cuPointerGetAttribute(&mapped, CU_POINTER_ATTRIBUTE_MAPPED, inside), CUDA_SUCCESS);
  EXPECT_EQ(base, reinterpret_cast<CUdeviceptr>(device));
  EXPECT_GE(size, 256u);
  EXPECT_EQ(mapped, 1u);

  int onStack = 0;
  type = 9;
  ordinal = 9;
  ctx = primary;
  managed = 9;
  ASSERT_EQ(cuPointerGetAttributes(4, which, out, reinterpret_cast<CUdeviceptr>(&onStack)), CUDA_SUCCESS);
  EXPECT_EQ(type, 0u);
  EXPECT_EQ(ordinal, 0);
  EXPECT_EQ(ctx, nullptr);
  EXPECT_EQ(managed, 0u);
  EXPECT_EQ(cuPointerGetAttribute(&singular, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, reinterpret_cast<CUdeviceptr>(&onStack)),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cudaFree(device), cudaSuccess);
}

}  // namespace

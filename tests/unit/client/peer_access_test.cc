// Peer access through the client (client/api/peer_access.cc), against the fake tallyd offering
// two GPUs that are peers: the answers come from the Welcome's P2P attributes, and enabling is
// the client's bookkeeping with the native error codes.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "tests/unit/client/fake_tallyd.h"

namespace {

using tally::testing::FakeTallyd;

FakeTallyd* const server = [] {
  FakeTallyd* s = &tally::testing::processFakeTallyd();
  s->offerDevices(2);
  return s;
}();

TEST(PeerAccess, QueriesAnswerFromTheWelcome) {
  int can = -1;
  ASSERT_EQ(cudaDeviceCanAccessPeer(&can, 0, 1), cudaSuccess);
  EXPECT_EQ(can, 1);
  ASSERT_EQ(cudaDeviceCanAccessPeer(&can, 1, 1), cudaSuccess);
  EXPECT_EQ(can, 0);  // a device is not its own peer
  EXPECT_EQ(cudaDeviceCanAccessPeer(&can, 0, 2), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaDeviceCanAccessPeer(nullptr, 0, 1), cudaErrorInvalidValue);
  ASSERT_EQ(cuDeviceCanAccessPeer(&can, 1, 0), CUDA_SUCCESS);
  EXPECT_EQ(can, 1);
  int value = -1;
  ASSERT_EQ(cudaDeviceGetP2PAttribute(&value, cudaDevP2PAttrNativeAtomicSupported, 0, 1), cudaSuccess);
  EXPECT_EQ(value, 1);
  ASSERT_EQ(cuDeviceGetP2PAttribute(&value, CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK, 1, 0), CUDA_SUCCESS);
  EXPECT_EQ(value, 0);
  EXPECT_EQ(cudaDeviceGetP2PAttribute(&value, cudaDevP2PAttrAccessSupported, 1, 1), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaDeviceGetP2PAttribute(&value, static_cast<cudaDeviceP2PAttr>(99), 0, 1), cudaErrorInvalidValue);
}

TEST(PeerAccess, EnableOnceDisableOnce) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  EXPECT_EQ(cudaDeviceEnablePeerAccess(0, 0), cudaErrorInvalidDevice);  // itself
  EXPECT_EQ(cudaDeviceEnablePeerAccess(1, 1), cudaErrorInvalidValue);   // flags must be 0
  EXPECT_EQ(cudaDeviceDisablePeerAccess(1), cudaErrorPeerAccessNotEnabled);
  EXPECT_EQ(cudaDeviceEnablePeerAccess(1, 0), cudaSuccess);
  EXPECT_EQ(cudaDeviceEnablePeerAccess(1, 0), cudaErrorPeerAccessAlreadyEnabled);
  EXPECT_EQ(cudaDeviceDisablePeerAccess(1), cudaSuccess);
  EXPECT_EQ(cudaDeviceDisablePeerAccess(1), cudaErrorPeerAccessNotEnabled);
}

TEST(PeerAccess, DriverContextsNameTheirDevices) {
  CUcontext c0 = nullptr, c1 = nullptr;
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&c0, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&c1, 1), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSetCurrent(c1), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxEnablePeerAccess(c0, 0), CUDA_SUCCESS);  // device 1 reaches device 0
  EXPECT_EQ(cuCtxEnablePeerAccess(c0, 0), CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
  EXPECT_EQ(cuCtxEnablePeerAccess(c1, 0), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(cuCtxEnablePeerAccess(reinterpret_cast<CUcontext>(0x1234), 0), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuCtxDisablePeerAccess(c0), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxDisablePeerAccess(c0), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
}

}  // namespace

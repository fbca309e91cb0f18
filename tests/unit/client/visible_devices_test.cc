// CUDA_VISIBLE_DEVICES through the client, against the fake tallyd offering two GPUs: the
// client sends the variable's entries in its Hello (tallyd selects and renumbers its GPUs:
// server/session/device_visibility.h), numbers the GPUs of the Welcome from 0, and names them by
// those numbers on the wire (tallyd's Tenant::gpu maps them to its own).
#include "fake_tallyd.h"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace {

using tally::testing::FakeTallyd;

FakeTallyd* const server = [] {
  FakeTallyd* s = &tally::testing::processFakeTallyd();
  s->offerDevices(2);
  ::setenv("CUDA_VISIBLE_DEVICES", "1,GPU-1111,MIG-x", 1);  // before the client connects
  return s;
}();

TEST(VisibleDevices, TheEntriesTravelInTheHelloAsTheApplicationHasThem) {
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  EXPECT_EQ(count, 2);  // what the (fake) tallyd offers after selecting
  auto [restricts, entries] = server->helloDevices();
  EXPECT_TRUE(restricts);
  EXPECT_EQ(entries, (std::vector<std::string>{"1", "GPU-1111", "MIG-x"}));
}

TEST(VisibleDevices, DevicesAreNumberedAsTheWelcomeListsThem) {
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 16), cudaSuccess);
  EXPECT_EQ(server->lastAllocDevice(), 1u);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  CUdevice device = -1;
  EXPECT_EQ(cuDeviceGet(&device, 1), CUDA_SUCCESS);
  EXPECT_EQ(device, 1);
  EXPECT_EQ(cuDeviceGet(&device, 2), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(cudaSetDevice(2), cudaErrorInvalidDevice);
  cudaGetLastError();
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  EXPECT_EQ(prop.totalGlobalMem, 0u);  // the fake sends no raw properties
  cudaUUID_t uuid{};
  ASSERT_EQ(cuDeviceGetUuid(reinterpret_cast<CUuuid*>(&uuid), 1), CUDA_SUCCESS);
  EXPECT_EQ(static_cast<unsigned char>(uuid.bytes[0]), 0x22);
}

}  // namespace

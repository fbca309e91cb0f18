// cudaMallocManaged and kin against the fake tallyd (client/api/managed_memory.cc). Built three
// ways: TALLY_TEST_MANAGED_MODE 2, the fake maps the memory at the client's own address (as
// tallyd over a Unix socket); 1, it maps it elsewhere (the address taken in tallyd); 0, no shared
// memory (as over TCP). Only mode 2 gives managed memory; the others answer NotSupported and
// leave nothing mapped.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstring>

#include "tests/unit/client/fake_tallyd.h"

namespace {

using tally::testing::FakeTallyd;
namespace wire = tally::wire;

FakeTallyd* const server = [] {
  FakeTallyd* s = &tally::testing::processFakeTallyd();
  s->offerSharedHostMemory(TALLY_TEST_MANAGED_MODE != 0);
  s->mapHostAtClientAddress(TALLY_TEST_MANAGED_MODE == 2);
  return s;
}();

TEST(ManagedMemory, ArgumentsAreChecked) {
  void* p = nullptr;
  EXPECT_EQ(cudaMallocManaged(nullptr, 64, cudaMemAttachGlobal), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMallocManaged(&p, 0, cudaMemAttachGlobal), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMallocManaged(&p, 64, 0x7), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMallocManaged(&p, 64, cudaMemAttachSingle), cudaErrorInvalidValue);  // not for allocations
  int local = 0;
  cudaMemLocation device{cudaMemLocationTypeDevice, 0};
  EXPECT_EQ(cudaMemAdvise(&local, sizeof(local), cudaMemAdviseSetReadMostly, device), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemPrefetchAsync(&local, sizeof(local), device, 0, nullptr), cudaErrorInvalidValue);
}

#if TALLY_TEST_MANAGED_MODE == 2

TEST(ManagedMemory, OnePointerForTheHostAndTheDevice) {
  float* data = nullptr;
  ASSERT_EQ(cudaMallocManaged(reinterpret_cast<void**>(&data), 1000 * sizeof(float), cudaMemAttachGlobal), cudaSuccess);
  ASSERT_NE(data, nullptr);
  for (int i = 0; i < 1000; ++i) data[i] = static_cast<float>(i);  // host memory of this process
  // tallyd's mapping of the same memfd sees the host's writes.
  bool mapped = false;
  for (const auto& m : server->hostMappings()) {
    if (m.clientAddress != reinterpret_cast<uint64_t>(data)) continue;
    mapped = true;
    float seen = 0;
    std::memcpy(&seen, m.local + 7 * sizeof(float), sizeof(float));
    EXPECT_EQ(seen, 7.0f);
  }
  EXPECT_TRUE(mapped);
  cudaPointerAttributes attr{};
  ASSERT_EQ(cudaPointerGetAttributes(&attr, data + 3), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeManaged);
  EXPECT_EQ(attr.devicePointer, data + 3);
  EXPECT_EQ(attr.hostPointer, data + 3);
  cudaMemLocation device{cudaMemLocationTypeDevice, 0};
  EXPECT_EQ(cudaMemPrefetchAsync(data, 1000 * sizeof(float), device, 0, nullptr), cudaSuccess);
  EXPECT_EQ(cudaMemAdvise(data, 1000 * sizeof(float), cudaMemAdviseSetReadMostly, device), cudaSuccess);
  EXPECT_EQ(cudaMemPrefetchAsync(data, 2000 * sizeof(float) + 4096 * 4, device, 0, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFreeHost(data), cudaErrorInvalidValue);  // managed memory goes with cudaFree
  EXPECT_EQ(cudaFree(data + 1), cudaErrorInvalidValue);  // an interior pointer
  uint64_t unregisters = server->callsOf(wire::Call::HOST_UNREGISTER);
  EXPECT_EQ(cudaFree(data), cudaSuccess);
  EXPECT_EQ(server->callsOf(wire::Call::HOST_UNREGISTER), unregisters + 1);
}

TEST(ManagedMemory, MemsetsWaitForTheStreamThenWriteTheHostPages) {
  unsigned char* bytes = nullptr;
  ASSERT_EQ(cudaMallocManaged(reinterpret_cast<void**>(&bytes), 8192, cudaMemAttachGlobal), cudaSuccess);
  std::memset(bytes, 0, 8192);
  uint64_t syncs = server->callsOf(wire::Call::STREAM_SYNCHRONIZE);
  uint64_t memsets = server->callsOf(wire::Call::MEMSET);
  ASSERT_EQ(cudaMemsetAsync(bytes + 100, 0x5a, 1000, nullptr), cudaSuccess);
  EXPECT_EQ(server->callsOf(wire::Call::STREAM_SYNCHRONIZE), syncs + 1) << "after the stream's earlier work";
  EXPECT_EQ(server->callsOf(wire::Call::MEMSET), memsets) << "no device memset: the bytes are the host's";
  EXPECT_EQ(bytes[99], 0);
  EXPECT_EQ(bytes[100], 0x5a);
  EXPECT_EQ(bytes[1099], 0x5a);
  EXPECT_EQ(bytes[1100], 0);
  EXPECT_EQ(cuMemsetD32(reinterpret_cast<CUdeviceptr>(bytes) + 4096, 0x01020304, 4), CUDA_SUCCESS);
  EXPECT_EQ(bytes[4096], 0x04);
  EXPECT_EQ(bytes[4099], 0x01);
  EXPECT_EQ(cudaMemset(bytes + 8000, 1, 8192), cudaErrorInvalidValue) << "past the allocation";
  EXPECT_EQ(cudaFree(bytes), cudaSuccess);
}

TEST(ManagedMemory, CopiesWithManagedSidesGoWhereTheBytesAre) {
  unsigned char* a = nullptr;
  unsigned char* b = nullptr;
  ASSERT_EQ(cudaMallocManaged(reinterpret_cast<void**>(&a), 4096, cudaMemAttachGlobal), cudaSuccess);
  ASSERT_EQ(cudaMallocManaged(reinterpret_cast<void**>(&b), 4096, cudaMemAttachHost), cudaSuccess);
  for (int i = 0; i < 4096; ++i) a[i] = static_cast<unsigned char>(i * 3);
  uint64_t copies = server->callsOf(wire::Call::MEMCPY);
  // Named device-to-device, both managed: a host copy after the stream's work, not a device one.
  ASSERT_EQ(cudaMemcpyAsync(b, a, 4096, cudaMemcpyDeviceToDevice, nullptr), cudaSuccess);
  EXPECT_EQ(server->callsOf(wire::Call::MEMCPY), copies);
  EXPECT_EQ(std::memcmp(a, b, 4096), 0);
  EXPECT_EQ(cudaFree(a), cudaSuccess);
  EXPECT_EQ(cudaFree(b), cudaSuccess);
}

#else

TEST(ManagedMemory, NotSupportedWithoutSharedMemoryAtTheSameAddress) {
  void* p = nullptr;
  uint64_t registers = server->callsOf(wire::Call::HOST_REGISTER);
  uint64_t unregisters = server->callsOf(wire::Call::HOST_UNREGISTER);
  EXPECT_EQ(cudaMallocManaged(&p, 4096, cudaMemAttachGlobal), cudaErrorNotSupported);
  EXPECT_EQ(cuMemAllocManaged(reinterpret_cast<CUdeviceptr*>(&p), 4096, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_NOT_SUPPORTED);
  // Mapped elsewhere: tallyd let go of it again; no shared memory: never asked.
  EXPECT_EQ(server->callsOf(wire::Call::HOST_REGISTER) - registers, TALLY_TEST_MANAGED_MODE == 1 ? 2u : 0u);
  EXPECT_EQ(server->callsOf(wire::Call::HOST_UNREGISTER) - unregisters, TALLY_TEST_MANAGED_MODE == 1 ? 2u : 0u);
  EXPECT_TRUE(server->hostMappings().empty());
}

#endif

}  // namespace

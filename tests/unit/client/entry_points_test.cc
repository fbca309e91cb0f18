// cuGetProcAddress and cudaGetDriverEntryPoint[ByVersion] through the preloaded client: what it
// implements is found, a generated NotSupported stub is not (so feature probes take their
// fallback), and every driver function PyTorch requires at start-up is found. Stream memory
// operations and the virtual-memory handle queries PyTorch resolves that way, against the fake
// tallyd.
#include "fake_tallyd.h"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <thread>

// cudaGetDriverEntryPoint is deprecated in CUDA 13 but still exported (PyTorch calls it first).
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace {

using tally::testing::FakeTallyd;

FakeTallyd* const server = &tally::testing::processFakeTallyd();

class EntryPoints : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(cuInit(0), CUDA_SUCCESS); }
};

// PyTorch 2.11, c10/cuda/driver_api.h: C10_LIBCUDA_DRIVER_API_REQUIRED. c10/cuda/driver_api.cpp
// resolves each through cudaGetDriverEntryPointByVersion (then cudaGetDriverEntryPoint) and
// asserts that it was found, at the first use of its driver API.
constexpr const char* kPyTorchRequired[] = {
    "cuDeviceGet",
    "cuDeviceGetAttribute",
    "cuMemGetAddressRange",
    "cuMemAddressReserve",
    "cuMemRelease",
    "cuMemMap",
    "cuMemAddressFree",
    "cuMemSetAccess",
    "cuMemUnmap",
    "cuMemCreate",
    "cuMemGetAllocationGranularity",
    "cuMemExportToShareableHandle",
    "cuMemImportFromShareableHandle",
    "cuMemRetainAllocationHandle",
    "cuMemGetAllocationPropertiesFromHandle",
    "cuMemsetD32Async",
    "cuStreamWriteValue32",
    "cuGetErrorString",
};

TEST_F(EntryPoints, ImplementedFunctionsAreFound) {
  for (const char* name : {"cuMemAlloc", "cuStreamWriteValue32", "cuLaunchKernel"}) {
    void* fn = nullptr;
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    EXPECT_EQ(cuGetProcAddress(name, &fn, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &status), CUDA_SUCCESS) << name;
    EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SUCCESS) << name;
    EXPECT_NE(fn, nullptr) << name;
  }
  void* fn = nullptr;
  ASSERT_EQ(cuGetProcAddress("cuMemAlloc", &fn, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(fn, reinterpret_cast<void*>(&cuMemAlloc));  // cuMemAlloc_v2 through cuda.h's rename
}

// Declared by cuda.h only under CUDA_API_PER_THREAD_DEFAULT_STREAM.
extern "C" CUresult CUDAAPI cuMemcpy3DPeerAsync_ptsz(const CUDA_MEMCPY3D_PEER* p, CUstream stream);

TEST_F(EntryPoints, GeneratedStubsAreNotFound) {
  void* fn = &fn;
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
  EXPECT_EQ(cuGetProcAddress("cuImportExternalMemory", &fn, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &status),
            CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  EXPECT_EQ(fn, nullptr);
  // The per-thread-default-stream twin of a stub is a stub too ...
  fn = &fn;
  EXPECT_EQ(cuGetProcAddress("cuGraphicsMapResources", &fn, CUDA_VERSION, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
                             &status),
            CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(fn, nullptr);
  // ... and the twin of an implemented function is found: it is that function on the thread's
  // per-thread default stream.
  EXPECT_EQ(cuGetProcAddress("cuMemcpy3DPeerAsync", &fn, CUDA_VERSION, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
                             &status),
            CUDA_SUCCESS);
  EXPECT_EQ(fn, reinterpret_cast<void*>(&cuMemcpy3DPeerAsync_ptsz));
  // Unknown names as before.
  EXPECT_EQ(cuGetProcAddress("cuNoSuchFunction", &fn, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &status),
            CUDA_ERROR_NOT_FOUND);
}

TEST_F(EntryPoints, RuntimeLookupsReportThroughStatus) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
  EXPECT_EQ(cudaGetDriverEntryPoint("cuMemAlloc", &fn, cudaEnableDefault, &status), cudaSuccess);
  EXPECT_EQ(status, cudaDriverEntryPointSuccess);
  EXPECT_NE(fn, nullptr);
  fn = &fn;
  EXPECT_EQ(cudaGetDriverEntryPoint("cuImportExternalMemory", &fn, cudaEnableDefault, &status), cudaSuccess);
  EXPECT_EQ(status, cudaDriverEntryPointSymbolNotFound);
  EXPECT_EQ(fn, nullptr);
  fn = &fn;
  EXPECT_EQ(cudaGetDriverEntryPointByVersion("cuImportExternalMemory", &fn, CUDART_VERSION, cudaEnableDefault, &status),
            cudaSuccess);
  EXPECT_EQ(status, cudaDriverEntryPointSymbolNotFound);
  EXPECT_EQ(fn, nullptr);
}

TEST_F(EntryPoints, EveryFunctionPyTorchRequiresIsFound) {
  // PyTorch asks with the version it was built against (CUDA 12.x or 13.x wheels).
  for (unsigned version : {12030u, 12080u, 13000u}) {
    for (const char* name : kPyTorchRequired) {
      void* fn = nullptr;
      cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
      EXPECT_EQ(cudaGetDriverEntryPointByVersion(name, &fn, version, cudaEnableDefault, &status), cudaSuccess);
      EXPECT_EQ(status, cudaDriverEntryPointSuccess) << name << " at " << version;
      EXPECT_NE(fn, nullptr) << name << " at " << version;
    }
  }
}

TEST_F(EntryPoints, SharingAllocationsBetweenProcessesIsNotSupported) {
  int fd = -1;
  CUmemGenericAllocationHandle handle = 0;
  EXPECT_EQ(cuMemExportToShareableHandle(&fd, 1, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(cuMemImportFromShareableHandle(&handle, reinterpret_cast<void*>(static_cast<intptr_t>(3)),
                                           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
            CUDA_ERROR_NOT_SUPPORTED);
}

CUmemAllocationProp deviceProperties() {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  prop.allocFlags.gpuDirectRDMACapable = 1;
  return prop;
}

TEST_F(EntryPoints, AllocationPropertiesComeBackFromTheHandle) {
  CUmemAllocationProp prop = deviceProperties();
  CUmemGenericAllocationHandle handle = 0;
  ASSERT_EQ(cuMemCreate(&handle, 2u << 20, &prop, 0), CUDA_SUCCESS);
  CUmemAllocationProp seen{};
  ASSERT_EQ(cuMemGetAllocationPropertiesFromHandle(&seen, handle), CUDA_SUCCESS);
  EXPECT_EQ(std::memcmp(&seen, &prop, sizeof prop), 0);
  EXPECT_EQ(cuMemGetAllocationPropertiesFromHandle(nullptr, handle), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMemRelease(handle), CUDA_SUCCESS);
  EXPECT_EQ(cuMemGetAllocationPropertiesFromHandle(&seen, handle), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(EntryPoints, AHandleReleasedWhileMappedKeepsItsProperties) {
  CUmemAllocationProp prop = deviceProperties();
  CUmemGenericAllocationHandle handle = 0;
  CUdeviceptr base = 0x7f5000000000;
  ASSERT_EQ(cuMemCreate(&handle, 2u << 20, &prop, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemMap(base, 2u << 20, 0, handle, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemRelease(handle), CUDA_SUCCESS);
  CUmemAllocationProp seen{};
  EXPECT_EQ(cuMemGetAllocationPropertiesFromHandle(&seen, handle), CUDA_SUCCESS);
  ASSERT_EQ(cuMemUnmap(base, 2u << 20), CUDA_SUCCESS);
  EXPECT_EQ(cuMemGetAllocationPropertiesFromHandle(&seen, handle), CUDA_ERROR_INVALID_VALUE);
}

// --- stream memory operations -----------------------------------------------------------------

constexpr CUdeviceptr kWord = 0x7f0000200000;

TEST(StreamMemoryOps, AWriteIsOneOneWayMessage) {
  uint64_t before = server->callsOf(tally::wire::Call::STREAM_MEM_OPS);
  ASSERT_EQ(cuStreamWriteValue32(nullptr, kWord, 7, CU_STREAM_WRITE_VALUE_DEFAULT), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);  // flushes the batch of one-way calls
  EXPECT_EQ(server->callsOf(tally::wire::Call::STREAM_MEM_OPS), before + 1);
  auto ops = server->lastStreamMemOps();
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_EQ(ops[0].operation, static_cast<uint32_t>(CU_STREAM_MEM_OP_WRITE_VALUE_32));
  EXPECT_EQ(ops[0].address, kWord);
  EXPECT_EQ(ops[0].value, 7u);
}

TEST(StreamMemoryOps, ABatchIsOneMessage) {
  CUstreamBatchMemOpParams params[2] = {};
  params[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
  params[0].writeValue.address = kWord;
  params[0].writeValue.value64 = 1ull << 40;
  params[1].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
  params[1].waitValue.address = kWord + 8;
  params[1].waitValue.value = 3;
  params[1].waitValue.flags = CU_STREAM_WAIT_VALUE_EQ;
  uint64_t before = server->callsOf(tally::wire::Call::STREAM_MEM_OPS);
  ASSERT_EQ(cuStreamBatchMemOp(nullptr, 2, params, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(server->callsOf(tally::wire::Call::STREAM_MEM_OPS), before + 1);
  auto ops = server->lastStreamMemOps();
  ASSERT_EQ(ops.size(), 2u);
  EXPECT_EQ(ops[0].value, 1ull << 40);
  EXPECT_EQ(ops[1].operation, static_cast<uint32_t>(CU_STREAM_MEM_OP_WAIT_VALUE_32));
  EXPECT_EQ(ops[1].flags, static_cast<uint32_t>(CU_STREAM_WAIT_VALUE_EQ));
}

TEST(StreamMemoryOps, WordsOfStreamOrderedMemoryAreRefusedAsTheDriverDoes) {
  // tallyd backs cudaMalloc with pooled memory too; only what the application took from a pool
  // is refused (natively: CUDA_ERROR_INVALID_VALUE at the call).
  void* plain = nullptr;
  void* pooled = nullptr;
  ASSERT_EQ(cudaMalloc(&plain, 64), cudaSuccess);
  ASSERT_EQ(cudaMallocAsync(&pooled, 64, nullptr), cudaSuccess);
  ASSERT_NE(pooled, nullptr);
  uint64_t before = server->calls();
  EXPECT_EQ(cuStreamWriteValue32(nullptr, reinterpret_cast<CUdeviceptr>(pooled), 1, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamWaitValue32(nullptr, reinterpret_cast<CUdeviceptr>(pooled) + 4, 1, CU_STREAM_WAIT_VALUE_GEQ),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamWriteValue32(nullptr, reinterpret_cast<CUdeviceptr>(plain), 1, 0), CUDA_SUCCESS);
  ASSERT_EQ(cudaFreeAsync(pooled, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_GE(server->calls(), before + 1);
}

TEST(StreamMemoryOps, WhatTheDriverRefusesAtTheCallIsNotSent) {
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  uint64_t before = server->calls();
  EXPECT_EQ(cuStreamWriteValue32(nullptr, kWord, 1, 0x10), CUDA_ERROR_INVALID_VALUE);     // unknown flag
  EXPECT_EQ(cuStreamWriteValue32(nullptr, kWord + 2, 1, 0), CUDA_ERROR_INVALID_VALUE);    // misaligned
  EXPECT_EQ(cuStreamWriteValue64(nullptr, kWord + 4, 1, 0), CUDA_ERROR_INVALID_VALUE);    // misaligned for 64 bits
  EXPECT_EQ(cuStreamWaitValue32(nullptr, 0, 1, CU_STREAM_WAIT_VALUE_GEQ), CUDA_ERROR_INVALID_VALUE);  // null
  EXPECT_EQ(cuStreamWaitValue32(nullptr, kWord, 1, 7), CUDA_ERROR_INVALID_VALUE);         // no such comparison
  CUstreamBatchMemOpParams op{};
  op.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
  op.writeValue.address = kWord;
  EXPECT_EQ(cuStreamBatchMemOp(nullptr, 1, &op, 1), CUDA_ERROR_INVALID_VALUE);            // flags must be 0
  EXPECT_EQ(cuStreamBatchMemOp(nullptr, 1, nullptr, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamBatchMemOp(nullptr, 256, &op, 0), CUDA_ERROR_INVALID_VALUE);         // "less than 256"
  EXPECT_EQ(server->calls(), before);
}

}  // namespace

namespace {

// Asked with the CUDA version its caller was built for, a lookup returns the generation of that
// ABI; the old generations of these are implemented too (a runtime built for CUDA 13 asks for
// cuDevicePrimaryCtxRelease as of 7.0 and cuEventElapsedTime as of 2.0).
TEST_F(EntryPoints, OlderGenerationsOfImplementedFunctionsAreFound) {
  const std::pair<const char*, int> generations[] = {
      {"cuDevicePrimaryCtxRelease", 7000}, {"cuDevicePrimaryCtxReset", 7000}, {"cuEventElapsedTime", 2000},
      {"cuDeviceGetUuid", 9020},           {"cuIpcOpenMemHandle", 4010},      {"cuGetProcAddress", 11030},
      {"cuCtxSynchronize", 13000},         {"cuCtxGetDevice", 13000},
  };
  for (const auto& [name, version] : generations) {
    void* fn = nullptr;
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    EXPECT_EQ(cuGetProcAddress(name, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &status), CUDA_SUCCESS)
        << name << " as of " << version;
    EXPECT_NE(fn, nullptr) << name;
  }
  using OldProcAddress = CUresult (*)(const char*, void**, int, cuuint64_t);
  void* old = nullptr;
  ASSERT_EQ(cuGetProcAddress("cuGetProcAddress", &old, 11030, CU_GET_PROC_ADDRESS_DEFAULT, nullptr), CUDA_SUCCESS);
  void* launch = nullptr;
  EXPECT_EQ(reinterpret_cast<OldProcAddress>(old)("cuLaunchKernel", &launch, CUDA_VERSION, 0), CUDA_SUCCESS);
  EXPECT_NE(launch, nullptr);
}

TEST_F(EntryPoints, TheContextArgumentOfCuda13SyncAndDeviceQueries) {
  CUcontext primary = nullptr;
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&primary, 0), CUDA_SUCCESS);
  CUdevice device = -1;
  EXPECT_EQ(cuCtxGetDevice_v2(&device, primary), CUDA_SUCCESS);
  EXPECT_EQ(device, 0);
  EXPECT_EQ(cuCtxSynchronize_v2(primary), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxSynchronize_v2(nullptr), CUDA_SUCCESS);
  int notAContext = 0;
  EXPECT_EQ(cuCtxGetDevice_v2(&device, reinterpret_cast<CUcontext>(&notAContext)), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuCtxSynchronize_v2(reinterpret_cast<CUcontext>(&notAContext)), CUDA_ERROR_INVALID_CONTEXT);
}

CUuuid uuidOf(std::initializer_list<unsigned char> bytes) {
  CUuuid id;
  std::copy(bytes.begin(), bytes.end(), reinterpret_cast<unsigned char*>(id.bytes));
  return id;
}

template <typename Fn>
Fn slotOf(const void* table, size_t index) {
  return reinterpret_cast<Fn>(static_cast<const void* const*>(table)[index]);
}

// The tables a statically linked CUDA runtime needs are served (size word first); an unknown one
// is refused with a null table, never something the runtime would misread.
TEST_F(EntryPoints, ExportTablesForAStaticRuntimeAreServedAndUnknownOnesRefused) {
  void* fn = nullptr;
  ASSERT_EQ(cuGetProcAddress("cuGetExportTable", &fn, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, nullptr), CUDA_SUCCESS);
  CUuuid runtimeInterface = uuidOf({0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a, 0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd, 0x9d, 0xf9});
  const void* table = nullptr;
  ASSERT_EQ(cuGetExportTable(&table, &runtimeInterface), CUDA_SUCCESS);
  EXPECT_EQ(static_cast<const uintptr_t*>(table)[0], 13 * sizeof(void*));
  CUcontext viaTable = nullptr, primary = nullptr;
  EXPECT_EQ(slotOf<CUresult (*)(CUcontext*, CUdevice)>(table, 2)(&viaTable, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuDevicePrimaryCtxRetain(&primary, 0), CUDA_SUCCESS);
  EXPECT_EQ(viaTable, primary);

  CUuuid unknown = uuidOf({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16});
  table = &fn;
  EXPECT_EQ(cuGetExportTable(&table, &unknown), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(table, nullptr);
  EXPECT_EQ(cuGetExportTable(nullptr, &runtimeInterface), CUDA_ERROR_INVALID_VALUE);
}

// The integrity answer the runtime checks depends on the time it passes and on the calling
// thread (it recomputes it from its own view), and is the same when asked again alike.
TEST_F(EntryPoints, IntegrityCheckDependsOnTimeAndThread) {
  CUuuid integrity = uuidOf({0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b, 0x8d, 0x34, 0xba, 0x12, 0x3c, 0x66, 0xe1, 0xf2});
  const void* table = nullptr;
  ASSERT_EQ(cuGetExportTable(&table, &integrity), CUDA_SUCCESS);
  using Check = CUresult (*)(unsigned, unsigned long long, unsigned long long*);
  auto check = slotOf<Check>(table, 1);
  auto answer = [&](unsigned version, unsigned long long seconds) {
    std::array<unsigned long long, 2> out{};
    EXPECT_EQ(check(version, seconds, out.data()), CUDA_SUCCESS);
    return out;
  };
  EXPECT_EQ(answer(13000, 1), answer(13000, 2)) << "the first two answers are constants";
  EXPECT_NE(answer(13000, 1), answer(13001, 1));
  auto first = answer(13002, 1000);
  EXPECT_EQ(first, answer(13002, 1000));
  EXPECT_NE(first, answer(13002, 1001));
  std::array<unsigned long long, 2> fromAnotherThread{};
  std::thread([&] { fromAnotherThread = answer(13002, 1000); }).join();
  EXPECT_NE(first, fromAnotherThread);
}

}  // namespace

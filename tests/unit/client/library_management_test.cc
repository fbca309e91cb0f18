// Library management through the client (client/api/module.cc), against the fake tallyd, whose
// every module holds the kernels kFakeKernelNames and the global kFakeGlobalName: counting and
// enumerating kernels (names from tallyd, handles the ordinary ones), kernel names and owners,
// globals, the runtime's cudaLibrary* calls, and a cudaKernel_t from a library launched and
// configured through the runtime's `func` argument; bad arguments get the native errors.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "tests/unit/client/fake_tallyd.h"

namespace {

using tally::testing::FakeTallyd;
using tally::testing::kFakeKernelNames;
namespace wire = tally::wire;

FakeTallyd* const server = [] {
  FakeTallyd* s = &tally::testing::processFakeTallyd();
  s->offerDevices(2);
  return s;
}();

// Any PTX will do: the fake answers for every module alike.
constexpr char kImage[] = ".version 8.0\n.target sm_90\n.address_size 64\n";

class LibraryManagement : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  }
};

CUlibrary loadDriverLibrary() {
  CUlibrary library = nullptr;
  EXPECT_EQ(cuLibraryLoadData(&library, kImage, nullptr, nullptr, 0, nullptr, nullptr, 0), CUDA_SUCCESS);
  return library;
}

cudaLibrary_t loadRuntimeLibrary() {
  cudaLibrary_t library = nullptr;
  EXPECT_EQ(cudaLibraryLoadData(&library, kImage, nullptr, nullptr, 0, nullptr, nullptr, 0), cudaSuccess);
  return library;
}

TEST_F(LibraryManagement, DriverCountsEnumeratesAndNamesTheKernels) {
  CUlibrary library = loadDriverLibrary();
  ASSERT_NE(library, nullptr);
  unsigned count = 0;
  ASSERT_EQ(cuLibraryGetKernelCount(&count, library), CUDA_SUCCESS);
  ASSERT_EQ(count, 3u);
  CUkernel kernels[3] = {};
  ASSERT_EQ(cuLibraryEnumerateKernels(kernels, count, library), CUDA_SUCCESS);
  for (unsigned i = 0; i < count; ++i) {
    const char* name = nullptr;
    ASSERT_EQ(cuKernelGetName(&name, kernels[i]), CUDA_SUCCESS);
    EXPECT_STREQ(name, kFakeKernelNames[i]);  // tallyd's order
    CUlibrary owner = nullptr;
    ASSERT_EQ(cuKernelGetLibrary(&owner, kernels[i]), CUDA_SUCCESS);
    EXPECT_EQ(owner, library);
  }
  // Enumerated handles are the ordinary ones: looking one up by name sends nothing and finds it.
  uint64_t lookups = server->callsOf(wire::Call::MODULE_GET_FUNCTION);
  CUkernel byName = nullptr;
  ASSERT_EQ(cuLibraryGetKernel(&byName, library, "kernel_b"), CUDA_SUCCESS);
  EXPECT_EQ(byName, kernels[1]);
  EXPECT_EQ(server->callsOf(wire::Call::MODULE_GET_FUNCTION), lookups);

  CUfunction function = nullptr;
  ASSERT_EQ(cuKernelGetFunction(&function, kernels[2]), CUDA_SUCCESS);
  const char* name = nullptr;
  ASSERT_EQ(cuFuncGetName(&name, function), CUDA_SUCCESS);
  EXPECT_STREQ(name, "kernel_c");
  CUmodule module = nullptr, libraryModule = nullptr;
  ASSERT_EQ(cuFuncGetModule(&module, function), CUDA_SUCCESS);
  ASSERT_EQ(cuLibraryGetModule(&libraryModule, library), CUDA_SUCCESS);
  EXPECT_EQ(module, libraryModule);
  int threads = 0;
  ASSERT_EQ(cuKernelGetAttribute(&threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, kernels[0], 0), CUDA_SUCCESS);
  EXPECT_EQ(threads, tally::testing::kFakeMaxThreadsPerBlock);
  EXPECT_EQ(cuKernelSetCacheConfig(kernels[0], CU_FUNC_CACHE_PREFER_SHARED, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuLibraryUnload(library), CUDA_SUCCESS);
}

TEST_F(LibraryManagement, EnumeratingFillsWhatFitsAndNoMore) {
  CUlibrary library = loadDriverLibrary();
  int sentinelWord = 0;
  auto* const sentinel = reinterpret_cast<CUkernel>(&sentinelWord);
  CUkernel fewer[3] = {nullptr, nullptr, sentinel};
  ASSERT_EQ(cuLibraryEnumerateKernels(fewer, 2, library), CUDA_SUCCESS);
  EXPECT_NE(fewer[0], nullptr);
  EXPECT_NE(fewer[1], nullptr);
  EXPECT_EQ(fewer[2], sentinel);  // past numKernels: untouched
  CUkernel more[5] = {nullptr, nullptr, nullptr, sentinel, sentinel};
  ASSERT_EQ(cuLibraryEnumerateKernels(more, 5, library), CUDA_SUCCESS);
  EXPECT_EQ(more[0], fewer[0]);
  EXPECT_EQ(more[1], fewer[1]);
  EXPECT_NE(more[2], nullptr);
  EXPECT_EQ(more[3], sentinel);  // past the library's kernels: untouched
  EXPECT_EQ(more[4], sentinel);
  ASSERT_EQ(cuLibraryUnload(library), CUDA_SUCCESS);
}

TEST_F(LibraryManagement, ModuleFunctionsAreEnumeratedToo) {
  CUmodule module = nullptr;
  ASSERT_EQ(cuModuleLoadData(&module, kImage), CUDA_SUCCESS);
  unsigned count = 0;
  ASSERT_EQ(cuModuleGetFunctionCount(&count, module), CUDA_SUCCESS);
  ASSERT_EQ(count, 3u);
  CUfunction functions[3] = {};
  ASSERT_EQ(cuModuleEnumerateFunctions(functions, count, module), CUDA_SUCCESS);
  CUfunction byName = nullptr;
  ASSERT_EQ(cuModuleGetFunction(&byName, module, "kernel_a"), CUDA_SUCCESS);
  EXPECT_EQ(functions[0], byName);
  const char* name = nullptr;
  ASSERT_EQ(cuFuncGetName(&name, functions[1]), CUDA_SUCCESS);
  EXPECT_STREQ(name, "kernel_b");
  ASSERT_EQ(cuModuleUnload(module), CUDA_SUCCESS);
  // The handles die with their module.
  EXPECT_EQ(cuFuncGetName(&name, functions[1]), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuModuleGetFunctionCount(&count, module), CUDA_ERROR_INVALID_HANDLE);
}

TEST_F(LibraryManagement, DriverBadArgumentsGetTheNativeErrorsAndSendNothing) {
  CUlibrary library = loadDriverLibrary();
  CUkernel kernel = nullptr;
  ASSERT_EQ(cuLibraryGetKernel(&kernel, library, "kernel_a"), CUDA_SUCCESS);
  int word = 0;
  auto* madeUpLibrary = reinterpret_cast<CUlibrary>(&word);
  auto* madeUpKernel = reinterpret_cast<CUkernel>(&word);
  unsigned count = 0;
  const char* name = nullptr;
  CUkernel kernels[3] = {};
  uint64_t before = server->calls();
  EXPECT_EQ(cuLibraryGetKernelCount(nullptr, library), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuLibraryGetKernelCount(&count, madeUpLibrary), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuLibraryEnumerateKernels(nullptr, 3, library), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuLibraryEnumerateKernels(kernels, 3, madeUpLibrary), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuModuleGetFunctionCount(nullptr, reinterpret_cast<CUmodule>(library)), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuKernelGetName(nullptr, kernel), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuKernelGetName(&name, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuKernelGetName(&name, madeUpKernel), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuFuncGetName(&name, nullptr), CUDA_ERROR_INVALID_VALUE);
  CUlibrary owner = nullptr;
  EXPECT_EQ(cuKernelGetLibrary(nullptr, kernel), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuKernelGetLibrary(&owner, madeUpKernel), CUDA_ERROR_INVALID_HANDLE);
  CUmodule module = nullptr;
  EXPECT_EQ(cuFuncGetModule(nullptr, reinterpret_cast<CUfunction>(kernel)), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuFuncGetModule(&module, reinterpret_cast<CUfunction>(&word)), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuLibraryGetModule(&module, madeUpLibrary), CUDA_ERROR_INVALID_HANDLE);
  CUfunction function = nullptr;
  EXPECT_EQ(cuKernelGetFunction(&function, madeUpKernel), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuKernelSetCacheConfig(madeUpKernel, CU_FUNC_CACHE_PREFER_L1, 0), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuKernelSetCacheConfig(kernel, CU_FUNC_CACHE_PREFER_L1, 7), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(cuKernelSetCacheConfig(kernel, static_cast<CUfunc_cache>(9), 0), CUDA_ERROR_INVALID_VALUE);
  CUdeviceptr ptr = 0;
  EXPECT_EQ(cuLibraryGetGlobal(nullptr, nullptr, library, tally::testing::kFakeGlobalName), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuLibraryGetGlobal(&ptr, nullptr, library, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuLibraryGetGlobal(&ptr, nullptr, madeUpLibrary, "x"), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(server->calls(), before);

  ASSERT_EQ(cuLibraryUnload(library), CUDA_SUCCESS);
  EXPECT_EQ(cuKernelGetName(&name, kernel), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuLibraryGetKernelCount(&count, library), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuLibraryUnload(library), CUDA_ERROR_INVALID_HANDLE);
}

TEST_F(LibraryManagement, GlobalsComeFromTallyd) {
  CUlibrary library = loadDriverLibrary();
  CUdeviceptr ptr = 0;
  size_t bytes = 0;
  ASSERT_EQ(cuLibraryGetGlobal(&ptr, &bytes, library, tally::testing::kFakeGlobalName), CUDA_SUCCESS);
  EXPECT_EQ(ptr, tally::testing::kFakeGlobalAddress);
  EXPECT_EQ(bytes, tally::testing::kFakeGlobalBytes);
  bytes = 0;
  ASSERT_EQ(cuLibraryGetGlobal(nullptr, &bytes, library, tally::testing::kFakeGlobalName), CUDA_SUCCESS);
  EXPECT_EQ(bytes, tally::testing::kFakeGlobalBytes);
  EXPECT_EQ(cuLibraryGetGlobal(&ptr, &bytes, library, "no_such_global"), CUDA_ERROR_NOT_FOUND);
  ASSERT_EQ(cuLibraryUnload(library), CUDA_SUCCESS);

  cudaLibrary_t runtimeLibrary = loadRuntimeLibrary();
  void* address = nullptr;
  ASSERT_EQ(cudaLibraryGetGlobal(&address, &bytes, runtimeLibrary, tally::testing::kFakeGlobalName), cudaSuccess);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(address), tally::testing::kFakeGlobalAddress);
  EXPECT_EQ(cudaLibraryGetGlobal(&address, &bytes, runtimeLibrary, "no_such_global"), cudaErrorSymbolNotFound);
  EXPECT_EQ(cudaGetLastError(), cudaErrorSymbolNotFound);
  ASSERT_EQ(cudaLibraryUnload(runtimeLibrary), cudaSuccess);
}

TEST_F(LibraryManagement, RuntimeCountsEnumeratesAndFindsKernels) {
  cudaLibrary_t library = loadRuntimeLibrary();
  unsigned count = 0;
  ASSERT_EQ(cudaLibraryGetKernelCount(&count, library), cudaSuccess);
  ASSERT_EQ(count, 3u);
  cudaKernel_t kernels[3] = {};
  ASSERT_EQ(cudaLibraryEnumerateKernels(kernels, count, library), cudaSuccess);
  cudaKernel_t byName = nullptr;
  ASSERT_EQ(cudaLibraryGetKernel(&byName, library, "kernel_c"), cudaSuccess);
  EXPECT_EQ(byName, kernels[2]);
  // A cudaKernel_t is a CUkernel.
  const char* name = nullptr;
  ASSERT_EQ(cuKernelGetName(&name, reinterpret_cast<CUkernel>(kernels[0])), CUDA_SUCCESS);
  EXPECT_STREQ(name, "kernel_a");
  ASSERT_EQ(cudaFuncGetName(&name, reinterpret_cast<const void*>(kernels[1])), cudaSuccess);
  EXPECT_STREQ(name, "kernel_b");
  size_t offset = 1, size = 0;
  ASSERT_EQ(cudaFuncGetParamInfo(reinterpret_cast<const void*>(kernels[1]), 0, &offset, &size), cudaSuccess);
  EXPECT_EQ(offset, 0u);
  EXPECT_EQ(size, 8u);
  EXPECT_EQ(cudaFuncGetParamInfo(reinterpret_cast<const void*>(kernels[1]), 1, &offset, &size),
            cudaErrorInvalidValue);

  EXPECT_EQ(cudaLibraryGetKernel(&byName, library, "no_such_kernel"), cudaErrorSymbolNotFound);
  EXPECT_EQ(cudaLibraryGetKernel(nullptr, library, "kernel_a"), cudaErrorInvalidValue);
  EXPECT_EQ(cudaLibraryGetKernelCount(nullptr, library), cudaErrorInvalidValue);
  EXPECT_EQ(cudaLibraryEnumerateKernels(nullptr, 3, library), cudaErrorInvalidValue);
  int word = 0;
  EXPECT_EQ(cudaLibraryGetKernelCount(&count, reinterpret_cast<cudaLibrary_t>(&word)),
            cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaLibraryLoadData(nullptr, kImage, nullptr, nullptr, 0, nullptr, nullptr, 0), cudaErrorInvalidValue);
  cudaLibrary_t other = nullptr;
  EXPECT_EQ(cudaLibraryLoadData(&other, nullptr, nullptr, nullptr, 0, nullptr, nullptr, 0), cudaErrorInvalidValue);
  EXPECT_EQ(cudaLibraryLoadFromFile(&other, "/nonexistent/tally/library.cubin", nullptr, nullptr, 0, nullptr, nullptr,
                                    0),
            cudaErrorFileNotFound);
  cudaKernel_t none = nullptr;
  EXPECT_EQ(cudaGetKernel(nullptr, &word), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetKernel(&none, &word), cudaErrorInvalidDeviceFunction);  // not a registered kernel
  ASSERT_EQ(cudaLibraryUnload(library), cudaSuccess);
  EXPECT_EQ(cudaLibraryUnload(library), cudaErrorInvalidResourceHandle);
  cudaGetLastError();
}

TEST_F(LibraryManagement, ALibraryKernelLaunchesThroughTheRuntimeAndTheDriver) {
  cudaLibrary_t library = loadRuntimeLibrary();
  cudaKernel_t kernel = nullptr;
  ASSERT_EQ(cudaLibraryGetKernel(&kernel, library, "kernel_b"), cudaSuccess);
  const uint64_t id = server->functionIdOf("kernel_b");
  ASSERT_NE(id, 0u);
  void* out = nullptr;
  void* args[] = {&out};
  const auto* func = reinterpret_cast<const void*>(kernel);
  ASSERT_EQ(cudaLaunchKernel(func, dim3(4), dim3(128), args, 0, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the fake has seen the launch once it answers
  EXPECT_EQ(server->lastLaunchFunction(), id);

  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(2);
  config.blockDim = dim3(64);
  uint64_t launches = server->callsOf(wire::Call::LAUNCH_KERNEL);
  ASSERT_EQ(cudaLaunchKernelExC(&config, func, args), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(server->callsOf(wire::Call::LAUNCH_KERNEL), launches + 1);
  EXPECT_EQ(server->lastLaunchFunction(), id);

  CUkernel other = nullptr;
  ASSERT_EQ(cuLibraryGetKernel(&other, reinterpret_cast<CUlibrary>(library), "kernel_a"), CUDA_SUCCESS);
  CUfunction function = nullptr;
  ASSERT_EQ(cuKernelGetFunction(&function, other), CUDA_SUCCESS);
  ASSERT_EQ(cuLaunchKernel(function, 1, 1, 1, 32, 1, 1, 0, nullptr, args, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(server->lastLaunchFunction(), server->functionIdOf("kernel_a"));

  // Programmatic serialization travels (tallyd keeps it only after the tenant's own kernel);
  // hints that only tune caches or memory ordering are dropped (XLA sets them); an attribute with
  // effects beyond the launch is refused.
  CUlaunchAttribute hints[2] = {};
  hints[0].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  hints[0].value.programmaticStreamSerializationAllowed = 1;
  hints[1].id = CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN;
  hints[1].value.memSyncDomain = CU_LAUNCH_MEM_SYNC_DOMAIN_REMOTE;
  CUlaunchConfig ex{};
  ex.gridDimX = ex.gridDimY = ex.gridDimZ = 1;
  ex.blockDimX = 32;
  ex.blockDimY = ex.blockDimZ = 1;
  ex.attrs = hints;
  ex.numAttrs = 2;
  launches = server->callsOf(wire::Call::LAUNCH_KERNEL);
  ASSERT_EQ(cuLaunchKernelEx(&ex, function, args, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(server->callsOf(wire::Call::LAUNCH_KERNEL), launches + 1);
  EXPECT_EQ(server->lastLaunchAttributeIds(),
            std::vector<uint32_t>{CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION});
  CUlaunchAttribute completion{};
  completion.id = CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT;
  ex.attrs = &completion;
  ex.numAttrs = 1;
  EXPECT_EQ(cuLaunchKernelEx(&ex, function, args, nullptr), CUDA_ERROR_NOT_SUPPORTED);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(server->callsOf(wire::Call::LAUNCH_KERNEL), launches + 1) << "a refused launch reaches no GPU";

  ASSERT_EQ(cudaLibraryUnload(library), cudaSuccess);
  launches = server->callsOf(wire::Call::LAUNCH_KERNEL);
  EXPECT_EQ(cudaLaunchKernel(func, dim3(1), dim3(1), args, 0, nullptr), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(server->callsOf(wire::Call::LAUNCH_KERNEL), launches);
  cudaGetLastError();
}

TEST_F(LibraryManagement, ALibraryKernelTakesFunctionAttributes) {
  cudaLibrary_t library = loadRuntimeLibrary();
  cudaKernel_t kernel = nullptr;
  ASSERT_EQ(cudaLibraryGetKernel(&kernel, library, "kernel_a"), cudaSuccess);
  const auto* func = reinterpret_cast<const void*>(kernel);
  cudaFuncAttributes attributes{};
  ASSERT_EQ(cudaFuncGetAttributes(&attributes, func), cudaSuccess);
  EXPECT_EQ(attributes.maxThreadsPerBlock, tally::testing::kFakeMaxThreadsPerBlock);
  EXPECT_EQ(attributes.numRegs, tally::testing::kFakeNumRegs);

  uint64_t sets = server->callsOf(wire::Call::FUNC_SET_ATTRIBUTE);
  ASSERT_EQ(cudaFuncSetAttribute(func, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 << 10), cudaSuccess);
  EXPECT_EQ(server->callsOf(wire::Call::FUNC_SET_ATTRIBUTE), sets + 1);
  ASSERT_EQ(cudaFuncGetAttributes(&attributes, func), cudaSuccess);
  EXPECT_EQ(attributes.maxDynamicSharedSizeBytes, 64 << 10);

  ASSERT_EQ(cudaKernelSetAttributeForDevice(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 80 << 10, 0),
            cudaSuccess);
  EXPECT_EQ(server->callsOf(wire::Call::FUNC_SET_ATTRIBUTE), sets + 2);
  ASSERT_EQ(cudaFuncGetAttributes(&attributes, func), cudaSuccess);
  EXPECT_EQ(attributes.maxDynamicSharedSizeBytes, 80 << 10);
  // Device 1: the library's kernels never run there (it was loaded on device 0); nothing to send.
  ASSERT_EQ(cudaKernelSetAttributeForDevice(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 96 << 10, 1),
            cudaSuccess);
  EXPECT_EQ(server->callsOf(wire::Call::FUNC_SET_ATTRIBUTE), sets + 2);
  EXPECT_EQ(cudaKernelSetAttributeForDevice(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 1, 2),
            cudaErrorInvalidDevice);
  EXPECT_EQ(cudaKernelSetAttributeForDevice(kernel, cudaFuncAttributeMax, 1, 0), cudaErrorInvalidValue);
  int word = 0;
  EXPECT_EQ(cudaKernelSetAttributeForDevice(reinterpret_cast<cudaKernel_t>(&word),
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, 1, 0),
            cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaFuncGetAttributes(&attributes, &word), cudaErrorInvalidResourceHandle);
  ASSERT_EQ(cudaLibraryUnload(library), cudaSuccess);
  cudaGetLastError();
}

// A fatbin container whose only entry is PTX for compute_100 (layout as in common/fatbin): an
// image with no code this (sm_90) GPU can run.
std::vector<uint64_t> foreignImage() {
  const std::string ptx = ".version 8.8\n.target sm_100\n.address_size 64\n";
  const uint64_t padded = (ptx.size() + 1 + 7) / 8 * 8;
  std::vector<uint8_t> bytes(16 + 64 + padded, 0);
  const uint32_t magic = 0xBA55ED50;
  const uint64_t body = 64 + padded, flags = 0x1;  // 64-bit
  const uint16_t kind = 1, headerOffset = 16;  // PTX
  const uint32_t arch = 100;
  std::memcpy(&bytes[0], &magic, 4);
  bytes[4] = 1;
  std::memcpy(&bytes[6], &headerOffset, 2);
  std::memcpy(&bytes[8], &body, 8);
  uint8_t* header = &bytes[16];
  std::memcpy(header, &kind, 2);
  header[2] = header[3] = 1;
  header[4] = 64;
  std::memcpy(header + 8, &padded, 8);
  std::memcpy(header + 28, &arch, 4);
  std::memcpy(header + 40, &flags, 8);
  std::memcpy(header + 80 - 16, ptx.data(), ptx.size());
  std::vector<uint64_t> aligned((bytes.size() + 7) / 8);
  std::memcpy(aligned.data(), bytes.data(), bytes.size());
  return aligned;
}

// As natively on the H200 (tests/gpu/library_management.cu): a library without code for this GPU
// loads, each lookup answers CUDA_ERROR_NO_BINARY_FOR_GPU and unloading works; a module load fails.
TEST_F(LibraryManagement, ALibraryWithoutCodeForThisGpuLoadsAndHasNothingToLookUp) {
  std::vector<uint64_t> image = foreignImage();
  CUlibrary library = nullptr;
  ASSERT_EQ(cuLibraryLoadData(&library, image.data(), nullptr, nullptr, 0, nullptr, nullptr, 0), CUDA_SUCCESS);
  CUkernel kernel = nullptr;
  EXPECT_EQ(cuLibraryGetKernel(&kernel, library, kFakeKernelNames[0]), CUDA_ERROR_NO_BINARY_FOR_GPU);
  unsigned count = 7;
  EXPECT_EQ(cuLibraryGetKernelCount(&count, library), CUDA_ERROR_NO_BINARY_FOR_GPU);
  CUdeviceptr global = 0;
  size_t bytes = 0;
  EXPECT_EQ(cuLibraryGetGlobal(&global, &bytes, library, "anything"), CUDA_ERROR_NO_BINARY_FOR_GPU);
  EXPECT_EQ(cuLibraryUnload(library), CUDA_SUCCESS);
  EXPECT_EQ(cuLibraryUnload(library), CUDA_ERROR_INVALID_HANDLE);
  CUmodule module = nullptr;
  EXPECT_EQ(cuModuleLoadData(&module, image.data()), CUDA_ERROR_NO_BINARY_FOR_GPU);
  cudaLibrary_t runtimeLibrary = nullptr;
  ASSERT_EQ(cudaLibraryLoadData(&runtimeLibrary, image.data(), nullptr, nullptr, 0, nullptr, nullptr, 0), cudaSuccess);
  EXPECT_EQ(cudaLibraryUnload(runtimeLibrary), cudaSuccess);
}

}  // namespace

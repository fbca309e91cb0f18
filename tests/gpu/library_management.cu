// Library management: a fatbin built from ptx_src/library_kernels.cu (three kernels, two
// __device__ globals) loaded with cudaLibraryLoadData; its kernels counted, enumerated (all, and
// fewer than there are), named and found by name; lib_scale launched with cudaLaunchKernel,
// lib_accumulate with cuLaunchKernel through cuKernelGetFunction, lib_iota with
// cudaLaunchKernelExC; the globals read and written through cudaLibraryGetGlobal; attributes of a
// cudaKernel_t through cudaFuncGetAttributes / cudaFuncSetAttribute /
// cudaKernelSetAttributeForDevice; the native errors of bad arguments. Only values that are the
// same natively and through tallyd are printed (names sorted: no handle or address).
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "gpu_test_common.h"
#include "library_kernels_fatbin.h"  // generated: alignas(8) static const unsigned char kLibraryKernelsFatbin[]
#include "library_kernels_sm100_fatbin.h"  // generated: the same kernels, sm_100 code only

namespace {

constexpr int kN = 1000;
constexpr int kThreads = 128;
constexpr unsigned kBlocks = (kN + kThreads - 1) / kThreads;

std::string kernelName(cudaKernel_t kernel) {
  const char* name = nullptr;
  CHECK(cudaFuncGetName(&name, reinterpret_cast<const void*>(kernel)));
  return name;
}

int readGlobal(cudaLibrary_t library, const char* name) {
  void* address = nullptr;
  int value = -1;
  CHECK(cudaLibraryGetGlobal(&address, nullptr, library, name));
  CHECK(cudaMemcpy(&value, address, sizeof value, cudaMemcpyDeviceToHost));
  return value;
}

// Count, enumerate (all, then fewer than there are) and look up by name.
cudaKernel_t enumerateKernels(cudaLibrary_t library, std::vector<cudaKernel_t>& kernels) {
  unsigned count = 0;
  CHECK(cudaLibraryGetKernelCount(&count, library));
  std::printf("kernel count: %u\n", count);
  expect(count == 3, "cudaLibraryGetKernelCount counts the 3 kernels");
  kernels.assign(count, nullptr);
  CHECK(cudaLibraryEnumerateKernels(kernels.data(), count, library));
  std::vector<std::string> names;
  for (cudaKernel_t k : kernels) names.push_back(kernelName(k));
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) std::printf("enumerated kernel: %s\n", name.c_str());
  expect(names == std::vector<std::string>{"lib_accumulate", "lib_iota", "lib_scale"},
         "cudaLibraryEnumerateKernels names every kernel once");

  int sentinelWord = 0;
  auto* const sentinel = reinterpret_cast<cudaKernel_t>(&sentinelWord);
  cudaKernel_t fewer[3] = {nullptr, nullptr, sentinel};
  CHECK(cudaLibraryEnumerateKernels(fewer, 2, library));
  bool known = std::find(kernels.begin(), kernels.end(), fewer[0]) != kernels.end() &&
               std::find(kernels.begin(), kernels.end(), fewer[1]) != kernels.end() && fewer[0] != fewer[1];
  expect(known && fewer[2] == sentinel, "enumerating 2 of 3 fills 2 slots only");

  cudaKernel_t scale = nullptr;
  CHECK(cudaLibraryGetKernel(&scale, library, "lib_scale"));
  expect(std::find(kernels.begin(), kernels.end(), scale) != kernels.end(),
         "cudaLibraryGetKernel finds an enumerated kernel");
  const char* driverName = nullptr;
  CU_CHECK(cuKernelGetName(&driverName, reinterpret_cast<CUkernel>(scale)));
  expect(std::string(driverName) == "lib_scale", "cuKernelGetName of the cudaKernel_t");
  return scale;
}

// lib_scale through cudaLaunchKernel: out[i] = in[i] * 3 + lib_bias.
void launchScale(cudaKernel_t scale, const int* dIn, int* dOut, int bias) {
  int factor = 3, n = kN;
  const int* in = dIn;
  int* out = dOut;
  void* args[] = {&out, &in, &factor, &n};
  CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(scale), dim3(kBlocks), dim3(kThreads), args, 0, nullptr));
  CHECK(cudaDeviceSynchronize());
  std::vector<int> host(kN);
  CHECK(cudaMemcpy(host.data(), dOut, sizeof(int) * kN, cudaMemcpyDeviceToHost));
  int bad = 0;
  for (int i = 0; i < kN; ++i) bad += host[i] != i * 3 + bias;
  std::printf("lib_scale via cudaLaunchKernel: out[0]=%d out[%d]=%d bad=%d\n", host[0], kN - 1, host[kN - 1], bad);
  expect(bad == 0, "lib_scale (cudaLaunchKernel) results");
}

// lib_accumulate through cuLaunchKernel on the function of the kernel: lib_total = sum(in).
void launchAccumulate(cudaLibrary_t library, const int* dIn) {
  cudaKernel_t accumulate = nullptr;
  CHECK(cudaLibraryGetKernel(&accumulate, library, "lib_accumulate"));
  CUfunction function = nullptr;
  CU_CHECK(cuKernelGetFunction(&function, reinterpret_cast<CUkernel>(accumulate)));
  const char* name = nullptr;
  CU_CHECK(cuFuncGetName(&name, function));
  expect(std::string(name) == "lib_accumulate", "cuFuncGetName of cuKernelGetFunction's function");
  CUdeviceptr in = reinterpret_cast<CUdeviceptr>(dIn);
  int n = kN;
  void* params[] = {&in, &n};
  CU_CHECK(cuLaunchKernel(function, kBlocks, 1, 1, kThreads, 1, 1, 0, nullptr, params, nullptr));
  CHECK(cudaDeviceSynchronize());
  int total = readGlobal(library, "lib_total");
  std::printf("lib_accumulate via cuLaunchKernel: lib_total=%d\n", total);
  expect(total == kN * (kN - 1) / 2, "lib_accumulate (cuLaunchKernel) adds into the library's global");
}

// lib_iota through cudaLaunchKernelExC.
void launchIota(cudaLibrary_t library, int* dOut) {
  cudaKernel_t iota = nullptr;
  CHECK(cudaLibraryGetKernel(&iota, library, "lib_iota"));
  int base = 100, n = kN;
  void* args[] = {&dOut, &base, &n};
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(kBlocks);
  config.blockDim = dim3(kThreads);
  CHECK(cudaLaunchKernelExC(&config, reinterpret_cast<const void*>(iota), args));
  CHECK(cudaDeviceSynchronize());
  std::vector<int> host(kN);
  CHECK(cudaMemcpy(host.data(), dOut, sizeof(int) * kN, cudaMemcpyDeviceToHost));
  int bad = 0;
  for (int i = 0; i < kN; ++i) bad += host[i] != base + i;
  std::printf("lib_iota via cudaLaunchKernelExC: out[0]=%d bad=%d\n", host[0], bad);
  expect(bad == 0, "lib_iota (cudaLaunchKernelExC) results");
}

void checkAttributes(cudaLibrary_t library, cudaKernel_t scale) {
  const auto* func = reinterpret_cast<const void*>(scale);
  cudaFuncAttributes attributes{};
  CHECK(cudaFuncGetAttributes(&attributes, func));
  std::printf("lib_scale: maxThreadsPerBlock=%d numRegs>0=%d\n", attributes.maxThreadsPerBlock,
              attributes.numRegs > 0 ? 1 : 0);
  CHECK(cudaFuncSetAttribute(func, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 << 10));
  CHECK(cudaFuncGetAttributes(&attributes, func));
  std::printf("lib_scale: maxDynamicSharedSizeBytes=%d\n", attributes.maxDynamicSharedSizeBytes);
  expect(attributes.maxDynamicSharedSizeBytes == 64 << 10, "cudaFuncSetAttribute on a cudaKernel_t");

  // Another kernel: cudaFuncSetAttribute's value would override this one's.
  cudaKernel_t iota = nullptr;
  CHECK(cudaLibraryGetKernel(&iota, library, "lib_iota"));
  CHECK(cudaKernelSetAttributeForDevice(iota, cudaFuncAttributeMaxDynamicSharedMemorySize, 32 << 10, 0));
  int value = -1;
  CU_CHECK(cuKernelGetAttribute(&value, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                reinterpret_cast<CUkernel>(iota), 0));
  std::printf("lib_iota on device 0: maxDynamicSharedSizeBytes=%d\n", value);
  expect(value == 32 << 10, "cudaKernelSetAttributeForDevice");
}

void checkErrors(cudaLibrary_t library) {
  cudaKernel_t kernel = nullptr;
  void* address = nullptr;
  size_t bytes = 0;
  cudaLibrary_t none = nullptr;
  EXPECT_ERR(cudaLibraryGetKernelCount(nullptr, library), cudaErrorInvalidValue);
  EXPECT_ERR(cudaLibraryEnumerateKernels(nullptr, 3, library), cudaErrorInvalidValue);
  EXPECT_ERR(cudaLibraryGetKernel(&kernel, library, "no_such_kernel"), cudaErrorSymbolNotFound);
  EXPECT_ERR(cudaLibraryGetGlobal(&address, &bytes, library, "no_such_global"), cudaErrorSymbolNotFound);
  EXPECT_ERR(cudaLibraryLoadData(&none, nullptr, nullptr, nullptr, 0, nullptr, nullptr, 0), cudaErrorInvalidValue);
}

}  // namespace

// An image with code for another GPU only (cuBLAS loads such libraries at start-up): what the
// library and module loads, a kernel lookup and a launch answer, as natively.
void foreignImage() {
  CUlibrary library = nullptr;
  CUresult loaded = cuLibraryLoadData(&library, kForeignKernelsFatbin, nullptr, nullptr, 0, nullptr, nullptr, 0);
  std::printf("foreign image: cuLibraryLoadData -> %d\n", loaded);
  if (loaded == CUDA_SUCCESS) {
    CUkernel kernel = nullptr;
    CUresult found = cuLibraryGetKernel(&kernel, library, "lib_iota");
    std::printf("foreign image: cuLibraryGetKernel -> %d\n", found);
    if (found == CUDA_SUCCESS) {
      CUfunction function = nullptr;
      std::printf("foreign image: cuKernelGetFunction -> %d\n", cuKernelGetFunction(&function, kernel));
    }
    std::printf("foreign image: cuLibraryUnload -> %d\n", cuLibraryUnload(library));
  }
  CUmodule module = nullptr;
  CUresult moduleLoaded = cuModuleLoadData(&module, kForeignKernelsFatbin);
  std::printf("foreign image: cuModuleLoadData -> %d\n", moduleLoaded);
  if (moduleLoaded == CUDA_SUCCESS) cuModuleUnload(module);
  expect(moduleLoaded == CUDA_ERROR_NO_BINARY_FOR_GPU || moduleLoaded == CUDA_SUCCESS,
         "an image for another GPU: no binary, or loaded lazily");
  CHECK(cudaGetLastError());
}

int main() {
  CHECK(cudaSetDevice(0));
  cudaLibrary_t library = nullptr;
  CHECK(cudaLibraryLoadData(&library, kLibraryKernelsFatbin, nullptr, nullptr, 0, nullptr, nullptr, 0));

  std::vector<cudaKernel_t> kernels;
  cudaKernel_t scale = enumerateKernels(library, kernels);

  void* biasAddress = nullptr;
  size_t biasBytes = 0;
  CHECK(cudaLibraryGetGlobal(&biasAddress, &biasBytes, library, "lib_bias"));
  int bias = readGlobal(library, "lib_bias");
  std::printf("lib_bias: %zu bytes, initial value %d\n", biasBytes, bias);
  expect(biasBytes == sizeof(int) && bias == 7, "cudaLibraryGetGlobal reads the initialized global");
  bias = 11;
  CHECK(cudaMemcpy(biasAddress, &bias, sizeof bias, cudaMemcpyHostToDevice));

  std::vector<int> input(kN);
  for (int i = 0; i < kN; ++i) input[i] = i;
  int *dIn = nullptr, *dOut = nullptr;
  CHECK(cudaMalloc(&dIn, sizeof(int) * kN));
  CHECK(cudaMalloc(&dOut, sizeof(int) * kN));
  CHECK(cudaMemcpy(dIn, input.data(), sizeof(int) * kN, cudaMemcpyHostToDevice));

  launchScale(scale, dIn, dOut, bias);
  launchAccumulate(library, dIn);
  launchIota(library, dOut);
  checkAttributes(library, scale);
  checkErrors(library);
  foreignImage();

  CHECK(cudaFree(dIn));
  CHECK(cudaFree(dOut));
  CHECK(cudaLibraryUnload(library));
  return finish("library_management");
}

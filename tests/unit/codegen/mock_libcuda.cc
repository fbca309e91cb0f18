// A stand-in for the NVIDIA driver library, built as libcuda.so.1 into its own
// directory and found through LD_LIBRARY_PATH by the MockDriver.* tests of
// driver_shim_test.cc (never linked).  It implements a handful of exports with
// distinguishable results, so the tests can tell that the server driver shim
// forwards each call to the export of exactly its own name, and it counts calls.
#define __CUDA_API_VERSION_INTERNAL 1
#define __CUDA_API_VERSION_INTERNAL_ODR 1
#include <cuda.h>

#include <atomic>
#include <cstring>
#include <string_view>

namespace {

enum Counter {
  kInit,
  kDriverGetVersion,
  kDeviceGetCount,
  kMemAlloc,
  kMemAllocV2,
  kLaunchKernel,
  kLaunchKernelPtsz,
  kGetProcAddressV2,
  kCounters
};
std::atomic<int> gCalls[kCounters];
std::atomic<bool> gInitialized{false};

struct NamedCounter {
  const char* name;
  Counter counter;
};
constexpr NamedCounter kNames[] = {
    {"cuInit", kInit},
    {"cuDriverGetVersion", kDriverGetVersion},
    {"cuDeviceGetCount", kDeviceGetCount},
    {"cuMemAlloc", kMemAlloc},
    {"cuMemAlloc_v2", kMemAllocV2},
    {"cuLaunchKernel", kLaunchKernel},
    {"cuLaunchKernel_ptsz", kLaunchKernelPtsz},
    {"cuGetProcAddress_v2", kGetProcAddressV2},
};

}  // namespace

extern "C" {

// Number of calls of the mock's export `name` so far (-1: not a mock export).
__attribute__((visibility("default"))) int tallyMockCalls(const char* name) {
  for (const auto& n : kNames) {
    if (std::string_view(n.name) == name) return gCalls[n.counter].load();
  }
  return -1;
}

CUresult CUDAAPI cuInit(unsigned int Flags) {
  ++gCalls[kInit];
  if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  gInitialized = true;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDriverGetVersion(int* driverVersion) {
  ++gCalls[kDriverGetVersion];
  if (driverVersion == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *driverVersion = CUDA_VERSION;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetCount(int* count) {
  ++gCalls[kDeviceGetCount];
  if (!gInitialized) return CUDA_ERROR_NOT_INITIALIZED;
  // A call to another export through the PLT: when the executable exports the
  // shim's definitions (-rdynamic), this binds to the shim, which must forward
  // back here (to cuDriverGetVersion) without recursing.
  int version = 0;
  if (cuDriverGetVersion(&version) != CUDA_SUCCESS || version != CUDA_VERSION) return CUDA_ERROR_UNKNOWN;
  *count = 3;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetName(char* name, int len, CUdevice dev) {
  if (!gInitialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (name == nullptr || len <= 0 || dev < 0 || dev >= 3) return CUDA_ERROR_INVALID_VALUE;
  char text[32] = "Mock GPU ";
  text[9] = static_cast<char>('0' + dev);
  std::strncpy(name, text, static_cast<size_t>(len) - 1);
  name[len - 1] = '\0';
  return CUDA_SUCCESS;
}

// The CUDA 2.0 32-bit generation and the current one: different results.
CUresult CUDAAPI cuMemAlloc(CUdeviceptr_v1* dptr, unsigned int bytesize) {
  ++gCalls[kMemAlloc];
  *dptr = 0x1000u + bytesize;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  ++gCalls[kMemAllocV2];
  *dptr = 0x200000000ull + bytesize;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                                unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                                unsigned int sharedMemBytes, CUstream hStream, void** kernelParams, void** extra) {
  ++gCalls[kLaunchKernel];
  // Every argument arrives: the product encodes them.
  const bool ok = f == reinterpret_cast<CUfunction>(0x10) && gridDimX * gridDimY * gridDimZ == 2 * 3 * 4 &&
                  blockDimX * blockDimY * blockDimZ == 5 * 6 * 7 && sharedMemBytes == 8 &&
                  hStream == reinterpret_cast<CUstream>(0x20) && kernelParams == reinterpret_cast<void**>(0x30) &&
                  extra == reinterpret_cast<void**>(0x40);
  return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int,
                                     unsigned int, unsigned int, CUstream, void**, void**) {
  ++gCalls[kLaunchKernelPtsz];
  return CUDA_ERROR_NOT_PERMITTED;  // distinguishable from cuLaunchKernel
}

CUresult CUDAAPI cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                                     CUdriverProcAddressQueryResult* symbolStatus) {
  ++gCalls[kGetProcAddressV2];
  (void)cudaVersion;
  (void)flags;
  if (symbol == nullptr || pfn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const std::string_view s(symbol);
  void* fn = nullptr;
  if (s == "cuInit") fn = reinterpret_cast<void*>(&cuInit);
  if (s == "cuDriverGetVersion") fn = reinterpret_cast<void*>(&cuDriverGetVersion);
  if (s == "cuDeviceGetCount") fn = reinterpret_cast<void*>(&cuDeviceGetCount);
  if (s == "cuDeviceGetName") fn = reinterpret_cast<void*>(&cuDeviceGetName);
  if (s == "cuGetProcAddress") fn = reinterpret_cast<void*>(&cuGetProcAddress_v2);
  *pfn = fn;
  if (symbolStatus != nullptr) {
    *symbolStatus = fn != nullptr ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  }
  return fn != nullptr ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

}  // extern "C"

// 11. Expected (non-sticky) error cases and the "last error" bookkeeping:
//     invalid launch configuration (cudaPeekAtLastError / cudaGetLastError),
//     cudaMemcpy with a bogus device pointer, cudaFree of a never-allocated
//     pointer, cudaSetDevice(99), cudaStreamQuery on a busy stream, too-large
//     allocations, invalid memcpy direction. The context must stay usable.
#include <vector>

#include "gpu_test_common.h"

__global__ void touch(int* p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = i ^ 0x55;
}

__global__ void spin(unsigned long long ns) { gpu_spin_ns(ns); }

// Print an observed error code and compare with the expected one.
static void see(const char* what, cudaError_t got, cudaError_t want) {
  std::printf("%-58s -> %s\n", what, cudaGetErrorName(got));
  if (got != want) {
    std::printf("  MISMATCH: expected %s\n", cudaGetErrorName(want));
    ++g_failures;
  }
}

// Launch-configuration errors: documented as cudaErrorInvalidConfiguration;
// the CUDA 13 runtime with driver 580 reports cudaErrorInvalidValue. Either
// is accepted by the self-check; the printed name is what the suite diffs.
static void see_cfg(const char* what, cudaError_t got) {
  std::printf("%-58s -> %s\n", what, cudaGetErrorName(got));
  if (got != cudaErrorInvalidConfiguration && got != cudaErrorInvalidValue) {
    std::printf("  MISMATCH: expected cudaErrorInvalidConfiguration or cudaErrorInvalidValue\n");
    ++g_failures;
  }
}

int main() {
  int* d;
  cudaError_t e = cudaSuccess;
  const int n = 4096;
  CHECK(cudaMalloc(&d, sizeof(int) * n));
  see("cudaGetLastError (fresh)", cudaGetLastError(), cudaSuccess);

  // 1. Too many threads per block.
  touch<<<1, 2048>>>(d, n);
  const cudaError_t first = cudaPeekAtLastError();
  see_cfg("cudaPeekAtLastError after <<<1,2048>>>", first);
  see("cudaPeekAtLastError again (peek does not reset)", cudaPeekAtLastError(), first);
  see("cudaGetLastError (returns and resets)", cudaGetLastError(), first);
  see("cudaGetLastError (after reset)", cudaGetLastError(), cudaSuccess);
  see("cudaPeekAtLastError (after reset)", cudaPeekAtLastError(), cudaSuccess);

  // Invalid block dims in y/z, zero-sized grid.
  touch<<<dim3(1, 1, 1), dim3(32, 32, 2)>>>(d, n);
  see_cfg("cudaGetLastError after block (32,32,2)", cudaGetLastError());
  touch<<<dim3(1, 1, 1), dim3(1, 1, 65)>>>(d, n);
  see_cfg("cudaGetLastError after block z=65", cudaGetLastError());
  touch<<<0, 32>>>(d, n);
  see_cfg("cudaGetLastError after grid 0", cudaGetLastError());

  // A later failing launch, then a successful call: last error persists.
  touch<<<1, 4096>>>(d, n);
  see("cudaDeviceSynchronize after failed launch", cudaDeviceSynchronize(), cudaSuccess);
  see_cfg("cudaGetLastError still reports the launch error", cudaGetLastError());

  // 2. cudaMemcpy with a bogus device pointer.
  std::vector<int> h(n, 7);
  void* bogus = reinterpret_cast<void*>(static_cast<uintptr_t>(0x10));
  see("cudaMemcpy D2H from bogus device pointer",
      cudaMemcpy(h.data(), bogus, 256, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
  see("cudaGetLastError after bogus memcpy", cudaGetLastError(), cudaErrorInvalidValue);
  see("cudaMemcpy H2D to bogus device pointer",
      cudaMemcpy(bogus, h.data(), 256, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  (void)cudaGetLastError();

  // 3. cudaFree of a pointer that was never allocated.
  see("cudaFree(never allocated pointer)", cudaFree(reinterpret_cast<void*>(static_cast<uintptr_t>(0x12345678))),
      cudaErrorInvalidValue);
  see("cudaGetLastError after bad cudaFree", cudaGetLastError(), cudaErrorInvalidValue);
  see("cudaFree(interior pointer d+1)", cudaFree(d + 1), cudaErrorInvalidValue);
  (void)cudaGetLastError();
  see("cudaFreeHost(pageable pointer)", cudaFreeHost(h.data()), cudaErrorInvalidValue);
  (void)cudaGetLastError();

  // 4. cudaSetDevice(99).
  see("cudaSetDevice(99)", cudaSetDevice(99), cudaErrorInvalidDevice);
  see("cudaGetLastError after cudaSetDevice(99)", cudaGetLastError(), cudaErrorInvalidDevice);
  see("cudaGetLastError (reset)", cudaGetLastError(), cudaSuccess);
  int dev = -1;
  CHECK(cudaGetDevice(&dev));
  std::printf("current device still %d\n", dev);
  expect(dev == 0, "device unchanged after cudaSetDevice(99)");
  cudaDeviceProp prop;
  see("cudaGetDeviceProperties(dev 99)", cudaGetDeviceProperties(&prop, 99), cudaErrorInvalidDevice);
  (void)cudaGetLastError();

  // 5. cudaStreamQuery on a busy stream.
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  see("cudaStreamQuery(idle stream)", cudaStreamQuery(s), cudaSuccess);
  spin<<<1, 1, 0, s>>>(400ull * 1000 * 1000);  // 400 ms
  CHECK_LAUNCH();
  see("cudaStreamQuery(busy stream)", cudaStreamQuery(s), cudaErrorNotReady);
  CHECK(cudaStreamSynchronize(s));
  see("cudaStreamQuery(after sync)", cudaStreamQuery(s), cudaSuccess);
  (void)cudaGetLastError();

  // 6. Allocation far beyond device memory.
  void* huge = nullptr;
  see("cudaMalloc(1 PiB)", cudaMalloc(&huge, size_t(1) << 50), cudaErrorMemoryAllocation);
  see("cudaGetLastError after failed cudaMalloc", cudaGetLastError(), cudaErrorMemoryAllocation);
  see("cudaGetLastError (reset)", cudaGetLastError(), cudaSuccess);

  // 7. Invalid memcpy direction; invalid device function.
  see("cudaMemcpy(kind=77)", cudaMemcpy(d, h.data(), 16, static_cast<cudaMemcpyKind>(77)),
      cudaErrorInvalidMemcpyDirection);
  (void)cudaGetLastError();
  cudaFuncAttributes fa;
  // CUDA 13 reports cudaErrorInvalidResourceHandle (older: cudaErrorInvalidDeviceFunction).
  e = cudaFuncGetAttributes(&fa, reinterpret_cast<const void*>(&see));
  std::printf("%-58s -> %s\n", "cudaFuncGetAttributes(host function)", cudaGetErrorName(e));
  if (e != cudaErrorInvalidResourceHandle && e != cudaErrorInvalidDeviceFunction) {
    std::printf("  MISMATCH: expected cudaErrorInvalidResourceHandle or cudaErrorInvalidDeviceFunction\n");
    ++g_failures;
  }
  (void)cudaGetLastError();

  // The context is still healthy: a normal launch + copy works.
  touch<<<(n + 255) / 256, 256>>>(d, n);
  CHECK_LAUNCH();
  CHECK(cudaMemcpy(h.data(), d, sizeof(int) * n, cudaMemcpyDeviceToHost));
  int bad = 0;
  for (int i = 0; i < n; ++i)
    if (h[i] != (i ^ 0x55)) ++bad;
  expect(bad == 0, "context usable after all errors");
  see("cudaGetLastError at end", cudaGetLastError(), cudaSuccess);

  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(d));
  return finish("error_cases");
}

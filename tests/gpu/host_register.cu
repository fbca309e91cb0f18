// cudaHostRegister on malloc'd memory (an unaligned start): async copies from and to it on a
// stream, a kernel that reads and writes it through cudaHostGetDevicePointer
// (cudaHostRegisterMapped), the errors of overlapping / unknown / empty registrations, then
// cudaHostUnregister with the buffer's contents still valid; cuMemHostRegister likewise.
// Through tallyd over a Unix socket the pages are moved into memory shared with tallyd; over
// TCP there is no device pointer (run_suite.sh runs this program over the Unix socket only).
#include <vector>

#include "gpu_test_common.h"

__global__ void scale(const float* in, float* out, size_t n, float by) {
  size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * by;
}

// Reads the host buffer through its device pointer, writes the sum of neighbours back into it.
__global__ void mappedNeighbours(float* mapped, float* result, size_t n) {
  size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i + 1 < n) result[i] = mapped[i] + mapped[i + 1];
  if (i == 0) mapped[n - 1] = -1.0f;  // a device write into host memory
}

int main() {
  const size_t n = (4u << 20) / sizeof(float) + 13;  // ~4 MiB, not a page multiple
  const size_t bytes = n * sizeof(float);
  std::vector<char> storageIn(bytes + 64), storageOut(bytes + 64);
  // Unaligned starts inside malloc'd memory (std::vector's).
  float* in = reinterpret_cast<float*>(storageIn.data() + 4);
  float* out = reinterpret_cast<float*>(storageOut.data() + 12);
  Rng rng(7);
  for (size_t i = 0; i < n; ++i) in[i] = rng.unit();
  for (size_t i = 0; i < n; ++i) out[i] = 0.0f;
  uint64_t inSum = checksum_bytes(in, bytes);

  CHECK(cudaHostRegister(in, bytes, cudaHostRegisterMapped));
  CHECK(cudaHostRegister(out, bytes, cudaHostRegisterDefault));
  expect(checksum_bytes(in, bytes) == inSum, "contents unchanged by registration");

  EXPECT_ERR(cudaHostRegister(in, bytes, 0), cudaErrorHostMemoryAlreadyRegistered);
  EXPECT_ERR(cudaHostRegister(in + 100, 64, 0), cudaErrorHostMemoryAlreadyRegistered);
  EXPECT_ERR(cudaHostRegister(nullptr, 64, 0), cudaErrorInvalidValue);
  EXPECT_ERR(cudaHostRegister(in, 0, 0), cudaErrorInvalidValue);
  EXPECT_ERR(cudaHostUnregister(in + 100), cudaErrorInvalidValue);  // inside a registration (native)
  EXPECT_ERR(cudaHostUnregister(storageIn.data() + bytes + 32), cudaErrorHostMemoryNotRegistered);
  unsigned flags = 0;
  cudaError_t flagsErr = cudaHostGetFlags(&flags, in);
  (void)cudaGetLastError();
  std::printf("cudaHostGetFlags on registered memory -> %s\n", cudaGetErrorName(flagsErr));

  // Async copies from and to registered memory on a stream.
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  float *dIn, *dOut;
  CHECK(cudaMalloc(&dIn, bytes));
  CHECK(cudaMalloc(&dOut, bytes));
  CHECK(cudaMemcpyAsync(dIn, in, bytes, cudaMemcpyHostToDevice, stream));
  scale<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(dIn, dOut, n, 3.0f);
  CHECK_LAUNCH();
  CHECK(cudaMemcpyAsync(out, dOut, bytes, cudaMemcpyDeviceToHost, stream));
  CHECK(cudaStreamSynchronize(stream));
  bool scaled = true;
  for (size_t i = 0; i < n; ++i) scaled = scaled && out[i] == in[i] * 3.0f;
  expect(scaled, "async copies through registered memory");

  // A kernel reading and writing the registered buffer through its device pointer.
  float* mapped = nullptr;
  CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&mapped), in, 0));
  float* dResult;
  CHECK(cudaMalloc(&dResult, bytes));
  const float last = in[n - 1];
  std::vector<float> expected(n - 1);
  for (size_t i = 0; i + 1 < n; ++i) expected[i] = in[i] + in[i + 1];
  mappedNeighbours<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(mapped, dResult, n);
  CHECK_LAUNCH();
  CHECK(cudaStreamSynchronize(stream));
  std::vector<float> result(n - 1);
  CHECK(cudaMemcpy(result.data(), dResult, (n - 1) * sizeof(float), cudaMemcpyDeviceToHost));
  bool neighbours = true;
  for (size_t i = 0; i + 2 < n; ++i) neighbours = neighbours && result[i] == expected[i];
  expect(neighbours, "kernel read host memory through its device pointer");
  expect(in[n - 1] == -1.0f, "kernel wrote host memory through its device pointer");
  in[n - 1] = last;

  // Unregistered, the memory stays the application's, contents and all.
  CHECK(cudaHostUnregister(in));
  CHECK(cudaHostUnregister(out));
  EXPECT_ERR(cudaHostUnregister(in), cudaErrorHostMemoryNotRegistered);
  expect(checksum_bytes(in, bytes) == inSum, "contents kept after unregister");
  bool outKept = true;
  for (size_t i = 0; i < n; ++i) outKept = outKept && out[i] == in[i] * 3.0f;
  expect(outKept, "copied-back results kept after unregister");
  in[0] = 42.0f;
  expect(in[0] == 42.0f, "memory still writable after unregister");
  // Plain (pageable) copies still work on it.
  CHECK(cudaMemcpy(dIn, in, bytes, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(out, dIn, bytes, cudaMemcpyDeviceToHost));
  expect(std::memcmp(out, in, bytes) == 0, "pageable round trip after unregister");

  // The driver's names, page-aligned memory this time.
  std::vector<char> storageDriver(3 * 4096 + 4096);
  void* aligned = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(storageDriver.data()) + 4095) & ~uintptr_t{4095});
  std::memset(aligned, 0x5a, 3 * 4096);
  CU_CHECK(cuMemHostRegister(aligned, 3 * 4096, CU_MEMHOSTREGISTER_DEVICEMAP));
  CUresult again = cuMemHostRegister(aligned, 4096, 0);
  std::printf("cuMemHostRegister twice -> %s\n", cu_err_name(again));
  CHECK(cudaMemcpy(dIn, aligned, 3 * 4096, cudaMemcpyHostToDevice));
  CU_CHECK(cuMemHostUnregister(aligned));
  std::printf("cuMemHostUnregister twice -> %s\n", cu_err_name(cuMemHostUnregister(aligned)));
  std::vector<char> back(3 * 4096);
  CHECK(cudaMemcpy(back.data(), dIn, back.size(), cudaMemcpyDeviceToHost));
  expect(std::memcmp(back.data(), aligned, back.size()) == 0, "driver-registered memory copied");

  CHECK(cudaFree(dIn));
  CHECK(cudaFree(dOut));
  CHECK(cudaFree(dResult));
  CHECK(cudaStreamDestroy(stream));
  return finish("host_register");
}

// Training-like best-effort client for the isolation benchmark (bench/isolation/run.sh).
//
// One iteration runs the kinds of kernels that hurt a co-located inference service most:
//   long_blocks   4 waves of blocks that each compute for about a millisecond
//   persistent    one wave of blocks that each stride over a 256 MiB array (memory bound)
//   elementwise   a many-wave kernel of short blocks over 64 M floats
// and counts iterations per second. Built twice by CMake: with PTX (tallyd can transform its
// kernels) and SASS only (as stock frameworks ship).
//
//   be_train --seconds S       prints {"iterations":N,"seconds":S,"iterations_per_s":R}
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#define CHECK(x)                                                                          \
  do {                                                                                    \
    cudaError_t e_ = (x);                                                                 \
    if (e_ != cudaSuccess) {                                                              \
      std::fprintf(stderr, "be_train: %s failed: %s\n", #x, cudaGetErrorString(e_));      \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

__global__ void longBlocks(float* out, int iterations) {
  float x = threadIdx.x * 0.001f + blockIdx.x;
  for (int i = 0; i < iterations; ++i) x = x * 0.9999f + 0.0001f * __sinf(x);
  out[blockIdx.x * blockDim.x + threadIdx.x] = x;
}

__global__ void persistent(float* data, size_t n, int passes) {
  for (int p = 0; p < passes; ++p) {
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
      data[i] = data[i] * 0.5f + 1.0f;
    }
  }
}

__global__ void elementwise(float* a, const float* b, size_t n) {
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i < n) a[i] = a[i] * 1.0001f + b[i];
}

int main(int argc, char** argv) {
  double seconds = 10;
  int blockIterations = 60000;  // about 1 ms per block on the H200
  double lead = 0;  // seconds run (uncounted) before the measured window: HP starts meanwhile
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--seconds") seconds = std::atof(argv[i + 1]);
    if (a == "--block-iterations") blockIterations = std::atoi(argv[i + 1]);
    if (a == "--lead") lead = std::atof(argv[i + 1]);
  }
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const size_t big = size_t(64) << 20;  // floats
  float *a, *b, *out;
  CHECK(cudaMalloc(&a, big * sizeof(float)));
  CHECK(cudaMalloc(&b, big * sizeof(float)));
  CHECK(cudaMemset(a, 0, big * sizeof(float)));
  CHECK(cudaMemset(b, 0, big * sizeof(float)));
  const int longGrid = sms * 8 * 4;  // 8 blocks of 128 threads fit an SM: 4 waves
  CHECK(cudaMalloc(&out, size_t(longGrid) * 128 * sizeof(float)));
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  auto iteration = [&] {
    longBlocks<<<longGrid, 128, 0, stream>>>(out, blockIterations);
    persistent<<<sms * 2, 512, 0, stream>>>(a, big, 4);
    elementwise<<<unsigned((big + 255) / 256), 256, 0, stream>>>(a, b, big);
    CHECK(cudaStreamSynchronize(stream));
  };
  for (int i = 0; i < 3; ++i) iteration();  // warm-up
  for (auto leadStart = std::chrono::steady_clock::now();
       std::chrono::duration<double>(std::chrono::steady_clock::now() - leadStart).count() < lead;) {
    iteration();
  }
  auto begin = std::chrono::steady_clock::now();
  long iterations = 0;
  double elapsed = 0;
  while (elapsed < seconds) {
    iteration();
    ++iterations;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  }
  CHECK(cudaGetLastError());
  std::printf("{\"iterations\":%ld,\"seconds\":%.3f,\"iterations_per_s\":%.3f}\n", iterations, elapsed,
              double(iterations) / elapsed);
  return 0;
}

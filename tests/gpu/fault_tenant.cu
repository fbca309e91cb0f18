// One tenant of the fault-recovery test (tests/gpu/fault_recovery.sh). Modes:
//   assert    a kernel fails a device-side assert
//   illegal   a kernel writes to an unmapped address
//   hang      a kernel that does not end (2 minutes; tallyd's kernel_timeout_s must end it)
//   busy      launch + sync + check in a loop until a call fails (a bystander)
//   fill      fill 256 MiB with a pattern, free it, exit
//   fresh     vector add, checked; then a fresh 256 MiB allocation must read as zeros
// Prints "error=<cudaError name>" for the first failure (and "later=<name>" for the call after
// it: an error of a lost context stays), or "ok" — the script compares these lines.
// Device asserts must fire in a release build too.
#undef NDEBUG
#include <cuda_runtime.h>

#include <cassert>
#include <cstdio>
#include <cstring>
#include <vector>

namespace {

constexpr size_t kPatternBytes = 256u << 20;
constexpr unsigned char kPattern = 0x5a;

__global__ void failAssert(int value) { assert(value == 0); }

__global__ void storeTo(unsigned* address) { *address = 1; }

__global__ void spinFor(unsigned long long nanoseconds) {
  unsigned long long start = 0, now = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < nanoseconds);
}

__global__ void addVectors(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

int reportFailure(cudaError_t e) {
  std::printf("error=%s\n", cudaGetErrorName(e));
  // A lost context stays lost for this process, as a sticky error does natively.
  std::printf("later=%s\n", cudaGetErrorName(cudaMalloc(reinterpret_cast<void**>(&e), 16)));
  std::fflush(stdout);
  return 0;
}

int faulting(const char* mode) {
  int* warm = nullptr;
  if (cudaError_t e = cudaMalloc(&warm, 4); e != cudaSuccess) return reportFailure(e);
  if (std::strcmp(mode, "assert") == 0) {
    failAssert<<<1, 1>>>(1);
  } else if (std::strcmp(mode, "illegal") == 0) {
    storeTo<<<1, 1>>>(reinterpret_cast<unsigned*>(0x8));
  } else {
    spinFor<<<1, 32>>>(120ull * 1000 * 1000 * 1000);
  }
  cudaError_t e = cudaDeviceSynchronize();
  if (e == cudaSuccess) {
    std::printf("ok (the faulting kernel did not fail)\n");
    return 1;
  }
  return reportFailure(e);
}

// Three device vectors and one round of c = a + b through them, copies included.
struct Vectors {
  int n = 0;
  float *a = nullptr, *b = nullptr, *c = nullptr;

  cudaError_t allocate(int count) {
    n = count;
    for (float** v : {&a, &b, &c}) {
      if (cudaError_t e = cudaMalloc(v, n * sizeof(float)); e != cudaSuccess) return e;
    }
    return cudaSuccess;
  }
  // `spinNanoseconds` of extra GPU time first, so that the round keeps work on the GPU.
  cudaError_t add(const std::vector<float>& ha, const std::vector<float>& hb, std::vector<float>& hc,
                  unsigned long long spinNanoseconds) {
    cudaMemcpy(a, ha.data(), n * sizeof(float), cudaMemcpyHostToDevice);
    cudaMemcpy(b, hb.data(), n * sizeof(float), cudaMemcpyHostToDevice);
    if (spinNanoseconds > 0) spinFor<<<4, 32>>>(spinNanoseconds);
    addVectors<<<(n + 255) / 256, 256>>>(a, b, c, n);
    return cudaMemcpy(hc.data(), c, n * sizeof(float), cudaMemcpyDeviceToHost);
  }
};

// A bystander: real work with results checked, until a call fails.
int busy() {
  Vectors v;
  if (cudaError_t e = v.allocate(1 << 20); e != cudaSuccess) return reportFailure(e);
  std::vector<float> ha(v.n, 1.0f), hb(v.n, 2.0f), hc(v.n);
  for (int round = 0; round < 1000000; ++round) {
    if (cudaError_t e = v.add(ha, hb, hc, 2ull * 1000 * 1000); e != cudaSuccess) return reportFailure(e);
    if (hc[round % v.n] != 3.0f) {
      std::printf("wrong result in round %d\n", round);
      return 1;
    }
  }
  std::printf("ok (never failed)\n");
  return 1;
}

int fill() {
  void* p = nullptr;
  if (cudaError_t e = cudaMalloc(&p, kPatternBytes); e != cudaSuccess) return reportFailure(e);
  if (cudaError_t e = cudaMemset(p, kPattern, kPatternBytes); e != cudaSuccess) return reportFailure(e);
  cudaDeviceSynchronize();
  cudaFree(p);
  std::printf("ok\n");
  return 0;
}

int fresh() {
  Vectors v;
  if (cudaError_t e = v.allocate(1 << 16); e != cudaSuccess) return reportFailure(e);
  std::vector<float> ha(v.n), hb(v.n), hc(v.n);
  for (int i = 0; i < v.n; ++i) ha[i] = float(i), hb[i] = float(2 * i);
  if (cudaError_t e = v.add(ha, hb, hc, 0); e != cudaSuccess) return reportFailure(e);
  for (int i = 0; i < v.n; ++i) {
    if (hc[i] != float(3 * i)) {
      std::printf("wrong sum at %d\n", i);
      return 1;
    }
  }
  // What another tenant left in memory must not be readable here.
  unsigned char* big = nullptr;
  if (cudaError_t e = cudaMalloc(&big, kPatternBytes); e != cudaSuccess) return reportFailure(e);
  std::vector<unsigned char> host(kPatternBytes);
  cudaMemcpy(host.data(), big, kPatternBytes, cudaMemcpyDeviceToHost);
  size_t foreign = 0;
  for (unsigned char byte : host) foreign += byte == kPattern;
  std::printf("foreign_bytes=%zu\n", foreign);
  std::printf(foreign == 0 ? "ok\n" : "LEAK\n");
  return foreign == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "";
  if (!std::strcmp(mode, "assert") || !std::strcmp(mode, "illegal") || !std::strcmp(mode, "hang")) return faulting(mode);
  if (!std::strcmp(mode, "busy")) return busy();
  if (!std::strcmp(mode, "fill")) return fill();
  if (!std::strcmp(mode, "fresh")) return fresh();
  std::fprintf(stderr, "usage: %s assert|illegal|hang|busy|fill|fresh\n", argv[0]);
  return 2;
}

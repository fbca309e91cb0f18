// Where does a native asynchronous launch's time go (issue #8, async launch rate)? tallyd makes
// the driver call itself, so what it can save or must match is told apart here, natively, in one
// process, medians over batches:
//   runtime_first   cudaLaunchKernel, the first 256 launches after a sync (the queue is empty:
//                   the host's cost alone)
//   runtime_steady  cudaLaunchKernel, 50,000 in a row (what tally_microbench launch_async sees)
//   driver_first    cuLaunchKernel with kernelParams, first 256 after a sync
//   driver_steady   cuLaunchKernel with kernelParams, 50,000 in a row
//   buffer_steady   cuLaunchKernel with one packed argument buffer (CU_LAUNCH_PARAM_BUFFER_POINTER)
//   gpu_per_kernel  the GPU's own time per queued kernel: 512 launches held behind a kernel that
//                   spins on a host flag, then released, timed by events around them
// Each for an empty kernel and for one with four pointer arguments. Output: one JSON line per
// measurement: {"way":..., "args":N, "median_us":..., "p10_us":..., "p90_us":...}
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

namespace {

#define CHECK(x)                                                              \
  do {                                                                        \
    auto status_ = (x);                                                       \
    if (static_cast<int>(status_) != 0) {                                     \
      std::fprintf(stderr, "%s failed: %d (line %d)\n", #x, static_cast<int>(status_), __LINE__); \
      std::exit(2);                                                           \
    }                                                                         \
  } while (0)

__global__ void empty_kernel() {}
__global__ void four_args_kernel(float* a, float* b, float* c, float* d) {
  if (a == nullptr && b == c && c == d) a[0] = 1.0f;  // never true: keeps the arguments live
}
__global__ void wait_for_flag(volatile int* flag) {
  while (*flag == 0) {
  }
}

using Clock = std::chrono::steady_clock;

double microsSince(Clock::time_point t0, int count) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / count;
}

void report(const char* way, int args, std::vector<double> v) {
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return v[static_cast<size_t>(q * (v.size() - 1))]; };
  std::printf("{\"way\": \"%s\", \"args\": %d, \"median_us\": %.4f, \"p10_us\": %.4f, \"p90_us\": %.4f}\n", way, args,
              at(0.5), at(0.1), at(0.9));
  std::fflush(stdout);
}

// Times `count` calls of `launch` per batch, `batches` times, syncing between batches.
std::vector<double> timeBatches(const std::function<void()>& launch, int count, int batches, cudaStream_t s) {
  std::vector<double> out;
  for (int b = 0; b < batches; ++b) {
    CHECK(cudaStreamSynchronize(s));
    auto t0 = Clock::now();
    for (int i = 0; i < count; ++i) launch();
    out.push_back(microsSince(t0, count));
  }
  CHECK(cudaStreamSynchronize(s));
  return out;
}

struct Kernel {
  const char* name;
  const void* runtimeSymbol;
  int args;
};

void probe(const Kernel& k, cudaStream_t s, float* buffers) {
  CUfunction f = nullptr;
  CHECK(cudaGetFuncBySymbol(reinterpret_cast<cudaFunction_t*>(&f), k.runtimeSymbol));
  float* pointers[4] = {buffers, buffers + 1, buffers + 2, buffers + 3};
  void* params[4] = {&pointers[0], &pointers[1], &pointers[2], &pointers[3]};
  void** argv = k.args > 0 ? params : nullptr;
  size_t packedBytes = sizeof(pointers[0]) * k.args;
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, pointers, CU_LAUNCH_PARAM_BUFFER_SIZE, &packedBytes,
                   CU_LAUNCH_PARAM_END};
  auto runtime = [&] { CHECK(cudaLaunchKernel(k.runtimeSymbol, dim3(1), dim3(32), argv, 0, s)); };
  auto driver = [&] { CHECK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, reinterpret_cast<CUstream>(s), argv, nullptr)); };
  auto buffer = [&] {
    void** packed = k.args > 0 ? extra : nullptr;
    CHECK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, reinterpret_cast<CUstream>(s), nullptr, packed));
  };
  for (int i = 0; i < 2000; ++i) runtime();  // warm-up
  report("runtime_first", k.args, timeBatches(runtime, 256, 40, s));
  report("runtime_steady", k.args, timeBatches(runtime, 50000, 7, s));
  report("driver_first", k.args, timeBatches(driver, 256, 40, s));
  report("driver_steady", k.args, timeBatches(driver, 50000, 7, s));
  report("buffer_steady", k.args, timeBatches(buffer, 50000, 7, s));

  int* flag = nullptr;
  CHECK(cudaHostAlloc(&flag, sizeof(int), cudaHostAllocMapped));
  cudaEvent_t first, last;
  CHECK(cudaEventCreate(&first));
  CHECK(cudaEventCreate(&last));
  std::vector<double> gpu;
  for (int rep = 0; rep < 15; ++rep) {
    *const_cast<volatile int*>(flag) = 0;
    wait_for_flag<<<1, 1, 0, s>>>(flag);
    CHECK(cudaEventRecord(first, s));
    constexpr int kQueued = 512;
    for (int i = 0; i < kQueued; ++i) driver();
    CHECK(cudaEventRecord(last, s));
    *const_cast<volatile int*>(flag) = 1;
    CHECK(cudaStreamSynchronize(s));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, first, last));
    gpu.push_back(ms * 1000.0 / kQueued);
  }
  report("gpu_per_kernel", k.args, gpu);
  CHECK(cudaEventDestroy(first));
  CHECK(cudaEventDestroy(last));
  CHECK(cudaFreeHost(flag));
}

}  // namespace

int main() {
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  float* buffers = nullptr;
  CHECK(cudaMalloc(&buffers, 4 * sizeof(float)));
  probe({"empty", reinterpret_cast<const void*>(&empty_kernel), 0}, s, buffers);
  probe({"four_args", reinterpret_cast<const void*>(&four_args_kernel), 4}, s, buffers);
  CHECK(cudaFree(buffers));
  CHECK(cudaStreamDestroy(s));
  return 0;
}

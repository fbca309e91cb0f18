// A tenant for tests/gpu/sm_partition.sh: runs kernels for a while and reports which SMs their
// blocks ran on, so the test can check where tallyd placed this tenant's work.
//   gpu_sm_census --seconds S [--skip S0] [--block-us U]   (SMs counted after the first S0 seconds)
// Every kernel has 8 blocks per SM (more than a partition holds at once), each spinning about U
// µs and recording %smid; the output also checks the kernels' results (a fill of the grid).
// Prints {"device_sms":N,"distinct_sms":M,"kernels":K,"correct":true|false}.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <vector>

__global__ void census(unsigned* sms, unsigned* fill, long long cycles, unsigned tag) {
  long long start = clock64();
  while (clock64() - start < cycles) {
  }
  if (threadIdx.x == 0) {
    unsigned id;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
    sms[blockIdx.x] = id;
    fill[blockIdx.x] = tag + blockIdx.x;
  }
}

static void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "gpu_sm_census: %s: %s\n", what, cudaGetErrorString(e));
  std::exit(1);
}

int main(int argc, char** argv) {
  double seconds = 2, skip = 0, blockMicros = 50;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--seconds")) seconds = std::atof(argv[i + 1]);
    if (!std::strcmp(argv[i], "--block-us")) blockMicros = std::atof(argv[i + 1]);
    if (!std::strcmp(argv[i], "--skip")) skip = std::atof(argv[i + 1]);
  }
  int sms = 0, clockKhz = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "multiprocessor count");
  check(cudaDeviceGetAttribute(&clockKhz, cudaDevAttrClockRate, 0), "clock rate");
  const unsigned blocks = 8u * unsigned(sms);
  unsigned *sm = nullptr, *fill = nullptr;
  check(cudaMalloc(&sm, blocks * sizeof(unsigned)), "cudaMalloc");
  check(cudaMalloc(&fill, blocks * sizeof(unsigned)), "cudaMalloc");
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  const long long cycles = static_cast<long long>(blockMicros * clockKhz / 1000.0);
  std::set<unsigned> used;
  std::vector<unsigned> h(blocks), f(blocks);
  bool correct = true;
  long kernels = 0;
  auto begin = std::chrono::steady_clock::now();
  for (double elapsed = 0; elapsed < seconds;
       elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count()) {
    const unsigned tag = static_cast<unsigned>(kernels) * 7919u;
    census<<<blocks, 128, 0, stream>>>(sm, fill, cycles, tag);
    check(cudaMemcpyAsync(h.data(), sm, blocks * sizeof(unsigned), cudaMemcpyDeviceToHost, stream), "copy");
    check(cudaMemcpyAsync(f.data(), fill, blocks * sizeof(unsigned), cudaMemcpyDeviceToHost, stream), "copy");
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    if (elapsed >= skip) used.insert(h.begin(), h.end());
    for (unsigned b = 0; b < blocks; ++b) correct = correct && f[b] == tag + b;
    ++kernels;
  }
  std::printf("{\"device_sms\":%d,\"distinct_sms\":%zu,\"kernels\":%ld,\"correct\":%s}\n", sms, used.size(), kernels,
              correct ? "true" : "false");
  return correct ? 0 : 1;
}

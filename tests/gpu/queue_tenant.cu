// A tenant for tests/gpu/hardware_queues.sh: either a best-effort tenant that keeps many streams
// busy, or a high-priority tenant that times its own round trips next to it.
//   gpu_queue_tenant be <streams> <seconds>   keeps each low-priority stream ~5 ms deep in
//                                             one-block kernels; checks every kernel ran
//   gpu_queue_tenant hp <reps>                times launch + cudaStreamSynchronize of an empty
//                                             kernel on a highest-priority stream
// Prints one JSON line: be {"streams","launches","correct"}, hp {"median_us","p90_us","p99_us"}.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "gpu_queue_tenant: %s: %s\n", what, cudaGetErrorString(e));
  std::exit(1);
}

__global__ void empty() {}

// One block of one warp for ~0.5 ms, then one count for its stream.
__global__ void busyBlock(unsigned* count) {
  unsigned long long start = 0, now = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < 500000);
  if (threadIdx.x == 0) atomicAdd(count, 1u);
}

int bestEffort(int streams, double seconds) {
  int least = 0, greatest = 0;
  check(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange");
  unsigned* counts = nullptr;
  check(cudaMalloc(&counts, sizeof(unsigned) * streams), "cudaMalloc");
  check(cudaMemset(counts, 0, sizeof(unsigned) * streams), "cudaMemset");
  std::vector<cudaStream_t> busy(streams);
  std::vector<unsigned> launched(streams, 0);
  auto launchOn = [&](int i) {
    busyBlock<<<1, 32, 0, busy[i]>>>(counts + i);
    ++launched[i];
  };
  for (int i = 0; i < streams; ++i) {
    check(cudaStreamCreateWithPriority(&busy[i], cudaStreamNonBlocking, least), "cudaStreamCreateWithPriority");
    for (int k = 0; k < 10; ++k) launchOn(i);
  }
  auto start = Clock::now();
  // One kernel per stream every 0.5 ms keeps every queue ~5 ms deep.
  for (auto next = start; std::chrono::duration<double>(Clock::now() - start).count() < seconds;) {
    next += std::chrono::microseconds(500);
    for (int i = 0; i < streams; ++i) launchOn(i);
    std::this_thread::sleep_until(next);
  }
  check(cudaGetLastError(), "kernel launch");
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  std::vector<unsigned> ran(streams);
  check(cudaMemcpy(ran.data(), counts, sizeof(unsigned) * streams, cudaMemcpyDeviceToHost), "cudaMemcpy");
  unsigned long total = 0;
  for (unsigned n : launched) total += n;
  std::printf("{\"streams\":%d,\"launches\":%lu,\"correct\":%s}\n", streams, total, ran == launched ? "true" : "false");
  return 0;
}

int highPriority(int reps) {
  int least = 0, greatest = 0;
  check(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange");
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, greatest), "cudaStreamCreateWithPriority");
  std::vector<double> us;
  for (int i = 0; i < reps + 20; ++i) {
    auto t0 = Clock::now();
    empty<<<1, 1, 0, s>>>();
    check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    if (i >= 20) us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  std::sort(us.begin(), us.end());
  auto at = [&](double q) { return us[static_cast<size_t>(q * static_cast<double>(us.size() - 1))]; };
  std::printf("{\"median_us\":%.2f,\"p90_us\":%.2f,\"p99_us\":%.2f}\n", at(0.5), at(0.9), at(0.99));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && !std::strcmp(argv[1], "be")) return bestEffort(std::atoi(argv[2]), std::atof(argv[3]));
  if (argc == 3 && !std::strcmp(argv[1], "hp")) return highPriority(std::atoi(argv[2]));
  std::fprintf(stderr, "usage: gpu_queue_tenant be <streams> <seconds> | hp <reps>\n");
  return 2;
}

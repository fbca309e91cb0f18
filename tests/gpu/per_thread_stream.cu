// A program built with `--default-stream per-thread` (CMakeLists.txt): every call that takes the
// default stream goes through the runtime's _ptds/_ptsz exports, and each host thread's null
// stream is its own per-thread stream. Four threads each fill, transform and read back their own
// buffer through the default stream only; a thread's work must not wait for another's (it would
// not deadlock if it did, but the checksums would still be right: this checks the exports exist
// and keep order within a thread).
#include <thread>
#include <vector>

#include "gpu_test_common.h"

__global__ void scale_add(int* v, int n, int mul, int add) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) v[i] = v[i] * mul + add;
}

static unsigned long long thread_work(int t, int n) {
  int* d = nullptr;
  CHECK(cudaMalloc(&d, sizeof(int) * n));
  CHECK(cudaMemsetAsync(d, 0, sizeof(int) * n, 0));  // cudaMemsetAsync_ptsz
  std::vector<int> h(n);
  for (int i = 0; i < n; ++i) h[i] = i + t;
  CHECK(cudaMemcpyAsync(d, h.data(), sizeof(int) * n, cudaMemcpyHostToDevice, 0));  // _ptsz
  for (int k = 1; k <= 8; ++k) scale_add<<<64, 128>>>(d, n, k % 3 + 1, t + k);  // _ptsz launch
  CHECK_LAUNCH();
  CHECK(cudaStreamSynchronize(0));  // cudaStreamSynchronize_ptsz
  std::vector<int> out(n, -1);
  CHECK(cudaMemcpy(out.data(), d, sizeof(int) * n, cudaMemcpyDeviceToHost));  // cudaMemcpy_ptds
  CHECK(cudaFree(d));
  unsigned long long sum = 0;
  for (int i = 0; i < n; ++i) {
    long long want = i + t;
    for (int k = 1; k <= 8; ++k) want = static_cast<int>(want * (k % 3 + 1) + t + k);
    if (out[i] != static_cast<int>(want)) {
      std::printf("thread %d: element %d is %d, expected %d\n", t, i, out[i], static_cast<int>(want));
      std::exit(1);
    }
    sum = sum * 1000003ull + static_cast<unsigned>(out[i]);
  }
  return sum;
}

int main() {
  CHECK(cudaSetDevice(0));
  constexpr int kThreads = 4;
  std::vector<unsigned long long> sums(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back([&sums, t] { sums[t] = thread_work(t, 1 << 16); });
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) std::printf("thread %d checksum %016llx\n", t, sums[t]);
  // The legacy default stream is still reachable by name and synchronizes with the others.
  CHECK(cudaStreamSynchronize(cudaStreamLegacy));
  CHECK(cudaDeviceSynchronize());
  std::printf("per_thread_stream OK\n");
  return 0;
}

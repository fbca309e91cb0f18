// 18. printf from device code. Only single-threaded kernels print, so the
//     text and its order are deterministic; the host flushes stdout around
//     each launch so host and device lines interleave in a fixed order.
//     Through tallyd, the device output must reach the client's stdout.
#include "gpu_test_common.h"

__global__ void say(int round, float f, const int* data) {
  printf("device: round %d value %.3f data[round]=%d hex=%08x\n", round, f, data[round],
         static_cast<unsigned int>(data[round]) * 2654435761u);
  if (round == 2) printf("device: %s %lld %c\n", "string-arg", -1234567890123LL, 'Z');
}

__global__ void compute_then_print(const int* data, int n) {
  long long s = 0;
  for (int i = 0; i < n; ++i) s += data[i];
  printf("device: sum of %d values = %lld\n", n, s);
}

int main() {
  const int n = 16;
  int h[n];
  Rng rng(18);
  long long want = 0;
  for (int i = 0; i < n; ++i) {
    h[i] = rng.range(-1000, 1000);
    want += h[i];
  }
  int* d;
  CHECK(cudaMalloc(&d, sizeof h));
  CHECK(cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice));
  for (int r = 0; r < 3; ++r) {
    std::printf("host: launching round %d\n", r);
    std::fflush(stdout);
    say<<<1, 1>>>(r, 0.5f * r + 0.125f, d);
    CHECK_LAUNCH();
    CHECK(cudaDeviceSynchronize());
    std::fflush(stdout);
    std::printf("host: round %d done\n", r);
  }
  std::fflush(stdout);
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  compute_then_print<<<1, 1, 0, s>>>(d, n);
  CHECK_LAUNCH();
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaDeviceSynchronize());
  std::fflush(stdout);
  std::printf("host: expected sum = %lld\n", want);
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(d));
  return finish("kernel_printf");
}

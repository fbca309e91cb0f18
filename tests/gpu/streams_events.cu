// 7. Multiple streams (flags, priorities) with events: record,
//    cudaStreamWaitEvent, cudaEventQuery, cudaEventSynchronize,
//    cudaEventElapsedTime (only ">= 0" is printed).
#include <vector>

#include "gpu_test_common.h"

// One block: spins for `ns` nanoseconds, then writes a pattern.
__global__ void slow_fill(int* buf, int n, int salt, unsigned long long ns) {
  if (threadIdx.x == 0) gpu_spin_ns(ns);
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) buf[i] = i * 7 + salt;
}

__global__ void transform(const int* in, int* out, int n, int mul, int add) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * mul + add;
}

static const char* flags_name(unsigned int f) {
  return f == cudaStreamNonBlocking ? "cudaStreamNonBlocking" : (f == cudaStreamDefault ? "cudaStreamDefault" : "other");
}

int main() {
  int least = 0, greatest = 0;
  CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  std::printf("stream priority range: least=%d greatest=%d\n", least, greatest);
  expect(greatest <= least, "greatest priority is numerically <= least");

  cudaStream_t s_hi, s_lo, s_nb, s_def;
  CHECK(cudaStreamCreateWithPriority(&s_hi, cudaStreamNonBlocking, greatest));
  CHECK(cudaStreamCreateWithPriority(&s_lo, cudaStreamNonBlocking, least));
  CHECK(cudaStreamCreateWithFlags(&s_nb, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&s_def, cudaStreamDefault));
  struct {
    const char* name;
    cudaStream_t s;
  } streams[] = {{"s_hi", s_hi}, {"s_lo", s_lo}, {"s_nb", s_nb}, {"s_def", s_def}};
  for (auto& st : streams) {
    int prio = 12345;
    unsigned int flags = 999;
    CHECK(cudaStreamGetPriority(st.s, &prio));
    CHECK(cudaStreamGetFlags(st.s, &flags));
    std::printf("%s: priority=%d flags=%s\n", st.name, prio, flags_name(flags));
  }

  cudaEvent_t ev_start, ev_a, ev_stop, ev_notiming, ev_blocking;
  CHECK(cudaEventCreate(&ev_start));
  CHECK(cudaEventCreate(&ev_a));
  CHECK(cudaEventCreate(&ev_stop));
  CHECK(cudaEventCreateWithFlags(&ev_notiming, cudaEventDisableTiming));
  CHECK(cudaEventCreateWithFlags(&ev_blocking, cudaEventBlockingSync | cudaEventDisableTiming));

  // A never-recorded event is complete.
  EXPECT_ERR(cudaEventQuery(ev_notiming), cudaSuccess);

  const int n = 1 << 20;
  int *d_a, *d_b, *d_c;
  CHECK(cudaMalloc(&d_a, sizeof(int) * n));
  CHECK(cudaMalloc(&d_b, sizeof(int) * n));
  CHECK(cudaMalloc(&d_c, sizeof(int) * n));
  CHECK(cudaMemset(d_a, 0, sizeof(int) * n));
  CHECK(cudaDeviceSynchronize());

  // s_lo: slow producer (300 ms) -> ev_a.  s_hi waits on ev_a, transforms.
  // s_nb waits on ev_stop (recorded on s_hi) and transforms again.
  CHECK(cudaEventRecord(ev_start, s_lo));
  slow_fill<<<1, 1024, 0, s_lo>>>(d_a, n, 99, 300ull * 1000 * 1000);
  CHECK_LAUNCH();
  CHECK(cudaEventRecord(ev_a, s_lo));
  CHECK(cudaStreamWaitEvent(s_hi, ev_a, 0));
  transform<<<(n + 255) / 256, 256, 0, s_hi>>>(d_a, d_b, n, 3, 1);
  CHECK_LAUNCH();
  CHECK(cudaEventRecord(ev_stop, s_hi));
  CHECK(cudaStreamWaitEvent(s_nb, ev_stop, 0));
  transform<<<(n + 255) / 256, 256, 0, s_nb>>>(d_b, d_c, n, -1, 5);
  CHECK_LAUNCH();
  CHECK(cudaEventRecord(ev_notiming, s_nb));

  // The producer spins for 300 ms, so these events cannot be complete yet.
  EXPECT_ERR(cudaEventQuery(ev_a), cudaErrorNotReady);
  EXPECT_ERR(cudaEventQuery(ev_notiming), cudaErrorNotReady);
  EXPECT_ERR(cudaStreamQuery(s_nb), cudaErrorNotReady);

  CHECK(cudaEventSynchronize(ev_stop));
  EXPECT_ERR(cudaEventQuery(ev_a), cudaSuccess);
  EXPECT_ERR(cudaEventQuery(ev_stop), cudaSuccess);
  float ms = -1.0f;
  CHECK(cudaEventElapsedTime(&ms, ev_start, ev_stop));
  std::printf("elapsed start->stop >= 0: %s\n", ms >= 0.0f ? "yes" : "no");
  expect(ms >= 0.0f, "cudaEventElapsedTime >= 0");
  // Timing is disabled on ev_notiming.
  CHECK(cudaEventSynchronize(ev_notiming));
  EXPECT_ERR(cudaEventElapsedTime(&ms, ev_start, ev_notiming), cudaErrorInvalidResourceHandle);
  EXPECT_ERR(cudaStreamQuery(s_nb), cudaSuccess);

  std::vector<int> c(n);
  CHECK(cudaMemcpy(c.data(), d_c, sizeof(int) * n, cudaMemcpyDeviceToHost));
  int bad = 0;
  for (int i = 0; i < n; ++i)
    if (c[i] != -((i * 7 + 99) * 3 + 1) + 5) ++bad;
  std::printf("chained result checksum=%016llx bad=%d\n",
              static_cast<unsigned long long>(checksum_bytes(c.data(), c.size() * 4)), bad);
  expect(bad == 0, "cross-stream event ordering");

  // Blocking-sync event on the default-flag stream, which also orders with
  // the legacy default stream.
  slow_fill<<<1, 1024, 0, s_def>>>(d_a, n, 5, 50ull * 1000 * 1000);
  CHECK_LAUNCH();
  CHECK(cudaEventRecord(ev_blocking, s_def));
  transform<<<(n + 255) / 256, 256>>>(d_a, d_b, n, 2, 0);  // legacy stream: waits for s_def
  CHECK_LAUNCH();
  CHECK(cudaEventSynchronize(ev_blocking));
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaMemcpy(c.data(), d_b, sizeof(int) * n, cudaMemcpyDeviceToHost));
  bad = 0;
  for (int i = 0; i < n; ++i)
    if (c[i] != (i * 7 + 5) * 2) ++bad;
  std::printf("legacy-stream after s_def checksum=%016llx bad=%d\n",
              static_cast<unsigned long long>(checksum_bytes(c.data(), c.size() * 4)), bad);
  expect(bad == 0, "legacy default stream waits for blocking stream");

  // Many streams fanning in on events recorded on each.
  const int k = 8;
  cudaStream_t fan[k];
  cudaEvent_t fev[k];
  int* parts;
  CHECK(cudaMalloc(&parts, sizeof(int) * n));
  for (int j = 0; j < k; ++j) {
    CHECK(cudaStreamCreateWithFlags(&fan[j], cudaStreamNonBlocking));
    CHECK(cudaEventCreateWithFlags(&fev[j], cudaEventDisableTiming));
    int chunk = n / k;
    transform<<<(chunk + 255) / 256, 256, 0, fan[j]>>>(d_c + j * chunk, parts + j * chunk, chunk, j + 1, j);
    CHECK_LAUNCH();
    CHECK(cudaEventRecord(fev[j], fan[j]));
    CHECK(cudaStreamWaitEvent(s_hi, fev[j], 0));
  }
  transform<<<(n + 255) / 256, 256, 0, s_hi>>>(parts, d_b, n, 1, 1);
  CHECK_LAUNCH();
  CHECK(cudaStreamSynchronize(s_hi));
  CHECK(cudaMemcpy(c.data(), d_b, sizeof(int) * n, cudaMemcpyDeviceToHost));
  bad = 0;
  for (int i = 0; i < n; ++i) {
    int j = i / (n / k);
    int cc = -((i * 7 + 99) * 3 + 1) + 5;
    if (c[i] != cc * (j + 1) + j + 1) ++bad;
  }
  std::printf("fan-in checksum=%016llx bad=%d\n",
              static_cast<unsigned long long>(checksum_bytes(c.data(), c.size() * 4)), bad);
  expect(bad == 0, "fan-in of 8 streams via cudaStreamWaitEvent");

  for (int j = 0; j < k; ++j) {
    CHECK(cudaStreamDestroy(fan[j]));
    CHECK(cudaEventDestroy(fev[j]));
  }
  for (auto& st : streams) CHECK(cudaStreamDestroy(st.s));
  CHECK(cudaEventDestroy(ev_start));
  CHECK(cudaEventDestroy(ev_a));
  CHECK(cudaEventDestroy(ev_stop));
  CHECK(cudaEventDestroy(ev_notiming));
  CHECK(cudaEventDestroy(ev_blocking));
  CHECK(cudaFree(d_a));
  CHECK(cudaFree(d_b));
  CHECK(cudaFree(d_c));
  CHECK(cudaFree(parts));
  return finish("streams_events");
}

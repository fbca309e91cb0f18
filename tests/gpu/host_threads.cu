// 9. Several host threads: 4 workers, each with its own stream, doing
//    launches + async copies + syncs concurrently, while another thread is
//    blocked in cudaStreamSynchronize on a kernel that only finishes when the
//    main thread releases it (after all workers are done). If a blocked
//    cudaStreamSynchronize stalled the other threads' CUDA calls, the long
//    kernel would hit its 20 s timeout and the check would fail (no hang).
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "gpu_test_common.h"

constexpr int kWorkers = 4;
constexpr int kIters = 40;
constexpr size_t kElems = 1 << 16;

__global__ void work(const unsigned int* in, unsigned int* out, size_t n, unsigned int k) {
  size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * 3u + k;
}

// Spins until *flag != 0 (or ~20 s pass). result: 1 = released, 2 = timed out.
__global__ void wait_for_flag(const volatile int* flag, int* result, unsigned long long timeout_ns) {
  unsigned long long start = gpu_globaltimer();
  int r = 2;
  while (gpu_globaltimer() - start < timeout_ns) {
    if (*flag != 0) {
      r = 1;
      break;
    }
    __nanosleep(1000);
  }
  *result = r;
}

__global__ void set_flag(int* flag, int v) {
  atomicExch(flag, v);
  __threadfence_system();
}

struct WorkerBufs {
  unsigned int* h_in;   // pinned
  unsigned int* h_out;  // pinned
  unsigned int* d_in;
  unsigned int* d_out;
  unsigned long long checksum = 0;
  int bad = 0;
  int done_iters = 0;
  cudaStream_t stream = nullptr;
};

static void worker(int id, WorkerBufs* b, std::atomic<int>* errors) {
  cudaError_t e = cudaSetDevice(0);
  cudaStream_t s = nullptr;
  if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  if (e != cudaSuccess) {
    ++*errors;
    return;
  }
  Rng rng(1000 + id);
  unsigned long long h = 0;
  for (int it = 0; it < kIters; ++it) {
    for (size_t i = 0; i < kElems; ++i) b->h_in[i] = rng.u32();
    unsigned int k = static_cast<unsigned int>(id * 1000 + it);
    e = cudaMemcpyAsync(b->d_in, b->h_in, kElems * 4, cudaMemcpyHostToDevice, s);
    if (e == cudaSuccess) {
      work<<<static_cast<unsigned int>((kElems + 255) / 256), 256, 0, s>>>(b->d_in, b->d_out, kElems, k);
      e = cudaGetLastError();
    }
    if (e == cudaSuccess) e = cudaMemcpyAsync(b->h_out, b->d_out, kElems * 4, cudaMemcpyDeviceToHost, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    if (e != cudaSuccess) {
      std::printf("worker %d iter %d: %s\n", id, it, cudaGetErrorName(e));
      ++*errors;
      break;
    }
    for (size_t i = 0; i < kElems; ++i)
      if (b->h_out[i] != b->h_in[i] * 3u + k) ++b->bad;
    h = h * 1099511628211ull + checksum_bytes(b->h_out, kElems * 4);
    b->done_iters = it + 1;
  }
  b->checksum = h;
  // The stream is destroyed by main after the release: destroying streams or
  // freeing memory here could implicitly synchronise with the spinning kernel.
  b->stream = s;
}

int main() {
  CHECK(cudaSetDevice(0));
  int* d_flag;
  int* d_result;
  int* d_dummy_flag;
  CHECK(cudaMalloc(&d_flag, sizeof(int)));
  CHECK(cudaMalloc(&d_result, sizeof(int)));
  CHECK(cudaMalloc(&d_dummy_flag, sizeof(int)));
  CHECK(cudaMemset(d_flag, 0, sizeof(int)));
  CHECK(cudaMemset(d_result, 0, sizeof(int)));

  WorkerBufs bufs[kWorkers];
  for (auto& b : bufs) {
    CHECK(cudaMallocHost(&b.h_in, kElems * 4));
    CHECK(cudaMallocHost(&b.h_out, kElems * 4));
    CHECK(cudaMalloc(&b.d_in, kElems * 4));
    CHECK(cudaMalloc(&b.d_out, kElems * 4));
  }

  cudaStream_t s_long, s_release;
  CHECK(cudaStreamCreateWithFlags(&s_long, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&s_release, cudaStreamNonBlocking));

  // Warm up every kernel once so that lazy module loading cannot need a
  // context synchronisation while the spinning kernel runs.
  CHECK(cudaMemset(d_dummy_flag, 1, sizeof(int)));
  wait_for_flag<<<1, 1>>>(d_dummy_flag, d_result, 1000000ull);
  CHECK_LAUNCH();
  set_flag<<<1, 1>>>(d_dummy_flag, 1);
  CHECK_LAUNCH();
  work<<<1, 32>>>(bufs[0].d_in, bufs[0].d_out, 32, 0);
  CHECK_LAUNCH();
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaMemset(d_result, 0, sizeof(int)));

  std::atomic<bool> launched{false}, returned{false};
  std::atomic<int> errors{0};
  cudaError_t blocked_err = cudaSuccess;
  std::thread blocked([&] {
    cudaError_t e = cudaSetDevice(0);
    if (e == cudaSuccess) {
      wait_for_flag<<<1, 1, 0, s_long>>>(d_flag, d_result, 20ull * 1000 * 1000 * 1000);
      e = cudaGetLastError();
    }
    launched = true;
    if (e == cudaSuccess) e = cudaStreamSynchronize(s_long);
    blocked_err = e;
    returned = true;
  });
  while (!launched) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // let it enter the sync

  std::vector<std::thread> ts;
  for (int i = 0; i < kWorkers; ++i) ts.emplace_back(worker, i, &bufs[i], &errors);
  for (auto& t : ts) t.join();
  const bool still_blocked = !returned.load();

  // Release the spinning kernel from another stream.
  set_flag<<<1, 1, 0, s_release>>>(d_flag, 1);
  CHECK_LAUNCH();
  CHECK(cudaStreamSynchronize(s_release));
  blocked.join();
  int result = 0;
  CHECK(cudaMemcpy(&result, d_result, sizeof(int), cudaMemcpyDeviceToHost));

  for (int i = 0; i < kWorkers; ++i)
    std::printf("worker %d: iters=%d checksum=%016llx bad=%d\n", i, bufs[i].done_iters,
                bufs[i].checksum, bufs[i].bad);
  std::printf("worker errors=%d\n", errors.load());
  std::printf("blocked thread still in cudaStreamSynchronize after workers finished: %s\n",
              still_blocked ? "yes" : "no");
  std::printf("blocked thread sync result: %s\n", cudaGetErrorName(blocked_err));
  std::printf("long kernel result: %s\n", result == 1 ? "released by flag" : (result == 2 ? "timed out" : "not run"));
  bool all_ok = errors == 0;
  for (auto& b : bufs) all_ok = all_ok && b.bad == 0 && b.done_iters == kIters;
  expect(all_ok, "4 worker threads: all iterations correct");
  expect(still_blocked, "sync on long kernel did not return early");
  expect(blocked_err == cudaSuccess, "blocked cudaStreamSynchronize succeeded");
  expect(result == 1, "long kernel released by flag (no timeout)");

  for (auto& b : bufs) {
    if (b.stream) CHECK(cudaStreamDestroy(b.stream));
    CHECK(cudaFreeHost(b.h_in));
    CHECK(cudaFreeHost(b.h_out));
    CHECK(cudaFree(b.d_in));
    CHECK(cudaFree(b.d_out));
  }
  CHECK(cudaStreamDestroy(s_long));
  CHECK(cudaStreamDestroy(s_release));
  CHECK(cudaFree(d_flag));
  CHECK(cudaFree(d_result));
  CHECK(cudaFree(d_dummy_flag));
  return finish("host_threads");
}

// Does another thread's completion polling slow a high-priority thread's driver calls in the
// same context (issue #9)? In tallyd every tenant shares one context: a best-effort tenant's
// thread polls for its syncs while a high-priority tenant launches. Under MPS each client has
// its own driver instance, so nothing is shared on the host. This probe times, natively in one
// process, a high-priority thread's launch call, launch + completion round trip and an 8-kernel
// request, while N other threads poll in one of these ways:
//   none     nobody polls
//   event    cuEventQuery on a pending event, back to back (tallyd's inline wait and completion thread)
//   stream   cuStreamQuery on a busy stream
//   word     a load of a host word that the GPU would write (cuStreamWriteValue32): no driver call
// Output: one JSON line per (way, pollers, measure) with median, p90 and p99 in µs.
// Usage: poll_contention_probe [reps]
#include <cuda.h>
#include <cuda_runtime.h>

#include "probe_common.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace {

__global__ void empty() {}

__global__ void holdUntil(const volatile unsigned* release) {
  while (*release == 0) {
  }
}

using Clock = std::chrono::steady_clock;

double micros(Clock::time_point from) { return std::chrono::duration<double, std::micro>(Clock::now() - from).count(); }

void report(const char* way, int pollers, const char* measure, std::vector<double>& us) {
  std::sort(us.begin(), us.end());
  auto at = [&](double q) { return us[static_cast<size_t>(q * static_cast<double>(us.size() - 1))]; };
  std::printf("{\"way\":\"%s\",\"pollers\":%d,\"measure\":\"%s\",\"median_us\":%.2f,\"p90_us\":%.2f,\"p99_us\":%.2f}\n",
              way, pollers, measure, at(0.5), at(0.9), at(0.99));
  std::fflush(stdout);
}

void waitForEvent(CUevent done) {
  while (cuEventQuery(done) == CUDA_ERROR_NOT_READY) __builtin_ia32_pause();
}

// The high-priority thread's three measures, each after a warm-up.
void measure(const char* way, int pollers, CUstream hp, CUevent done, int reps) {
  std::vector<double> launch, roundTrip, request;
  for (int i = 0; i < reps + 100; ++i) {
    auto t0 = Clock::now();
    empty<<<1, 1, 0, hp>>>();
    double l = micros(t0);
    PROBE_CHECK(cuEventRecord(done, hp));
    waitForEvent(done);
    double rt = micros(t0);
    if (i >= 100) {
      launch.push_back(l);
      roundTrip.push_back(rt);
    }
  }
  for (int i = 0; i < reps / 10 + 20; ++i) {
    auto t0 = Clock::now();
    for (int k = 0; k < 8; ++k) spinNanos<<<132, 128, 0, hp>>>(20000);
    PROBE_CHECK(cuEventRecord(done, hp));
    waitForEvent(done);
    if (i >= 20) request.push_back(micros(t0));
  }
  report(way, pollers, "launch_call", launch);
  report(way, pollers, "launch_round_trip", roundTrip);
  report(way, pollers, "request_8x20us", request);
}

void pollLoop(const std::string& way, CUcontext context, CUstream busy, CUevent pending, const volatile unsigned* word,
              const std::atomic<bool>& stop) {
  PROBE_CHECK(cuCtxSetCurrent(context));
  while (!stop.load(std::memory_order_relaxed)) {
    if (way == "event") {
      (void)cuEventQuery(pending);
    } else if (way == "stream") {
      (void)cuStreamQuery(busy);
    } else {
      (void)*word;
    }
    __builtin_ia32_pause();
  }
}

}  // namespace

int main(int argc, char** argv) {
  int reps = argc > 1 ? std::atoi(argv[1]) : 20000;
  PROBE_CHECK(cudaSetDevice(0));
  PROBE_CHECK(cudaFree(nullptr));
  CUcontext context = nullptr;
  PROBE_CHECK(cuCtxGetCurrent(&context));
  int leastPriority = 0, greatestPriority = 0;
  PROBE_CHECK(cudaDeviceGetStreamPriorityRange(&leastPriority, &greatestPriority));
  CUstream hp = nullptr;
  PROBE_CHECK(cuStreamCreateWithPriority(&hp, CU_STREAM_NON_BLOCKING, greatestPriority));
  CUevent done = nullptr;
  PROBE_CHECK(cuEventCreate(&done, CU_EVENT_DISABLE_TIMING));
  unsigned* release = nullptr;
  PROBE_CHECK(cudaHostAlloc(&release, 64, cudaHostAllocMapped));
  unsigned* releaseDevice = nullptr;
  PROBE_CHECK(cudaHostGetDevicePointer(&releaseDevice, release, 0));
  // Load every kernel before one of them holds an SM: a lazy module load waits for the device.
  *release = 1;
  empty<<<1, 1, 0, hp>>>();
  spinNanos<<<1, 1, 0, hp>>>(1000);
  holdUntil<<<1, 1, 0, hp>>>(releaseDevice);
  PROBE_CHECK(cudaDeviceSynchronize());

  for (const char* way : {"none", "event", "stream", "word"}) {
    for (int pollers : {1, 3}) {
      if (std::string(way) == "none" && pollers > 1) continue;
      // Each poller's stream holds one single-thread kernel until the end: its event stays pending.
      *release = 0;
      std::vector<CUstream> busy(pollers);
      std::vector<CUevent> pending(pollers);
      std::atomic<bool> stop{false};
      std::vector<std::thread> threads;
      for (int p = 0; p < pollers; ++p) {
        PROBE_CHECK(cuStreamCreateWithPriority(&busy[p], CU_STREAM_NON_BLOCKING, leastPriority));
        PROBE_CHECK(cuEventCreate(&pending[p], CU_EVENT_DISABLE_TIMING));
        holdUntil<<<1, 1, 0, busy[p]>>>(releaseDevice);
        PROBE_CHECK(cuEventRecord(pending[p], busy[p]));
        if (std::string(way) != "none") {
          threads.emplace_back(pollLoop, std::string(way), context, busy[p], pending[p], release, std::cref(stop));
        }
      }
      measure(way, std::string(way) == "none" ? 0 : pollers, hp, done, reps);
      stop = true;
      for (auto& t : threads) t.join();
      __atomic_store_n(release, 1u, __ATOMIC_RELEASE);
      PROBE_CHECK(cudaDeviceSynchronize());
      for (int p = 0; p < pollers; ++p) {
        PROBE_CHECK(cuEventDestroy(pending[p]));
        PROBE_CHECK(cuStreamDestroy(busy[p]));
      }
    }
  }
  return 0;
}

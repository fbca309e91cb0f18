// Do a context's streams share hardware work queues, so that one tenant's stream waits behind
// another's queued kernels (issue #9)? tallyd puts every tenant's streams in one context, and the
// driver maps a context's streams onto CUDA_DEVICE_MAX_CONNECTIONS queues (8 unless set). This
// probe, natively in one process, fills S low-priority streams with a long queue of one-block
// kernels (they leave almost every SM free), then times an empty kernel's round trip on one more
// stream, at the highest priority and at the default one, adding one busy kernel to every busy
// stream before each. A stream that got a queue of its own
// answers in ~10 µs; one that shares a queue waits for kernels of 0.5 ms ahead of it.
// The busy streams and the timed one are each in the primary context or in a green context of
// every SM (a green context has queues of its own, if the driver gives it them).
// Output: one JSON line per (placement, priority, S): median, p90, p99 and max in µs.
// `churn` asks which queue a new stream gets: one stream is created first and timed, then one is
// created and destroyed, then 7 busy ones (round robin over creations would put the 7th on the
// timed one's queue). The same across processes, through tallyd: tests/gpu/hardware_queues.sh.
// Usage: queue_sharing_probe [reps] | churn
//   (run under different CUDA_DEVICE_MAX_CONNECTIONS)
#include <cuda.h>
#include <cuda_runtime.h>

#include "probe_common.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

__global__ void empty() {}

using Clock = std::chrono::steady_clock;

CUfunction emptyFn = nullptr;
CUfunction spinFn = nullptr;

void launch(CUfunction f, unsigned blocks, unsigned threads, CUstream s, void** args) {
  PROBE_CHECK(cuLaunchKernel(f, blocks, 1, 1, threads, 1, 1, 0, s, args, nullptr));
}

void spinOn(CUstream s) {
  unsigned nanos = 500000;
  void* args[] = {&nanos};
  launch(spinFn, 1, 32, s, args);
}

void measure(const char* placement, const char* priority, const std::vector<CUstream>& busy, CUstream probe,
             CUevent done, int reps) {
  std::vector<double> us;
  for (int i = 0; i < reps + 5; ++i) {
    for (CUstream s : busy) spinOn(s);  // keep every busy queue 5 ms long
    auto t0 = Clock::now();
    launch(emptyFn, 1, 1, probe, nullptr);
    PROBE_CHECK(cuEventRecord(done, probe));
    while (cuEventQuery(done) == CUDA_ERROR_NOT_READY) __builtin_ia32_pause();
    if (i >= 5) us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  std::sort(us.begin(), us.end());
  auto at = [&](double q) { return us[static_cast<size_t>(q * static_cast<double>(us.size() - 1))]; };
  const char* connections = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  std::printf(
      "{\"connections\":\"%s\",\"placement\":\"%s\",\"priority\":\"%s\",\"busy_streams\":%d,\"median_us\":%.2f,"
      "\"p90_us\":%.2f,\"p99_us\":%.2f,\"max_us\":%.2f}\n",
      connections != nullptr ? connections : "default", placement, priority, static_cast<int>(busy.size()), at(0.5),
      at(0.9), at(0.99), us.back());
  std::fflush(stdout);
}

CUgreenCtx everySmGreenContext(CUdevice dev) {
  CUdevResource all{};
  PROBE_CHECK(cuDeviceGetDevResource(dev, &all, CU_DEV_RESOURCE_TYPE_SM));
  CUdevResourceDesc desc = nullptr;
  PROBE_CHECK(cuDevResourceGenerateDesc(&desc, &all, 1));
  CUgreenCtx green = nullptr;
  PROBE_CHECK(cuGreenCtxCreate(&green, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM));
  return green;
}

CUstream makeStream(CUgreenCtx green, int priority) {
  CUstream s = nullptr;
  if (green != nullptr) {
    PROBE_CHECK(cuGreenCtxStreamCreate(&s, green, CU_STREAM_NON_BLOCKING, priority));
  } else {
    PROBE_CHECK(cuStreamCreateWithPriority(&s, CU_STREAM_NON_BLOCKING, priority));
  }
  return s;
}

int runChurn(CUevent done) {
  int leastPriority = 0, greatestPriority = 0;
  PROBE_CHECK(cudaDeviceGetStreamPriorityRange(&leastPriority, &greatestPriority));
  CUstream probe = makeStream(nullptr, greatestPriority);
  CUstream churned = makeStream(nullptr, leastPriority);
  PROBE_CHECK(cuStreamDestroy(churned));
  std::vector<CUstream> busy(7);
  for (auto& s : busy) {
    s = makeStream(nullptr, leastPriority);
    for (int k = 0; k < 10; ++k) spinOn(s);
  }
  measure("churn: timed, 1 created and destroyed, 7 busy", "highest", busy, probe, done, 100);
  PROBE_CHECK(cudaDeviceSynchronize());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  int reps = argc > 1 && mode != "churn" ? std::atoi(argv[1]) : 100;
  PROBE_CHECK(cudaSetDevice(0));
  PROBE_CHECK(cudaFree(nullptr));
  CUdevice dev = 0;
  PROBE_CHECK(cuCtxGetDevice(&dev));
  int leastPriority = 0, greatestPriority = 0;
  PROBE_CHECK(cudaDeviceGetStreamPriorityRange(&leastPriority, &greatestPriority));
  PROBE_CHECK(cudaGetFuncBySymbol(&emptyFn, reinterpret_cast<const void*>(empty)));
  PROBE_CHECK(cudaGetFuncBySymbol(&spinFn, reinterpret_cast<const void*>(spinNanos)));
  CUevent done = nullptr;
  PROBE_CHECK(cuEventCreate(&done, CU_EVENT_DISABLE_TIMING));
  if (mode == "churn") return runChurn(done);
  CUgreenCtx busyGreen = everySmGreenContext(dev);
  CUgreenCtx probeGreen = everySmGreenContext(dev);
  struct Placement {
    const char* name;
    CUgreenCtx busy;
    CUgreenCtx probe;
  };
  const Placement placements[] = {{"busy_primary/probe_primary", nullptr, nullptr},
                                  {"busy_green/probe_primary", busyGreen, nullptr},
                                  {"busy_primary/probe_green", nullptr, probeGreen},
                                  {"busy_green/probe_green", busyGreen, probeGreen}};
  for (const Placement& where : placements) {
    for (int busyStreams : {0, 7, 8, 16, 31, 40}) {
      for (bool high : {true, false}) {
        if (!high && busyStreams != 8) continue;  // priority made no difference; one check of it
        // The probe's stream is created after the busy ones, as a new tenant's would be.
        std::vector<CUstream> busy(busyStreams);
        for (auto& s : busy) {
          s = makeStream(where.busy, leastPriority);
          for (int k = 0; k < 10; ++k) spinOn(s);
        }
        CUstream probe = makeStream(where.probe, high ? greatestPriority : 0);
        measure(where.name, high ? "highest" : "default", busy, probe, done, reps);
        PROBE_CHECK(cudaDeviceSynchronize());
        PROBE_CHECK(cuStreamSynchronize(probe));
        for (auto& s : busy) PROBE_CHECK(cuStreamSynchronize(s));
        PROBE_CHECK(cuStreamDestroy(probe));
        for (auto& s : busy) PROBE_CHECK(cuStreamDestroy(s));
      }
    }
  }
  PROBE_CHECK(cuGreenCtxDestroy(busyGreen));
  PROBE_CHECK(cuGreenCtxDestroy(probeGreen));
  return 0;
}

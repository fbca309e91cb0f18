// What a periodic health check of the context costs another thread's launches (issue #9). tallyd's
// fault monitor asks the driver something every 100 ms to notice a sticky error on a GPU that no
// tenant calls; in a shared context that call may hold a lock a high-priority thread's launch
// needs. This probe times, natively in one process, a high-priority thread's 8-kernel requests
// (each kernel ~20 µs on every SM, one event wait per request) next to a best-effort thread that
// keeps the GPU full of 150 µs blocks at the lowest priority, while a third thread calls one of
// these every 10 ms:
//   none          nothing
//   ctx_limit     cuCtxGetLimit(CU_LIMIT_STACK_SIZE)   (tallyd's health probe until this probe)
//   event_query   cuEventQuery on an event recorded once, long complete
//   ctx_flags     cuCtxGetFlags
// Output: one JSON line per way: the launch call's and the request's p50 / p99 / p99.9 / max and
// how long the checks themselves took (µs).
// Usage: health_probe_cost [seconds per way]
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

using Clock = std::chrono::steady_clock;

double micros(Clock::time_point from) { return std::chrono::duration<double, std::micro>(Clock::now() - from).count(); }

struct Tail {
  double p50 = 0, p99 = 0, p999 = 0, max = 0;
};

Tail tailOf(std::vector<double> us) {
  Tail t;
  if (us.empty()) return t;
  std::sort(us.begin(), us.end());
  auto at = [&](double q) { return us[static_cast<size_t>(q * static_cast<double>(us.size() - 1))]; };
  t = {at(0.5), at(0.99), at(0.999), us.back()};
  return t;
}

// Keeps up to four best-effort kernels of 150 µs blocks (four waves on every SM) queued.
void bestEffort(CUcontext context, CUstream stream, int sms, const std::atomic<bool>& stop) {
  PROBE_CHECK(cuCtxSetCurrent(context));
  CUevent done = nullptr;
  PROBE_CHECK(cuEventCreate(&done, CU_EVENT_DISABLE_TIMING));
  while (!stop.load(std::memory_order_relaxed)) {
    for (int k = 0; k < 4; ++k) spinNanos<<<sms * 8, 128, 0, stream>>>(150000);
    PROBE_CHECK(cuEventRecord(done, stream));
    while (cuEventQuery(done) == CUDA_ERROR_NOT_READY) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  PROBE_CHECK(cuEventDestroy(done));
}

// One check every 10 ms, the way tallyd's monitor thread sleeps between them.
void checker(const std::string& way, CUcontext context, CUevent completed, const std::atomic<bool>& stop,
             std::vector<double>& took) {
  PROBE_CHECK(cuCtxSetCurrent(context));
  while (!stop.load(std::memory_order_relaxed)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    auto t0 = Clock::now();
    if (way == "ctx_limit") {
      size_t value = 0;
      PROBE_CHECK(cuCtxGetLimit(&value, CU_LIMIT_STACK_SIZE));
    } else if (way == "event_query") {
      PROBE_CHECK(cuEventQuery(completed));
    } else if (way == "ctx_flags") {
      unsigned flags = 0;
      PROBE_CHECK(cuCtxGetFlags(&flags));
    } else {
      continue;
    }
    took.push_back(micros(t0));
  }
}

void print(const char* way, const char* measure, const Tail& t) {
  std::printf("{\"way\":\"%s\",\"measure\":\"%s\",\"p50_us\":%.1f,\"p99_us\":%.1f,\"p999_us\":%.1f,\"max_us\":%.1f}\n", way,
              measure, t.p50, t.p99, t.p999, t.max);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? std::atof(argv[1]) : 2.0;
  PROBE_CHECK(cudaSetDevice(0));
  PROBE_CHECK(cudaFree(nullptr));
  CUcontext context = nullptr;
  PROBE_CHECK(cuCtxGetCurrent(&context));
  int sms = 0;
  PROBE_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  int lowest = 0, highest = 0;
  PROBE_CHECK(cudaDeviceGetStreamPriorityRange(&lowest, &highest));
  CUstream hp = nullptr, be = nullptr;
  PROBE_CHECK(cuStreamCreateWithPriority(&hp, CU_STREAM_NON_BLOCKING, highest));
  PROBE_CHECK(cuStreamCreateWithPriority(&be, CU_STREAM_NON_BLOCKING, lowest));
  CUevent done = nullptr, completed = nullptr;
  PROBE_CHECK(cuEventCreate(&done, CU_EVENT_DISABLE_TIMING));
  PROBE_CHECK(cuEventCreate(&completed, CU_EVENT_DISABLE_TIMING));
  PROBE_CHECK(cuEventRecord(completed, hp));
  spinNanos<<<1, 1, 0, hp>>>(1000);  // loaded before the GPU is busy
  PROBE_CHECK(cudaDeviceSynchronize());

  for (const char* way : {"none", "ctx_limit", "event_query", "ctx_flags"}) {
    std::atomic<bool> stop{false};
    std::vector<double> took, launch, request;
    std::thread beThread(bestEffort, context, be, sms, std::cref(stop));
    std::thread checkThread(checker, std::string(way), context, completed, std::cref(stop), std::ref(took));
    const auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    while (Clock::now() < end) {
      auto t0 = Clock::now();
      for (int k = 0; k < 8; ++k) {
        auto l0 = Clock::now();
        spinNanos<<<sms, 128, 0, hp>>>(20000);
        launch.push_back(micros(l0));
      }
      PROBE_CHECK(cuEventRecord(done, hp));
      while (cuEventQuery(done) == CUDA_ERROR_NOT_READY) __builtin_ia32_pause();
      request.push_back(micros(t0));
    }
    stop = true;
    beThread.join();
    checkThread.join();
    PROBE_CHECK(cudaDeviceSynchronize());
    print(way, "launch_call", tailOf(launch));
    print(way, "request_8x20us", tailOf(request));
    print(way, "check_call", tailOf(took));
  }
  return 0;
}

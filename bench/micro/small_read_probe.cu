// How fast can tallyd bring a few bytes of device memory back to the host (issue #8)? A
// synchronous 4-byte cudaMemcpy is one DMA on the copy engine plus the driver's wait; tallyd
// does the same into a staging buffer, then waits for an event. This probe times the ways it
// could do it instead, each natively in one process, medians over many reps:
//   memcpy_pageable   cudaMemcpy into pageable memory (what the application does natively)
//   dma_event         cuMemcpyDtoHAsync into pinned memory, cuEventRecord, cuEventQuery spin
//   dma_submit_only   cuMemcpyDtoHAsync into pinned memory, not waited for (the call's cost)
//   dma_stream_query  cuMemcpyDtoHAsync into pinned memory, cuStreamQuery spin (no event)
//   dma_sync          cuMemcpyDtoHAsync into pinned memory, cuStreamSynchronize
//   dma_flag          cuMemcpyDtoHAsync into pinned memory, cuStreamWriteValue32 of a mapped
//                     flag, spin on the flag in host memory
//   kernel_flag       a one-thread kernel stores the bytes and then the flag into mapped host
//                     memory (system-scope fence between), spin on the flag
// Output: one JSON line per way: {"way":..., "bytes":..., "median_us":..., "p10_us":..., "p90_us":...}
#include <cuda.h>
#include <cuda_runtime.h>

#include "probe_common.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

namespace {

__global__ void readBack(const unsigned* src, unsigned words, volatile unsigned* dst, volatile unsigned* flag,
                         unsigned value) {
  for (unsigned i = 0; i < words; ++i) dst[i] = src[i];
  __threadfence_system();
  *flag = value;
}

void spinUntil(const volatile unsigned* flag, unsigned value) {
  while (*flag != value) __builtin_ia32_pause();
}

void time(const char* way, size_t bytes, int reps, const std::function<void(unsigned)>& once) {
  std::vector<double> us;
  for (int i = 0; i < reps + 200; ++i) {
    auto start = std::chrono::steady_clock::now();
    once(static_cast<unsigned>(i + 1));
    double t = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
    if (i >= 200) us.push_back(t);
  }
  std::sort(us.begin(), us.end());
  std::printf("{\"way\":\"%s\",\"bytes\":%zu,\"median_us\":%.2f,\"p10_us\":%.2f,\"p90_us\":%.2f}\n", way, bytes,
              us[us.size() / 2], us[us.size() / 10], us[us.size() * 9 / 10]);
}

}  // namespace

int main(int argc, char** argv) {
  int reps = argc > 1 ? std::atoi(argv[1]) : 5000;
  PROBE_CHECK(cudaSetDevice(0));
  PROBE_CHECK(cudaFree(nullptr));
  CUstream stream = nullptr;
  PROBE_CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CUevent event = nullptr;
  PROBE_CHECK(cuEventCreate(&event, CU_EVENT_DISABLE_TIMING));
  unsigned* device = nullptr;
  PROBE_CHECK(cudaMalloc(&device, 1 << 20));
  PROBE_CHECK(cudaMemset(device, 7, 1 << 20));
  unsigned* pinned = nullptr;
  PROBE_CHECK(cudaHostAlloc(&pinned, 1 << 20, cudaHostAllocMapped));
  unsigned* flag = nullptr;
  PROBE_CHECK(cudaHostAlloc(&flag, 64, cudaHostAllocMapped));
  unsigned* pinnedDevice = nullptr;
  unsigned* flagDevice = nullptr;
  PROBE_CHECK(cudaHostGetDevicePointer(&pinnedDevice, pinned, 0));
  PROBE_CHECK(cudaHostGetDevicePointer(&flagDevice, flag, 0));
  std::vector<char> pageable(1 << 20);
  auto src = reinterpret_cast<CUdeviceptr>(device);
  for (size_t bytes : {size_t{4}, size_t{256}, size_t{4096}}) {
    time("memcpy_pageable", bytes, reps, [&](unsigned) { PROBE_CHECK(cudaMemcpy(pageable.data(), device, bytes, cudaMemcpyDeviceToHost)); });
    time("dma_event", bytes, reps, [&](unsigned) {
      PROBE_CHECK(cuMemcpyDtoHAsync(pinned, src, bytes, stream));
      PROBE_CHECK(cuEventRecord(event, stream));
      while (cuEventQuery(event) == CUDA_ERROR_NOT_READY) __builtin_ia32_pause();
    });
    // The submission alone (the driver call's own cost), then the wait outside the timing.
    time("dma_submit_only", bytes, reps, [&](unsigned) {
      PROBE_CHECK(cuMemcpyDtoHAsync(pinned, src, bytes, stream));
    });
    PROBE_CHECK(cuStreamSynchronize(stream));
    time("dma_stream_query", bytes, reps, [&](unsigned) {
      PROBE_CHECK(cuMemcpyDtoHAsync(pinned, src, bytes, stream));
      while (cuStreamQuery(stream) == CUDA_ERROR_NOT_READY) __builtin_ia32_pause();
    });
    time("dma_sync", bytes, reps, [&](unsigned) {
      PROBE_CHECK(cuMemcpyDtoHAsync(pinned, src, bytes, stream));
      PROBE_CHECK(cuStreamSynchronize(stream));
    });
    time("dma_flag", bytes, reps, [&](unsigned v) {
      PROBE_CHECK(cuMemcpyDtoHAsync(pinned, src, bytes, stream));
      PROBE_CHECK(cuStreamWriteValue32(stream, reinterpret_cast<CUdeviceptr>(flagDevice), v, CU_STREAM_WRITE_VALUE_DEFAULT));
      spinUntil(flag, v);
    });
    time("kernel_flag", bytes, reps, [&](unsigned v) {
      readBack<<<1, 1, 0, stream>>>(device, static_cast<unsigned>(bytes / 4), pinnedDevice, flagDevice, v);
      spinUntil(flag, v);
    });
  }
  return 0;
}

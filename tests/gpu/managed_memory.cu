// Managed memory: one pointer used by the host and by kernels, interleaved (the way the CUDA
// samples' UnifiedMemoryStreams and friends use it), memsets and copies to and from device
// memory, prefetch and advice, pointer attributes, and the free.
#include "gpu_test_common.h"

#include <vector>

__global__ void scaleAdd(float* data, int n, float scale, float add) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] = data[i] * scale + add;
}

__global__ void sumInto(const float* data, int n, float* total) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) atomicAdd(total, data[i]);
}

int main() {
  const int n = 1 << 20;
  float* data = nullptr;
  CHECK(cudaMallocManaged(&data, n * sizeof(float)));
  for (int i = 0; i < n; ++i) data[i] = static_cast<float>(i % 1000);  // the host writes it directly

  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  int device = 0;
  CHECK(cudaGetDevice(&device));
  cudaMemLocation onDevice{cudaMemLocationTypeDevice, device};
  CHECK(cudaMemPrefetchAsync(data, n * sizeof(float), onDevice, 0, s));
  CHECK(cudaMemAdvise(data, n * sizeof(float), cudaMemAdviseSetReadMostly, onDevice));
  scaleAdd<<<(n + 255) / 256, 256, 0, s>>>(data, n, 2.0f, 1.0f);
  CHECK_LAUNCH();
  CHECK(cudaStreamSynchronize(s));
  int bad = 0;
  for (int i = 0; i < n; ++i) bad += data[i] != static_cast<float>(i % 1000) * 2.0f + 1.0f;
  std::printf("kernel on managed memory, read by the host: bad=%d\n", bad);
  expect(bad == 0, "host writes, kernel updates, host reads the same pointer");

  // Host and kernels take turns, several rounds.
  float* total = nullptr;
  CHECK(cudaMallocManaged(&total, sizeof(float)));
  double expected = 0;
  for (int round = 0; round < 3; ++round) {
    *total = 0.0f;
    data[round] = 5000.0f + round;
    sumInto<<<(1024 + 255) / 256, 256, 0, s>>>(data, 1024, total);
    CHECK(cudaStreamSynchronize(s));
    expected = 0;
    for (int i = 0; i < 1024; ++i) expected += data[i];
    std::printf("round %d: total=%.1f expected=%.1f\n", round, *total, expected);
    expect(*total == static_cast<float>(expected), "kernel reads what the host just wrote");
  }

  // Memsets and copies between managed and device memory, in stream order.
  float* dev = nullptr;
  CHECK(cudaMalloc(&dev, n * sizeof(float)));
  CHECK(cudaMemcpyAsync(dev, data, n * sizeof(float), cudaMemcpyDefault, s));
  CHECK(cudaMemsetAsync(data, 0, n * sizeof(float), s));
  scaleAdd<<<(n + 255) / 256, 256, 0, s>>>(dev, n, 1.0f, 3.0f);
  CHECK(cudaMemcpyAsync(data, dev, n * sizeof(float), cudaMemcpyDeviceToDevice, s));
  CHECK(cudaStreamSynchronize(s));
  bad = 0;
  for (int i = 0; i < n; ++i) {
    float before = i < 3 ? 5000.0f + i : static_cast<float>(i % 1000) * 2.0f + 1.0f;
    bad += data[i] != before + 3.0f;
  }
  std::printf("copies and memsets through managed memory: bad=%d\n", bad);
  expect(bad == 0, "cudaMemcpyAsync/cudaMemsetAsync with managed memory in stream order");

  cudaPointerAttributes attr{};
  CHECK(cudaPointerGetAttributes(&attr, data + 10));
  std::printf("attributes: type=%d device pointer matches=%d host pointer matches=%d\n", static_cast<int>(attr.type),
              attr.devicePointer == data + 10, attr.hostPointer == data + 10);
  expect(attr.type == cudaMemoryTypeManaged, "cudaPointerGetAttributes says managed");

  CHECK(cudaFree(dev));
  CHECK(cudaFree(total));
  CHECK(cudaFree(data));
  CHECK(cudaStreamDestroy(s));
  return finish("managed_memory");
}

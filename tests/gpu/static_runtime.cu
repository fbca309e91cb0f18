// A program linked with the static CUDA runtime (nvcc's default): it carries its own cudart,
// which reaches the driver only through libcuda.so.1 — cuGetProcAddress and the private export
// tables (client/api/export_tables.cc), including the integrity check it recomputes. Kernels,
// a __device__ symbol, streams, events, and a device reset after which the runtime rebuilds its
// per-context state (context-local storage) and reloads its modules.
//
//   gpu_static_runtime            everything (GPU suite)
//   gpu_static_runtime --no-launch no kernel launches (the fake GPU of the CPU integration test
//                                  runs no kernels)
#include "gpu_test_common.h"

#include <cstring>

__device__ int launches;

__global__ void scaleAdd(float* y, const float* x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
  if (i == 0) atomicAdd(&launches, 1);
}

namespace {

constexpr int kN = 1 << 16;

double checksum(const float* v, int n) {
  double s = 0;
  for (int i = 0; i < n; ++i) s += v[i] * ((i % 7) + 1);
  return s;
}

void runKernels(float* dx, float* dy, float* host, cudaStream_t stream) {
  cudaEvent_t done;
  CHECK(cudaEventCreate(&done));
  for (int round = 0; round < 3; ++round) {
    scaleAdd<<<(kN + 255) / 256, 256, 0, stream>>>(dy, dx, 0.5f + round, kN);
    CHECK(cudaGetLastError());
  }
  CHECK(cudaEventRecord(done, stream));
  CHECK(cudaEventSynchronize(done));
  CHECK(cudaMemcpyAsync(host, dy, kN * sizeof(float), cudaMemcpyDeviceToHost, stream));
  CHECK(cudaStreamSynchronize(stream));
  int count = 0;
  CHECK(cudaMemcpyFromSymbol(&count, launches, sizeof count));
  std::printf("y checksum %.1f, kernels counted on the device %d\n", checksum(host, kN), count);
  CHECK(cudaEventDestroy(done));
}

}  // namespace

int main(int argc, char** argv) {
  const bool launch = !(argc > 1 && std::strcmp(argv[1], "--no-launch") == 0);
  int devices = 0, runtime = 0;
  CHECK(cudaGetDeviceCount(&devices));
  CHECK(cudaRuntimeGetVersion(&runtime));
  std::printf("devices %s, runtime %d\n", devices > 0 ? "present" : "none", runtime);

  static float host[kN];
  for (int i = 0; i < kN; ++i) host[i] = static_cast<float>(i % 101);
  for (int phase = 0; phase < 2; ++phase) {  // the second phase runs after a device reset
    float *dx = nullptr, *dy = nullptr;
    CHECK(cudaMalloc(&dx, kN * sizeof(float)));
    CHECK(cudaMalloc(&dy, kN * sizeof(float)));
    CHECK(cudaMemcpy(dx, host, kN * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemset(dy, 0, kN * sizeof(float)));
    static float back[kN];
    CHECK(cudaMemcpy(back, dx, kN * sizeof(float), cudaMemcpyDeviceToHost));
    std::printf("phase %d: round trip %s\n", phase, std::memcmp(back, host, sizeof back) == 0 ? "equal" : "DIFFERS");
    int seed = 40 + phase;
    CHECK(cudaMemcpyToSymbol(launches, &seed, sizeof seed));
    int readBack = 0;
    CHECK(cudaMemcpyFromSymbol(&readBack, launches, sizeof readBack));
    std::printf("phase %d: symbol %d\n", phase, readBack);
    cudaFuncAttributes attributes;
    CHECK(cudaFuncGetAttributes(&attributes, scaleAdd));
    std::printf("phase %d: kernel attributes read, max threads per block %d\n", phase, attributes.maxThreadsPerBlock);
    if (launch) {
      cudaStream_t stream;
      CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      runKernels(dx, dy, back, stream);
      CHECK(cudaStreamDestroy(stream));
    }
    CHECK(cudaFree(dx));
    CHECK(cudaFree(dy));
    CHECK(cudaDeviceReset());
  }
  std::printf("static runtime: done\n");
  return 0;
}

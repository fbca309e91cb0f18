// Programmatic dependent launch (sm_90): a kernel launched with the programmatic stream
// serialization attribute may start while the previous kernel of its stream still runs, once
// that kernel has signalled (cudaTriggerProgrammaticLaunchCompletion), and waits for it in
// cudaGridDependencySynchronize. Checked: the consumer overlaps a signalling producer (the
// attribute reached the driver), its results are right after that wait, and it is ordered
// as usual without the attribute or after a copy.
#include <vector>

#include "gpu_test_common.h"

constexpr int kThreads = 256;
constexpr int kElements = 4096;
constexpr unsigned long long kProducerSpinNs = 5'000'000;  // long next to a launch, short for a test

// Lets its dependent start at once, then holds its block for a while before it writes `data`
// and raises `ready`.
__global__ void producer(int* data, int* ready, int seed) {
  cudaTriggerProgrammaticLaunchCompletion();
  if (threadIdx.x == 0) {
    unsigned long long start = gpu_globaltimer();
    while (gpu_globaltimer() - start < kProducerSpinNs) {
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kElements; i += blockDim.x) data[i] = i * 3 + seed;
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    *reinterpret_cast<volatile int*>(ready) = 1;
  }
}

// Notes whether the producer was still running when it started, then waits for the producer and
// doubles what it wrote.
__global__ void consumer(const int* data, const int* ready, int* out, int* startedEarly, int* readyAfterWait) {
  if (threadIdx.x == 0) *startedEarly = *reinterpret_cast<const volatile int*>(ready) == 0;
  cudaGridDependencySynchronize();
  if (threadIdx.x == 0) *readyAfterWait = *reinterpret_cast<const volatile int*>(ready);
  for (int i = threadIdx.x; i < kElements; i += blockDim.x) out[i] = data[i] * 2;
}

struct Buffers {
  int* data = nullptr;
  int* ready = nullptr;
  int* out = nullptr;
  int* startedEarly = nullptr;
  int* readyAfterWait = nullptr;
};

struct Outcome {
  int startedEarly = -1;
  int readyAfterWait = -1;
  int wrong = 0;
};

void launchConsumer(const Buffers& b, cudaStream_t stream, bool programmatic) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(1);
  config.blockDim = dim3(kThreads);
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = programmatic ? 1 : 0;
  CHECK(cudaLaunchKernelEx(&config, consumer, static_cast<const int*>(b.data), static_cast<const int*>(b.ready), b.out,
                           b.startedEarly, b.readyAfterWait));
}

// producer, then (a copy, when `copyBetween`) the consumer; the consumer's view of it.
Outcome run(const Buffers& b, cudaStream_t stream, bool programmatic, bool copyBetween, int seed) {
  CHECK(cudaMemsetAsync(b.ready, 0, sizeof(int), stream));
  CHECK(cudaMemsetAsync(b.out, 0, kElements * sizeof(int), stream));
  producer<<<1, kThreads, 0, stream>>>(b.data, b.ready, seed);
  CHECK(cudaGetLastError());
  if (copyBetween) CHECK(cudaMemcpyAsync(b.startedEarly, b.ready, sizeof(int), cudaMemcpyDeviceToDevice, stream));
  launchConsumer(b, stream, programmatic);
  CHECK(cudaStreamSynchronize(stream));
  Outcome o;
  std::vector<int> out(kElements);
  CHECK(cudaMemcpy(out.data(), b.out, kElements * sizeof(int), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(&o.startedEarly, b.startedEarly, sizeof(int), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(&o.readyAfterWait, b.readyAfterWait, sizeof(int), cudaMemcpyDeviceToHost));
  for (int i = 0; i < kElements; ++i) o.wrong += out[i] != (i * 3 + seed) * 2;
  std::printf("programmatic=%d copy between=%d: started early %d, ready after wait %d, wrong %d\n", programmatic,
              copyBetween, o.startedEarly, o.readyAfterWait, o.wrong);
  return o;
}

int main() {
  Buffers b;
  CHECK(cudaMalloc(&b.data, kElements * sizeof(int)));
  CHECK(cudaMalloc(&b.out, kElements * sizeof(int)));
  CHECK(cudaMalloc(&b.ready, sizeof(int)));
  CHECK(cudaMalloc(&b.startedEarly, sizeof(int)));
  CHECK(cudaMalloc(&b.readyAfterWait, sizeof(int)));
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  // A GPU busy with another tenant's blocks may start the consumer late: a few tries.
  Outcome chained;
  for (int attempt = 0; attempt < 3 && chained.startedEarly != 1; ++attempt) chained = run(b, stream, true, false, 7);
  expect(chained.startedEarly == 1, "consumer started while its producer ran");
  expect(chained.readyAfterWait == 1 && chained.wrong == 0, "consumer saw the producer's writes after its wait");

  Outcome ordered = run(b, stream, false, false, 11);
  expect(ordered.startedEarly == 0 && ordered.readyAfterWait == 1 && ordered.wrong == 0,
         "without the attribute the consumer runs after its producer");

  // The copy overwrites startedEarly before the consumer sets it: only its order is checked.
  Outcome afterCopy = run(b, stream, true, true, 13);
  expect(afterCopy.readyAfterWait == 1 && afterCopy.wrong == 0, "after a copy the consumer is ordered as usual");

  CHECK(cudaStreamDestroy(stream));
  CHECK(cudaFree(b.data));
  CHECK(cudaFree(b.out));
  CHECK(cudaFree(b.ready));
  CHECK(cudaFree(b.startedEarly));
  CHECK(cudaFree(b.readyAfterWait));
  return finish("programmatic_launch");
}

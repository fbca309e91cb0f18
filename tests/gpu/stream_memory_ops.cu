// Stream memory operations between two streams, resolved as PyTorch resolves them (through
// cudaGetDriverEntryPointByVersion): a consumer stream waits on a word
// (cuStreamWaitValue32/64) that a producer stream writes (cuStreamWriteValue32/64) after its
// kernel, so the consumer's kernel sees the producer's data; and cuStreamBatchMemOp doing both.
// The output is the same natively and through tallyd.
//
// Every kernel is loaded (by a first launch, then a device sync) before any stream waits: under
// CUDA's lazy loading (the default) a kernel's first launch loads it, and loading may
// synchronize the context, which then waits for the consumer parked at its wait, whose word
// only the producer's later work writes: a deadlock (the programming guide's "Lazy Loading /
// concurrent execution"; the first version of this test hung natively at the first launch after
// the first wait). The producer holds its work back 2 ms each time, so the consumer really has to
// wait, and its kernel would read the previous round's data if the wait did not hold it.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <vector>

#include "gpu_test_common.h"  // CHECK, CU_CHECK, driver_fn, expect, finish

constexpr int kN = 1 << 16;

__global__ void produce(int* data, int n, int base) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] = base + i;
}

// Holds the producer back 2 ms, so that the consumer really has to wait for the producer's word.
__global__ void delay() { gpu_spin_ns(2'000'000); }

__global__ void consume(const int* data, int* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = data[i] * 2;
}

static bool consumerSawProducer(const int* dOut, int base) {
  std::vector<int> h(kN);
  CHECK(cudaMemcpy(h.data(), dOut, kN * sizeof(int), cudaMemcpyDeviceToHost));
  for (int i = 0; i < kN; ++i) {
    if (h[i] != 2 * (base + i)) return false;
  }
  return true;
}

int main() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("SKIP: no GPU visible\n");
    return 77;
  }
  auto writeValue32 = driver_fn<PFN_cuStreamWriteValue32_v11070>("cuStreamWriteValue32");
  auto waitValue32 = driver_fn<PFN_cuStreamWaitValue32_v11070>("cuStreamWaitValue32");
  auto writeValue64 = driver_fn<PFN_cuStreamWriteValue64_v11070>("cuStreamWriteValue64");
  auto waitValue64 = driver_fn<PFN_cuStreamWaitValue64_v11070>("cuStreamWaitValue64");
  auto batchMemOp = driver_fn<PFN_cuStreamBatchMemOp_v11070>("cuStreamBatchMemOp");

  cudaStream_t producer = nullptr, consumer = nullptr;
  CHECK(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking));
  int *dData = nullptr, *dOut = nullptr;
  unsigned long long* dWords = nullptr;  // [0]: 32-bit flag (low half), [1]: 64-bit flag
  CHECK(cudaMalloc(&dData, kN * sizeof(int)));
  CHECK(cudaMalloc(&dOut, kN * sizeof(int)));
  CHECK(cudaMalloc(&dWords, 2 * sizeof(unsigned long long)));
  CHECK(cudaMemset(dWords, 0, 2 * sizeof(unsigned long long)));
  auto word32 = reinterpret_cast<CUdeviceptr>(&dWords[0]);
  auto word64 = reinterpret_cast<CUdeviceptr>(&dWords[1]);
  const int blocks = (kN + 255) / 256;

  // Loads every kernel before the first wait (see the top), and leaves data = i, out = 2i. The
  // device sync also orders the legacy stream's memset of the words (the streams are
  // non-blocking) before any wait reads them.
  produce<<<blocks, 256, 0, producer>>>(dData, kN, 0);
  consume<<<blocks, 256, 0, producer>>>(dData, dOut, kN);
  delay<<<1, 1, 0, producer>>>();
  CHECK_LAUNCH();
  CHECK(cudaDeviceSynchronize());

  // A word of stream-ordered memory (cudaMallocAsync) too, written in stream order. Printed, not
  // asserted: next to the native run, a run through tallyd (which hands out all device memory
  // from memory pools) shows whether the driver takes stream memory operations on pooled memory.
  {
    unsigned* pooled = nullptr;
    CHECK(cudaMallocAsync(reinterpret_cast<void**>(&pooled), sizeof(unsigned), producer));
    CHECK(cudaMemsetAsync(pooled, 0, sizeof(unsigned), producer));
    CUresult call = writeValue32(producer, reinterpret_cast<CUdeviceptr>(pooled), 7, CU_STREAM_WRITE_VALUE_DEFAULT);
    cudaError_t synced = cudaStreamSynchronize(producer);
    unsigned value = 0;
    CHECK(cudaMemcpy(&value, pooled, sizeof value, cudaMemcpyDeviceToHost));
    std::printf("cuStreamWriteValue32 to cudaMallocAsync memory: %s, then the sync %s, word %u\n", cu_err_name(call),
                cudaGetErrorName(synced), value);
    CHECK(cudaFreeAsync(pooled, producer));
    CHECK(cudaStreamSynchronize(producer));
  }

  // 32 bits: the consumer waits for the producer's word.
  CU_CHECK(waitValue32(consumer, word32, 1, CU_STREAM_WAIT_VALUE_GEQ));
  consume<<<blocks, 256, 0, consumer>>>(dData, dOut, kN);
  CHECK_LAUNCH();
  delay<<<1, 1, 0, producer>>>();
  produce<<<blocks, 256, 0, producer>>>(dData, kN, 100);
  CHECK_LAUNCH();
  CU_CHECK(writeValue32(producer, word32, 1, CU_STREAM_WRITE_VALUE_DEFAULT));
  CHECK(cudaStreamSynchronize(consumer));
  expect(consumerSawProducer(dOut, 100), "cuStreamWaitValue32 waits for cuStreamWriteValue32");

  // 64 bits, an operand above 2^32, compared for equality.
  const cuuint64_t big = (1ull << 40) + 7;
  CU_CHECK(waitValue64(consumer, word64, big, CU_STREAM_WAIT_VALUE_EQ));
  consume<<<blocks, 256, 0, consumer>>>(dData, dOut, kN);
  delay<<<1, 1, 0, producer>>>();
  produce<<<blocks, 256, 0, producer>>>(dData, kN, 200);
  CHECK_LAUNCH();
  CU_CHECK(writeValue64(producer, word64, big, CU_STREAM_WRITE_VALUE_DEFAULT));
  CHECK(cudaStreamSynchronize(consumer));
  expect(consumerSawProducer(dOut, 200), "cuStreamWaitValue64 waits for cuStreamWriteValue64");

  // A batch: the producer writes both words, the consumer waits on both.
  CUstreamBatchMemOpParams waits[2] = {}, writes[2] = {};
  waits[0].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
  waits[0].waitValue.address = word32;
  waits[0].waitValue.value = 2;
  waits[0].waitValue.flags = CU_STREAM_WAIT_VALUE_GEQ;
  waits[1].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_64;
  waits[1].waitValue.address = word64;
  waits[1].waitValue.value64 = big + 1;
  waits[1].waitValue.flags = CU_STREAM_WAIT_VALUE_EQ;
  writes[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
  writes[0].writeValue.address = word32;
  writes[0].writeValue.value = 2;
  writes[1].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
  writes[1].writeValue.address = word64;
  writes[1].writeValue.value64 = big + 1;
  CU_CHECK(batchMemOp(consumer, 2, waits, 0));
  consume<<<blocks, 256, 0, consumer>>>(dData, dOut, kN);
  delay<<<1, 1, 0, producer>>>();
  produce<<<blocks, 256, 0, producer>>>(dData, kN, 300);
  CHECK_LAUNCH();
  CU_CHECK(batchMemOp(producer, 2, writes, 0));
  CHECK(cudaStreamSynchronize(consumer));
  expect(consumerSawProducer(dOut, 300), "cuStreamBatchMemOp waits for its writes");

  // What the driver refuses at the call. The word is 2 now: were the unknown comparison taken
  // after all, as any of GEQ, EQ, AND or NOR it would pass at once instead of holding the
  // producer (and the device syncs below) forever.
  expect(writeValue32(producer, word32 + 2, 1, 0) == CUDA_ERROR_INVALID_VALUE, "a misaligned word is refused");
  expect(waitValue32(producer, word32, 2, 0x7) == CUDA_ERROR_INVALID_VALUE, "an unknown comparison is refused");

  unsigned long long words[2] = {};
  CHECK(cudaMemcpy(words, dWords, sizeof words, cudaMemcpyDeviceToHost));
  std::printf("words: 0x%llx 0x%llx\n", words[0], words[1]);
  CHECK(cudaFree(dWords));
  CHECK(cudaFree(dOut));
  CHECK(cudaFree(dData));
  CHECK(cudaStreamDestroy(consumer));
  CHECK(cudaStreamDestroy(producer));
  return finish("stream_memory_ops");
}

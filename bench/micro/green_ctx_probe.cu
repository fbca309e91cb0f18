// What tallyd can rely on when it places tenants' streams in green contexts (SM partitions) of
// its one context per GPU (docs/scheduler.md, "SM partitions"):
//   1. a kernel of a module loaded in the primary context runs on a green context's stream and
//      reads and writes memory allocated in the primary context;
//   2. events cross between a green context's streams and the primary context's;
//   3. the blocks of a kernel in a green context stay on that partition's SMs (%smid);
//   4. how long a short "HP" kernel waits when a long "BE" kernel fills the other partition, or
//      the primary context, against running alone.
// Prints one line per check and exits non-zero when a functional check fails.
#include <cuda.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <vector>

#define CHECK(call)                                                                       \
  do {                                                                                    \
    CUresult r_ = (call);                                                                 \
    if (r_ != CUDA_SUCCESS) {                                                             \
      const char* n_ = nullptr;                                                           \
      cuGetErrorName(r_, &n_);                                                            \
      std::printf("FAIL %s:%d %s -> %s\n", __FILE__, __LINE__, #call, n_ ? n_ : "?");     \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

__device__ unsigned smId() {
  unsigned id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  return id;
}

__global__ void fill(int* out, int value, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = value + i;
}

// Every block spins `cycles` and records the SM it ran on.
__global__ void spinRecord(unsigned* sms, long long cycles) {
  long long start = clock64();
  while (clock64() - start < cycles) {
  }
  if (threadIdx.x == 0) sms[blockIdx.x] = smId();
}

static double millisSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

struct Partition {
  CUgreenCtx green = nullptr;
  CUstream stream = nullptr;
  unsigned sms = 0;
};

static Partition makePartition(CUdevice dev, CUdevResource resource) {
  Partition p;
  CUdevResourceDesc desc;
  CHECK(cuDevResourceGenerateDesc(&desc, &resource, 1));
  CHECK(cuGreenCtxCreate(&p.green, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM));
  CHECK(cuGreenCtxStreamCreate(&p.stream, p.green, CU_STREAM_NON_BLOCKING, 0));
  p.sms = resource.sm.smCount;
  return p;
}

static std::set<unsigned> smsUsed(CUfunction spin, CUstream stream, unsigned blocks, long long cycles, double* ms) {
  unsigned* d = nullptr;
  cudaMalloc(&d, blocks * sizeof(unsigned));
  void* args[] = {&d, &cycles};
  auto t = std::chrono::steady_clock::now();
  CHECK(cuLaunchKernel(spin, blocks, 1, 1, 128, 1, 1, 0, stream, args, nullptr));
  CHECK(cuStreamSynchronize(stream));
  if (ms) *ms = millisSince(t);
  std::vector<unsigned> h(blocks);
  cudaMemcpy(h.data(), d, blocks * sizeof(unsigned), cudaMemcpyDeviceToHost);
  cudaFree(d);
  return std::set<unsigned>(h.begin(), h.end());
}

int main(int argc, char** argv) {
  unsigned hpSms = argc > 1 ? std::atoi(argv[1]) : 40;
  CHECK(cuInit(0));
  CUdevice dev;
  CHECK(cuDeviceGet(&dev, 0));
  CUcontext primary;
  CHECK(cuDevicePrimaryCtxRetain(&primary, dev));
  CHECK(cuCtxSetCurrent(primary));
  cudaFree(nullptr);  // the runtime binds to the same primary context

  CUdevResource all;
  CHECK(cuDeviceGetDevResource(dev, &all, CU_DEV_RESOURCE_TYPE_SM));
  std::printf("device SMs %u min partition %u alignment %u\n", all.sm.smCount, all.sm.minSmPartitionSize,
              all.sm.smCoscheduledAlignment);
  CUdevResource group, rest;
  unsigned groups = 1;
  CHECK(cuDevSmResourceSplitByCount(&group, &groups, &all, &rest, 0, hpSms));
  Partition hp = makePartition(dev, group), be = makePartition(dev, rest);
  std::printf("partitions: hp %u SMs, be %u SMs\n", hp.sms, be.sms);

  // 1. Functions and memory of the primary context in a green context's stream.
  CUfunction fillFn, spinFn;
  CHECK(cudaGetFuncBySymbol(&fillFn, (const void*)fill) == cudaSuccess ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN);
  CHECK(cudaGetFuncBySymbol(&spinFn, (const void*)spinRecord) == cudaSuccess ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN);
  const int n = 1 << 20;
  CUdeviceptr buf;
  CHECK(cuMemAlloc(&buf, n * sizeof(int)));
  int value = 7, count = n;
  void* fillArgs[] = {&buf, &value, &count};
  CHECK(cuLaunchKernel(fillFn, n / 256, 1, 1, 256, 1, 1, 0, be.stream, fillArgs, nullptr));
  std::vector<int> host(n);
  CHECK(cuMemcpyDtoHAsync(host.data(), buf, n * sizeof(int), be.stream));
  CHECK(cuStreamSynchronize(be.stream));
  bool ok = true;
  for (int i = 0; i < n; ++i) ok &= host[i] == 7 + i;
  std::printf("%s primary-context function and memory in a green stream\n", ok ? "PASS" : "FAIL");

  // 2. Events: record in a green stream, wait in a primary stream and the other partition.
  CUevent ev;
  CHECK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
  CUstream primaryStream;
  CHECK(cuStreamCreateWithPriority(&primaryStream, CU_STREAM_NON_BLOCKING, 0));
  value = 100;
  CHECK(cuLaunchKernel(fillFn, n / 256, 1, 1, 256, 1, 1, 0, be.stream, fillArgs, nullptr));
  CHECK(cuEventRecord(ev, be.stream));
  CHECK(cuStreamWaitEvent(hp.stream, ev, 0));
  CHECK(cuMemcpyDtoHAsync(host.data(), buf, n * sizeof(int), hp.stream));
  CHECK(cuStreamSynchronize(hp.stream));
  bool evOk = host[n - 1] == 100 + n - 1;
  CHECK(cuEventRecord(ev, hp.stream));
  CHECK(cuStreamWaitEvent(primaryStream, ev, 0));
  CHECK(cuStreamSynchronize(primaryStream));
  std::printf("%s events across green and primary streams\n", evOk ? "PASS" : "FAIL");
  ok &= evOk;

  // 3. SM confinement.
  const long long shortCycles = 2000000;  // ~1 ms at ~1.9 GHz
  double msAll = 0, msHp = 0, msBe = 0;
  auto usedAll = smsUsed(spinFn, primaryStream, 8 * all.sm.smCount, shortCycles, &msAll);
  auto usedHp = smsUsed(spinFn, hp.stream, 8 * all.sm.smCount, shortCycles, &msHp);
  auto usedBe = smsUsed(spinFn, be.stream, 8 * all.sm.smCount, shortCycles, &msBe);
  bool disjoint = true;
  for (unsigned s : usedHp) disjoint &= usedBe.count(s) == 0;
  std::printf("SMs used: primary %zu (%.2f ms), hp %zu (%.2f ms), be %zu (%.2f ms); %s disjoint\n", usedAll.size(),
              msAll, usedHp.size(), msHp, usedBe.size(), msBe, disjoint ? "PASS" : "FAIL");
  ok &= disjoint && usedHp.size() <= hp.sms && usedBe.size() <= be.sms;

  // 4. HP latency next to a long BE kernel (blocks of ~20 ms) in the BE partition or the primary.
  unsigned* beSms = nullptr;
  cudaMalloc(&beSms, 64 * all.sm.smCount * sizeof(unsigned));
  const long long longCycles = 40000000;
  auto hpLatency = [&](CUstream hpStream, CUstream beStream, const char* label) {
    long long c = 20000;  // ~10 us per block
    void* beArgs[] = {&beSms, (void*)&longCycles};
    if (beStream) CHECK(cuLaunchKernel(spinFn, 4 * all.sm.smCount, 1, 1, 128, 1, 1, 0, beStream, beArgs, nullptr));
    if (beStream) {
      auto t = std::chrono::steady_clock::now();
      while (millisSince(t) < 2) {
      }
    }
    unsigned* d = nullptr;
    cudaMalloc(&d, 4 * all.sm.smCount * sizeof(unsigned));
    void* args[] = {&d, &c};
    auto t = std::chrono::steady_clock::now();
    CHECK(cuLaunchKernel(spinFn, 4 * all.sm.smCount, 1, 1, 128, 1, 1, 0, hpStream, args, nullptr));
    CHECK(cuStreamSynchronize(hpStream));
    std::printf("hp kernel %s: %.3f ms\n", label, millisSince(t));
    if (beStream) CHECK(cuStreamSynchronize(beStream));
    cudaFree(d);
  };
  CUstream hpTop;
  int least, greatest;
  CHECK(cuCtxGetStreamPriorityRange(&least, &greatest));
  CHECK(cuStreamCreateWithPriority(&hpTop, CU_STREAM_NON_BLOCKING, greatest));
  CUstream beLow;
  CHECK(cuGreenCtxStreamCreate(&beLow, be.green, CU_STREAM_NON_BLOCKING, least));
  hpLatency(hpTop, nullptr, "alone, primary");
  hpLatency(hp.stream, nullptr, "alone, hp partition");
  hpLatency(hp.stream, be.stream, "hp partition, BE in be partition");
  hpLatency(hpTop, beLow, "primary top priority, BE low priority in be partition");
  hpLatency(hpTop, primaryStream, "primary top priority, BE in primary");
  CUstream hpGreenTop;
  CHECK(cuGreenCtxStreamCreate(&hpGreenTop, hp.green, CU_STREAM_NON_BLOCKING, greatest));
  hpLatency(hpGreenTop, beLow, "hp partition top priority, BE low in be partition");

  // 5. Does a primary-context synchronize wait for green streams?
  void* beArgs[] = {&beSms, (void*)&shortCycles};
  CHECK(cuLaunchKernel(spinFn, all.sm.smCount, 1, 1, 128, 1, 1, 0, be.stream, beArgs, nullptr));
  CHECK(cuCtxSynchronize());
  CUresult q = cuStreamQuery(be.stream);
  std::printf("cuCtxSynchronize in primary %s green streams\n", q == CUDA_SUCCESS ? "waits for" : "does not wait for");

  CHECK(cuStreamDestroy(hp.stream));
  CHECK(cuStreamDestroy(be.stream));
  CHECK(cuGreenCtxDestroy(hp.green));
  CHECK(cuGreenCtxDestroy(be.green));
  CUresult after = cuLaunchKernel(fillFn, n / 256, 1, 1, 256, 1, 1, 0, primaryStream, fillArgs, nullptr);
  std::printf("%s primary context usable after green contexts destroyed (%d)\n",
              after == CUDA_SUCCESS ? "PASS" : "FAIL", after);
  ok &= after == CUDA_SUCCESS;
  std::printf("%s\n", ok ? "ALL PASS" : "SOME FAILED");
  return ok ? 0 : 1;
}

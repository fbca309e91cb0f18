// 15. Device queries: cudaGetDeviceCount, cudaGetDeviceProperties,
//     cudaDeviceGetAttribute, cudaMemGetInfo (only free <= total printed),
//     driver/runtime versions, cudaDeviceGetLimit/SetLimit, pointer
//     attributes of device / pinned / pageable memory, occupancy queries.
//     Exits 2 when no device is visible (used by run_suite.sh as the proof
//     that the mount namespace hides the GPU).
#include <cmath>
#include <vector>

#include "gpu_test_common.h"

__global__ void occ_kernel(float* p, int n) {
  extern __shared__ float sh[];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  sh[threadIdx.x] = i < n ? p[i] : 0.0f;
  __syncthreads();
  if (i < n) p[i] = sh[blockDim.x - 1 - threadIdx.x] + 1.0f;
}

int main() {
  int count = -1;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count < 1) {
    std::printf("cudaGetDeviceCount -> %s (count=%d): no GPU visible\n", cudaGetErrorName(e),
                e == cudaSuccess ? count : 0);
    return 2;
  }
  std::printf("device count: %d\n", count);
  int dev = -1;
  CHECK(cudaGetDevice(&dev));
  std::printf("current device: %d\n", dev);

  cudaDeviceProp p;
  CHECK(cudaGetDeviceProperties(&p, 0));
  std::printf("name: %s\n", p.name);
  std::printf("compute capability: %d.%d\n", p.major, p.minor);
  std::printf("multiProcessorCount: %d\n", p.multiProcessorCount);
  std::printf("totalGlobalMem: %.0f GiB\n", std::round(static_cast<double>(p.totalGlobalMem) / (1024.0 * 1024 * 1024)));
  std::printf("warpSize: %d maxThreadsPerBlock: %d maxThreadsPerMultiProcessor: %d\n", p.warpSize,
              p.maxThreadsPerBlock, p.maxThreadsPerMultiProcessor);
  std::printf("maxThreadsDim: %d %d %d maxGridSize: %d %d %d\n", p.maxThreadsDim[0], p.maxThreadsDim[1],
              p.maxThreadsDim[2], p.maxGridSize[0], p.maxGridSize[1], p.maxGridSize[2]);
  std::printf("sharedMemPerBlock: %zu sharedMemPerBlockOptin: %zu sharedMemPerMultiprocessor: %zu\n",
              p.sharedMemPerBlock, p.sharedMemPerBlockOptin, p.sharedMemPerMultiprocessor);
  std::printf("regsPerBlock: %d totalConstMem: %zu l2CacheSize: %d\n", p.regsPerBlock, p.totalConstMem,
              p.l2CacheSize);
  std::printf("concurrentKernels: %d unifiedAddressing: %d cooperativeLaunch: %d asyncEngineCount>0: %d\n",
              p.concurrentKernels, p.unifiedAddressing, p.cooperativeLaunch, p.asyncEngineCount > 0 ? 1 : 0);
  expect(p.major >= 1 && p.multiProcessorCount > 0 && p.totalGlobalMem > 0, "sane properties");

  struct {
    cudaDeviceAttr a;
    const char* name;
  } attrs[] = {
      {cudaDevAttrMaxThreadsPerBlock, "MaxThreadsPerBlock"},
      {cudaDevAttrMaxBlockDimX, "MaxBlockDimX"},
      {cudaDevAttrMaxBlockDimZ, "MaxBlockDimZ"},
      {cudaDevAttrMaxGridDimX, "MaxGridDimX"},
      {cudaDevAttrMaxGridDimY, "MaxGridDimY"},
      {cudaDevAttrMaxSharedMemoryPerBlock, "MaxSharedMemoryPerBlock"},
      {cudaDevAttrMaxSharedMemoryPerBlockOptin, "MaxSharedMemoryPerBlockOptin"},
      {cudaDevAttrWarpSize, "WarpSize"},
      {cudaDevAttrMultiProcessorCount, "MultiProcessorCount"},
      {cudaDevAttrComputeCapabilityMajor, "ComputeCapabilityMajor"},
      {cudaDevAttrComputeCapabilityMinor, "ComputeCapabilityMinor"},
      {cudaDevAttrMaxThreadsPerMultiProcessor, "MaxThreadsPerMultiProcessor"},
      {cudaDevAttrMaxRegistersPerBlock, "MaxRegistersPerBlock"},
      {cudaDevAttrL2CacheSize, "L2CacheSize"},
      {cudaDevAttrGlobalMemoryBusWidth, "GlobalMemoryBusWidth"},
      {cudaDevAttrConcurrentKernels, "ConcurrentKernels"},
      {cudaDevAttrCooperativeLaunch, "CooperativeLaunch"},
      {cudaDevAttrUnifiedAddressing, "UnifiedAddressing"},
      {cudaDevAttrManagedMemory, "ManagedMemory"},
      {cudaDevAttrStreamPrioritiesSupported, "StreamPrioritiesSupported"},
      {cudaDevAttrMaxBlocksPerMultiprocessor, "MaxBlocksPerMultiprocessor"},
  };
  for (auto& a : attrs) {
    int v = -1;
    CHECK(cudaDeviceGetAttribute(&v, a.a, 0));
    std::printf("attr %-30s = %d\n", a.name, v);
  }
  int mp = 0, ccmaj = 0;
  CHECK(cudaDeviceGetAttribute(&mp, cudaDevAttrMultiProcessorCount, 0));
  CHECK(cudaDeviceGetAttribute(&ccmaj, cudaDevAttrComputeCapabilityMajor, 0));
  expect(mp == p.multiProcessorCount && ccmaj == p.major, "attributes agree with properties");

  size_t free_b = 0, total_b = 0;
  CHECK(cudaMemGetInfo(&free_b, &total_b));
  std::printf("cudaMemGetInfo: free <= total: %s, total > 0: %s\n", free_b <= total_b ? "yes" : "no",
              total_b > 0 ? "yes" : "no");
  expect(free_b <= total_b && total_b > 0, "cudaMemGetInfo");

  int drv = 0, rt = 0;
  CHECK(cudaDriverGetVersion(&drv));
  CHECK(cudaRuntimeGetVersion(&rt));
  std::printf("driver version: %d runtime version: %d driver >= runtime: %s\n", drv, rt,
              drv >= rt ? "yes" : "no");
  expect(drv >= rt && rt >= 13000, "driver supports the runtime");

  // Limits.
  size_t stack = 0, fifo = 0, heap = 0;
  CHECK(cudaDeviceGetLimit(&stack, cudaLimitStackSize));
  CHECK(cudaDeviceGetLimit(&fifo, cudaLimitPrintfFifoSize));
  CHECK(cudaDeviceGetLimit(&heap, cudaLimitMallocHeapSize));
  std::printf("limits: stack=%zu printfFifo=%zu mallocHeap=%zu\n", stack, fifo, heap);
  CHECK(cudaDeviceSetLimit(cudaLimitStackSize, 8192));
  size_t stack2 = 0;
  CHECK(cudaDeviceGetLimit(&stack2, cudaLimitStackSize));
  std::printf("stack after set(8192): %zu\n", stack2);
  expect(stack2 >= 8192, "cudaDeviceSetLimit(cudaLimitStackSize)");
  CHECK(cudaDeviceSetLimit(cudaLimitStackSize, stack));
  CHECK(cudaDeviceGetLimit(&stack2, cudaLimitStackSize));
  expect(stack2 == stack, "stack limit restored");

  // Pointer attributes.
  float* dptr;
  float* pinned;
  float* portable;
  CHECK(cudaMalloc(&dptr, 1 << 20));
  CHECK(cudaMallocHost(&pinned, 1 << 20));
  CHECK(cudaHostAlloc(&portable, 4096, cudaHostAllocPortable));
  std::vector<float> pageable(1024, 1.0f);
  cudaPointerAttributes pa;
  CHECK(cudaPointerGetAttributes(&pa, dptr));
  std::printf("device pointer: type=%s device=%d devicePointer==ptr: %s\n", memory_type_name(pa.type),
              pa.device, pa.devicePointer == dptr ? "yes" : "no");
  expect(pa.type == cudaMemoryTypeDevice && pa.devicePointer == dptr, "device pointer attributes");
  CHECK(cudaPointerGetAttributes(&pa, dptr + 1000));
  std::printf("interior device pointer: type=%s\n", memory_type_name(pa.type));
  CHECK(cudaPointerGetAttributes(&pa, pinned));
  std::printf("pinned pointer: type=%s hostPointer==ptr: %s\n", memory_type_name(pa.type),
              pa.hostPointer == pinned ? "yes" : "no");
  expect(pa.type == cudaMemoryTypeHost && pa.hostPointer == pinned, "pinned pointer attributes");
  CHECK(cudaPointerGetAttributes(&pa, portable));
  std::printf("portable pinned pointer: type=%s\n", memory_type_name(pa.type));
  CHECK(cudaPointerGetAttributes(&pa, pageable.data()));
  std::printf("pageable pointer: type=%s\n", memory_type_name(pa.type));
  expect(pa.type == cudaMemoryTypeUnregistered, "pageable pointer is unregistered");

  // Occupancy.
  int blocks256 = 0, blocks256_smem = 0, blocks1024 = 0;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks256, occ_kernel, 256, 256 * sizeof(float)));
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks256_smem, occ_kernel, 256, 48 * 1024));
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks1024, occ_kernel, 1024, 1024 * sizeof(float)));
  int min_grid = 0, best_block = 0;
  CHECK(cudaOccupancyMaxPotentialBlockSize(&min_grid, &best_block, occ_kernel, 1024 * sizeof(float), 0));
  size_t avail_smem = 0;
  CHECK(cudaOccupancyAvailableDynamicSMemPerBlock(&avail_smem, occ_kernel, 2, 256));
  std::printf("occupancy: blocks/SM(256 thr)=%d blocks/SM(256 thr, 48KiB)=%d blocks/SM(1024 thr)=%d\n",
              blocks256, blocks256_smem, blocks1024);
  std::printf("occupancy: maxPotentialBlockSize minGrid=%d block=%d availDynSmem(2 blocks,256)=%zu\n",
              min_grid, best_block, avail_smem);
  expect(blocks256 > 0 && blocks1024 > 0 && best_block > 0, "occupancy queries");

  // Run the kernel at the suggested size to prove the queried config works.
  const int n = 100000;
  std::vector<float> hv(n);
  Rng rng(15);
  for (auto& v : hv) v = rng.unit();
  CHECK(cudaMemcpy(dptr, hv.data(), sizeof(float) * n, cudaMemcpyHostToDevice));
  occ_kernel<<<(n + best_block - 1) / best_block, best_block, best_block * sizeof(float)>>>(dptr, n);
  CHECK_LAUNCH();
  std::vector<float> out(n);
  CHECK(cudaMemcpy(out.data(), dptr, sizeof(float) * n, cudaMemcpyDeviceToHost));
  int bad = 0;
  for (int i = 0; i < n; ++i) {
    int b = i / best_block, t = i % best_block;
    int src = b * best_block + (best_block - 1 - t);
    float want = (src < n ? hv[src] : 0.0f) + 1.0f;
    if (out[i] != want) ++bad;
  }
  expect(bad == 0, "kernel at suggested block size");

  CHECK(cudaSetDevice(0));
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaFree(dptr));
  CHECK(cudaFreeHost(pinned));
  CHECK(cudaFreeHost(portable));
  return finish("device_query");
}

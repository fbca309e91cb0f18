// Stream-ordered allocator: cudaMallocAsync / cudaFreeAsync on streams, the default and
// created pools, pool attributes (release threshold, reuse flags, reserved / used memory and
// their high watermarks), cudaMemPoolTrimTo, cudaMallocFromPoolAsync, the current pool of a
// device, and the driver's cuMemAllocAsync / cuMemFreeAsync. What PyTorch's
// PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync does, in miniature.
// Exits 77 (skip) when no GPU is visible or the device has no memory pools.
#include <cuda.h>

#include <vector>

#include "gpu_test_common.h"

__global__ void fill(int* p, int n, int base) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = base + i;
}

__global__ void add_from(int* dst, const int* src, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) dst[i] += src[i];
}

static uint64_t pool_u64(cudaMemPool_t pool, cudaMemPoolAttr attr) {
  cuuint64_t v = 0;
  CHECK(cudaMemPoolGetAttribute(pool, attr, &v));
  return v;
}

static bool check_values(const int* d, int n, int expect_base, cudaStream_t s) {
  std::vector<int> h(n);
  CHECK(cudaMemcpyAsync(h.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  for (int i = 0; i < n; ++i) {
    if (h[i] != expect_base + i) return false;
  }
  return true;
}

static void ordered_on_streams() {
  const int n = 1 << 20;
  cudaStream_t a, b;
  CHECK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
  int* x = nullptr;
  CHECK(cudaMallocAsync(reinterpret_cast<void**>(&x), n * sizeof(int), a));
  fill<<<(n + 255) / 256, 256, 0, a>>>(x, n, 7);
  CHECK_LAUNCH();
  expect(check_values(x, n, 7, a), "cudaMallocAsync memory holds a kernel's values");
  // Used on another stream after an event: the address is valid in stream order.
  int* y = nullptr;
  CHECK(cudaMallocAsync(reinterpret_cast<void**>(&y), n * sizeof(int), b));
  fill<<<(n + 255) / 256, 256, 0, b>>>(y, n, 0);
  cudaEvent_t done;
  CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  CHECK(cudaEventRecord(done, b));
  CHECK(cudaStreamWaitEvent(a, done, 0));
  add_from<<<(n + 255) / 256, 256, 0, a>>>(x, y, n);
  std::vector<int> h(n);
  CHECK(cudaMemcpyAsync(h.data(), x, n * sizeof(int), cudaMemcpyDeviceToHost, a));
  CHECK(cudaStreamSynchronize(a));
  bool ok = true;
  for (int i = 0; i < n; ++i) ok = ok && h[i] == 7 + 2 * i;
  expect(ok, "two streams share stream-ordered memory through an event");
  CHECK(cudaFreeAsync(y, a));  // freed on the stream that used it last
  CHECK(cudaFreeAsync(x, a));
  CHECK(cudaStreamSynchronize(a));
  // cudaFree of stream-ordered memory and cudaFreeAsync of cudaMalloc memory are both legal.
  int* z = nullptr;
  CHECK(cudaMallocAsync(reinterpret_cast<void**>(&z), 4096, a));
  CHECK(cudaStreamSynchronize(a));
  CHECK(cudaFree(z));
  CHECK(cudaMalloc(reinterpret_cast<void**>(&z), 4096));
  CHECK(cudaFreeAsync(z, a));
  CHECK(cudaStreamSynchronize(a));
  expect(true, "cudaFree / cudaFreeAsync cross over");
  CHECK(cudaEventDestroy(done));
  CHECK(cudaStreamDestroy(a));
  CHECK(cudaStreamDestroy(b));
}

static void default_pool_attributes() {
  cudaMemPool_t pool = nullptr, current = nullptr;
  CHECK(cudaDeviceGetDefaultMemPool(&pool, 0));
  CHECK(cudaDeviceGetMemPool(&current, 0));
  expect(pool == current, "the current pool starts as the default pool");
  // What PyTorch's cudaMallocAsync backend sets first.
  cuuint64_t keep = UINT64_MAX;
  CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  expect(pool_u64(pool, cudaMemPoolAttrReleaseThreshold) == UINT64_MAX, "release threshold reads back");
  int reuse = 0;
  CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolReuseAllowOpportunistic, &reuse));
  std::printf("reuse opportunistic by default: %d\n", reuse);
  int off = 0;
  CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolReuseAllowInternalDependencies, &off));
  CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolReuseAllowInternalDependencies, &reuse));
  std::printf("reuse internal dependencies after set 0: %d\n", reuse);

  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  // Relative to what the pool holds already: natively a cudaFree of stream-ordered memory
  // (ordered_on_streams) leaves 4 KiB counted as used on the H200's driver.
  const uint64_t usedBefore = pool_u64(pool, cudaMemPoolAttrUsedMemCurrent);
  const size_t bytes = 64u << 20;
  void* p = nullptr;
  CHECK(cudaMallocAsync(&p, bytes, s));
  CHECK(cudaStreamSynchronize(s));
  uint64_t used = pool_u64(pool, cudaMemPoolAttrUsedMemCurrent);
  uint64_t reserved = pool_u64(pool, cudaMemPoolAttrReservedMemCurrent);
  std::fprintf(stderr, "before: used %llu; after a 64 MiB cudaMallocAsync: used %llu reserved %llu\n",
               static_cast<unsigned long long>(usedBefore), static_cast<unsigned long long>(used),
               static_cast<unsigned long long>(reserved));
  expect(used >= usedBefore + bytes, "used memory counts the allocation");
  expect(reserved >= bytes, "reserved memory covers the allocation");
  CHECK(cudaFreeAsync(p, s));
  CHECK(cudaStreamSynchronize(s));
  std::fprintf(stderr, "after the free: used %llu reserved %llu used-high %llu\n",
               static_cast<unsigned long long>(pool_u64(pool, cudaMemPoolAttrUsedMemCurrent)),
               static_cast<unsigned long long>(pool_u64(pool, cudaMemPoolAttrReservedMemCurrent)),
               static_cast<unsigned long long>(pool_u64(pool, cudaMemPoolAttrUsedMemHigh)));
  expect(pool_u64(pool, cudaMemPoolAttrUsedMemCurrent) == usedBefore, "used memory drops back after the free");
  expect(pool_u64(pool, cudaMemPoolAttrUsedMemHigh) >= usedBefore + bytes, "used high watermark remembers it");
  expect(pool_u64(pool, cudaMemPoolAttrReservedMemCurrent) >= bytes, "threshold UINT64_MAX keeps the memory");
  cuuint64_t zero = 0;
  CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero));
  expect(pool_u64(pool, cudaMemPoolAttrUsedMemHigh) == usedBefore, "used high watermark resets to the current use");
  CHECK(cudaMemPoolTrimTo(pool, 0));
  std::fprintf(stderr, "after trim to 0: reserved %llu\n",
               static_cast<unsigned long long>(pool_u64(pool, cudaMemPoolAttrReservedMemCurrent)));
  expect(pool_u64(pool, cudaMemPoolAttrReservedMemCurrent) < bytes, "trim to 0 gives the freed memory back");
  CHECK(cudaStreamDestroy(s));
}

static void created_pool() {
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  cudaMemPool_t pool = nullptr;
  CHECK(cudaMemPoolCreate(&pool, &props));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  const int n = 1000;
  int* p = nullptr;
  CHECK(cudaMallocFromPoolAsync(reinterpret_cast<void**>(&p), n * sizeof(int), pool, s));
  fill<<<4, 256, 0, s>>>(p, n, 100);
  expect(check_values(p, n, 100, s), "cudaMallocFromPoolAsync memory works");
  expect(pool_u64(pool, cudaMemPoolAttrUsedMemCurrent) >= n * sizeof(int), "the created pool counts its own use");
  // As the device's current pool, cudaMallocAsync draws from it.
  CHECK(cudaDeviceSetMemPool(0, pool));
  cudaMemPool_t current = nullptr;
  CHECK(cudaDeviceGetMemPool(&current, 0));
  expect(current == pool, "cudaDeviceSetMemPool sets the current pool");
  int* q = nullptr;
  uint64_t before = pool_u64(pool, cudaMemPoolAttrUsedMemCurrent);
  CHECK(cudaMallocAsync(reinterpret_cast<void**>(&q), 1 << 20, s));
  CHECK(cudaStreamSynchronize(s));
  expect(pool_u64(pool, cudaMemPoolAttrUsedMemCurrent) > before, "cudaMallocAsync uses the current pool");
  CHECK(cudaFreeAsync(q, s));
  CHECK(cudaFreeAsync(p, s));
  CHECK(cudaStreamSynchronize(s));
  cudaMemPool_t dflt = nullptr;
  CHECK(cudaDeviceGetDefaultMemPool(&dflt, 0));
  CHECK(cudaDeviceSetMemPool(0, dflt));
  CHECK(cudaMemPoolDestroy(pool));
  CHECK(cudaStreamDestroy(s));
}


static void driver_entry_points() {
  auto memAllocAsync = driver_fn<CUresult (*)(CUdeviceptr*, size_t, CUstream)>("cuMemAllocAsync");
  auto memFreeAsync = driver_fn<CUresult (*)(CUdeviceptr, CUstream)>("cuMemFreeAsync");
  auto getDefaultPool = driver_fn<CUresult (*)(CUmemoryPool*, CUdevice)>("cuDeviceGetDefaultMemPool");
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  CUdeviceptr p = 0;
  std::printf("cuMemAllocAsync -> %d\n", static_cast<int>(memAllocAsync(&p, 1 << 16, reinterpret_cast<CUstream>(s))));
  CHECK(cudaMemsetAsync(reinterpret_cast<void*>(p), 0x5a, 1 << 16, s));
  unsigned char last = 0;
  CHECK(cudaMemcpyAsync(&last, reinterpret_cast<void*>(p + (1 << 16) - 1), 1, cudaMemcpyDeviceToHost, s));
  std::printf("cuMemFreeAsync -> %d\n", static_cast<int>(memFreeAsync(p, reinterpret_cast<CUstream>(s))));
  CHECK(cudaStreamSynchronize(s));
  expect(last == 0x5a, "cuMemAllocAsync memory is usable");
  CUmemoryPool pool = nullptr;
  cudaMemPool_t runtimePool = nullptr;
  std::printf("cuDeviceGetDefaultMemPool -> %d\n", static_cast<int>(getDefaultPool(&pool, 0)));
  CHECK(cudaDeviceGetDefaultMemPool(&runtimePool, 0));
  expect(reinterpret_cast<void*>(pool) == reinterpret_cast<void*>(runtimePool), "driver and runtime name one default pool");
  CHECK(cudaStreamDestroy(s));
}

int main() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count < 1) {
    std::printf("SKIP: no GPU visible\n");
    return 77;
  }
  int pools = 0;
  CHECK(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, 0));
  std::printf("cudaDevAttrMemoryPoolsSupported: %d\n", pools);
  if (!pools) {
    std::printf("SKIP: the device has no memory pools\n");
    return 77;
  }
  ordered_on_streams();
  default_pool_attributes();
  created_pool();
  driver_entry_points();
  return finish("stream_ordered_alloc");
}

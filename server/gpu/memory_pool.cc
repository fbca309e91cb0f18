#include "server/gpu/memory_pool.h"

#include <cstdint>

namespace tally::server::gpu {

CUresult clearThenFree(CUdeviceptr ptr, size_t size, CUstream stream) {
  if (size > 0) {
    if (CUresult r = cuMemsetD8Async(ptr, 0, size, stream); r != CUDA_SUCCESS) return r;
  }
  return cuMemFreeAsync(ptr, stream);
}

std::unique_ptr<MemoryPool> MemoryPool::create(CUdevice device, std::string& error) {
  CUmemPoolProps props = {};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location = {CU_MEM_LOCATION_TYPE_DEVICE, device};
  CUmemoryPool pool = nullptr;
  if (CUresult r = cuMemPoolCreate(&pool, &props); r != CUDA_SUCCESS) {
    error = "cuMemPoolCreate: CUresult " + std::to_string(r);
    return nullptr;
  }
  // Keep what is freed (trim() gives it back), and never let an allocation wait for another
  // tenant's stream to reach its free: that dependency would tie one tenant's cudaMalloc to
  // another tenant's kernels. Memory whose free has already completed is still reused.
  cuuint64_t keepAll = UINT64_MAX;
  int no = 0;
  if (CUresult r = cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keepAll); r != CUDA_SUCCESS) {
    error = "cuMemPoolSetAttribute(RELEASE_THRESHOLD): CUresult " + std::to_string(r);
  } else if (r = cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES, &no);
             r != CUDA_SUCCESS) {
    error = "cuMemPoolSetAttribute(REUSE_ALLOW_INTERNAL_DEPENDENCIES): CUresult " + std::to_string(r);
  }
  if (!error.empty()) {
    cuMemPoolDestroy(pool);
    return nullptr;
  }
  return std::unique_ptr<MemoryPool>(new MemoryPool(pool));
}

MemoryPool::~MemoryPool() { cuMemPoolDestroy(pool_); }

CUresult MemoryPool::allocate(size_t size, CUstream stream, CUdeviceptr& out) {
  CUresult r = cuMemAllocFromPoolAsync(&out, size, pool_, stream);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) {
    trim();
    r = cuMemAllocFromPoolAsync(&out, size, pool_, stream);
  }
  if (r != CUDA_SUCCESS) return r;
  return cuStreamSynchronize(stream);
}

void MemoryPool::trim() { cuMemPoolTrimTo(pool_, 0); }

size_t MemoryPool::idleBytes() const {
  cuuint64_t reserved = 0, used = 0;
  if (cuMemPoolGetAttribute(pool_, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved) != CUDA_SUCCESS ||
      cuMemPoolGetAttribute(pool_, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used) != CUDA_SUCCESS || used > reserved) {
    return 0;
  }
  return reserved - used;
}

}  // namespace tally::server::gpu

#include "server/gpu/staging_pool.h"

#include "server/gpu/cuda_check.h"

#include <bit>
#include <cstdlib>

namespace tally::server::gpu {

StagingBuffer::~StagingBuffer() { pool_->give(data_, capacity_, pinned_); }

StagingPool::StagingPool(CUcontext context, size_t maxPooledBytes)
    : context_(context), maxPooledBytes_(maxPooledBytes) {}

StagingPool::~StagingPool() {
  makeContextCurrent(context_);
  for (auto& [size, buffers] : free_) {
    for (void* p : buffers) cuMemFreeHost(p);
  }
}

size_t StagingPool::sizeClass(size_t size) { return std::bit_ceil(std::max<size_t>(size, 64 << 10)); }

std::shared_ptr<StagingBuffer> StagingPool::take(size_t size) {
  size_t capacity = sizeClass(size);
  {
    std::lock_guard lock(mutex_);
    auto it = free_.find(capacity);
    if (it != free_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      return std::make_shared<StagingBuffer>(this, p, capacity, true);
    }
    if (pooledBytes_ + capacity <= maxPooledBytes_) {
      void* p = nullptr;
      makeContextCurrent(context_);
      if (cuMemHostAlloc(&p, capacity, CU_MEMHOSTALLOC_PORTABLE) == CUDA_SUCCESS) {
        pooledBytes_ += capacity;
        return std::make_shared<StagingBuffer>(this, p, capacity, true);
      }
    }
  }
  void* p = std::aligned_alloc(4096, (size + 4095) / 4096 * 4096);
  return p != nullptr ? std::make_shared<StagingBuffer>(this, p, size, false) : nullptr;
}

void StagingPool::give(void* data, size_t capacity, bool pinned) {
  if (!pinned) {
    std::free(data);
    return;
  }
  std::lock_guard lock(mutex_);
  free_[capacity].push_back(data);
}

}  // namespace tally::server::gpu

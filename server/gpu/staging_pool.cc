#include "server/gpu/staging_pool.h"

#include "server/gpu/cuda_check.h"

#include <spdlog/spdlog.h>

#include <bit>

namespace tally::server::gpu {

StagingBuffer::~StagingBuffer() {
  pool_->give(data_, capacity_);
  if (budget_) budget_->release(capacity_);
}

StagingPool::StagingPool(CUcontext context, size_t warnBytes) : context_(context), warnBytes_(warnBytes) {}

StagingPool::~StagingPool() {
  makeContextCurrent(context_);
  for (auto& [size, buffers] : free_) {
    for (void* p : buffers) cuMemFreeHost(p);
  }
}

size_t StagingPool::sizeClass(size_t size) { return std::bit_ceil(std::max<size_t>(size, 64 << 10)); }

void* StagingPool::reuseOrAllocate(size_t capacity) {
  std::lock_guard lock(mutex_);
  if (auto it = free_.find(capacity); it != free_.end() && !it->second.empty()) {
    void* p = it->second.back();
    it->second.pop_back();
    return p;
  }
  void* p = nullptr;
  makeContextCurrent(context_);
  if (CUresult r = cuMemHostAlloc(&p, capacity, CU_MEMHOSTALLOC_PORTABLE); r != CUDA_SUCCESS) {
    spdlog::warn("staging: cuMemHostAlloc of {} bytes failed ({}), {} bytes pinned so far", capacity, describe(r),
                 pinnedBytes_);
    return nullptr;
  }
  pinnedBytes_ += capacity;
  if (pinnedBytes_ > warnBytes_ && !warned_) {
    warned_ = true;
    spdlog::warn("staging: {} MiB of pinned host memory for copies (kept until tallyd exits)", pinnedBytes_ >> 20);
  }
  return p;
}

std::shared_ptr<StagingBuffer> StagingPool::take(size_t size, const std::shared_ptr<StagingBudget>& budget) {
  size_t capacity = sizeClass(size);
  if (budget && !budget->acquire(capacity)) return nullptr;
  void* p = reuseOrAllocate(capacity);
  if (p == nullptr) {
    if (budget) budget->release(capacity);
    return nullptr;
  }
  return std::make_shared<StagingBuffer>(this, p, capacity, budget);
}

void StagingPool::give(void* data, size_t capacity) {
  std::lock_guard lock(mutex_);
  free_[capacity].push_back(data);
}

}  // namespace tally::server::gpu

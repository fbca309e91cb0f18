#include "server/gpu/staging_pool.h"

#include "server/gpu/cuda_check.h"

#include <spdlog/spdlog.h>

#include <bit>

namespace tally::server::gpu {

namespace {

// Pinned memory from the driver, in `context`.
PinnedMemory driverPinnedMemory(CUcontext context) {
  return PinnedMemory{
      [context](size_t size) -> void* {
        void* p = nullptr;
        makeContextCurrent(context);
        if (CUresult r = cuMemHostAlloc(&p, size, CU_MEMHOSTALLOC_PORTABLE); r != CUDA_SUCCESS) {
          spdlog::warn("staging: cuMemHostAlloc of {} bytes failed ({})", size, describe(r));
          return nullptr;
        }
        return p;
      },
      [context](void* p) {
        makeContextCurrent(context);
        cuMemFreeHost(p);
      }};
}

}  // namespace

StagingBuffer::~StagingBuffer() {
  pool_->give(data_, capacity_);
  if (budget_) budget_->release(capacity_);
}

StagingPool::StagingPool(CUcontext context, size_t warnBytes, size_t keepIdleBytes)
    : StagingPool(driverPinnedMemory(context), warnBytes, keepIdleBytes) {}

StagingPool::StagingPool(PinnedMemory memory, size_t warnBytes, size_t keepIdleBytes)
    : memory_(std::move(memory)), warnBytes_(warnBytes), keepIdle_(keepIdleBytes) {}

StagingPool::~StagingPool() {
  for (auto& [size, buffers] : free_) {
    for (void* p : buffers) memory_.release(p);
  }
}

size_t StagingPool::sizeClass(size_t size) { return std::bit_ceil(std::max<size_t>(size, 64 << 10)); }

size_t StagingPool::pieceLimit(const StagingBudget* budget) {
  if (budget == nullptr) return kMaxPiece;
  // A power of two is its own size class, so a piece of a quarter of the hard limit always fits
  // and leaves room for the next pieces while earlier ones are still in flight.
  return std::max<size_t>(1, std::min(kMaxPiece, std::bit_floor(budget->hardLimit()) / 4));
}

void* StagingPool::reuseOrAllocate(size_t capacity) {
  std::lock_guard lock(mutex_);
  if (auto it = free_.find(capacity); it != free_.end() && !it->second.empty()) {
    void* p = it->second.back();
    it->second.pop_back();
    idleBytes_ -= capacity;
    return p;
  }
  void* p = memory_.allocate(capacity);
  if (p == nullptr) {
    spdlog::warn("staging: no pinned buffer of {} bytes, {} bytes pinned so far", capacity, pinnedBytes_);
    return nullptr;
  }
  pinnedBytes_ += capacity;
  if (pinnedBytes_ > warnBytes_ && !warned_) {
    warned_ = true;
    spdlog::warn("staging: {} MiB of pinned host memory for copies (idle buffers past {} MiB are given back when "
                 "no tenant is on the GPU)",
                 pinnedBytes_ >> 20, keepIdle_ >> 20);
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
  idleBytes_ += capacity;
  if (quiet_) trimLocked();
}

size_t StagingPool::trimLocked() {
  size_t freed = 0;
  for (auto it = free_.rbegin(); it != free_.rend() && idleBytes_ > keepIdle_; ++it) {
    auto& [capacity, buffers] = *it;
    while (!buffers.empty() && idleBytes_ > keepIdle_) {
      memory_.release(buffers.back());
      buffers.pop_back();
      idleBytes_ -= capacity;
      pinnedBytes_ -= capacity;
      freed += capacity;
    }
  }
  return freed;
}

void StagingPool::noteTenantsPresent() {
  std::lock_guard lock(mutex_);
  quiet_ = false;
}

size_t StagingPool::noteNoTenant() {
  std::lock_guard lock(mutex_);
  quiet_ = true;
  return trimLocked();
}

size_t StagingPool::pinnedBytes() const {
  std::lock_guard lock(mutex_);
  return pinnedBytes_;
}

size_t StagingPool::idleBytes() const {
  std::lock_guard lock(mutex_);
  return idleBytes_;
}

}  // namespace tally::server::gpu

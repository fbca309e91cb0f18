// Pinned host buffers for bulk copies, reused across calls, and the share of them one tenant
// may hold.
//
// Why always pinned: the driver copies pageable memory in pieces driven by the calling thread,
// so the stream then waits for a host thread; a context-wide call (module load, free) holding
// the driver's lock while it waits for every stream blocks that thread — a deadlock across
// tenants, seen on the H200 soak (docs/scheduler.md). Why buffers are never given back to the
// driver while tallyd runs: cuMemFreeHost also waits for every kernel of the context.
#pragma once

#include <cuda.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace tally::server::gpu {

class StagingPool;

// Bytes of staging one tenant holds: copies in flight and device-to-host data its client has not
// read yet. Past `soft` a new buffer waits (at most `maxWait`) for the tenant's own buffers to
// come back; past `hard` it is refused. One request may exceed `soft` when nothing is held, so
// that any single frame can pass. Shared with the buffers, which may outlive the tenant.
class StagingBudget {
 public:
  StagingBudget(size_t soft, size_t hard, std::chrono::milliseconds maxWait)
      : soft_(soft), hard_(hard), maxWait_(maxWait) {}

  bool acquire(size_t bytes) {
    std::unique_lock lock(mutex_);
    // The wait is bounded: the buffers may belong to copies queued behind something only this
    // tenant's thread can deliver (a host callback's completion message over TCP).
    returned_.wait_for(lock, maxWait_, [&] { return held_ == 0 || held_ + bytes <= soft_; });
    if (held_ + bytes > hard_ && held_ != 0) return false;
    held_ += bytes;
    return true;
  }
  void release(size_t bytes) {
    {
      std::lock_guard lock(mutex_);
      held_ -= bytes;
    }
    returned_.notify_all();
  }
  size_t held() const {
    std::lock_guard lock(mutex_);
    return held_;
  }

 private:
  const size_t soft_, hard_;
  const std::chrono::milliseconds maxWait_;
  mutable std::mutex mutex_;
  std::condition_variable returned_;
  size_t held_ = 0;
};

// A pinned buffer lent by the pool; returned to it (and to the tenant's budget) on destruction.
class StagingBuffer {
 public:
  StagingBuffer(StagingPool* pool, void* data, size_t capacity, std::shared_ptr<StagingBudget> budget)
      : pool_(pool), data_(data), capacity_(capacity), budget_(std::move(budget)) {}
  ~StagingBuffer();
  StagingBuffer(const StagingBuffer&) = delete;
  StagingBuffer& operator=(const StagingBuffer&) = delete;

  void* data() const { return data_; }
  size_t capacity() const { return capacity_; }

 private:
  StagingPool* pool_;
  void* data_;
  size_t capacity_;
  std::shared_ptr<StagingBudget> budget_;
};

class StagingPool {
 public:
  // Past `warnBytes` of pinned staging in all, tallyd says so once in its log.
  explicit StagingPool(CUcontext context, size_t warnBytes = 1ull << 30);
  ~StagingPool();

  // A pinned buffer of at least `size` bytes charged to `budget` (may be null); nullptr when the
  // budget refuses it or the driver has no pinned memory left.
  std::shared_ptr<StagingBuffer> take(size_t size, const std::shared_ptr<StagingBudget>& budget);

 private:
  friend class StagingBuffer;
  void give(void* data, size_t capacity);
  void* reuseOrAllocate(size_t capacity);
  static size_t sizeClass(size_t size);

  CUcontext context_;
  size_t warnBytes_;
  size_t pinnedBytes_ = 0;
  bool warned_ = false;
  std::mutex mutex_;
  std::map<size_t, std::vector<void*>> free_;
};

}  // namespace tally::server::gpu

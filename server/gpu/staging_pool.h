// Pinned host buffers for bulk copies, reused across calls, and the share of them one tenant
// may hold.
//
// Why always pinned: the driver copies pageable memory in pieces driven by the calling thread,
// so the stream then waits for a host thread; a context-wide call (module load, free) holding
// the driver's lock while it waits for every stream blocks that thread — a deadlock across
// tenants, seen on the H200 soak (docs/scheduler.md). Why buffers go back to the driver only
// while no tenant is on the GPU: cuMemFreeHost waits for every kernel of the context, and other
// threads' driver calls wait behind it. What the pool keeps idle past that point is bounded by
// a high-water mark; what one call may pin is bounded by the tenant's budget and the piece size.
#pragma once

#include <cuda.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace tally::server::gpu {

class StagingPool;

// Bytes of staging one tenant holds: copies in flight and device-to-host data its client has not
// read yet. Past `soft` a new buffer waits (at most `maxWait`) for the tenant's own buffers to
// come back; past `hard` it is refused, always — also when nothing is held, so no single call
// pins more than `hard` (callers cut copies into pieces of at most StagingPool::pieceLimit).
// Shared with the buffers, which may outlive the tenant.
class StagingBudget {
 public:
  StagingBudget(size_t soft, size_t hard, std::chrono::milliseconds maxWait)
      : soft_(soft), hard_(std::max(soft, hard)), maxWait_(maxWait) {}

  bool acquire(size_t bytes) {
    std::unique_lock lock(mutex_);
    if (bytes > hard_) return false;  // could never fit: refuse without waiting
    // The wait is bounded: the buffers may belong to copies queued behind something only this
    // tenant's thread can deliver (a host callback's completion message over TCP).
    returned_.wait_for(lock, maxWait_, [&] { return held_ == 0 || held_ + bytes <= soft_; });
    if (bytes > hard_ - held_) return false;
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
  size_t hardLimit() const { return hard_; }

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

// How the pool gets and gives back pinned memory: the driver in tallyd, a fake in unit tests.
struct PinnedMemory {
  std::function<void*(size_t)> allocate;  // nullptr when none is left
  std::function<void(void*)> release;
};

class StagingPool {
 public:
  // The largest buffer one piece of a copy takes (a power of two, so its size class is itself).
  static constexpr size_t kMaxPiece = 16 << 20;
  // Idle buffers the pool keeps for reuse once no tenant is on the GPU.
  static constexpr size_t kDefaultKeepIdle = 64 << 20;

  // Past `warnBytes` of pinned staging in all, tallyd says so once in its log.
  explicit StagingPool(CUcontext context, size_t warnBytes = 1ull << 30, size_t keepIdleBytes = kDefaultKeepIdle);
  StagingPool(PinnedMemory memory, size_t warnBytes, size_t keepIdleBytes);
  ~StagingPool();

  // A pinned buffer of at least `size` bytes charged to `budget` (may be null); nullptr when the
  // budget refuses it or the driver has no pinned memory left.
  std::shared_ptr<StagingBuffer> take(size_t size, const std::shared_ptr<StagingBudget>& budget);

  // The most one piece of a copy may take so that `budget` (may be null) can always grant it
  // when the tenant holds nothing: kMaxPiece, or a quarter of a small budget's hard limit.
  static size_t pieceLimit(const StagingBudget* budget);

  // The GPU's tenant count went from 0 to 1: freeing pinned memory could now wait for kernels.
  void noteTenantsPresent();
  // The GPU's last tenant left: idle buffers past the high-water mark go back to the driver,
  // now and as later ones are returned, until noteTenantsPresent. Returns the bytes freed now.
  size_t noteNoTenant();

  size_t pinnedBytes() const;
  size_t idleBytes() const;

 private:
  friend class StagingBuffer;
  void give(void* data, size_t capacity);
  void* reuseOrAllocate(size_t capacity);
  // Frees idle buffers, largest first, until at most keepIdle_ bytes stay idle (mutex_ held).
  size_t trimLocked();
  static size_t sizeClass(size_t size);

  PinnedMemory memory_;
  size_t warnBytes_;
  size_t keepIdle_;
  size_t pinnedBytes_ = 0;
  size_t idleBytes_ = 0;
  bool warned_ = false;
  bool quiet_ = false;  // no tenant on the GPU: returned buffers past keepIdle_ are freed at once
  mutable std::mutex mutex_;
  std::map<size_t, std::vector<void*>> free_;
};

}  // namespace tally::server::gpu

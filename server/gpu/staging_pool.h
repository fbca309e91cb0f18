// Pinned host buffers for bulk copies, reused across calls (cuMemHostAlloc costs milliseconds).
#pragma once

#include <cuda.h>

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace tally::server::gpu {

class StagingPool;

// A pinned buffer lent by the pool; returned to it on destruction.
class StagingBuffer {
 public:
  StagingBuffer(StagingPool* pool, void* data, size_t capacity, bool pinned)
      : pool_(pool), data_(data), capacity_(capacity), pinned_(pinned) {}
  ~StagingBuffer();
  StagingBuffer(const StagingBuffer&) = delete;
  StagingBuffer& operator=(const StagingBuffer&) = delete;

  void* data() const { return data_; }
  size_t capacity() const { return capacity_; }

 private:
  StagingPool* pool_;
  void* data_;
  size_t capacity_;
  bool pinned_;
};

class StagingPool {
 public:
  explicit StagingPool(CUcontext context, size_t maxPooledBytes = 1ull << 30);
  ~StagingPool();

  // A buffer of at least `size` bytes. Pinned when the pool can provide one; otherwise plain
  // memory (the driver then stages it itself), so a copy never waits for a buffer.
  std::shared_ptr<StagingBuffer> take(size_t size);

 private:
  friend class StagingBuffer;
  void give(void* data, size_t capacity, bool pinned);
  static size_t sizeClass(size_t size);

  CUcontext context_;
  size_t maxPooledBytes_;
  size_t pooledBytes_ = 0;
  std::mutex mutex_;
  std::map<size_t, std::vector<void*>> free_;
};

}  // namespace tally::server::gpu

// Up to 32 slots that any thread takes and gives back without a lock (completion words of the
// ring file, landing areas for small copies). A Lease gives its slot back when it goes.
#pragma once

#include <atomic>
#include <cstdint>

namespace tally::client {

class FreeSlots {
 public:
  explicit FreeSlots(unsigned count) : free_(count >= 32 ? ~uint32_t{0} : (uint32_t{1} << count) - 1) {}

  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& other) noexcept : owner_(other.owner_), index_(other.index_) { other.owner_ = nullptr; }
    Lease& operator=(Lease&&) = delete;
    ~Lease() {
      if (owner_ != nullptr) owner_->free_.fetch_or(uint32_t{1} << index_, std::memory_order_release);
    }
    explicit operator bool() const { return owner_ != nullptr; }
    unsigned index() const { return index_; }

   private:
    friend class FreeSlots;
    Lease(FreeSlots* owner, unsigned index) : owner_(owner), index_(index) {}
    FreeSlots* owner_ = nullptr;
    unsigned index_ = 0;
  };

  // An empty lease when every slot is taken.
  Lease take() {
    uint32_t free = free_.load(std::memory_order_relaxed);
    while (free != 0) {
      auto index = static_cast<unsigned>(__builtin_ctz(free));
      if (free_.compare_exchange_weak(free, free & ~(uint32_t{1} << index), std::memory_order_acquire)) {
        return Lease(this, index);
      }
    }
    return {};
  }

 private:
  std::atomic<uint32_t> free_;  // bit i: slot i is free
};

}  // namespace tally::client

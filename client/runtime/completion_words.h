// Synchronizing calls that the GPU itself says are done (Unix-socket clients). A memfd region
// tallyd maps and registers holds one 32-bit word per slot, each on its own cache line, and a
// small landing area per slot for a device-to-host copy into pageable memory. A call names its
// slot's word (schema: Call.completionWord); tallyd has the GPU write the call id's low 32 bits
// there after the call's work, and the waiting thread returns when it sees them instead of
// waiting for tallyd to notice the completion and answer (Connection::PendingCall::word).
#pragma once

#include "client/runtime/shared_memfd.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace tally::client {

class CompletionWords {
 public:
  static constexpr size_t kSlots = 32;
  // Device-to-host copies into pageable memory up to this size land in the slot, then a memcpy.
  static constexpr size_t kLandingBytes = 16u << 10;

  // Maps the region (one call to tallyd); nullptr when memory cannot be shared with its GPU.
  static std::unique_ptr<CompletionWords> open(const MapSharedRegion& mapRegion);

  // One slot, held by one call at a time; empty when every slot was taken.
  class Slot {
   public:
    Slot() = default;
    Slot(Slot&& other) noexcept : owner_(other.owner_), index_(other.index_) { other.owner_ = nullptr; }
    Slot& operator=(Slot&&) = delete;
    ~Slot();
    explicit operator bool() const { return owner_ != nullptr; }
    const std::atomic<uint32_t>& word() const;
    char* landing() const;

   private:
    friend class CompletionWords;
    Slot(CompletionWords* owner, unsigned index) : owner_(owner), index_(index) {}
    CompletionWords* owner_ = nullptr;
    unsigned index_ = 0;
  };
  Slot acquire();

 private:
  struct alignas(64) Line {
    std::atomic<uint32_t> word;
  };
  static_assert(sizeof(Line) == 64 && std::atomic<uint32_t>::is_always_lock_free);
  static constexpr size_t kRegionBytes = kSlots * (sizeof(Line) + kLandingBytes);

  explicit CompletionWords(char* region) : region_(region) {}
  Line* lines() const { return reinterpret_cast<Line*>(region_); }
  void release(unsigned index) { free_.fetch_or(uint64_t{1} << index, std::memory_order_release); }

  char* region_;
  std::atomic<uint64_t> free_{(uint64_t{1} << kSlots) - 1};  // bit i: slot i is free
};

}  // namespace tally::client

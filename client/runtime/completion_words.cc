#include "client/runtime/completion_words.h"

namespace tally::client {

std::unique_ptr<CompletionWords> CompletionWords::open(const MapSharedRegion& mapRegion) {
  void* region = nullptr;
  uint64_t serverAddress = 0;
  if (mapRegion(kRegionBytes, region, serverAddress) != CUDA_SUCCESS) return nullptr;
  if (serverAddress == 0) return nullptr;  // not registered there: the GPU cannot write the words
  return std::unique_ptr<CompletionWords>(new CompletionWords(static_cast<char*>(region)));
}

CompletionWords::Slot CompletionWords::acquire() {
  uint64_t free = free_.load(std::memory_order_relaxed);
  while (free != 0) {
    unsigned index = static_cast<unsigned>(__builtin_ctzll(free));
    if (free_.compare_exchange_weak(free, free & ~(uint64_t{1} << index), std::memory_order_acquire)) {
      return Slot(this, index);
    }
  }
  return {};
}

CompletionWords::Slot::~Slot() {
  if (owner_ != nullptr) owner_->release(index_);
}

const std::atomic<uint32_t>& CompletionWords::Slot::word() const { return owner_->lines()[index_].word; }

char* CompletionWords::Slot::landing() const {
  return owner_->region_ + kSlots * sizeof(Line) + index_ * kLandingBytes;
}

}  // namespace tally::client

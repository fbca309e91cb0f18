// A tenant's completion words (schema: Call.completionSlot): the words of its ring file
// (frame::SharedRings::completionWord) that its waiting threads poll. tallyd stores a call's
// word just before the reply; for a long copy the GPU writes it, in stream order right behind
// the copy, so the client sees it as the copy ends rather than after tallyd noticed. For that
// the ring file's control page is registered with the driver; it is unregistered when the last
// holder (the tenant, a completion callback) lets go, after the tenant's streams were drained.
#pragma once

#include "common/frame/shared_ring.h"

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <memory>

namespace tally::server::gpu {
class Gpu;
}

namespace tally::server::session {

class CompletionWords {
 public:
  // The words of `rings`; the GPU may write them when the driver registered the page (on `g`'s
  // context; portable to the others).
  static std::shared_ptr<CompletionWords> adopt(std::shared_ptr<frame::SharedRings> rings, gpu::Gpu* g);
  ~CompletionWords();
  CompletionWords(const CompletionWords&) = delete;
  CompletionWords& operator=(const CompletionWords&) = delete;

  // Word `wireSlot` - 1 (Call.completionSlot); nullptr for 0 or a slot past the ring file's.
  std::atomic<uint32_t>* word(uint32_t wireSlot) const;
  // Where the GPU sees that word; 0 when the page is not registered or the slot is not valid.
  CUdeviceptr deviceWord(uint32_t wireSlot) const;

 private:
  explicit CompletionWords(std::shared_ptr<frame::SharedRings> rings) : rings_(std::move(rings)) {}
  std::shared_ptr<frame::SharedRings> rings_;
  CUdeviceptr devicePage_ = 0;  // 0: not registered
};

}  // namespace tally::server::session

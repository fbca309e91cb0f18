#include "server/gpu/fault_evidence.h"

#include <algorithm>

namespace tally::server::gpu {

void FaultEvidence::noteLaunch(Clock::time_point now) {
  // Order: the window opens before the launch counts, so a reader never sees an unsettled launch
  // without a start time.
  if (!unsettled()) firstUnsettledNs_.store(now.time_since_epoch().count(), std::memory_order_release);
  lastLaunchNs_.store(now.time_since_epoch().count(), std::memory_order_release);
  launches_.fetch_add(1, std::memory_order_acq_rel);
}

void FaultEvidence::noteSettled(uint64_t sequence) {
  uint64_t seen = settled_.load(std::memory_order_acquire);
  while (seen < sequence && !settled_.compare_exchange_weak(seen, sequence, std::memory_order_acq_rel)) {
  }
  std::lock_guard lock(codeMutex_);
  auto proven = std::find_if(unsettledCode_.begin(), unsettledCode_.end(), [&](const auto& c) { return c.first > sequence; });
  for (auto it = unsettledCode_.begin(); it != proven; ++it) provenCode_.insert(it->second);
  unsettledCode_.erase(unsettledCode_.begin(), proven);
  if (unsettledCode_.empty()) codeOverflow_ = false;
}

void FaultEvidence::noteCode(uint64_t code) {
  // Bounded: a tenant that queues thousands of launches between syncs is not worth listing.
  constexpr size_t kMaxListed = 256;
  std::lock_guard lock(codeMutex_);
  if (unsettledCode_.size() >= kMaxListed) {
    codeOverflow_ = true;
    return;
  }
  unsettledCode_.emplace_back(launchesSoFar(), code);
}

bool FaultEvidence::runsUnprovenCode() const {
  std::lock_guard lock(codeMutex_);
  if (codeOverflow_) return true;
  return std::any_of(unsettledCode_.begin(), unsettledCode_.end(),
                     [&](const auto& c) { return provenCode_.count(c.second) == 0; });
}

std::optional<FaultEvidence::Clock::time_point> FaultEvidence::unsettledSince() const {
  if (!unsettled()) return std::nullopt;
  return Clock::time_point(Clock::duration(firstUnsettledNs_.load(std::memory_order_acquire)));
}

// ---- kernel marks ------------------------------------------------------------------------------

void FaultEvidence::attachMarks(MarkWords words, std::shared_ptr<const std::atomic<bool>> shared) {
  std::lock_guard lock(marksMutex_);
  words_ = words;
  shared_ = std::move(shared);
  slots_.assign(words_.host != nullptr ? words_.count : 0, MarkSlot{});
  // The block may have served an earlier tenant: count on from where its words stand.
  for (size_t i = 0; i < slots_.size(); ++i) slots_[i].issued = word(i);
}

FaultEvidence::MarkSlot* FaultEvidence::slotFor(CUstream stream) {
  MarkSlot* free = nullptr;
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].stream == stream) return &slots_[i];
    // A slot whose stream has nothing left unmarked or unpassed can change streams (the old one
    // may be gone; if not, it gets a slot again when it next runs a kernel).
    if (free == nullptr && (slots_[i].stream == nullptr || (!slots_[i].pending && caughtUp(i)))) free = &slots_[i];
  }
  if (free != nullptr) free->stream = stream;
  return free;
}

void FaultEvidence::noteKernelOn(CUstream stream) {
  // A tenant alone pays one store per launch, not a lock (shared_ is set once, before launches).
  if (!shared_ || !shared_->load(std::memory_order_relaxed)) {
    unmarkedUpTo_.store(launchesSoFar(), std::memory_order_release);
    return;
  }
  std::lock_guard lock(marksMutex_);
  MarkSlot* slot = slotFor(stream);
  if (slot == nullptr) {
    unmarkedUpTo_.store(launchesSoFar(), std::memory_order_release);
    return;
  }
  slot->pending = true;
  anyPending_ = true;
}

void FaultEvidence::writeMarks(const MarkWriter& write) {
  std::lock_guard lock(marksMutex_);
  if (!anyPending_) return;
  anyPending_ = false;
  for (size_t i = 0; i < slots_.size(); ++i) {
    MarkSlot& slot = slots_[i];
    if (!slot.pending) continue;
    slot.pending = false;
    CUdeviceptr address = words_.device + i * sizeof(uint32_t);
    if (write(slot.stream, address, slot.issued + 1) == CUDA_SUCCESS) {
      ++slot.issued;
    } else {
      unmarkedUpTo_.store(launchesSoFar(), std::memory_order_release);  // no proof for these
    }
  }
}

bool FaultEvidence::kernelsMayRun() const {
  if (settled_.load(std::memory_order_acquire) < unmarkedUpTo_.load(std::memory_order_acquire)) return true;
  std::lock_guard lock(marksMutex_);
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].pending || !caughtUp(i)) return true;
  }
  return false;
}

}  // namespace tally::server::gpu

// Words that a tenant's streams wait on (cuStreamWaitValue32 ≥ a sequence) and that only its
// client sets: host-callback flags and shared host-callback words. Filled past every wait when
// the client is gone — by release(), or earlier by HangupWatch when the tenant's thread is stuck
// in a driver call. That call may itself be what waits for these streams (a context-wide wait:
// module load, free), so the release must not need that thread (docs/scheduler.md).
// Thread-safe; read without the driver, so tallyctl can show it while the driver is busy.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

namespace tally::server::session {

class HostWaits {
 public:
  // A stream may wait until `word` reaches `awaited` from now on; filled at once if the client
  // is already gone.
  void add(uint32_t* word, uint32_t awaited) {
    std::lock_guard lock(mutex_);
    if (released_) {
      fill(Wait{word, awaited});
      return;
    }
    if (waits_.size() >= kPruneAt) pruneReached();
    waits_.push_back(Wait{word, awaited});
  }
  // The client is gone: every wait is released, and the words are forgotten (their memory may
  // be freed after this returns). Returns how many waits were still pending.
  size_t releaseAll() {
    std::lock_guard lock(mutex_);
    released_ = true;
    size_t count = pendingLocked();
    for (const Wait& w : waits_) fill(w);
    waits_.clear();
    return count;
  }
  // Waits whose word has not reached its sequence yet: callbacks the client still owes (or that
  // its streams have not reached).
  size_t pending() const {
    std::lock_guard lock(mutex_);
    return pendingLocked();
  }

 private:
  struct Wait {
    uint32_t* word;
    uint32_t awaited;
  };
  static constexpr size_t kPruneAt = 64;  // a long-lived tenant's list stays short
  // How far past a wait a release writes: far enough for every later wait on the word too.
  static constexpr uint32_t kFillAhead = 1u << 30;
  // The GPU's ≥ is cyclic — (int32_t)(word - awaited) >= 0 (cuStreamWaitValue32, GEQ) — so
  // "past" is judged the same way: UINT32_MAX would hold such a wait forever.
  static bool reached(const Wait& w) {
    return static_cast<int32_t>(__atomic_load_n(w.word, __ATOMIC_ACQUIRE) - w.awaited) >= 0;
  }
  // Lets the wait go (and every later one on the word with it).
  static void fill(const Wait& w) {
    if (!reached(w)) __atomic_store_n(w.word, w.awaited + kFillAhead, __ATOMIC_RELEASE);
  }
  size_t pendingLocked() const {
    size_t count = 0;
    for (const Wait& w : waits_) count += reached(w) ? 0 : 1;
    return count;
  }
  // Forgets waits already over. A word whose every wait is over is not filled at release: no
  // stream waits on it any more (a later wait adds it again).
  void pruneReached() { std::erase_if(waits_, reached); }

  mutable std::mutex mutex_;
  std::vector<Wait> waits_;
  bool released_ = false;
};

}  // namespace tally::server::session

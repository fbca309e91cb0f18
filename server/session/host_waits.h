// Words that a tenant's streams wait on (cuStreamWaitValue32) and that only its client sets:
// host-callback flags and shared host-callback words. Filled with UINT32_MAX when the client is
// gone — by release(), or earlier by HangupWatch when the tenant's thread is stuck in a driver
// call. That call may itself be what waits for these streams (a context-wide wait: module load,
// free), so the release must not need that thread (docs/scheduler.md). Thread-safe.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

namespace tally::server::session {

class HostWaits {
 public:
  // A stream may wait on `word` from now on; filled at once if the client is already gone.
  void add(uint32_t* word) {
    std::lock_guard lock(mutex_);
    if (released_) {
      fill(word);
    } else {
      words_.push_back(word);
    }
  }
  // The client is gone: every wait is released, and the words are forgotten (their memory may
  // be freed after this returns). Returns how many words it filled.
  size_t releaseAll() {
    std::lock_guard lock(mutex_);
    released_ = true;
    for (uint32_t* word : words_) fill(word);
    size_t filled = words_.size();
    words_.clear();
    return filled;
  }

 private:
  static void fill(uint32_t* word) { __atomic_store_n(word, UINT32_MAX, __ATOMIC_RELEASE); }

  std::mutex mutex_;
  std::vector<uint32_t*> words_;
  bool released_ = false;
};

}  // namespace tally::server::session

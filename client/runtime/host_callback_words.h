// Host callbacks without tallyd in the loop (Unix-socket clients): each stream with callbacks
// owns two u32 words of a memfd region that tallyd maps and registers. The stream writes the
// callback's sequence to `reached` when it gets there and waits on the GPU until `done` holds
// it; this thread polls `reached`, runs the callbacks in stream order and writes `done`.
// Why: with messages, a callback's completion had to pass through the tenant's tallyd thread,
// and a context-wide driver call (module load, free) waits for every stream of the context —
// so a load waiting for a stream parked at a callback could wait forever (docs/scheduler.md).
#pragma once

#include "client/runtime/shared_memfd.h"

#include <cuda.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace tally::client {

class HostCallbackWords {
 public:
  // Maps the region (one call to tallyd); nullptr when memory cannot be shared.
  static std::unique_ptr<HostCallbackWords> open(const MapSharedRegion& mapRegion, std::function<void()> onCallbackRun);
  ~HostCallbackWords();

  struct Ticket {
    uint64_t reachedWord = 0;  // client addresses, for the HostFunc call
    uint64_t doneWord = 0;
    uint32_t sequence = 0;
  };
  // Queues `callback` for `stream`; false when the stream has no word pair left (the caller
  // then uses the message path).
  bool enqueue(uint64_t stream, std::function<void()> callback, Ticket& ticket);
  // Forgets a callback whose HostFunc call could not be sent.
  void cancelLast(uint64_t stream);
  // The key will queue nothing more (a destroyed executable graph's host node): its word pair
  // goes back for reuse once its callbacks have run.
  void release(uint64_t stream);

 private:
  struct Pending {
    uint32_t sequence;
    std::function<void()> callback;
  };
  struct Slot {
    size_t index = 0;
    uint32_t issued = 0;
    std::deque<Pending> pending;
    bool released = false;
  };
  // A word pair no key holds; `issued` carries on, so a sequence is never reused on its words.
  struct FreePair {
    size_t index;
    uint32_t issued;
  };
  // Gives a released slot's words back once nothing is pending on them; slot iterator valid.
  void freeIfDone(std::map<uint64_t, Slot>::iterator slot);
  HostCallbackWords(uint32_t* words, size_t slots, std::function<void()> onCallbackRun);
  std::atomic_ref<uint32_t> reached(size_t index) { return std::atomic_ref<uint32_t>(words_[2 * index]); }
  std::atomic_ref<uint32_t> done(size_t index) { return std::atomic_ref<uint32_t>(words_[2 * index + 1]); }
  void run();
  // Runs (unlocked) every callback whose stream got there; true if any ran.
  bool runReady(std::unique_lock<std::mutex>& lock);

  uint32_t* words_;
  size_t slotCount_;
  std::function<void()> onCallbackRun_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::map<uint64_t, Slot> slots_;  // by stream id (or another key its caller chose)
  std::vector<FreePair> freePairs_;
  size_t pairsUsed_ = 0;
  size_t pendingCount_ = 0;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace tally::client

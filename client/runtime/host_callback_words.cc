#include "client/runtime/host_callback_words.h"

#include <sys/prctl.h>

#include <chrono>
#include <vector>


namespace tally::client {
namespace {
constexpr size_t kRegionBytes = 64 * 1024;  // 8192 streams with callbacks
constexpr auto kPollPeriod = std::chrono::microseconds(10);
}  // namespace

std::unique_ptr<HostCallbackWords> HostCallbackWords::open(const MapSharedRegion& mapRegion, std::function<void()> onCallbackRun) {
  void* region = nullptr;
  uint64_t serverAddress = 0;
  if (mapRegion(kRegionBytes, region, serverAddress) != CUDA_SUCCESS) return nullptr;
  if (serverAddress == 0) return nullptr;  // not registered there: the GPU cannot see the words
  return std::unique_ptr<HostCallbackWords>(
      new HostCallbackWords(static_cast<uint32_t*>(region), kRegionBytes / (2 * sizeof(uint32_t)), std::move(onCallbackRun)));
}

HostCallbackWords::HostCallbackWords(uint32_t* words, size_t slots, std::function<void()> onCallbackRun)
    : words_(words), slotCount_(slots), onCallbackRun_(std::move(onCallbackRun)) {
  thread_ = std::thread([this] { run(); });
}

// Only tests get here: the client runtime is never destroyed (callbacks may run during exit).
HostCallbackWords::~HostCallbackWords() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

bool HostCallbackWords::enqueue(uint64_t stream, std::function<void()> callback, Ticket& ticket) {
  std::lock_guard lock(mutex_);
  auto it = slots_.find(stream);
  if (it == slots_.end()) {
    Slot slot;
    if (!freePairs_.empty()) {
      slot.index = freePairs_.back().index;
      slot.issued = freePairs_.back().issued;
      freePairs_.pop_back();
    } else if (pairsUsed_ < slotCount_) {
      slot.index = pairsUsed_++;
    } else {
      return false;
    }
    it = slots_.emplace(stream, std::move(slot)).first;
  }
  Slot& slot = it->second;
  ticket.sequence = ++slot.issued;
  ticket.reachedWord = reinterpret_cast<uint64_t>(&words_[2 * slot.index]);
  ticket.doneWord = reinterpret_cast<uint64_t>(&words_[2 * slot.index + 1]);
  slot.pending.push_back(Pending{ticket.sequence, std::move(callback)});
  ++pendingCount_;
  wake_.notify_one();
  return true;
}

void HostCallbackWords::cancelLast(uint64_t stream) {
  std::lock_guard lock(mutex_);
  auto it = slots_.find(stream);
  if (it == slots_.end() || it->second.pending.empty()) return;
  it->second.pending.pop_back();
  --it->second.issued;
  --pendingCount_;
}

void HostCallbackWords::release(uint64_t stream) {
  std::lock_guard lock(mutex_);
  auto it = slots_.find(stream);
  if (it == slots_.end()) return;
  it->second.released = true;
  freeIfDone(it);
}

void HostCallbackWords::freeIfDone(std::map<uint64_t, Slot>::iterator slot) {
  if (!slot->second.released || !slot->second.pending.empty()) return;
  freePairs_.push_back(FreePair{slot->second.index, slot->second.issued});
  slots_.erase(slot);
}

bool HostCallbackWords::runReady(std::unique_lock<std::mutex>& lock) {
  // A stream passes one callback at a time (it waits for `done` before it can reach the next),
  // so each slot has at most one ready callback per round.
  std::vector<std::pair<size_t, Pending>> ready;
  for (auto& [stream, slot] : slots_) {
    if (!slot.pending.empty() && reached(slot.index).load(std::memory_order_acquire) >= slot.pending.front().sequence) {
      ready.emplace_back(slot.index, std::move(slot.pending.front()));
      slot.pending.pop_front();
      --pendingCount_;
    }
  }
  if (ready.empty()) return false;
  lock.unlock();
  for (auto& [index, p] : ready) {
    p.callback();
    done(index).store(p.sequence, std::memory_order_release);
    onCallbackRun_();
  }
  lock.lock();
  // Released slots whose last callback has just run (its `done` is written) give their words back.
  for (auto it = slots_.begin(); it != slots_.end();) freeIfDone(it++);
  return true;
}

void HostCallbackWords::run() {
  prctl(PR_SET_TIMERSLACK, 1000UL);  // poll at microsecond steps while callbacks are pending
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return pendingCount_ > 0 || stopping_; });
    if (stopping_) return;
    if (!runReady(lock)) {
      lock.unlock();
      std::this_thread::sleep_for(kPollPeriod);
      lock.lock();
    }
  }
}

}  // namespace tally::client

// max_connections: a slot is taken when a connection is accepted, before any thread is started
// for it (TLS handshake or session), and given back when whatever holds it ends. Every thread
// a peer can make tallyd start is behind one.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace tally::server::transport {

class ConnectionSlots {
  struct Counter {
    explicit Counter(size_t l) : limit(l) {}
    const size_t limit;
    std::atomic<size_t> used{0};
    std::atomic<uint64_t> refused{0};
  };

 public:
  explicit ConnectionSlots(size_t limit) : counter_(std::make_shared<Counter>(limit)) {}

  // One held slot; move-only, given back when destroyed (it may outlive the ConnectionSlots).
  class Slot {
   public:
    Slot() = default;
    Slot(Slot&& other) noexcept = default;
    Slot& operator=(Slot&& other) noexcept {
      release();
      counter_ = std::move(other.counter_);
      return *this;
    }
    ~Slot() { release(); }
    bool held() const { return counter_ != nullptr; }

   private:
    friend class ConnectionSlots;
    explicit Slot(std::shared_ptr<Counter> counter) : counter_(std::move(counter)) {}
    void release() {
      if (counter_) counter_->used.fetch_sub(1, std::memory_order_acq_rel);
      counter_.reset();
    }
    std::shared_ptr<Counter> counter_;
  };

  // A slot, or one that is not held() (and counted as refused) when all are taken.
  Slot tryTake() {
    size_t used = counter_->used.load(std::memory_order_relaxed);
    do {
      if (used >= counter_->limit) {
        counter_->refused.fetch_add(1, std::memory_order_relaxed);
        return Slot();
      }
    } while (!counter_->used.compare_exchange_weak(used, used + 1, std::memory_order_acq_rel));
    return Slot(counter_);
  }

  size_t limit() const { return counter_->limit; }
  size_t inUse() const { return counter_->used.load(std::memory_order_acquire); }
  uint64_t refused() const { return counter_->refused.load(std::memory_order_relaxed); }

 private:
  std::shared_ptr<Counter> counter_;
};

using ConnectionSlot = ConnectionSlots::Slot;

}  // namespace tally::server::transport

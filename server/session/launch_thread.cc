#include "server/session/launch_thread.h"

#include <pthread.h>

#include <string>

namespace tally::server::session {

namespace {

using Clock = std::chrono::steady_clock;

inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Spins until `ready()` or `spin` has passed; true if ready.
template <typename Ready>
bool spinUntil(Ready ready, std::chrono::microseconds spin) {
  if (ready()) return true;
  const auto deadline = Clock::now() + spin;
  for (unsigned i = 1;; ++i) {
    cpuRelax();
    if (ready()) return true;
    if (i % 64 == 0 && Clock::now() >= deadline) return false;
  }
}

}  // namespace

LaunchThread::LaunchThread(uint64_t tenant, std::chrono::microseconds spin) : tenant_(tenant), spin_(spin) {
  thread_ = std::thread([this] { loop(); });
  std::string name = "launch-" + std::to_string(tenant_);
  name.resize(std::min<size_t>(name.size(), 15));  // the kernel's limit for a thread's name
  pthread_setname_np(thread_.native_handle(), name.c_str());
}

LaunchThread::~LaunchThread() {
  reserve().run = nullptr;  // the last job: stop
  publish();
  thread_.join();
}

template <typename Ready>
void LaunchThread::awaitDone(Ready ready) {
  if (spinUntil([&] { return ready(done_.load(std::memory_order_acquire)); }, spin_)) return;
  drainWaits_.store(true, std::memory_order_seq_cst);
  for (uint64_t done; !ready(done = done_.load(std::memory_order_seq_cst));) done_.wait(done);
  drainWaits_.store(false, std::memory_order_relaxed);
}

LaunchThread::Slot& LaunchThread::reserve() {
  const uint64_t head = head_.load(std::memory_order_relaxed);
  // Full: the driver is slower than the tenant's stream of launches; wait for a slot.
  awaitDone([head](uint64_t done) { return head - done < kSlots; });
  return slots_[head % kSlots];
}

void LaunchThread::publish() {
  head_.fetch_add(1, std::memory_order_seq_cst);
  if (sleeping_.load(std::memory_order_seq_cst)) wake();
}

void LaunchThread::wake() {
  wakeups_.fetch_add(1, std::memory_order_seq_cst);
  wakeups_.notify_one();
}

void LaunchThread::drain() {
  const uint64_t head = head_.load(std::memory_order_relaxed);
  awaitDone([head](uint64_t done) { return done == head; });
}

uint64_t LaunchThread::awaitWork(uint64_t done) {
  uint64_t head = done;
  auto arrived = [&] { return (head = head_.load(std::memory_order_seq_cst)) != done; };
  for (;;) {
    if (spinUntil(arrived, spin_)) return head;
    // The wake-up count is read before the sleep is announced, and the queue looked at after:
    // a publish() that comes later sees the announcement and bumps the count, so the wait
    // below returns at once or is woken.
    const uint32_t wakeups = wakeups_.load(std::memory_order_seq_cst);
    sleeping_.store(true, std::memory_order_seq_cst);
    if (!arrived()) wakeups_.wait(wakeups, std::memory_order_seq_cst);
    sleeping_.store(false, std::memory_order_seq_cst);
    if (head != done || arrived()) return head;
    // Woken with nothing queued (wake()): spin again, for the launches about to come.
  }
}

void LaunchThread::loop() {
  uint64_t done = 0;
  for (;;) {
    const uint64_t head = awaitWork(done);
    for (; done != head; ++done) {
      Slot& slot = slots_[done % kSlots];
      if (slot.run == nullptr) return;  // the destructor's: every job before it has run
      slot.run(slot.job);
      done_.store(done + 1, std::memory_order_seq_cst);
      if (drainWaits_.load(std::memory_order_seq_cst)) done_.notify_all();
    }
  }
}

}  // namespace tally::server::session

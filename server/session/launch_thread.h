// A high-priority tenant's second thread, for the driver calls of its kernel launches.
//
// Why: an asynchronous launch through tallyd costs the session thread its reading and checking
// (about 0.4 µs) plus the same cuLaunchKernel the application would have made (3-4 µs on the
// H200's host). One thread doing both runs a stream of launches slower than the application
// would natively. With this thread, the session thread checks launch N+1 while this one makes
// launch N's driver call, so a stream of launches costs the driver call alone.
//
// Order: the session thread hands over launches only, and only those with more calls already
// waiting behind them (api/launch_api.cc: the last launch of a burst, usually followed by a sync,
// is cheaper made without a hand-off). It waits for this thread to be idle (drain) before
// anything else it does for the tenant — another call, a join of streams, an end-of-burst mark —
// so the driver still sees the tenant's work in the order it was sent.
//
// Jobs are plain bytes copied into a fixed ring (no allocation per launch). One producer (the
// session thread), one consumer (this thread). Both sides spin for `spin` before they sleep on a
// futex (std::atomic::wait): an HP tenant's next request then finds this thread awake.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>
#include <type_traits>

namespace tally::server::session {

class LaunchThread {
 public:
  static constexpr size_t kJobBytes = 1280;  // a job with its launch's parameters
  static constexpr size_t kSlots = 64;

  LaunchThread(uint64_t tenant, std::chrono::microseconds spin);
  ~LaunchThread();  // runs what is queued, then stops the thread
  LaunchThread(const LaunchThread&) = delete;
  LaunchThread& operator=(const LaunchThread&) = delete;

  // Session thread only. Queues `job` for Run(job) on this thread, after every job queued
  // before it; waits while the ring is full.
  template <typename Job, void (*Run)(Job&)>
  void submit(const Job& job) {
    static_assert(std::is_trivially_copyable_v<Job> && sizeof(Job) <= kJobBytes && alignof(Job) <= 16);
    Slot& slot = reserve();
    std::memcpy(slot.job, &job, sizeof(Job));
    slot.run = [](void* bytes) { Run(*static_cast<Job*>(bytes)); };  // null: stop (the destructor's)
    publish();
  }
  // Session thread only: returns once every job queued so far has run.
  void drain();
  // Session thread only: whether a job is queued or running.
  bool busy() const { return done_.load(std::memory_order_acquire) != head_.load(std::memory_order_relaxed); }
  // Whether this thread sleeps (it spun for `spin` with nothing to do). A launch that finds it
  // asleep is faster made by the session thread itself while this one wakes (wake()).
  bool asleep() const { return sleeping_.load(std::memory_order_seq_cst); }
  void wake();

  uint64_t jobsRun() const { return done_.load(std::memory_order_relaxed); }

 private:
  struct Slot {
    void (*run)(void*) = nullptr;
    alignas(16) unsigned char job[kJobBytes];
  };

  Slot& reserve();
  void publish();
  // Session thread: spins, then sleeps, until ready(jobs run) holds.
  template <typename Ready>
  void awaitDone(Ready ready);
  void loop();
  // Spins, then sleeps, until head_ passes `done`; returns head_.
  uint64_t awaitWork(uint64_t done);

  const uint64_t tenant_;
  const std::chrono::microseconds spin_;
  std::array<Slot, kSlots> slots_{};
  std::atomic<uint64_t> head_{0};  // jobs queued (written by the session thread)
  std::atomic<uint64_t> done_{0};  // jobs run (written by this thread)
  std::atomic<uint32_t> wakeups_{0};  // what a sleeping launch thread waits on (futex word)
  std::atomic<bool> sleeping_{false};
  std::atomic<bool> drainWaits_{false};  // the session thread sleeps on done_ (drain, a full ring)
  std::thread thread_;
};

}  // namespace tally::server::session

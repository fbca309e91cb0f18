// Tells tallyd when stream work has finished, without ever blocking a tenant's thread on the
// GPU: syncs, device-to-host data and host callbacks are all answered from here.
//
// One thread per device polls CUDA events. Events are queried newest first and their
// callbacks run oldest first, so a callback never runs before one it depends on (if a newer
// event is complete, every older event it waited for was complete before it was queried).
#pragma once

#include <cuda.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tally::server::gpu {

class CompletionQueue {
 public:
  using Callback = std::function<void(CUresult)>;

  explicit CompletionQueue(CUcontext context);
  ~CompletionQueue();
  CompletionQueue(const CompletionQueue&) = delete;
  CompletionQueue& operator=(const CompletionQueue&) = delete;

  // Records an event on `stream` (the caller's context must be current) and runs `done` once
  // the stream reaches it: on the calling thread if that happens within `inlineSpinMicros`
  // (a short sync then costs no thread hand-off), else on the completion thread. Returns the
  // record error, if any, in which case `done` is not called. While an `urgent` watch (a
  // high-priority tenant's) is pending the completion thread never sleeps between polls. The
  // inline wait ends early once `interrupted` says so (the tenant sent more calls).
  CUresult watchStream(CUstream stream, Callback done, unsigned inlineSpinMicros = 0, bool urgent = false,
                       const std::function<bool()>& interrupted = {});

 private:
  struct Watch {
    CUevent event;
    Callback done;
    bool urgent = false;
  };

  void run();
  CUevent takeEvent();
  void recycle(CUevent event);
  // `breathe`: pause between polls, leaving the driver's locks to other tenants' threads (a
  // best-effort tenant's wait, which nobody is waiting on as closely).
  static bool completesWithin(CUevent event, unsigned micros, bool breathe, CUresult& result,
                              const std::function<bool()>& interrupted);
  void pollOnce(std::vector<Watch>& pending);

  CUcontext context_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<Watch> incoming_;
  std::vector<CUevent> spareEvents_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace tally::server::gpu

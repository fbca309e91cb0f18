#include "server/gpu/completion_queue.h"

#include "server/gpu/cuda_check.h"

#include <spdlog/spdlog.h>
#include <sys/prctl.h>

#include <algorithm>
#include <chrono>

namespace tally::server::gpu {

namespace {
// Busy-poll this long after the last completion: sync round trips then cost no wake-up.
constexpr auto kSpinWindow = std::chrono::microseconds(300);
// ... and this long after the last watch came: a sync on a step of up to a few ms (a training
// loop's) is answered when the GPU finishes it, as the driver's own spinning sync would be, not
// up to an idle poll late (~50 µs on the H200 host: 5 % of a 1 ms step). Longer waits poll.
constexpr auto kFreshWatchSpin = std::chrono::milliseconds(3);
constexpr auto kIdlePoll = std::chrono::microseconds(20);
// Pauses between a non-urgent inline wait's polls (~1-3 µs): back to back, one tenant's polling
// can keep another's driver calls waiting for the lock they share.
constexpr int kBreath = 48;
}  // namespace

CompletionQueue::CompletionQueue(CUcontext context) : context_(context) {
  thread_ = std::thread([this] { run(); });
}

CompletionQueue::~CompletionQueue() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
  for (CUevent e : spareEvents_) cuEventDestroy(e);
}

CUevent CompletionQueue::takeEvent() {
  {
    std::lock_guard lock(mutex_);
    if (!spareEvents_.empty()) {
      CUevent e = spareEvents_.back();
      spareEvents_.pop_back();
      return e;
    }
  }
  CUevent e = nullptr;
  cuEventCreate(&e, CU_EVENT_DISABLE_TIMING);
  return e;
}

void CompletionQueue::recycle(CUevent event) {
  std::lock_guard lock(mutex_);
  spareEvents_.push_back(event);
}

bool CompletionQueue::completesWithin(CUevent event, unsigned micros, bool breathe, CUresult& result,
                                      const std::function<bool()>& interrupted) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(micros);
  for (unsigned round = 0;; ++round) {
    result = cuEventQuery(event);
    if (result != CUDA_ERROR_NOT_READY) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    if (interrupted && round % 16 == 15 && interrupted()) return false;
    for (int i = breathe ? kBreath : 1; i > 0; --i) __builtin_ia32_pause();
  }
}

CUresult CompletionQueue::watchStream(CUstream stream, Callback done, unsigned inlineSpinMicros, bool urgent,
                                      const std::function<bool()>& interrupted) {
  CUevent event = takeEvent();
  if (event == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  if (CUresult r = cuEventRecord(event, stream); r != CUDA_SUCCESS) {
    recycle(event);
    return r;
  }
  if (CUresult result;
      inlineSpinMicros > 0 && completesWithin(event, inlineSpinMicros, !urgent, result, interrupted)) {
    recycle(event);
    done(result);
    return CUDA_SUCCESS;
  }
  {
    std::lock_guard lock(mutex_);
    incoming_.push_back(Watch{event, std::move(done), urgent});
  }
  wake_.notify_one();
  return CUDA_SUCCESS;
}

void CompletionQueue::pollOnce(std::vector<Watch>& pending) {
  std::vector<CUresult> state(pending.size());
  for (size_t i = pending.size(); i-- > 0;) state[i] = cuEventQuery(pending[i].event);
  std::vector<Watch> still;
  std::vector<CUevent> finished;
  for (size_t i = 0; i < pending.size(); ++i) {
    if (state[i] == CUDA_ERROR_NOT_READY) {
      still.push_back(std::move(pending[i]));
      continue;
    }
    try {
      pending[i].done(state[i]);
    } catch (const std::exception& e) {
      spdlog::error("completion callback threw: {}", e.what());
    }
    finished.push_back(pending[i].event);
  }
  pending.swap(still);
  if (!finished.empty()) {
    std::lock_guard lock(mutex_);
    spareEvents_.insert(spareEvents_.end(), finished.begin(), finished.end());
  }
}

void CompletionQueue::run() {
  ::prctl(PR_SET_TIMERSLACK, 1000UL);  // idle polls of 20 µs, not the default 50 µs slack
  makeContextCurrent(context_);
  std::vector<Watch> pending;
  auto lastProgress = std::chrono::steady_clock::now();
  auto lastArrival = lastProgress;
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      if (pending.empty() && incoming_.empty()) {
        wake_.wait(lock, [&] { return stopping_ || !incoming_.empty(); });
        lastProgress = std::chrono::steady_clock::now();
      }
      if (stopping_ && incoming_.empty() && pending.empty()) return;
      if (!incoming_.empty()) lastArrival = std::chrono::steady_clock::now();
      for (Watch& w : incoming_) pending.push_back(std::move(w));
      incoming_.clear();
    }
    size_t before = pending.size();
    pollOnce(pending);
    auto now = std::chrono::steady_clock::now();
    if (pending.size() != before) lastProgress = now;
    if (pending.empty()) continue;
    if (std::any_of(pending.begin(), pending.end(), [](const Watch& w) { return w.urgent; })) continue;
    if (now - lastProgress <= kSpinWindow || now - lastArrival <= kFreshWatchSpin) {
      // Not urgent: a breath between polls leaves the driver's locks to the tenants' threads.
      for (int i = 0; i < 16; ++i) __builtin_ia32_pause();
      continue;
    }
    std::unique_lock lock(mutex_);
    wake_.wait_for(lock, kIdlePoll, [&] { return stopping_ || !incoming_.empty(); });
  }
}

}  // namespace tally::server::gpu

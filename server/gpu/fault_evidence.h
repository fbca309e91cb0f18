// What one tenant has on the GPU, as far as a fault verdict (fault_monitor.h) needs to know.
//
// Two kinds of evidence:
//   - launches it queued and how many of them a completed (successful) sync has covered: the
//     window of unfinished work, which every tenant has;
//   - kernel marks: after each burst of launches, one cuStreamWriteValue32 per stream into mapped
//     host memory. A kernel can fault only while it runs, and a mark the GPU has written proves
//     the kernels before it ran to the end. Host memory stays readable after the context is lost,
//     which is when a verdict reads it. Marks are written only while the GPU is shared (a lone
//     tenant needs no evidence against others), so a tenant alone pays nothing for them;
//   - which code (kernel or executable graph) each unsettled launch runs, and which code of the
//     tenant a completed sync has already proven: when two tenants' kernels were on the GPU
//     together, the one running code never seen to finish is the likelier culprit.
#pragma once

#include <cuda.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

namespace tally::server::gpu {

// A tenant's block of mapped words, written by the GPU (one per stream it tracks).
struct MarkWords {
  uint32_t* host = nullptr;
  CUdeviceptr device = 0;
  size_t count = 0;
};
// Queues "write `value` to `address`" on `stream` after the work already queued there.
using MarkWriter = std::function<CUresult(CUstream stream, CUdeviceptr address, uint32_t value)>;

class FaultEvidence {
 public:
  using Clock = std::chrono::steady_clock;
  FaultEvidence(uint64_t tenant, std::string name) : tenant_(tenant), name_(std::move(name)) {}

  void noteLaunch(Clock::time_point now = Clock::now());
  // The sequence a completion watch covers: every launch noted so far.
  uint64_t launchesSoFar() const { return launches_.load(std::memory_order_acquire); }
  // A watch that covered `sequence` launches completed without error.
  void noteSettled(uint64_t sequence);
  // Launches not yet covered by a completed sync; and since when (nullopt: none).
  bool unsettled() const { return settled_.load(std::memory_order_acquire) < launches_.load(std::memory_order_acquire); }
  std::optional<Clock::time_point> unsettledSince() const;
  Clock::time_point lastLaunch() const {
    return Clock::time_point(Clock::duration(lastLaunchNs_.load(std::memory_order_acquire)));
  }

  // The launch just noted runs `code` (the tenant's handle of a kernel or executable graph).
  void noteCode(uint64_t code);
  // An unsettled launch runs code that no completed sync of this tenant has covered yet.
  bool runsUnprovenCode() const;

  // ---- kernel marks (the tenant's thread; kernelsMayRun from anywhere) ----
  // `words`: this tenant's block; `shared`: true while more than one tenant uses the GPUs.
  void attachMarks(MarkWords words, std::shared_ptr<const std::atomic<bool>> shared);
  // A kernel or graph was queued (not captured) on `stream`, after noteLaunch.
  void noteKernelOn(CUstream stream);
  // The end of the tenant's burst: a mark after the kernels queued on each stream since its last.
  void writeMarks(const MarkWriter& write);
  // Some kernel of the tenant may still be on the GPU (or was when the context was lost): it was
  // queued without a mark, or the GPU has not passed its mark. Only meaningful while unsettled.
  bool kernelsMayRun() const;

  uint64_t tenant() const { return tenant_; }
  const std::string& name() const { return name_; }

 private:
  struct MarkSlot {
    CUstream stream = nullptr;  // nullptr: free
    uint32_t issued = 0;        // the word reaches this once the GPU is past the stream's last mark
    bool pending = false;       // kernels queued since that mark
  };
  uint32_t word(size_t slot) const { return __atomic_load_n(&words_.host[slot], __ATOMIC_ACQUIRE); }
  bool caughtUp(size_t slot) const { return static_cast<int32_t>(word(slot) - slots_[slot].issued) >= 0; }
  MarkSlot* slotFor(CUstream stream);  // under marksMutex_; nullptr when every word is taken

  uint64_t tenant_;
  std::string name_;
  std::atomic<uint64_t> launches_{0};
  std::atomic<uint64_t> settled_{0};
  std::atomic<int64_t> firstUnsettledNs_{0};  // 0: nothing unsettled
  std::atomic<int64_t> lastLaunchNs_{0};

  mutable std::mutex codeMutex_;  // the tenant's thread, its completions, a verdict
  std::vector<std::pair<uint64_t, uint64_t>> unsettledCode_;  // (launch sequence, code)
  std::unordered_set<uint64_t> provenCode_;
  bool codeOverflow_ = false;  // too many unsettled launches to list: unknown code in flight

  mutable std::mutex marksMutex_;  // the tenant's thread, and a verdict: never contended in practice
  MarkWords words_;
  std::shared_ptr<const std::atomic<bool>> shared_;
  std::vector<MarkSlot> slots_;
  bool anyPending_ = false;
  // Launches up to this sequence went without a mark: they may run until a sync settles them.
  std::atomic<uint64_t> unmarkedUpTo_{0};
};

}  // namespace tally::server::gpu

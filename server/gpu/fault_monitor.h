// Faults of the shared context. A kernel that traps (device assert, illegal address, …) leaves
// the context in a *sticky* error: every later driver call of the process returns it, on every
// stream, and (measured on the H200, driver 580: bench/micro/fault_probe.cu) neither
// cuDevicePrimaryCtxReset nor a new context helps — cuDevicePrimaryCtxRetain and cuCtxCreate keep
// returning the error. The process must start over. The monitor therefore:
//   - notices the error (a status on its way to a tenant, or its own periodic probe);
//   - decides once which tenant(s) faulted (FaultVerdict), from what each tenant had on the GPU;
//   - maps every later status of a tenant: the faulting tenant keeps the native error, the others
//     get kContextResetError, always the same;
//   - hands the verdict to `onFault` (tallyd's main: tell every tenant, then start over).
// It also enforces kernel_timeout_s: a tenant whose launched work has not completed for that long
// is treated as faulting with CUDA_ERROR_LAUNCH_TIMEOUT (a kernel cannot be stopped alone in a
// shared context; a reset waits for running kernels, only a new process ends them).
#pragma once

#include <cuda.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace tally::server::gpu {

class Gpu;

// What a tenant that did not fault gets once the shared context is lost.
inline constexpr CUresult kContextResetError = CUDA_ERROR_CONTEXT_IS_DESTROYED;

// Errors after which the context is unusable for every tenant.
bool isStickyError(CUresult r);

// What one tenant has on the GPU, as far as a fault verdict needs to know: launches it queued,
// and how many of them a completed (successful) sync has covered. Written by the tenant's
// thread and its completion callbacks; read by the monitor.
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

  uint64_t tenant() const { return tenant_; }
  const std::string& name() const { return name_; }

 private:
  uint64_t tenant_;
  std::string name_;
  std::atomic<uint64_t> launches_{0};
  std::atomic<uint64_t> settled_{0};
  std::atomic<int64_t> firstUnsettledNs_{0};  // 0: nothing unsettled
  std::atomic<int64_t> lastLaunchNs_{0};
};

struct FaultVerdict {
  CUresult code = CUDA_SUCCESS;                   // the native error the culprit sees
  std::map<uint64_t, std::string> culprits;      // tenant id -> name: the one blamed, or none
  std::map<uint64_t, std::string> alsoSuspected; // others that had work on the GPU (logged)
  bool certain = false;                          // the blame counts towards a quarantine
  std::string reason;                            // one line for logs, tallyctl and the tenants
  std::chrono::system_clock::time_point at;
  // Tenants on the GPU when it happened: everybody gets told.
  size_t tenantsAffected = 0;
};

// Which tenant faulted, from the evidence. The driver does not say which stream faulted (every
// call of the process returns the same sticky error), so this is an inference, unit-tested:
// suspects are the tenants with work the GPU had not finished; of several, the one whose work has
// been unfinished longest. Measured on the H200 (tests/gpu/fault_recovery.sh): the driver reports
// the fault 8 ms (assert) to 150 ms (illegal address) after the faulting launch, and until then
// the other tenants' syncs keep completing, so their unfinished windows are younger. A bystander
// whose own kernels run longer than that delay can be blamed instead. Empty: no tenant had work.
struct Suspicion {
  std::optional<uint64_t> culprit;
  std::map<uint64_t, std::string> suspects;  // every tenant with unfinished work, culprit included
  // The culprit was the only suspect, or its work had been unfinished kClearMargin longer than any
  // other's. An illegal address stops every tenant's work at once, so a bystander that launched
  // in the same instant looks alike: such a blame is not counted towards a quarantine.
  bool clear = false;
};
inline constexpr std::chrono::milliseconds kClearMargin{1};
Suspicion suspicionOf(const std::vector<std::shared_ptr<FaultEvidence>>& tenants);

class FaultMonitor {
 public:
  struct Options {
    double kernelTimeoutSeconds = 0;                           // 0: no limit
    std::chrono::milliseconds probeInterval{100};              // how often an idle GPU is checked
  };
  using OnFault = std::function<void(const FaultVerdict&)>;

  FaultMonitor(Options options, std::vector<Gpu*> gpus, OnFault onFault);
  ~FaultMonitor();
  FaultMonitor(const FaultMonitor&) = delete;
  FaultMonitor& operator=(const FaultMonitor&) = delete;

  std::shared_ptr<FaultEvidence> enroll(uint64_t tenant, const std::string& name);
  void leave(uint64_t tenant);

  // The status to report to `tenant` for a driver result: a sticky error first declares the
  // fault (once); afterwards culprits get the native error and everybody else kContextResetError.
  CUresult statusFor(uint64_t tenant, CUresult status);
  // Declares a fault now (the first declaration wins). `culprit`: known (a timeout); else the
  // suspects are computed from the evidence.
  void declare(CUresult code, std::optional<uint64_t> culprit, const std::string& reason);
  std::optional<FaultVerdict> verdict() const;

 private:
  void run();
  void probeGpus();
  void checkTimeouts();

  Options options_;
  std::vector<Gpu*> gpus_;
  OnFault onFault_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::map<uint64_t, std::shared_ptr<FaultEvidence>> tenants_;
  std::atomic<bool> faulted_{false};
  std::optional<FaultVerdict> verdict_;
  bool handedOver_ = false;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace tally::server::gpu

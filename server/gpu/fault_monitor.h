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

#include "server/gpu/fault_evidence.h"

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
// suspects are the tenants with work the GPU had not finished. A kernel faults only while it
// runs, so a suspect whose kernels the GPU had all passed (its marks written: fault_evidence.h)
// is blamed only when no suspect's kernels may still run. Of several, the one whose work has been
// unfinished longest is blamed. Measured on the H200 (tests/gpu/fault_recovery.sh): the driver
// reports the fault 8 ms (assert) to 150 ms (illegal address) after the faulting launch, and
// until then the other tenants' syncs keep completing, so their unfinished windows are younger.
// When several suspects' work started within kClearMargin of each other (kernels of both were on
// the GPU when it stopped), the one running code that none of its completed syncs has covered
// yet is blamed, if only one is: code that finished before is the less likely culprit. Measured
// there: such ties happen when a bystander's long kernel is running as another tenant's kernel
// faults. Empty: no tenant had work.
struct Suspicion {
  std::optional<uint64_t> culprit;
  std::map<uint64_t, std::string> suspects;  // every tenant with unfinished work, culprit included
  // The culprit was the only suspect whose kernels may have run, or its work had been unfinished
  // kClearMargin longer than any other such suspect's. An illegal address stops every tenant's
  // work at once, so a bystander that launched in the same instant looks alike: such a blame is
  // not counted towards a quarantine.
  bool clear = false;
};
inline constexpr std::chrono::milliseconds kClearMargin{1};
Suspicion suspicionOf(const std::vector<std::shared_ptr<FaultEvidence>>& tenants);

// No tenant queued a launch within `quiet` before `now`. Only such a GPU is probed: on a GPU in
// use the next launch meets a sticky error itself (statusFor declares it), and the probe is a
// driver call in the tenants' context that took up to ~130 µs next to a busy best-effort stream on
// the H200 (bench/micro/health_probe_cost), which an HP tenant's launch may wait behind.
bool quietFor(const std::map<uint64_t, std::shared_ptr<FaultEvidence>>& tenants, FaultEvidence::Clock::time_point now,
              FaultEvidence::Clock::duration quiet);

class FaultMonitor {
 public:
  struct Options {
    double kernelTimeoutSeconds = 0;                           // 0: no limit
    std::chrono::milliseconds probeInterval{100};              // how often an idle GPU is checked (quietFor)
  };
  using OnFault = std::function<void(const FaultVerdict&)>;

  FaultMonitor(Options options, std::vector<Gpu*> gpus, OnFault onFault);
  ~FaultMonitor();
  FaultMonitor(const FaultMonitor&) = delete;
  FaultMonitor& operator=(const FaultMonitor&) = delete;

  // A tenant's evidence, with kernel marks while the mapped words last.
  std::shared_ptr<FaultEvidence> enroll(uint64_t tenant, const std::string& name);
  void leave(uint64_t tenant);
  // Queues a kernel mark (fault_evidence.h) with the driver, on the caller's current context.
  static CUresult writeMark(CUstream stream, CUdeviceptr address, uint32_t value);

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
  void allocateMarkWords();
  MarkWords takeMarkBlock(uint64_t tenant);  // under mutex_; empty when none is left

  // Mapped words for kernel marks: kMarkBlock per tenant, kMarkBlocks tenants.
  static constexpr size_t kMarkBlock = 16, kMarkBlocks = 512;
  uint32_t* markHost_ = nullptr;
  CUdeviceptr markDevice_ = 0;
  std::map<uint64_t, size_t> markBlockOf_;  // tenant -> block
  std::vector<bool> markBlockUsed_;
  std::shared_ptr<std::atomic<bool>> shared_ = std::make_shared<std::atomic<bool>>(false);

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

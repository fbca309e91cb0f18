// The scheduler's interface to the rest of tallyd. A policy sees every kernel launch of every
// tenant (and is told about their other stream work) and decides how and when it reaches the
// GPU, which it reaches through a Launcher (launcher.h). Policies: "passthrough" (straight to the
// tenant's stream: the shared-context baseline) and "priority" (priority_policy.h); "stress"
// (stress_policy.h) wraps either for the `--transform stress` test aid. A new policy is one new
// class and a line in makePolicy. See docs/scheduler.md.
#pragma once

#include <cuda.h>

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/metrics/latency_histogram.h"
#include "server/gpu/gpu.h"
#include "server/gpu/variant_launch.h"
#include "server/scheduler/decisions.h"

namespace tally::server::scheduler {

struct SchedulerConfig {
  std::string policy = "passthrough";  // "passthrough" | "priority"
  double idleWindowMicros = 100;       // HP idle this long before best-effort work runs again
  double budgetMicros = 100;           // turnaround budget of a best-effort kernel (retreat -> GPU free)
  double maxPauseMicros = 20000;       // longest a retreated PTB kernel waits for HP to go idle
  // Hold best-effort work while high-priority work runs. Off by default: on every pair measured on
  // the H200 it halved BE's throughput for less HP gain than an SM partition (docs/scheduler.md).
  bool gate = false;
  // Run long best-effort kernels as PTB / sliced variants. Off by default: next to HP requests of
  // 200 µs on the H200, PTB variants of 0.15 ms-block BE kernels left BE 1 % of its throughput
  // and HP an 11x p99, against 0.93 and 3x without them (docs/scheduler.md).
  bool transforms = false;
  bool streamPriorities = true;        // HP streams at the highest CUDA priority, BE at the lowest
  // SM partitions (gpu/sm_partitions.h): while HP and BE tenants are both active, HP works in
  // its partition and BE in the SMs it leaves; otherwise everyone uses the whole GPU.
  std::optional<gpu::SmPartitionSpec> smPartition;
  double partitionIdleMillis = 200;   // a class idle this long no longer keeps the GPU split
  bool partitionGate = false;         // also gate and transform BE work while split (ablation)
  // Choose the partition level online (PartitionController): the smallest reserve that serves HP
  // as well as the next larger one ...
  bool partitionControl = false;
  // ... or whose HP p99 stays within this bound (set, it turns the control on).
  HpP99Budget hpP99Budget;
  std::string profilesPath;            // learned kernel durations; empty: not kept
  // Chain a high-priority tenant's kernels (transform/chain.h: programmatic dependent launch):
  // the next kernel's blocks are queued while the previous kernel's last wave runs, so the SMs it
  // frees go to them and not to pending best-effort blocks. Needs the kernels' PTX at sm_90+.
  enum class HpChain {
    kOff,
    kWhileBestEffort,  // while best-effort work was queued on the GPU lately (alone it buys HP nothing)
    kAlways,           // every launch that can be (a test aid, and for measuring)
  };
  HpChain hpChain = HpChain::kWhileBestEffort;
  // Test aid (transform = "stress"): every launch of a kernel with variants runs as a random
  // variant, PTB ones preempted at random points (stress_policy.h); the application must not notice.
  bool stress = false;
  uint64_t stressSeed = 0;
};

// One kernel launch as the API layer hands it over. Pointers are valid during the call only.
struct KernelLaunch {
  uint64_t tenant = 0;
  bool highPriority = false;
  // The tenant's thread must stay free (it owes the GPU a host callback's completion, or its
  // streams wait on words it may write later: Tenant::mustNotBeHeld): the launch may not be
  // held back waiting for HP to go idle.
  bool mustNotHold = false;
  uint64_t streamId = 0;  // the tenant's stream id (stable while the tenant lives)
  gpu::Gpu* gpu = nullptr;
  CUstream stream = nullptr;
  CUfunction original = nullptr;
  CUfunction sliced = nullptr;  // null when the module has no variants
  CUfunction ptb = nullptr;
  CUfunction chained = nullptr;  // a high-priority tenant's variant (transform/chain.h), or null
  // The stream's previous work is a kernel this tenant launched: only then may a chained launch
  // overlap it (programmatic dependent launch is defined between two kernels of a stream); any
  // other chained launch is ordered as an original's is.
  bool followsKernel = false;
  const std::string* profileKey = nullptr;  // "<module hash>/<kernel name>"
  gpu::LaunchShape shape;
  std::span<const uint8_t> paramBuffer;                          // the kernel's parameter bytes
  void** paramPointers = nullptr;                                // into paramBuffer, one per parameter
  const std::vector<std::pair<uint32_t, uint32_t>>* paramLayout;  // (offset, size) per parameter
  // Launch attributes (cooperative, cluster shape, a priority already clamped to the tenant's
  // class): the kernel then goes through cuLaunchKernelEx, and never as a variant.
  std::span<const CUlaunchAttribute> attributes;
  // Per-tenant counters the policy keeps current (tallyctl stats).
  std::atomic<uint64_t>* slicedLaunches = nullptr;
  std::atomic<uint64_t>* ptbLaunches = nullptr;
  std::atomic<uint64_t>* chainedLaunches = nullptr;
  std::atomic<uint64_t>* preemptions = nullptr;
  metrics::LatencyHistogram* held = nullptr;       // launches the policy held back, and how long
  // The stream's side stream and PTB control block (StreamTable::prepareVariants), made on first
  // use; false when they cannot be. Only the stress policy asks (the priority policy keeps its
  // own control words per tenant).
  std::function<bool(CUstream& side, CUdeviceptr& control)> variantStreams;
};

// Pointers to each parameter's bytes inside k.paramBuffer, as cuLaunchKernel takes them: the
// ones the caller built (KernelLaunch::paramPointers), else made here (no allocation for up to
// kInline parameters: this runs per launch).
class ParameterPointers {
 public:
  static constexpr size_t kInline = 64;
  explicit ParameterPointers(const KernelLaunch& k);
  ParameterPointers(const ParameterPointers&) = delete;  // pointers_ may point into our storage
  ParameterPointers& operator=(const ParameterPointers&) = delete;
  void** get() { return pointers_; }
  gpu::KernelParams kernelParams() { return {pointers_, count_}; }

 private:
  std::array<void*, kInline> inline_;
  std::vector<void*> many_;
  void** pointers_;
  size_t count_;
};

// GPU work the scheduler cannot split or look into — a graph launch (its kernels run as
// captured), a cuBLAS/cuDNN call — scheduled as one unit: a high-priority tenant's closes the
// gate first, a best-effort tenant's waits its turn as one kernel would. `enqueue` issues it and
// names the stream it went to (null: none).
struct OpaqueWork {
  uint64_t tenant = 0;
  bool highPriority = false;
  bool mustNotHold = false;  // as KernelLaunch::mustNotHold
  gpu::Gpu* gpu = nullptr;
  std::function<CUresult(CUstream& used)> enqueue;
  metrics::LatencyHistogram* held = nullptr;
};

// Every hook is pure: a policy that wraps another (StressPolicy) must decide for each one, and a
// hook it forgot to forward would fail silently (HP marks never written at a burst's end were
// later written on streams the tenant had destroyed: tallyd crashed).
class Policy {
 public:
  virtual ~Policy() = default;
  virtual const char* name() const = 0;

  // The CUDA stream priority every stream of a tenant of this class gets; nullopt: the one the
  // application asks for.
  virtual std::optional<int> streamPriority(bool highPriority, const gpu::Gpu& g) const = 0;
  // Where a tenant of this class queues its next work on `g` (the whole GPU, or an SM
  // partition when the GPU has them). Asked before every call that queues stream work.
  virtual gpu::Placement placement(bool highPriority, gpu::Gpu& g) = 0;
  // High-priority tenant `tenant`'s synchronizing wait on `g` took `micros` (what the policy can
  // learn HP's latency from).
  virtual void observeHpWait(gpu::Gpu& g, uint64_t tenant, double micros) = 0;
  // The SMs of `g` best-effort work is kept off right now (0: it may use every SM): what an SM
  // reserve costs it, for the metrics.
  virtual unsigned smsKeptFromBestEffort(gpu::Gpu& g) = 0;
  // Enqueues (or arranges) a kernel launch, through the policy's Launcher.
  virtual CUresult launch(const KernelLaunch& k) = 0;
  // Enqueues opaque work (at once, unless the policy holds it). afterWork follows it, as for
  // other stream work.
  virtual CUresult runOpaque(const OpaqueWork& w) = 0;
  // A tenant enqueued other stream work (copy, memset, event, wait) on `stream`.
  virtual void afterWork(uint64_t tenant, bool highPriority, uint64_t streamId, gpu::Gpu& g, CUstream stream) = 0;
  // The tenant's thread is done queueing a burst of work (it is about to wait for the client,
  // or to run a call other than a launch): what the policy deferred while the burst was being
  // queued is issued now, on that thread. launch() and afterWork() may defer until then.
  virtual void endOfBurst(uint64_t tenant) = 0;
  // The tenant is ending, before it waits for its streams: nothing the policy holds back may
  // keep them from draining.
  virtual void tenantEnding(uint64_t tenant) = 0;
  // The tenant's streams are drained and destroyed: release what the policy kept for it.
  virtual void tenantReleased(uint64_t tenant) = 0;
  // One line of counters for logs and tallyctl.
  virtual std::string summary() const = 0;
  // Whether high-priority tenants' kernels may run chained: they then load their modules'
  // chained variants (KernelLaunch::chained).
  virtual bool chainsHighPriority() const = 0;
};

// The policy `config.policy` names for these GPUs (wrapped in the stress policy when
// `config.stress`), on driverLauncher() and steadyClock(), or nullptr with `error`. Whatever a
// policy needs from the driver it takes here, at startup: on the launch path a context-wide call
// (pinned allocation, module load) could wait for another tenant's kernel that waits for this
// tenant's next call.
std::unique_ptr<Policy> makePolicy(const SchedulerConfig& config, const std::vector<gpu::Gpu*>& gpus,
                                   std::string& error);

}  // namespace tally::server::scheduler

// "priority": high-priority (HP) tenants get the GPU as if alone; best-effort (BE) tenants use
// what is left. Layers, each reaching kernels the next cannot (docs/scheduler.md):
//   1. stream priorities: HP streams at the highest CUDA priority, BE at the lowest, so the
//      hardware dispatches pending HP blocks first;
//   2. a gate on BE launches: a BE tenant's thread queues a kernel only while HP has been idle
//      for the idle window and (waiting at most 1 ms) at most two of its kernels are still on
//      the GPU, so little BE work is queued when HP work arrives;
//   3. long BE kernels with PTX run as PTB variants, told to retreat the moment HP work is
//      submitted; on their stream a pause kernel waits (bounded) for the flag to drop and the
//      next run resumes from the progress counter; shorter ones run as slices, one gate per slice.
//      Configured from their measured duration to fit the turnaround budget.
// Beside them, HP kernels with PTX run chained (transform/chain.h) while BE work is about: each
// kernel's blocks are queued before its predecessor ends, so the SMs that predecessor frees go
// to HP and not to BE blocks that, once started, cannot be stopped.
// Two rules keep it deadlock-free (docs/scheduler.md): no GPU-side wait depends on a host
// decision that needs HP progress (an HP stream may share a hardware queue with the waiting BE
// stream), and no wait of a tenant's thread depends on GPU work that may need a later call of
// that tenant. Every wait is bounded in time or waits only for HP to go idle.
// It reaches the GPU only through its Launcher and tells time only by its Clock (launcher.h), so
// the scheduler tests run it on a simulated GPU and clock.
#pragma once

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>

#include "server/scheduler/decisions.h"
#include "server/scheduler/launcher.h"
#include "server/scheduler/policy.h"

namespace tally::server::scheduler {

// Host-pinned u32 words the GPU can read and write (gates, HP completion marks, PTB lane
// words), handed out one by one.
class MappedWords {
 public:
  explicit MappedWords(Launcher& launcher) : launcher_(launcher) {}
  bool allocate(size_t count, std::string& error);
  ~MappedWords();
  int take(uint32_t initial);  // -1 when all are in use
  void give(int word);
  uint32_t load(int word) const { return __atomic_load_n(&host_[word], __ATOMIC_ACQUIRE); }
  void store(int word, uint32_t value) { __atomic_store_n(&host_[word], value, __ATOMIC_RELEASE); }
  CUdeviceptr device(int word) const { return device_ + CUdeviceptr(word) * sizeof(uint32_t); }

 private:
  Launcher& launcher_;
  uint32_t* host_ = nullptr;
  CUdeviceptr device_ = 0;
  std::vector<bool> used_;
};

// "off", "auto" (kWhileBestEffort) or "always": the values of priority_hp_chain / --hp-chain.
std::optional<SchedulerConfig::HpChain> parseHpChain(std::string_view text);
const char* hpChainName(SchedulerConfig::HpChain chain);

class PriorityPolicy final : public Policy {
 public:
  // Sets up every GPU (mapped words, PTB progress counters, SM partitions); on failure `error`
  // says why. `monitorThread` false: nothing polls the GPUs unless pollOnce is called (the tests,
  // on a simulated clock).
  PriorityPolicy(SchedulerConfig config, const std::vector<gpu::Gpu*>& gpus, Launcher& launcher, Clock& clock,
                 std::string& error, bool monitorThread = true);
  ~PriorityPolicy() override;

  const char* name() const override { return "priority"; }
  std::optional<int> streamPriority(bool highPriority, const gpu::Gpu& g) const override;
  gpu::Placement placement(bool highPriority, gpu::Gpu& g) override;
  void observeHpWait(gpu::Gpu& g, uint64_t tenant, double micros) override;
  unsigned smsKeptFromBestEffort(gpu::Gpu& g) override;
  CUresult launch(const KernelLaunch& k) override;
  CUresult runOpaque(const OpaqueWork& w) override;
  void afterWork(uint64_t tenant, bool highPriority, uint64_t streamId, gpu::Gpu& g, CUstream stream) override;
  void endOfBurst(uint64_t tenant) override;
  void tenantEnding(uint64_t tenant) override;
  void tenantReleased(uint64_t tenant) override;
  std::string summary() const override;
  bool chainsHighPriority() const override { return config_.hpChain != SchedulerConfig::HpChain::kOff; }

  // One look of the monitor at every GPU: HP completion words (the gate opens after the idle
  // window) and finished timings.
  void pollOnce();

 private:
  using StreamKey = std::pair<uint64_t, uint64_t>;  // (tenant, stream id)

  // A BE tenant's state on one GPU: its PTB progress counter and retreat flag, and its kernels
  // still on the GPU (an event after each). Only the tenant's own thread launches through it.
  struct Lane {
    uint64_t tenant = 0;
    CUdeviceptr progress = 0;  // device u64, from the GPU's pool
    int progressSlot = -1;
    int retreat = -1;          // mapped word: raised while HP runs
    int never = -1;            // mapped word, always 0: the retreat flag of a PTB launch's last run
    std::deque<CUevent> inFlight;
    std::vector<CUevent> spareEvents;
  };
  struct Measurement {
    std::string key;
    CUevent start = nullptr, end = nullptr;
  };
  // One HP tenant's synchronizing waits with no BE active, and their p99 (0 until a window is
  // full): what a relative budget holds that tenant's waits to.
  struct AloneTail {
    std::vector<double> waits;
    double p99 = 0;
    void observe(double micros, size_t window);
  };
  struct GpuState {
    explicit GpuState(Launcher& launcher) : words(launcher) {}
    gpu::Gpu* gpu = nullptr;  // a key: only the launcher looks inside
    MappedWords words;
    HpActivity activity{0};
    std::unique_ptr<PartitionSplit> split;  // null: the GPU's SMs are not partitioned
    PartitionController controller;         // under mutex_
    // The partition level in use while both classes are active (0: every SM shared): the reserve
    // of controller.level() when it runs (useControllerLevel), else the strongest. Readable without
    // the lock, as is whether the controller's level keeps HP kernels unchained.
    std::atomic<uint8_t> level{0};
    std::atomic<bool> hpUnchained{false};
    std::atomic<bool> gateOpen{true};  // activity.gateOpen(), readable without the lock
    std::atomic<Nanos> beQueuedAt{kLongAgo};  // when BE work was last queued here
    struct HpSlot {
      int word = -1;
      uint32_t issued = 0;        // the word reaches this once the GPU is past the last HP work
      CUstream unmarked = nullptr;  // where that work went, while its mark waits for endOfBurst
      Nanos unmarkedSince = 0;
    };
    std::map<StreamKey, HpSlot> hpSlots;
    std::map<uint64_t, AloneTail> hpAlone;  // by HP tenant, under mutex_
    std::map<uint64_t, std::unique_ptr<Lane>> lanes;  // by BE tenant
    std::vector<std::unique_ptr<Lane>> endedLanes;    // of ending tenants, freed once released
    std::vector<Measurement> measuring;
    std::vector<std::pair<CUevent, CUevent>> eventPool;
    CUdeviceptr progressPool = 0;           // one u64 PTB progress counter per lane slot
    std::vector<bool> progressUsed;
  };

  GpuState* stateFor(gpu::Gpu& g);  // nullptr for a GPU the policy was not set up for
  // BE work on `g` runs in its own SM partition now and is neither gated nor transformed (that
  // would cost BE throughput and buy HP nothing: no BE block is on HP's SMs).
  bool beWorkIsolated(gpu::Gpu& g);
  std::string reserveName(gpu::Gpu& g, size_t level);  // "every SM shared", "HP 40 SMs / BE 92"
  // With chaining in `auto`, the controller's ladder starts one rung lower: every SM shared with
  // HP kernels unchained, which keeps BE the SMs chained blocks hold while they wait, where HP
  // meets its target without them. Its level L is then reserve L - 1, and L = 0 is that rung.
  bool ladderHasUnchainedRung() const {
    return controlsPartitions() && config_.hpChain == SchedulerConfig::HpChain::kWhileBestEffort;
  }
  void useControllerLevel(GpuState& s, size_t level);
  std::string controllerLevelName(gpu::Gpu& g, size_t level);
  std::string aloneKey(gpu::Gpu& g);
  std::string settledLevelKey(gpu::Gpu& g);  // where the last pair settled, kept in profiles_
  // Whether anything waits for HP to go idle (the gate, PTB retreats): else HP work is not marked.
  bool tracksHpActivity() const { return config_.gate || config_.transforms; }
  bool controlsPartitions() const { return config_.partitionControl || config_.hpP99Budget.set(); }
  bool setUp(gpu::Gpu& g, std::string& error);
  Lane* laneFor(GpuState& s, const KernelLaunch& k);
  void closeGate(GpuState& s);
  void openGate(GpuState& s);
  CUresult launchHighPriority(const KernelLaunch& k);
  // As chained or as the original (config_.hpChain).
  CUresult launchHpKernel(const KernelLaunch& k, void** params);
  bool chains(const KernelLaunch& k);
  void noteBestEffortWork(gpu::Gpu& g);
  CUresult launchBestEffort(const KernelLaunch& k);
  // Waits until this BE tenant may queue a kernel: few of its kernels on the GPU, and the gate
  // open unless the kernel runs beside HP work.
  void waitTurn(GpuState& s, Lane& lane, const KernelLaunch& k, bool gated);
  void markInFlight(Lane& lane, CUstream stream);
  // HP work was just queued on `stream`: HP is busy from now until the GPU passes the slot's
  // mark, which is written after the tenant's burst of work (endOfBurst), not after every launch.
  void markHpWork(GpuState& s, StreamKey key, CUstream stream);
  struct PendingMark {
    CUstream stream = nullptr;
    CUdeviceptr word = 0;
    uint32_t value = 0;
  };
  void writeMarks(const std::vector<PendingMark>& marks);
  KernelFacts occupancyFacts(const KernelLaunch& k, const std::string& key);  // takes mutex_ itself
  VariantRecord variantRecord(const std::string& key, VariantKind kind) const;  // under mutex_
  // Events around work about to be queued on `stream` (none when no event could be had), and
  // the end event once it is queued; the monitor reads the time (collectTimings).
  Measurement startTiming(GpuState& s, CUstream stream);
  void finishTiming(GpuState& s, Measurement m, CUstream stream, std::string key);
  // Under mutex_: a finished timing of an original ("<shape>") or a variant ("<shape>#ptb"),
  // saying so when a variant starts or stops paying.
  void recordTiming(const std::string& key, double micros);
  void monitor();
  void observeHp(GpuState& s);       // under mutex_: HP's words, and the gate
  void markStaleSlots(GpuState& s);  // under mutex_: marks deferred longer than kMaxUnmarked
  void collectTimings(GpuState& s);  // takes mutex_ itself, not across driver calls
  void saveProfiles();
  // Gives back the tenant's words and lanes (policy lock held); its events go to `events`.
  void forgetTenant(uint64_t tenant, std::vector<std::pair<gpu::Gpu*, CUevent>>& events);

  const SchedulerConfig config_;
  Launcher& launcher_;
  Clock& clock_;
  ChoiceKnobs knobs_;
  mutable std::mutex mutex_;
  std::map<gpu::Gpu*, std::unique_ptr<GpuState>> gpus_;
  KernelProfiles profiles_;
  std::map<std::string, KernelFacts> shapes_;  // occupancyFacts' answers
  std::map<std::string, uint64_t> launchesOfShape_;  // BE launches per shape key, since start
  std::atomic<bool> stopping_{false};
  std::atomic<uint32_t> unmarkedSlots_{0};  // HP slots whose mark waits for endOfBurst
  // Counters for summary().
  uint64_t gateCloses_ = 0, beOriginal_ = 0, beSliced_ = 0, bePtb_ = 0, measured_ = 0;
  uint64_t variantsRefused_ = 0;  // times a variant was found not to pay
  std::atomic<uint64_t> hpChained_{0};  // HP launches made chained
  std::atomic<uint64_t> beIsolated_{0};  // BE launches and opaque work run in the BE partition
  std::thread monitor_;  // last: started once everything above is ready
};

}  // namespace tally::server::scheduler

// Everything one tenant owns inside tallyd's shared contexts, and the per-tenant CUDA
// semantics that a shared context does not give for free:
//  - streams are created non-blocking on the server; the tenant's legacy default stream is
//    emulated per tenant and synchronizes with the tenant's own blocking streams only;
//  - device-wide syncs wait for this tenant's streams only;
//  - an allocation table, so every address a call names is checked and freed at the end.
// A Tenant is used by its session thread only (completion callbacks capture values, never
// the tenant), so it needs no lock.
#pragma once

#include "common/metrics/latency_histogram.h"
#include "server/gpu/gpu.h"
#include "server/session/auth.h"
#include "server/session/host_waits.h"

#include <cuda.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace tally::server::session {

// Client stream handles below this are the legacy default stream of device (id - 1).
inline constexpr uint64_t kFirstUserStream = 1u << 16;

struct StreamState {
  uint64_t id = 0;
  gpu::Gpu* gpu = nullptr;
  CUstream stream = nullptr;
  bool blocking = true;             // synchronizes with the tenant's legacy default stream
  bool legacyDefault = false;
  bool hasUnjoinedWork = false;     // work the legacy default stream has not waited for yet
  uint64_t joinedDefaultEpoch = 0;  // legacy-default work this stream has already waited for
  CUevent joinEvent = nullptr;
  // Host callbacks: the stream waits until the client reports callback `sequence` done.
  uint32_t* hostFlag = nullptr;     // pinned, device-mapped
  CUdeviceptr hostFlagDevice = 0;
  uint32_t hostFuncIssued = 0;
  // Kernel variants (created on first use): a stream for PTB retreat triggers and the PTB
  // progress counter + retreat flag shared by this stream's PTB launches.
  CUstream variantSide = nullptr;
  CUdeviceptr ptbControl = 0;
};

struct EventState {
  gpu::Gpu* gpu = nullptr;
  CUevent event = nullptr;
};

struct FunctionState {
  gpu::Gpu* gpu = nullptr;
  CUfunction function = nullptr;
  std::vector<std::pair<uint32_t, uint32_t>> params;  // (offset, size)
  size_t paramBytes = 0;
  // Variants, when the module was loaded with them (server/transform); null otherwise.
  CUfunction sliced = nullptr;
  CUfunction ptb = nullptr;
  std::string profileKey;  // "<module hash>/<kernel name>": what the scheduler learns durations by
  uint64_t module = 0;     // the client's handle of the module it came from
};

struct ModuleState {
  gpu::Gpu* gpu = nullptr;
  CUmodule module = nullptr;
  bool hasVariants = false;  // loaded from the compiled variant module instead of the client's image
  std::string identity;      // hex content hash of the client's module
  std::string poolKey;       // where the instance goes back to (gpu::ModulePool); empty: unloaded
  // Function attributes this tenant changed, with their values before: restored before the
  // instance goes back to the pool.
  struct ChangedAttribute {
    CUfunction function;
    CUfunction_attribute attribute;
    int original;
  };
  std::vector<ChangedAttribute> changedAttributes;
};

// What tallyctl shows about a tenant. Only the session thread writes them (relaxed atomic
// increments and stores on the call path); the admin thread reads them at any time.
struct TenantCounters {
  std::atomic<uint64_t> calls{0};
  std::atomic<uint64_t> launches{0};
  std::atomic<uint64_t> bytesHostToDevice{0};
  std::atomic<uint64_t> bytesDeviceToHost{0};
  std::atomic<uint64_t> memoryBytes{0};  // allocated device memory, stored after each change
  std::atomic<uint32_t> streams{0};      // created streams (not the legacy default ones), likewise
  std::atomic<uint64_t> throttledMicros{0};  // time its calls waited for max_calls_per_second
  std::atomic<uint64_t> slicedLaunches{0};  // launches run as sliced / PTB kernel variants
  std::atomic<uint64_t> ptbLaunches{0};
  std::atomic<uint64_t> preemptions{0};     // PTB retreat points set (one set after the grid is done stops nothing)
  // Best-effort launches the scheduler held back (gate closed, or two kernels still running),
  // their total wait, and its distribution: < 10 µs, < 100 µs, < 1 ms, < 10 ms, longer.
  metrics::LatencyHistogram held;
  // How long its synchronizing calls (syncs, synchronous copies) waited for the GPU, from arrival
  // to answer: for an inference tenant, an estimate of its requests' GPU-side latency. Shared:
  // the completion thread records into it after the call has left the session thread.
  std::shared_ptr<metrics::LatencyHistogram> syncWaits = std::make_shared<metrics::LatencyHistogram>();
  // What the tenant's thread is in now — a call (its wire::Call discriminant), kBusyReleasing,
  // or kBusyIdle — and since when (steady clock): tallyctl shows a thread stuck in the driver.
  // An integer on the call path; the admin thread looks the name up.
  static constexpr int32_t kBusyIdle = -1;
  static constexpr int32_t kBusyReleasing = -2;
  std::atomic<int32_t> busyCall{kBusyIdle};
  std::atomic<int64_t> busySinceNs{0};
};

// Marks the tenant's thread as inside `call` (a discriminant or kBusyReleasing) for its lifetime.
class BusyMark {
 public:
  BusyMark(TenantCounters& counters, int32_t call) : counters_(counters) {
    counters_.busySinceNs.store(std::chrono::steady_clock::now().time_since_epoch().count(), std::memory_order_relaxed);
    counters_.busyCall.store(call, std::memory_order_release);
  }
  ~BusyMark() { counters_.busyCall.store(TenantCounters::kBusyIdle, std::memory_order_release); }
  BusyMark(const BusyMark&) = delete;
  BusyMark& operator=(const BusyMark&) = delete;

 private:
  TenantCounters& counters_;
};

struct HostMapping {
  void* local = nullptr;    // where tallyd mapped the client's memfd
  size_t size = 0;
  CUdeviceptr device = 0;  // where the GPU sees it (every mapping is registered with the driver)
};

class Tenant {
 public:
  Tenant(uint64_t id, std::string name, PriorityClass priority, std::vector<gpu::Gpu*> gpus, TenantLimits limits = {});
  ~Tenant();
  Tenant(const Tenant&) = delete;
  Tenant& operator=(const Tenant&) = delete;

  uint64_t id() const { return id_; }
  const std::string& name() const { return name_; }
  PriorityClass priority() const { return priority_; }
  const TenantLimits& limits() const { return limits_; }
  gpu::Gpu* gpu(uint32_t device) const { return device < gpus_.size() ? gpus_[device] : nullptr; }

  // --- streams and events -------------------------------------------------------------
  CUresult createStream(uint32_t device, uint64_t id, bool nonBlocking, int priority);
  // Every stream of this tenant (its legacy default ones too) at the highest (true) or lowest
  // (false) CUDA priority, whatever the application asks: the scheduler's first layer.
  void setStreamBand(std::optional<bool> highest) { streamBand_ = highest; }
  CUresult destroyStream(uint64_t id);
  // The stream for `id`, creating the legacy default stream on first use; nullptr if unknown.
  StreamState* stream(uint64_t id);
  // Call before enqueuing work on `s`: makes it wait for what legacy semantics require.
  void orderBefore(StreamState& s);
  std::vector<StreamState*> streamsOf(gpu::Gpu* g);
  // A private stream of this tenant on `g` used to wait on events/streams for syncs.
  CUstream syncStream(gpu::Gpu* g);
  // syncStream(g), made to wait for the work queued so far on every stream of this tenant on
  // `g`: what a device-wide sync of the tenant's own device means.
  CUstream joinedSyncStream(gpu::Gpu* g);

  CUresult createEvent(uint32_t device, uint64_t id, unsigned flags);
  CUresult destroyEvent(uint64_t id);
  EventState* event(uint64_t id);

  // --- memory -------------------------------------------------------------------------
  CUresult allocate(uint32_t device, size_t size, CUdeviceptr& out);
  CUresult allocatePitch(uint32_t device, size_t width, size_t height, CUdeviceptr& out, size_t& pitch);
  // Like cudaFree, narrowed to the tenant: the memory goes once every stream of this tenant
  // has passed this point (queued on joinedSyncStream, whose completion the caller awaits),
  // not once every kernel of the context has ended, which cuMemFree waits for. `on`: its GPU.
  CUresult free(CUdeviceptr ptr, gpu::Gpu*& on);
  // The GPU whose memory holds [ptr, ptr+size) if the tenant owns all of it, else nullptr.
  gpu::Gpu* ownerOf(CUdeviceptr ptr, size_t size) const;
  size_t allocatedBytes() const { return allocatedBytes_; }
  void addGlobalRange(CUdeviceptr ptr, size_t size, gpu::Gpu* g);

  // Client memory shared through a memfd (pinned on the client side).
  // `deviceAddress` is where kernels see it (0 if the driver could not register it).
  CUresult mapHostMemory(int memfd, uint64_t clientAddress, size_t size, gpu::Gpu* g, uint64_t& deviceAddress);
  CUresult unmapHostMemory(uint64_t clientAddress);
  // Local address of [clientAddress, +size) if it lies inside one mapping, else nullptr.
  void* hostAddress(uint64_t clientAddress, size_t size) const;
  // A u32 word of a registered mapping, where tallyd and the GPU see it (host callbacks).
  struct SharedWord {
    uint32_t* local;
    CUdeviceptr device;
  };
  std::optional<SharedWord> sharedWord(uint64_t clientAddress) const;
  // A stream waits on this word: the mapping stays until the tenant ends, and the word is
  // filled when the client is gone so that callbacks it will never run hold nothing.
  void holdSharedDoneWord(uint32_t* local, uint32_t sequence) {
    sharedDoneWords_.insert(local);
    hostWaits_->add(local, sequence);
  }
  // Every word this tenant's streams wait on for its client (host_waits.h); shared with the
  // HangupWatch, which may release them while this tenant's thread is stuck.
  const std::shared_ptr<HostWaits>& hostWaits() const { return hostWaits_; }
  // The pinned staging this tenant's copies may hold at once (staging_pool.h).
  const std::shared_ptr<gpu::StagingBudget>& stagingBudget() const { return stagingBudget_; }

  // --- modules --------------------------------------------------------------------------
  // Loads `variants` (the compiled variant module of the image's PTX) when given and loadable,
  // else `image`.
  CUresult loadModule(uint32_t device, uint64_t id, const std::string& identity, const std::string& image,
                      const std::string* variants = nullptr);
  // The side stream and PTB control memory of `s`, created on first use; false if the driver
  // refused them (the launch then runs the original kernel).
  bool prepareVariants(StreamState& s);
  CUresult unloadModule(uint64_t id);
  // Call before changing attribute `a` of function `f` of module `moduleId`: a pooled instance
  // gets its earlier value back when this tenant is done with it.
  void noteAttributeChange(uint64_t moduleId, CUfunction f, CUfunction_attribute a);
  ModuleState* module(uint64_t id);
  FunctionState* function(uint64_t id);
  FunctionState& addFunction(uint64_t id, FunctionState state);

  // Context-wide limits as this tenant asked for them (the context holds the largest).
  std::map<int, size_t>& requestedLimits() { return requestedLimits_; }

  // Notices (replies, HostData, HostFuncReady) of this tenant still waiting in a completion
  // queue; while any is, a later notice must queue behind it rather than overtake it.
  const std::shared_ptr<std::atomic<int>>& queuedNotices() const { return queuedNotices_; }

  TenantCounters& counters() { return counters_; }
  const TenantCounters& counters() const { return counters_; }

  // Host callbacks whose stream waits on the GPU for the client's HostFuncDone. While any is
  // outstanding the scheduler must not hold this tenant's thread: the done message it would
  // keep from being read may be what the GPU (and through a shared hardware queue, HP) waits for.
  void noteHostFuncAwaited() { ++hostFuncsAwaited_; }
  void noteHostFuncsDone(uint32_t count) { hostFuncsAwaited_ -= std::min(count, hostFuncsAwaited_); }
  bool awaitsHostFuncs() const { return hostFuncsAwaited_ > 0; }

  // --- errors of one-way calls ---------------------------------------------------------
  void deferError(CUresult r) {
    if (deferred_ == CUDA_SUCCESS) deferred_ = r;
  }
  CUresult takeDeferredError() {
    CUresult r = deferred_;
    deferred_ = CUDA_SUCCESS;
    return r;
  }

  // Waits for the tenant's work, releases host callbacks nobody will run, frees everything.
  void release();

 private:
  struct Range {
    size_t size;
    gpu::Gpu* gpu;
    bool allocation;  // false: a module global, freed with its module
  };

  StreamState* createLegacyDefault(uint32_t device);
  // Quota checks (logged once per tenant when they first refuse).
  bool memoryQuotaAllows(size_t request);
  bool streamLimitAllows();
  // Streams the tenant created (what max_streams limits).
  size_t userStreamCount() const;
  // Copies allocatedBytes_ and the stream count into counters_ (after each change).
  void publishUsage();
  void joinStreams(StreamState& waiter, StreamState& waited);
  void freeAfterTenantWork(gpu::Gpu* g, CUdeviceptr ptr);
  CUstream allocStream(gpu::Gpu* g);
  CUstream privateStream(std::unordered_map<gpu::Gpu*, CUstream>& streams, gpu::Gpu* g);
  CUresult loadInstance(gpu::Gpu& g, uint64_t id, const std::string& identity, const std::string& image,
                        bool variants);
  // Back to the GPU's module pool, or unloaded when the image declares module-scope data.
  CUresult dropModule(ModuleState& m);

  uint64_t id_;
  std::string name_;
  PriorityClass priority_;
  std::vector<gpu::Gpu*> gpus_;
  TenantLimits limits_;
  bool quotaLogged_ = false;
  bool streamLimitLogged_ = false;
  std::unordered_map<uint64_t, std::unique_ptr<StreamState>> streams_;
  std::unordered_map<uint64_t, uint64_t> defaultEpoch_;  // per device: work count on legacy default
  using PrivateStreams = std::unordered_map<gpu::Gpu*, CUstream>;
  PrivateStreams syncStreams_;
  PrivateStreams allocStreams_;  // carry allocations only: never busy
  std::unordered_map<uint64_t, EventState> events_;
  std::map<CUdeviceptr, Range> ranges_;
  size_t allocatedBytes_ = 0;
  std::map<uint64_t, HostMapping> hostMappings_;
  std::unordered_map<uint64_t, ModuleState> modules_;
  std::unordered_map<uint64_t, FunctionState> functions_;
  std::vector<uint32_t*> retiredHostFlags_;
  uint32_t hostFuncsAwaited_ = 0;
  std::set<uint32_t*> sharedDoneWords_;
  std::shared_ptr<HostWaits> hostWaits_ = std::make_shared<HostWaits>();
  std::shared_ptr<gpu::StagingBudget> stagingBudget_;
  std::map<int, size_t> requestedLimits_;  // of destroyed streams
  CUresult deferred_ = CUDA_SUCCESS;
  std::shared_ptr<std::atomic<int>> queuedNotices_ = std::make_shared<std::atomic<int>>(0);
  bool released_ = false;
  TenantCounters counters_;
  std::optional<bool> streamBand_;
  int bandPriority(const gpu::Gpu& g, int requested) const;
  std::vector<std::pair<gpu::Gpu*, CUdeviceptr>> retiredPtbControls_;  // of destroyed streams: freed at release
};

}  // namespace tally::server::session

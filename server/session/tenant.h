// Everything one tenant owns inside tallyd's shared contexts: its identity, limits and
// counters, the error its one-way calls left, and its tables, split by state —
//  - streams() (+ events, the tenant's legacy default stream semantics; stream_table.h),
//  - memory() (allocation and module-global ranges, ownerOf, the quota; memory_table.h),
//  - modules() (+ the functions resolved in them; module_table.h),
//  - hostMappings() (client memory shared through memfds; host_mapping_table.h),
//  - memPools() (its stream-ordered allocator pools; mem_pool_table.h),
//  - virtualMemory() (allocation handles, reservations, mappings; virtual_memory_table.h).
//  - graphs() (open stream captures, graphs, executable graphs; graph_table.h).
//  - arrays() (CUDA arrays, texture and surface objects; array_table.h).
// What spans tables (allocating and freeing, unloading a module with its globals, the host
// waits, release) is here. A Tenant is used by its session thread only (completion callbacks
// capture values, never the tenant), so it needs no lock — but for what its launch thread
// touches while the session thread runs on: the deferred error and the counters (atomics).
#pragma once

#include "common/metrics/latency_histogram.h"
#include "server/gpu/gpu.h"
#include "server/session/bulk_lanes.h"
#include "server/session/array_table.h"
#include "server/session/auth.h"
#include "server/session/completion_words.h"
#include "server/session/host_mapping_table.h"
#include "server/session/host_waits.h"
#include "server/session/launch_thread.h"
#include "server/session/graph_table.h"
#include "server/session/library_object_table.h"
#include "server/session/link_table.h"
#include "server/session/mem_pool_table.h"
#include "server/session/memory_table.h"
#include "server/session/module_table.h"
#include "server/session/stream_table.h"
#include "server/session/virtual_memory_table.h"

#include <cuda.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <vector>

namespace tally::server::session {

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
  std::atomic<uint64_t> chainedLaunches{0};  // HP launches run as chained variants (scheduler layer 6)
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

  // --- the tables ----------------------------------------------------------------------
  StreamTable& streams() { return streams_; }
  MemoryTable& memory() { return memory_; }
  const MemoryTable& memory() const { return memory_; }
  ModuleTable& modules() { return modules_; }
  HostMappingTable& hostMappings() { return hostMappings_; }
  MemPoolTable& memPools() { return memPools_; }
  VirtualMemoryTable& virtualMemory() { return virtualMemory_; }
  LibraryObjectTable& libraryObjects() { return libraryObjects_; }
  GraphTable& graphs() { return graphs_; }
  LinkTable& links() { return links_; }
  ArrayTable& arrays() { return arrays_; }

  // --- memory (allocations come from the GPU's pool on the tenant's allocation stream) ---
  CUresult allocate(uint32_t device, size_t size, CUdeviceptr& out);
  CUresult allocatePitch(uint32_t device, size_t width, size_t height, CUdeviceptr& out, size_t& pitch);
  // Like cudaFree, narrowed to the tenant: the memory is cleared and goes once every stream of
  // this tenant has passed this point (queued on streams().joinedSyncStream, whose completion
  // the caller awaits), not once every kernel of the context has ended, which cuMemFree waits
  // for. `on`: its GPU.
  CUresult free(CUdeviceptr ptr, gpu::Gpu*& on);
  // An array the tenant (or its end) let go: once the tenant's work on its GPU has passed this
  // point it is cleared (the driver may hand its memory to another tenant), destroyed, and its
  // bytes leave the quota. cudaFreeArray synchronizes natively too.
  CUresult destroyArray(const ArrayState& array);
  // The same for a mipmapped array, level by level.
  CUresult destroyMipmapped(const MipmappedState& array);

  // --- modules -------------------------------------------------------------------------
  // modules().load on the tenant's device `device`.
  CUresult loadModule(uint32_t device, uint64_t id, const std::string& identity, const std::string& image,
                      const VariantImage* variants = nullptr);
  // The module goes with its functions and its globals: neither may name the instance once it
  // is back in the pool (another tenant's next) or unloaded.
  CUresult unloadModule(uint64_t id);

  // --- host callbacks --------------------------------------------------------------------
  // A stream waits on this shared word: its mapping stays until the tenant ends, and the word
  // is filled when the client is gone so that callbacks it will never run hold nothing.
  void holdSharedDoneWord(uint32_t* local, uint32_t sequence) {
    hostMappings_.holdWord(local);
    hostWaits_->add(local, sequence);
  }
  // Every word this tenant's streams wait on for its client (host_waits.h: host flags of its
  // streams, shared words of its mappings); shared with the HangupWatch, which may release them
  // while this tenant's thread is stuck.
  const std::shared_ptr<HostWaits>& hostWaits() const { return hostWaits_; }
  // The tenant's bulk lanes (TCP/TLS clients that asked for them; null: none), set at admission.
  const std::shared_ptr<BulkLanes>& lanes() const { return lanes_; }
  void setLanes(std::shared_ptr<BulkLanes> lanes) { lanes_ = std::move(lanes); }
  // The completion words of its ring file (completion_words.h); null without shared rings.
  const std::shared_ptr<CompletionWords>& completionWords() const { return completionWords_; }
  void setCompletionWords(std::shared_ptr<CompletionWords> words) { completionWords_ = std::move(words); }
  // Host callbacks whose stream waits on the GPU for the client's HostFuncDone. While any is
  // outstanding the scheduler must not hold this tenant's thread: the done message it would
  // keep from being read may be what the GPU (and through a shared hardware queue, HP) waits for.
  void noteHostFuncAwaited() { ++hostFuncsAwaited_; }
  void noteHostFuncsDone(uint32_t count) { hostFuncsAwaited_ -= std::min(count, hostFuncsAwaited_); }
  bool awaitsHostFuncs() const { return hostFuncsAwaited_ > 0; }
  // A stream of this tenant waited on a word (cuStreamWaitValue*): the write it waits for may
  // come with the tenant's later calls, and a parked stream can hold a hardware queue that HP's
  // work is behind.
  void noteStreamWaits() { streamWaits_ = true; }
  // Whether the scheduler must never hold this tenant's next work back until HP is idle: it owes
  // the GPU a host callback's completion, or it made streams wait on words it may write later.
  bool mustNotBeHeld() const { return awaitsHostFuncs() || streamWaits_; }

  // The pinned staging this tenant's copies may hold at once (staging_pool.h).
  const std::shared_ptr<gpu::StagingBudget>& stagingBudget() const { return stagingBudget_; }
  // Context-wide limits as this tenant asked for them (the context holds the largest).
  std::map<int, size_t>& requestedLimits() { return requestedLimits_; }
  // Notices (replies, HostData, HostFuncReady) of this tenant still waiting in a completion
  // queue; while any is, a later notice must queue behind it rather than overtake it.
  const std::shared_ptr<std::atomic<int>>& queuedNotices() const { return queuedNotices_; }

  TenantCounters& counters() { return counters_; }
  const TenantCounters& counters() const { return counters_; }

  // --- errors of one-way calls ---------------------------------------------------------
  // Keeps the first error until the next reply takes it; true when `r` is now that error.
  // Atomic: the launch thread defers its launches' errors while the session thread runs.
  bool deferError(CUresult r) {
    CUresult none = CUDA_SUCCESS;
    return deferred_.compare_exchange_strong(none, r, std::memory_order_acq_rel);
  }
  CUresult takeDeferredError() { return deferred_.exchange(CUDA_SUCCESS, std::memory_order_acq_rel); }
  bool hasDeferredError() const { return deferred_.load(std::memory_order_acquire) != CUDA_SUCCESS; }

  // --- the launch thread (launch_thread.h) ------------------------------------------------
  // Started at admission for high-priority tenants (hp_launch_thread); null otherwise.
  void startLaunchThread(std::chrono::microseconds spin);
  LaunchThread* launchThread() { return launchThread_.get(); }
  // Runs what it holds and stops it (the session's end, before release()).
  void stopLaunchThread();

  // Waits for the tenant's work, releases host callbacks nobody will run, frees everything.
  void release();

 private:
  // Parts of release(): mapped memory is cleared and unmapped, reservations freed, handles
  // released; pools are destroyed once their memory is freed.
  void releaseVirtualMemory();
  void destroyMemPools();
  void destroyLinks();
  void destroyArraysAndObjects();

 private:
  uint64_t id_;
  std::string name_;
  PriorityClass priority_;
  std::vector<gpu::Gpu*> gpus_;
  TenantLimits limits_;
  // Before the tables: they publish into it.
  TenantCounters counters_;
  StreamTable streams_;
  MemoryTable memory_;
  ModuleTable modules_;
  HostMappingTable hostMappings_;
  MemPoolTable memPools_;
  VirtualMemoryTable virtualMemory_;
  LibraryObjectTable libraryObjects_;
  GraphTable graphs_;  // after streams_: it counts captures there
  LinkTable links_;
  ArrayTable arrays_;
  uint32_t hostFuncsAwaited_ = 0;
  bool streamWaits_ = false;
  std::shared_ptr<HostWaits> hostWaits_ = std::make_shared<HostWaits>();
  std::shared_ptr<BulkLanes> lanes_;
  std::shared_ptr<CompletionWords> completionWords_;
  std::shared_ptr<gpu::StagingBudget> stagingBudget_;
  std::map<int, size_t> requestedLimits_;
  std::atomic<CUresult> deferred_{CUDA_SUCCESS};
  std::unique_ptr<LaunchThread> launchThread_;
  std::shared_ptr<std::atomic<int>> queuedNotices_ = std::make_shared<std::atomic<int>>(0);
  bool released_ = false;
};

}  // namespace tally::server::session

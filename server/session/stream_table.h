// One tenant's streams and events, and the per-tenant stream semantics that a shared context
// does not give for free:
//  - streams are created non-blocking on the server; the tenant's legacy default stream is
//    emulated per tenant and synchronizes with the tenant's own blocking streams only;
//  - device-wide syncs wait for this tenant's streams only (joinedSyncStream).
// Admission and counting (admitStream/admitEvent, insert*, the limits) need no driver and are
// unit-tested; everything else is the driver edge.
#pragma once

#include "server/gpu/sm_partitions.h"
#include "server/session/count_limit.h"
#include "server/session/ipc_registry.h"
#include "server/session/launch_thread.h"

#include <cuda.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tally::server::gpu {
class Gpu;
}

namespace tally::server::session {

// Client stream handles below this are the legacy default stream of device (id - 1).
inline constexpr uint64_t kFirstUserStream = 1u << 16;

struct StreamState {
  uint64_t id = 0;
  gpu::Gpu* gpu = nullptr;
  CUstream stream = nullptr;        // where its next work goes: placed[placement]
  int priority = 0;                 // CUDA priority, the same in every placement
  // Its driver stream in each placement (whole GPU, SM partitions), created on first use; work
  // moves between them in order (StreamTable::place).
  gpu::Placement placement = gpu::Placement::wholeGpu();
  std::array<CUstream, gpu::kPlacements> placed{};
  CUevent moveEvent = nullptr;
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
  // What was queued last, for chained launches (scheduler::KernelLaunch::followsKernel): every
  // call that queues work, and every wait tallyd adds, counts one; a kernel launch notes the count
  // and the driver stream it went to.
  uint64_t workQueued = 0;
  uint64_t kernelAt = 0;
  CUstream kernelOn = nullptr;
};

// Whether the stream's work before the call being made (streamForWork counted it) is a kernel
// the tenant launched, on the driver stream the stream uses now.
inline bool followsKernel(const StreamState& s) {
  return s.kernelOn == s.stream && s.kernelOn != nullptr && s.kernelAt + 1 == s.workQueued;
}
// The call being made queued a kernel on the stream.
inline void noteKernel(StreamState& s) {
  s.kernelAt = s.workQueued;
  s.kernelOn = s.stream;
}

struct EventState {
  gpu::Gpu* gpu = nullptr;
  CUevent event = nullptr;
  // Last recorded in a capturing stream: the record is a graph's, not the GPU's, so the event
  // cannot be waited on for a sync (CUDA_ERROR_CAPTURED_EVENT, as natively).
  bool recordedInCapture = false;
  // Set for an event shared by IPC (ipc_registry.h): the driver event goes with the last
  // holder, so destroying this one only drops a reference.
  std::shared_ptr<CUevent_st> shared;
  std::shared_ptr<IpcEventGrant> grant;  // the owner's export, once cudaIpcGetEventHandle made it
};

struct StreamLimits {
  uint64_t maxStreams = 0;  // 0 = unlimited; legacy default streams do not count
  uint64_t maxEvents = 0;
};

class StreamTable {
 public:
  // `publishedStreams` receives userStreamCount() after every change (tallyctl, metrics).
  StreamTable(std::vector<gpu::Gpu*> gpus, StreamLimits limits, std::string tenant,
              std::atomic<uint32_t>& publishedStreams);

  // --- streams -----------------------------------------------------------------------
  CUresult createStream(uint32_t device, uint64_t id, bool nonBlocking, int priority);
  CUresult destroyStream(uint64_t id);
  // Whether a stream may be created under `id`: CUDA_ERROR_INVALID_HANDLE for a legacy id or
  // one in use, CUDA_ERROR_OUT_OF_MEMORY past max_streams (what a driver out of streams answers).
  CUresult admitStream(uint64_t id);
  void insertStream(std::unique_ptr<StreamState> s);
  // The stream for `id`, creating the legacy default stream on first use; nullptr if unknown.
  StreamState* stream(uint64_t id);
  // Call before enqueuing work on `s`: makes it wait for what legacy semantics require.
  void orderBefore(StreamState& s);
  // Sends the stream's next work to placement `p` (an SM partition or the whole GPU), after
  // everything queued on it so far. A capturing stream stays where it is (the capture is bound
  // to its driver stream), and so does a stream whose GPU is not partitioned or that cannot get
  // a driver stream there.
  void place(StreamState& s, gpu::Placement p);
  std::vector<StreamState*> streamsOf(gpu::Gpu* g);
  // Every stream of this tenant (its legacy default ones too) at the highest (true) or lowest
  // (false) CUDA priority, whatever the application asks: the scheduler's first layer.
  void setBand(std::optional<bool> highest) { band_ = highest; }
  // The side stream and PTB control memory of `s`, created on first use; false if the driver
  // refused them (the launch then runs the original kernel).
  bool prepareVariants(StreamState& s);
  // Streams the tenant created (what max_streams limits).
  size_t userStreamCount() const;
  // The tenant's launch thread (launch_thread.h; null: none): joining or moving streams waits
  // for the launches it still holds, which must reach the driver first.
  void setLaunchThread(LaunchThread* launches) { launches_ = launches; }
  size_t streamCount() const { return streams_.size(); }

  // --- stream capture (graph_table.h keeps the captures themselves) ----------------------
  // Work on a capturing stream is recorded into a graph and never runs: nothing may wait for
  // it, and no join may reach into it (the waiting stream would be pulled into the capture).
  // Streams are asked only while one of this tenant's captures is open (a stream can join a
  // capture through an event wait, so the driver is asked, not a flag).
  void noteCaptureBegun() { ++activeCaptures_; }
  void noteCaptureEnded() { activeCaptures_ -= activeCaptures_ > 0 ? 1 : 0; }
  size_t activeCaptures() const { return activeCaptures_; }
  bool capturing(const StreamState& s) const { return capturing(s.stream); }
  bool capturing(CUstream stream) const;
  // Call just before `s` enters a capture (begin, or a wait on a captured event): records its
  // join event after its real work, which device-wide syncs then wait on instead of a record of
  // their own, and hands its unjoined work to the legacy default stream now.
  void markCaptureStart(StreamState& s);
  // Blocking user streams on `g` that are capturing (the legacy default stream may not be used
  // meanwhile: CUDA_ERROR_STREAM_CAPTURE_IMPLICIT natively).
  std::vector<StreamState*> capturingBlockingStreams(gpu::Gpu* g);

  // --- private streams -----------------------------------------------------------------
  // A private stream of this tenant on `g` used to wait on events/streams for syncs.
  CUstream syncStream(gpu::Gpu* g);
  // syncStream(g), made to wait for the work queued so far on every stream of this tenant on
  // `g`: what a device-wide sync of the tenant's own device means.
  CUstream joinedSyncStream(gpu::Gpu* g);
  // A private stream that carries allocations only: never busy.
  CUstream allocStream(gpu::Gpu* g);
  // Clears and frees device memory once every stream of this tenant on `g` has passed this
  // point (gpu::clearThenFree on joinedSyncStream(g)).
  CUresult freeAfterTenantWork(gpu::Gpu* g, CUdeviceptr ptr, size_t size);
  // Only the clearing: for a module's globals, whose memory goes when the module is unloaded
  // (which waits for the context's work, these clears included).
  CUresult clearAfterTenantWork(gpu::Gpu* g, CUdeviceptr ptr, size_t size);
  // Either at the end of the tenancy, where a failure can only be logged.
  void releaseAtEnd(gpu::Gpu* g, CUdeviceptr ptr, size_t size, bool free);
  // Synchronizes every stream of this tenant on `g` (its private sync stream too) that has
  // nothing left to run, so that the driver sees the stream-ordered frees queued on them as
  // complete (what cuMemPoolTrimTo needs before it gives their memory back). An idle stream's
  // sync returns at once, and only this tenant's thread queues work on its streams, so none can
  // become busy in between; busy and capturing streams are left alone (a sync could wait for a
  // host function or a word that only a later call of this tenant provides).
  void observeIdleStreams(gpu::Gpu* g);

  // --- events --------------------------------------------------------------------------
  CUresult createEvent(uint32_t device, uint64_t id, unsigned flags);
  CUresult destroyEvent(uint64_t id);
  // CUDA_ERROR_INVALID_HANDLE for an id in use, CUDA_ERROR_OUT_OF_MEMORY past max_events.
  CUresult admitEvent(uint64_t id);
  void insertEvent(uint64_t id, EventState e) { events_.emplace(id, e); }
  EventState* event(uint64_t id);
  size_t eventCount() const { return events_.size(); }

  // --- end of the tenancy, in the order Tenant::release() calls them -------------------
  // Waits for every stream's queued work.
  void synchronizeAll();
  // Waits for the variant side streams and frees every PTB control block (cleared, after the
  // tenant's work).
  void freePtbControls();
  // Waits for the private streams (the frees just queued on them) and destroys them.
  void destroyPrivateStreams();
  // Destroys the streams (with their join events, host flags and side streams), then the events.
  void destroyStreamsAndEvents();
  // Host flags of destroyed streams: their work may have waited on them until now.
  void freeRetiredHostFlags();
  void clear();

 private:
  using PrivateStreams = std::unordered_map<gpu::Gpu*, CUstream>;

  gpu::Gpu* gpu(uint32_t device) const { return device < gpus_.size() ? gpus_[device] : nullptr; }
  StreamState* createLegacyDefault(uint32_t device);
  // The id of the tenant's legacy default stream on `g` (0: not one of the tenant's GPUs).
  uint64_t legacyIdOf(const gpu::Gpu* g) const;
  int bandPriority(const gpu::Gpu& g, int requested) const;
  void joinStreams(StreamState& waiter, StreamState& waited);
  // Its driver streams in every placement, its events and its variant side stream.
  // The driver streams a tenant's stream holds: its variant side stream and one per placement.
  static std::vector<CUstream*> driverStreamsOf(StreamState& s);
  void destroyDriverStreams(StreamState& s);
  CUstream privateStream(PrivateStreams& streams, gpu::Gpu* g);
  void publish() { published_.store(static_cast<uint32_t>(userStreamCount()), std::memory_order_relaxed); }

  std::vector<gpu::Gpu*> gpus_;
  std::string tenant_;
  CountLimit streamLimit_;
  CountLimit eventLimit_;
  std::atomic<uint32_t>& published_;
  std::optional<bool> band_;
  LaunchThread* launches_ = nullptr;
  size_t activeCaptures_ = 0;
  std::unordered_map<uint64_t, std::unique_ptr<StreamState>> streams_;
  std::unordered_map<uint64_t, uint64_t> defaultEpoch_;  // per device: work count on legacy default
  PrivateStreams syncStreams_;
  PrivateStreams allocStreams_;  // carry allocations only: never busy
  std::unordered_map<uint64_t, EventState> events_;
  std::vector<uint32_t*> retiredHostFlags_;
  std::vector<std::pair<gpu::Gpu*, CUdeviceptr>> retiredPtbControls_;  // of destroyed streams: freed at release
};

}  // namespace tally::server::session

// What a handler of one Call sees: the tenant, the way back to the client, the bulk bytes
// that follow the message, and the services tallyd shares between tenants. Handlers live one
// file per API family (memory_api.cc, stream_api.cc, module_api.cc, launch_api.cc,
// device_api.cc); this is the only place where schema types meet CUDA.
#pragma once

#include "common/frame/socket_io.h"
#include "schema/envelope.capnp.h"
#include "server/gpu/fault_monitor.h"
#include "server/gpu/gpu.h"
#include "server/gpu/module_store.h"
#include "server/scheduler/policy.h"
#include "server/session/ipc_registry.h"
#include "server/session/outbox.h"
#include "server/session/session_services.h"
#include "server/session/tenant.h"
#include "server/transform/cache/variant_store.h"

#include <capnp/message.h>
#include <cuda.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace tally::server::api {

// What the handlers share between tenants (server/main builds it).
struct ApiServices {
  std::vector<gpu::Gpu*> gpus;
  gpu::ModuleStore* modules = nullptr;
  unsigned inlineWaitMicros = 2000;  // how long a tenant thread may wait for a short sync itself
  // ... and a high-priority tenant's thread, which stops waiting as soon as the tenant sends more.
  unsigned highPriorityInlineWaitMicros = 2000;
  // Kernel variants for best-effort tenants' modules; null when transforms are off.
  transform::VariantStore* variants = nullptr;
  // How launches reach the GPU (server/scheduler); never null once tallyd runs.
  scheduler::Policy* policy = nullptr;
  // Notices a fault of the shared context and says what each tenant is told (null: statuses as is).
  gpu::FaultMonitor* faults = nullptr;
  // CUDA IPC grants between this tallyd's tenants (ipc_api.cc); one per tallyd.
  session::IpcRegistry ipc;
};

// The session's CallHandler: one CallContext per call, then dispatch().
class Dispatcher final : public session::CallHandler {
 public:
  explicit Dispatcher(ApiServices& services) : services_(services) {}
  std::string run(const session::IncomingCall& call) override;

 private:
  ApiServices& services_;
};

// A copy whose bytes come on bulk lanes declares at most this many (the client sends pieces of
// 32 MiB; max_bulk_bytes' default cap for a frame's bulk).
inline constexpr uint64_t kMaxLaneCopyBytes = 64u << 20;

// Fills the union part of a Reply.
using ReplyFiller = std::function<void(wire::Reply::Builder)>;

class CallContext {
 public:
  CallContext(session::Tenant& tenant, std::shared_ptr<session::Outbox> outbox, frame::StreamReader& reader,
              uint32_t& bulkLeft, uint64_t callId, ApiServices& services)
      : tenant_(tenant), outbox_(std::move(outbox)), reader_(reader), bulkLeft_(bulkLeft), callId_(callId),
        services_(services) {}

  session::Tenant& tenant() { return tenant_; }
  // What the fault monitor knows of this tenant's GPU work (null without a monitor).
  void setFaultEvidence(std::shared_ptr<gpu::FaultEvidence> evidence) { evidence_ = std::move(evidence); }
  const std::shared_ptr<gpu::FaultEvidence>& faultEvidence() const { return evidence_; }
  // `status` as this tenant must see it: after a fault of the shared context, the fault's error.
  CUresult reported(CUresult status);
  // The stream the current call queues work on (set by streamForWork), for the scheduler.
  session::StreamState* workStream() const { return workStream_; }
  void setWorkStream(session::StreamState* s) { workStream_ = s; }
  // The status this call answers whatever the handler says: set where the call must not run at
  // all although its arguments are fine (the legacy default stream while a blocking stream
  // captures), so the handler's usual refusal path answers the native error.
  void overrideStatus(CUresult status) { override_ = status; }
  // The kind of call being answered, named in the debug log of refusals.
  void setKind(wire::Call::Which kind) { kind_ = kind; }
  ApiServices& services() { return services_; }
  const std::shared_ptr<session::Outbox>& outbox() { return outbox_; }
  bool oneWay() const { return callId_ == 0; }
  uint64_t callId() const { return callId_; }
  // Where the client waits for this call's completion besides the reply (Call.completionSlot):
  // 1 + a completion word of its ring file, 0 for none.
  uint32_t completionSlot() const { return completionSlot_; }
  void setCompletionSlot(uint32_t slot) { completionSlot_ = slot; }
  // This one-way call failed, and its error is the one the tenant's next reply will carry.
  bool deferredError() const { return deferred_ != CUDA_SUCCESS; }
  CUresult deferredStatus() const { return deferred_; }

  // Answers now (a call with an id), or records `status` as the tenant's deferred error.
  void finish(CUresult status, const ReplyFiller& fill = {});
  // Answers later, from any thread: the returned function sends the reply. Captures the
  // deferred error now, while the tenant is still ours to read.
  std::function<void(CUresult, const ReplyFiller&)> replyLater();
  // Like replyLater, for a reply that carries the copied bytes itself.
  std::function<void(CUresult, std::vector<iovec>, uint64_t, std::shared_ptr<void>)> replyLaterWithData();

  // Bulk bytes that follow the message (or come on the bulk lanes, takeBulkFromLanes); false
  // (and the peer is dropped) if too few remain.
  bool readBulk(void* dst, size_t size);
  // Consumes bulk bytes of a call that is refused, so the stream stays framed.
  bool skipBulk(size_t size);
  uint32_t bulkLeft() const { return lanes_ ? laneLeft_ : bulkLeft_; }
  // This call's bulk bytes are copy `token` on the tenant's bulk lanes, `bytes` in all.
  void takeBulkFromLanes(uint64_t token, uint32_t bytes);
  // Lane bytes the call left unread are read and dropped (the lanes stay in step); false when
  // the lanes failed.
  bool dropUnreadLaneBulk();
  // Device-to-host bytes of this call may go back on the tenant's bulk lanes (null: the reply's
  // connection carries them).
  const std::shared_ptr<session::BulkLanes>& replyLanes() const { return replyLanes_; }
  void setReplyLanes(std::shared_ptr<session::BulkLanes> lanes) { replyLanes_ = std::move(lanes); }
  int takeFd() { return reader_.takeFd(); }
  // The tenant has sent more than this call (later calls of its message, bytes buffered or
  // waiting in its ring or socket).
  bool moreCallsWaiting() const;
  void setMoreInFrame(bool more) { moreInFrame_ = more; }
  // Set when the call proved the peer broken or hostile; the session then drops it.
  void protocolError(std::string why) { protocolError_ = std::move(why); }
  const std::string& protocolErrorText() const { return protocolError_; }

 private:
  session::Tenant& tenant_;
  std::shared_ptr<session::Outbox> outbox_;
  frame::StreamReader& reader_;
  bool moreInFrame_ = false;
  uint32_t& bulkLeft_;
  uint64_t callId_;
  uint32_t completionSlot_ = 0;
  ApiServices& services_;
  std::string protocolError_;
  session::StreamState* workStream_ = nullptr;
  CUresult override_ = CUDA_SUCCESS;
  std::optional<wire::Call::Which> kind_;
  CUresult deferred_ = CUDA_SUCCESS;
  std::shared_ptr<gpu::FaultEvidence> evidence_;
  session::BulkLanes* lanes_ = nullptr;  // set: the bulk comes on the lanes
  uint64_t laneToken_ = 0;
  uint32_t laneTotal_ = 0;
  uint32_t laneLeft_ = 0;
  std::shared_ptr<session::BulkLanes> replyLanes_;
};

// Sends a Reply for call `id` on `outbox`, optionally followed by device-to-host bytes for
// `dataToken` (kept alive by `keepalive` until written).
void sendReply(session::Outbox& outbox, uint64_t id, CUresult status, CUresult deferred, const ReplyFiller& fill,
               std::vector<iovec> data = {}, uint64_t dataToken = 0, std::shared_ptr<void> keepalive = {});

// Runs one call; returns false when the session must drop the peer.
bool dispatch(CallContext& ctx, wire::Call::Reader call);

// Family handlers (one file each).
void handleMemory(CallContext& ctx, wire::Call::Reader call);
void handleStream(CallContext& ctx, wire::Call::Reader call);
void handleModule(CallContext& ctx, wire::Call::Reader call);
void handleJitLink(CallContext& ctx, wire::Call::Reader call);  // jit_link_api.cc
void handleArray(CallContext& ctx, wire::Call::Reader call);    // array_api.cc: arrays, textures, surfaces
void handleLaunch(CallContext& ctx, wire::Call::Reader call);
void handleDevice(CallContext& ctx, wire::Call::Reader call);
void handleLibrary(CallContext& ctx, wire::Call::Reader call);
void handleGraph(CallContext& ctx, wire::Call::Reader call);
void handleMemPool(CallContext& ctx, wire::MemPoolCall::Reader call);            // memory_pool_api.cc
void handleVirtualMemory(CallContext& ctx, wire::VirtualMemoryCall::Reader call);  // virtual_memory_api.cc
void handleIpc(CallContext& ctx, wire::IpcCall::Reader call);                    // ipc_api.cc

// Whether `bytes` more device memory keep the tenant within its quota, counting what its
// context limits reserve (memory_api.cc); logs a refusal.
bool quotaAllows(CallContext& ctx, size_t bytes);

// Shared by the handlers: the tenant's stream for a client handle, ordered for new work.
// nullptr for an unknown handle, and for the legacy default stream while a blocking stream of the
// tenant captures (the call then answers CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, see captureConflict).
session::StreamState* streamForWork(CallContext& ctx, uint64_t streamId);

// Stream capture (graph_api.cc). Work queued on a capturing stream is recorded into the capture
// and never runs, so nothing may wait for it: a call that would (a sync, a copy through staging,
// a host callback, a completion watch) gets CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED from here and
// the capture is invalidated, as the native runtime does. CUDA_SUCCESS when `stream` does not
// capture (a driver query only while one of the tenant's captures is open).
CUresult captureConflict(CallContext& ctx, CUstream stream);
// CUDA_ERROR_STREAM_CAPTURE_IMPLICIT (and their captures invalidated) when work for the legacy
// default stream `s` would have to join blocking streams that are capturing; else CUDA_SUCCESS.
CUresult legacyStreamConflict(CallContext& ctx, session::StreamState& s);
// How a call's completion word (Call.completionSlot) tells the client it is done, ahead of a
// reply that carries nothing else: not at all, stored by tallyd just before the reply, or also
// written by the GPU right behind the work (long copies).
enum class WordUse { kNone, kStore, kAlsoByTheGpu };
// Copies from this size on have the GPU write their word: they outlast the write's driver call.
inline constexpr size_t kGpuWordMinCopyBytes = 256u << 10;

// Runs `done` once the work queued so far on `stream` has finished, keeping this tenant's
// notices in order (inline only when none of them is still queued); the call's completion word
// first, as `wordUse` says (a `done` that sends a plain reply).
CUresult afterStream(CallContext& ctx, gpu::Gpu& g, CUstream stream, gpu::CompletionQueue::Callback done,
                     WordUse wordUse = WordUse::kNone);
// The scheduler's view of the tenant for work it cannot look into (set `enqueue` before use).
scheduler::OpaqueWork opaqueWork(CallContext& ctx, gpu::Gpu& g);
// Replies once the work queued so far on `stream` has finished. `copyBytes`: what the call's
// copy moves (its completion word is written by the GPU from kGpuWordMinCopyBytes on).
void replyWhenDone(CallContext& ctx, gpu::Gpu& g, CUstream stream, std::shared_ptr<void> keepalive = {},
                   size_t copyBytes = 0);
// Sends one staged piece of a device-to-host copy once `stream` reaches it: `whole` (the only
// piece of a call that is waited for) as the reply itself, else as HostData at `offset`, the
// `last` piece followed by the reply.
CUresult sendStagedPiece(CallContext& ctx, gpu::Gpu& g, CUstream stream, std::shared_ptr<gpu::StagingBuffer> staging,
                         uint64_t token, uint64_t offset, size_t bytes, bool last, bool whole);

}  // namespace tally::server::api

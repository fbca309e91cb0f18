#include "server/api/call_context.h"

#include "common/trace/call_trace.h"
#include "server/api/request_checks.h"
#include "server/gpu/cuda_check.h"

#include <capnp/schema.h>
#include <poll.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

namespace tally::server::api {

void sendReply(session::Outbox& outbox, uint64_t id, CUresult status, CUresult deferred, const ReplyFiller& fill,
               std::vector<iovec> data, uint64_t dataToken, std::shared_ptr<void> keepalive) {
  capnp::MallocMessageBuilder message(32);  // a reply is a few words; a larger one grows
  auto reply = message.initRoot<wire::ServerMessage>().initReply();
  reply.setId(id);
  reply.setStatus(status);
  reply.setDeferredStatus(deferred);
  reply.setDataToken(dataToken);
  if (fill) {
    fill(reply);
  } else {
    reply.setNone();
  }
  trace::recordCall(outbox.tenant(), id, -1, trace::Stage::kReply);
  outbox.send(message, std::move(data), std::move(keepalive));
}

namespace {

// Maps statuses for one tenant through the fault monitor; copyable into completion callbacks.
struct StatusView {
  gpu::FaultMonitor* faults;
  uint64_t tenant;
  CUresult operator()(CUresult status) const { return faults != nullptr ? faults->statusFor(tenant, status) : status; }
};

// The name of a call's kind ("launchKernel", "streamMemOps"), from the schema.
std::string callName(wire::Call::Which kind) {
  KJ_IF_MAYBE(field, capnp::Schema::from<wire::Call>().getFieldByDiscriminant(static_cast<uint16_t>(kind))) {
    return field->getProto().getName();
  }
  return "call " + std::to_string(static_cast<int>(kind));
}

}  // namespace

CUresult CallContext::reported(CUresult status) { return StatusView{services_.faults, tenant_.id()}(status); }

bool CallContext::moreCallsWaiting() const { return moreInFrame_ || reader_.readableNow(); }

void CallContext::finish(CUresult status, const ReplyFiller& fill) {
  if (override_ != CUDA_SUCCESS) status = override_;
  status = reported(status);
  if (status != CUDA_SUCCESS && kind_ && spdlog::should_log(spdlog::level::debug)) {
    spdlog::debug("tenant {} ({}): {} answered {}", tenant_.id(), tenant_.name(), callName(*kind_), static_cast<int>(status));
  }
  if (oneWay()) {
    if (status != CUDA_SUCCESS && tenant_.deferError(status)) deferred_ = status;
    return;
  }
  sendReply(*outbox_, callId_, status, reported(tenant_.takeDeferredError()), fill);
}

std::function<void(CUresult, const ReplyFiller&)> CallContext::replyLater() {
  if (oneWay()) return [](CUresult, const ReplyFiller&) {};
  return [outbox = outbox_, id = callId_, deferred = tenant_.takeDeferredError(),
          view = StatusView{services_.faults, tenant_.id()}](CUresult status, const ReplyFiller& fill) {
    sendReply(*outbox, id, view(status), view(deferred), fill);
  };
}

bool CallContext::skipBulk(size_t size) { return readBulk(nullptr, size); }

std::function<void(CUresult, std::vector<iovec>, uint64_t, std::shared_ptr<void>)> CallContext::replyLaterWithData() {
  return [outbox = outbox_, id = callId_, deferred = tenant_.takeDeferredError(),
          view = StatusView{services_.faults, tenant_.id()}](CUresult status, std::vector<iovec> data, uint64_t token,
                                                             std::shared_ptr<void> keepalive) {
    sendReply(*outbox, id, view(status), view(deferred), {}, std::move(data), token, std::move(keepalive));
  };
}

void CallContext::takeBulkFromLanes(uint64_t token, uint32_t bytes) {
  lanes_ = tenant_.lanes().get();
  laneToken_ = token;
  laneTotal_ = laneLeft_ = bytes;
}

bool CallContext::dropUnreadLaneBulk() { return lanes_ == nullptr || laneLeft_ == 0 || skipBulk(laneLeft_); }

bool CallContext::readBulk(void* dst, size_t size) {
  if (lanes_ != nullptr) {
    if (size > laneLeft_) {
      protocolError_ = fmt::format("call needs {} bulk bytes but its copy on the lanes has {}", size, laneLeft_);
      return false;
    }
    if (!lanes_->receive(laneToken_, laneTotal_, laneTotal_ - laneLeft_, dst, size)) {
      protocolError_ = "bulk lanes: " + lanes_->failure();
      return false;
    }
    laneLeft_ -= static_cast<uint32_t>(size);
    return true;
  }
  if (size > bulkLeft_) {
    protocolError_ = "call needs " + std::to_string(size) + " bulk bytes but the frame has " + std::to_string(bulkLeft_);
    return false;
  }
  frame::IoStatus status = dst != nullptr ? reader_.read(dst, size) : reader_.skip(size);
  if (!status.ok) {
    protocolError_ = status.error;
    return false;
  }
  bulkLeft_ -= static_cast<uint32_t>(size);
  return true;
}

session::StreamState* streamForWork(CallContext& ctx, uint64_t streamId) {
  session::StreamState* s = ctx.tenant().streams().stream(streamId);
  if (s != nullptr && s->legacyDefault) {
    if (CUresult r = legacyStreamConflict(ctx, *s); r != CUDA_SUCCESS) {
      ctx.overrideStatus(r);
      s = nullptr;
    }
  }
  if (s != nullptr) {
    ++s->workQueued;
    ctx.tenant().streams().orderBefore(*s);
    if (scheduler::Policy* policy = ctx.services().policy; policy != nullptr) {
      ctx.tenant().streams().place(*s, policy->placement(ctx.tenant().priority() == session::PriorityClass::kHigh, *s->gpu));
    }
  }
  ctx.setWorkStream(s);
  return s;
}

namespace {

// The call's completion word (schema: Call.completionSlot, server/session/completion_words.h):
// stored just before the reply is sent, it lets the client's waiting thread return without
// reading and routing the reply (~1 µs of a synchronous call's ~10). Only when the reply would
// say nothing more: no earlier notice of the tenant still queued (HostData, HostFuncReady),
// which must reach the client before it returns (the caller rules out a deferred error in the
// reply). The callback holds the words, so the store never outlives the ring file's mapping.
struct CompletionWord {
  std::shared_ptr<session::CompletionWords> words;
  std::atomic<uint32_t>* word = nullptr;
  uint32_t value = 0;

  void store() const {
    if (word != nullptr) word->store(value, std::memory_order_release);
  }
};

CompletionWord completionWordOf(CallContext& ctx) {
  const auto value = static_cast<uint32_t>(ctx.callId());
  const std::shared_ptr<session::CompletionWords>& words = ctx.tenant().completionWords();
  std::atomic<uint32_t>* word = words ? words->word(ctx.completionSlot()) : nullptr;
  if (word == nullptr || value == 0 || ctx.tenant().queuedNotices()->load() != 0) return {};
  return CompletionWord{words, word, value};
}

// A long copy's word is also written by the GPU, right behind the copy: the client sees it as
// the copy ends. Not for short work: the write costs the session thread ~2 µs of driver time
// (H200), more than noticing the completion does. True when the write is queued.
bool writeWordOnTheGpu(CallContext& ctx, CUstream stream, const CompletionWord& word) {
  CUdeviceptr device = word.word != nullptr ? word.words->deviceWord(ctx.completionSlot()) : 0;
  return device != 0 && cuStreamWriteValue32(stream, device, word.value, CU_STREAM_WRITE_VALUE_DEFAULT) == CUDA_SUCCESS;
}

}  // namespace

CUresult afterStream(CallContext& ctx, gpu::Gpu& g, CUstream stream, gpu::CompletionQueue::Callback done,
                     WordUse wordUse) {
  // A captured stream never gets there: its work is a graph's (graph_api.cc).
  if (CUresult r = captureConflict(ctx, stream); r != CUDA_SUCCESS) return r;
  CompletionWord word = wordUse != WordUse::kNone ? completionWordOf(ctx) : CompletionWord{};
  // Told by the GPU, the client needs nothing from the reply while it polls: the session thread
  // goes on reading its calls (the next one tends to come as the copy ends), and the reply, for
  // a client that stopped polling, is not a notice a later one must queue behind.
  const bool gpuTells = wordUse == WordUse::kAlsoByTheGpu && writeWordOnTheGpu(ctx, stream, word);
  trace::recordCall(ctx.tenant().id(), ctx.callId(), -1, trace::Stage::kSubmitted);
  std::shared_ptr<std::atomic<int>> queued = gpuTells ? nullptr : ctx.tenant().queuedNotices();
  bool high = ctx.tenant().priority() == session::PriorityClass::kHigh;
  unsigned spin = gpuTells || queued->load() != 0 ? 0
                  : high                          ? ctx.services().highPriorityInlineWaitMicros
                                                  : ctx.services().inlineWaitMicros;
  // The tenant's thread waits for its own sync while the tenant sends nothing else: the reply
  // then leaves from this thread, with no hand-off to the completion thread.
  auto moreCalls = [&ctx] { return ctx.moreCallsWaiting(); };
  if (queued) queued->fetch_add(1);
  // A completed sync settles the launches queued before it (the fault monitor's evidence).
  const auto& evidence = ctx.faultEvidence();
  uint64_t covered = evidence ? evidence->launchesSoFar() : 0;
  CUresult r = g.completions().watchStream(stream, [queued, evidence, covered, word = std::move(word),
                                                    done = std::move(done)](CUresult status) {
    if (evidence && status == CUDA_SUCCESS) evidence->noteSettled(covered);
    if (status == CUDA_SUCCESS) word.store();
    done(status);
    if (queued) queued->fetch_sub(1);
  }, spin, high, moreCalls);
  if (r != CUDA_SUCCESS && queued) queued->fetch_sub(1);
  return r;
}

void replyWhenDone(CallContext& ctx, gpu::Gpu& g, CUstream stream, std::shared_ptr<void> keepalive, size_t copyBytes) {
  if (ctx.oneWay() && !keepalive) return;
  // Asked before the reply takes it: a deferred error reaches the client only in the reply.
  const WordUse wordUse = ctx.tenant().hasDeferredError() ? WordUse::kNone
                          : copyBytes >= kGpuWordMinCopyBytes ? WordUse::kAlsoByTheGpu
                                                             : WordUse::kStore;
  auto reply = ctx.replyLater();
  auto started = std::chrono::steady_clock::now();
  // An HP tenant's waits tell the scheduler what the GPU's sharing costs it.
  scheduler::Policy* learner =
      ctx.tenant().priority() == session::PriorityClass::kHigh ? ctx.services().policy : nullptr;
  CUresult r = afterStream(ctx, g, stream,
                           [reply, keepalive, started, waits = ctx.tenant().counters().syncWaits, learner, &g,
                            tenant = ctx.tenant().id()](CUresult status) {
    double micros = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - started).count();
    waits->record(micros);
    reply(status, {});
    if (learner != nullptr && status == CUDA_SUCCESS) learner->observeHpWait(g, tenant, micros);  // off HP's path
  }, wordUse);
  if (r != CUDA_SUCCESS) ctx.finish(r);
}

namespace {

void sendHostData(session::Outbox& outbox, uint64_t token, uint64_t offset,
                  const std::shared_ptr<gpu::StagingBuffer>& staging, size_t bytes) {
  capnp::MallocMessageBuilder message(64);
  auto data = message.initRoot<wire::ServerMessage>().initHostData();
  data.setToken(token);
  data.setOffset(offset);
  outbox.send(message, {iovec{staging->data(), bytes}}, staging);
}

}  // namespace

CUresult sendStagedPiece(CallContext& ctx, gpu::Gpu& g, CUstream stream, std::shared_ptr<gpu::StagingBuffer> staging,
                         uint64_t token, uint64_t offset, size_t bytes, bool last, bool whole) {
  if (const auto& lanes = ctx.replyLanes()) {  // the client waits for every byte after the reply
    auto reply = last ? ctx.replyLater() : nullptr;
    return afterStream(ctx, g, stream, [lanes, outbox = ctx.outbox(), staging, token, offset, bytes, reply](CUresult status) {
      if (status == CUDA_SUCCESS && !lanes->send(token, offset, static_cast<const char*>(staging->data()), bytes, staging)) {
        sendHostData(*outbox, token, offset, staging, bytes);
      }
      if (reply) reply(status, {});
    });
  }
  if (whole) {  // one frame, one write: the reply carries the bytes
    return afterStream(ctx, g, stream, [reply = ctx.replyLaterWithData(), staging, token, bytes](CUresult status) {
      std::vector<iovec> data;
      if (status == CUDA_SUCCESS) data.push_back(iovec{staging->data(), bytes});
      reply(status, std::move(data), status == CUDA_SUCCESS ? token : 0, staging);
    });
  }
  auto reply = last ? ctx.replyLater() : nullptr;
  return afterStream(ctx, g, stream, [outbox = ctx.outbox(), staging, token, offset, bytes, reply](CUresult status) {
    if (status == CUDA_SUCCESS) sendHostData(*outbox, token, offset, staging, bytes);
    if (reply) reply(status, {});
  });
}

scheduler::OpaqueWork opaqueWork(CallContext& ctx, gpu::Gpu& g) {
  scheduler::OpaqueWork w;
  w.tenant = ctx.tenant().id();
  w.highPriority = ctx.tenant().priority() == session::PriorityClass::kHigh;
  w.mustNotHold = ctx.tenant().mustNotBeHeld();
  w.gpu = &g;
  w.held = &ctx.tenant().counters().held;
  return w;
}

namespace {

// tallyctl's stats: relaxed increments only (the admin thread just reads them).
void countCall(session::TenantCounters& counters, wire::Call::Reader call) {
  constexpr auto relaxed = std::memory_order_relaxed;
  counters.calls.fetch_add(1, relaxed);
  if (call.isLaunchKernel()) {
    counters.launches.fetch_add(1, relaxed);
  } else if (call.isMemcpy()) {
    auto copy = call.getMemcpy();
    uint64_t bytes = copy.getWidth() * std::max<uint64_t>(copy.getHeight(), 1);
    if (copy.getKind() == wire::CopyKind::HOST_TO_DEVICE) counters.bytesHostToDevice.fetch_add(bytes, relaxed);
    if (copy.getKind() == wire::CopyKind::DEVICE_TO_HOST) counters.bytesDeviceToHost.fetch_add(bytes, relaxed);
  }
}

}  // namespace

bool dispatch(CallContext& ctx, wire::Call::Reader call) {
  using W = wire::Call;
  countCall(ctx.tenant().counters(), call);
  switch (call.which()) {
    case W::MEM_ALLOC: case W::MEM_FREE: case W::MEMCPY: case W::MEMSET: case W::MEM_GET_INFO:
    case W::HOST_REGISTER: case W::HOST_UNREGISTER:
      handleMemory(ctx, call);
      break;
    case W::STREAM_CREATE: case W::STREAM_DESTROY: case W::STREAM_SYNCHRONIZE: case W::STREAM_QUERY:
    case W::STREAM_WAIT_EVENT: case W::EVENT_CREATE: case W::EVENT_DESTROY: case W::EVENT_RECORD:
    case W::EVENT_QUERY: case W::EVENT_SYNCHRONIZE: case W::EVENT_ELAPSED_TIME: case W::HOST_FUNC:
    case W::HOST_FUNC_DONE: case W::STREAM_MEM_OPS:
      handleStream(ctx, call);
      break;
    case W::MODULE_LOAD: case W::MODULE_UNLOAD: case W::MODULE_GET_FUNCTION: case W::MODULE_GET_GLOBAL:
    case W::FUNC_SET_ATTRIBUTE: case W::OCCUPANCY: case W::TENSOR_MAP_ENCODE_TILED: case W::MODULE_FUNCTION_NAMES:
      handleModule(ctx, call);
      break;
    case W::LINK_CREATE: case W::LINK_ADD_DATA: case W::LINK_COMPLETE: case W::LINK_DESTROY:
      handleJitLink(ctx, call);
      break;
    case W::ARRAY_CREATE: case W::ARRAY_DESTROY: case W::ARRAY_COPY: case W::TEXTURE_CREATE: case W::TEXTURE_DESTROY:
    case W::SURFACE_CREATE: case W::SURFACE_DESTROY: case W::MIPMAPPED_ARRAY_CREATE: case W::MIPMAPPED_ARRAY_GET_LEVEL:
    case W::MIPMAPPED_ARRAY_DESTROY:
      handleArray(ctx, call);
      break;
    case W::LAUNCH_KERNEL:
      handleLaunch(ctx, call);
      break;
    case W::DEVICE_SYNCHRONIZE: case W::SET_LIMIT: case W::GET_LIMIT:
      handleDevice(ctx, call);
      break;
    case W::MEM_POOL:
      handleMemPool(ctx, call.getMemPool());
      break;
    case W::VIRTUAL_MEMORY:
      handleVirtualMemory(ctx, call.getVirtualMemory());
      break;
    case W::IPC:
      handleIpc(ctx, call.getIpc());
      break;
    case W::LIBRARY:
      handleLibrary(ctx, call);
      break;
    case W::STREAM_BEGIN_CAPTURE: case W::STREAM_END_CAPTURE: case W::GRAPH_INSTANTIATE: case W::GRAPH_LAUNCH:
    case W::GRAPH_UPLOAD: case W::GRAPH_DESTROY: case W::GRAPH_EXEC_DESTROY: case W::GRAPH_GET_NODES:
    case W::GRAPH_KERNEL_NODE_GET_PARAMS: case W::GRAPH_KERNEL_NODE_SET_PARAMS: case W::GRAPH_CREATE:
    case W::GRAPH_ADD_KERNEL_NODE: case W::GRAPH_ADD_MEMCPY_NODE: case W::GRAPH_ADD_DEPENDENCIES:
    case W::GRAPH_ADD_NODE: case W::GRAPH_GET_EDGES: case W::GRAPH_REMOVE_DEPENDENCIES: case W::GRAPH_DESTROY_NODE:
    case W::GRAPH_CLONE: case W::GRAPH_MEMSET_NODE_GET_PARAMS: case W::GRAPH_MEMSET_NODE_SET_PARAMS:
    case W::GRAPH_NODE_GET_ENABLED: case W::GRAPH_NODE_SET_ENABLED: case W::GRAPH_EXEC_UPDATE:
      handleGraph(ctx, call);
      break;
    default:
      // A newer client may know calls we do not: refuse the call, keep the peer.
      ctx.finish(CUDA_ERROR_NOT_SUPPORTED);
      break;
  }
  // Copies, memsets, event records, waits and graph launches of a high-priority tenant are HP
  // work too (kernel launches tell the scheduler themselves). Not while the stream captures: the
  // mark would be captured into the graph and replayed with a stale value.
  session::StreamState* s = ctx.workStream();
  if (s != nullptr && !call.isLaunchKernel() && ctx.services().policy != nullptr &&
      !ctx.tenant().streams().capturing(*s)) {
    ctx.services().policy->afterWork(ctx.tenant().id(), ctx.tenant().priority() == session::PriorityClass::kHigh,
                                     s->id, *s->gpu, s->stream);
  }
  return ctx.protocolErrorText().empty();
}

namespace {

// A copy's bytes on the tenant's bulk lanes (bulk_lanes.h): host-to-device bytes come from them,
// device-to-host ones may go back on them. Returns why the peer must be dropped, or "".
std::string routeLaneBytes(CallContext& ctx, wire::Call::Reader call) {
  if (!call.isMemcpy() || !call.getMemcpy().getViaLanes()) return {};
  auto copy = call.getMemcpy();
  const auto& lanes = ctx.tenant().lanes();
  if (!lanes) return "a copy through bulk lanes from a tenant without them";
  if (copy.getHostShared()) return {};
  if (copy.getKind() == wire::CopyKind::DEVICE_TO_HOST) {
    if (lanes->ready()) ctx.setReplyLanes(lanes);
    return {};
  }
  if (copy.getKind() != wire::CopyKind::HOST_TO_DEVICE) return {};
  std::optional<uint64_t> bytes = checkedProduct(copy.getWidth(), std::max<uint64_t>(copy.getHeight(), 1));
  if (!bytes || *bytes > kMaxLaneCopyBytes) {
    return fmt::format("a copy through bulk lanes of {} rows of {} bytes (at most {} bytes)", copy.getHeight(),
                       copy.getWidth(), kMaxLaneCopyBytes);
  }
  ctx.takeBulkFromLanes(copy.getToken(), static_cast<uint32_t>(*bytes));
  return {};
}

}  // namespace

std::string Dispatcher::run(const session::IncomingCall& in) {
  CallContext ctx(in.tenant, in.outbox, in.reader, in.bulkLeft, in.call.getId(), services_);
  ctx.setCompletionSlot(in.call.getCompletionSlot());
  ctx.setFaultEvidence(in.evidence);
  ctx.setKind(in.call.which());
  ctx.setMoreInFrame(in.moreInFrame);
  const bool launches = in.call.isLaunchKernel() || in.call.isGraphLaunch();
  if (in.evidence && launches) {
    in.evidence->noteLaunch();
    // Kernels and graphs are told apart by the top bit: their handles are counted separately.
    in.evidence->noteCode(in.call.isLaunchKernel() ? in.call.getLaunchKernel().getFunction()
                                                   : in.call.getGraphLaunch().getExec() | (uint64_t{1} << 63));
  }
  if (std::string why = routeLaneBytes(ctx, in.call); !why.empty()) return why;
  bool ok = dispatch(ctx, in.call) && ctx.dropUnreadLaneBulk();
  // Where the kernels went, for the mark that proves them finished (not in a capture: the mark
  // would be captured too).
  if (session::StreamState* s = ctx.workStream(); in.evidence && launches && s != nullptr &&
                                                  !in.tenant.streams().capturing(*s)) {
    in.evidence->noteKernelOn(s->stream);
  }
  // A one-way call's error reaches the tenant only as the deferred status of a later reply,
  // which no longer says what failed: the log does (once per reply, as only the first is kept).
  if (ctx.deferredError()) {
    spdlog::info("tenant {} ({}): one-way {} failed: {}; reported at the tenant's next sync", in.tenant.id(),
                 in.tenant.name(), callName(in.call.which()), gpu::describe(ctx.deferredStatus()));
  }
  if (ok) return {};
  return ctx.protocolErrorText();
}

}  // namespace tally::server::api

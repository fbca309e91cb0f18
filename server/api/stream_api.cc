// Streams, events, syncs and host callbacks. Nothing here blocks the session thread on the
// GPU: every wait becomes an event watched by the device's completion queue.
#include "common/stream/stream_mem_ops.h"
#include "server/api/call_context.h"
#include "server/gpu/cuda_check.h"
#include "server/gpu/gpu.h"
#include "server/gpu/mem_op_kernels.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <vector>

namespace tally::server::api {

namespace {

// A capture begun on the stream ends with it (its graph is dropped): the driver's stream goes.
void destroyStream(CallContext& ctx, uint64_t id) {
  session::Tenant& t = ctx.tenant();
  if (std::optional<session::CaptureState> c = t.graphs().takeCapture(id)) {
    c->gpu->makeCurrent();
    CUgraph graph = nullptr;
    cuStreamEndCapture(c->stream, &graph);
    if (graph != nullptr) cuGraphDestroy(graph);
  }
  ctx.finish(t.streams().destroyStream(id));
}

void synchronizeStream(CallContext& ctx, uint64_t id) {
  session::StreamState* s = ctx.tenant().streams().stream(id);
  if (s == nullptr) return ctx.finish(CUDA_ERROR_INVALID_HANDLE);
  s->gpu->makeCurrent();
  replyWhenDone(ctx, *s->gpu, s->stream);
}

void queryStream(CallContext& ctx, uint64_t id) {
  session::StreamState* s = ctx.tenant().streams().stream(id);
  if (s == nullptr) return ctx.finish(CUDA_ERROR_INVALID_HANDLE);
  s->gpu->makeCurrent();
  if (CUresult r = captureConflict(ctx, s->stream); r != CUDA_SUCCESS) return ctx.finish(r);
  ctx.finish(cuStreamQuery(s->stream));
}

void waitEvent(CallContext& ctx, wire::StreamWaitEvent::Reader args) {
  session::EventState* e = ctx.tenant().streams().event(args.getEvent());
  if (e == nullptr) return ctx.finish(CUDA_ERROR_INVALID_HANDLE);
  session::StreamState* s = streamForWork(ctx, args.getStream());
  if (s == nullptr) return ctx.finish(CUDA_ERROR_INVALID_HANDLE);
  // A wait on an event recorded in a capture pulls this stream into it (a fork): mark where its
  // real work ends first.
  if (e->recordedInCapture && !ctx.tenant().streams().capturing(*s)) ctx.tenant().streams().markCaptureStart(*s);
  ctx.finish(cuStreamWaitEvent(s->stream, e->event, 0));
}

void recordEvent(CallContext& ctx, wire::EventRecord::Reader args) {
  session::EventState* e = ctx.tenant().streams().event(args.getEvent());
  if (e == nullptr) return ctx.finish(CUDA_ERROR_INVALID_HANDLE);
  session::StreamState* s = streamForWork(ctx, args.getStream());
  if (s == nullptr) return ctx.finish(CUDA_ERROR_INVALID_HANDLE);
  if (s->gpu != e->gpu) return ctx.finish(CUDA_ERROR_INVALID_HANDLE);
  CUresult r = cuEventRecord(e->event, s->stream);
  if (r == CUDA_SUCCESS) e->recordedInCapture = ctx.tenant().streams().capturing(*s);
  ctx.finish(r);
}

void queryEvent(CallContext& ctx, uint64_t id) {
  session::EventState* e = ctx.tenant().streams().event(id);
  if (e == nullptr) return ctx.finish(CUDA_ERROR_INVALID_HANDLE);
  e->gpu->makeCurrent();
  ctx.finish(cuEventQuery(e->event));
}

// Waits on the event's most recent record as of now, even if it is recorded again later.
void synchronizeEvent(CallContext& ctx, uint64_t id) {
  session::EventState* e = ctx.tenant().streams().event(id);
  if (e == nullptr) return ctx.finish(CUDA_ERROR_INVALID_HANDLE);
  // A captured record is a graph's: waiting for it would pull the sync stream into the capture.
  if (e->recordedInCapture) return ctx.finish(CUDA_ERROR_CAPTURED_EVENT);
  e->gpu->makeCurrent();
  CUstream waiter = ctx.tenant().streams().syncStream(e->gpu);
  if (CUresult r = cuStreamWaitEvent(waiter, e->event, 0); r != CUDA_SUCCESS) return ctx.finish(r);
  replyWhenDone(ctx, *e->gpu, waiter);
}

void elapsedTime(CallContext& ctx, wire::EventElapsedTime::Reader args) {
  session::EventState* start = ctx.tenant().streams().event(args.getStart());
  session::EventState* end = ctx.tenant().streams().event(args.getEnd());
  if (start == nullptr || end == nullptr) return ctx.finish(CUDA_ERROR_INVALID_HANDLE);
  start->gpu->makeCurrent();
  float ms = 0;
  CUresult r = cuEventElapsedTime(&ms, start->event, end->event);
  ctx.finish(r, [&](wire::Reply::Builder reply) { reply.setElapsedMs(ms); });
}

CUresult ensureHostFlag(session::Tenant& tenant, session::StreamState& s) {
  if (s.hostFlag != nullptr) return CUDA_SUCCESS;
  void* flag = nullptr;
  if (CUresult r = cuMemHostAlloc(&flag, sizeof(uint32_t), CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE);
      r != CUDA_SUCCESS) {
    return r;
  }
  s.hostFlag = static_cast<uint32_t*>(flag);
  *s.hostFlag = 0;
  return cuMemHostGetDevicePointer(&s.hostFlagDevice, flag, 0);
}

// The stream reaches the callback: tell the client (which runs it) and hold the stream until
// the client says it is done, with a stream memory wait on a pinned flag.
void hostFuncByMessages(CallContext& ctx, session::StreamState& s, uint64_t callback) {
  if (CUresult r = ensureHostFlag(ctx.tenant(), s); r != CUDA_SUCCESS) return ctx.finish(r);
  uint32_t sequence = ++s.hostFuncIssued;
  uint64_t streamId = s.id;
  CUresult r = afterStream(ctx, *s.gpu, s.stream, [outbox = ctx.outbox(), streamId, sequence, callback](CUresult) {
    capnp::MallocMessageBuilder message(64);
    auto ready = message.initRoot<wire::ServerMessage>().initHostFuncReady();
    ready.setStream(streamId);
    ready.setSequence(sequence);
    ready.setCallback(callback);
    outbox->send(message);
  });
  if (r == CUDA_SUCCESS) r = cuStreamWaitValue32(s.stream, s.hostFlagDevice, sequence, CU_STREAM_WAIT_VALUE_GEQ);
  if (r == CUDA_SUCCESS) {
    ctx.tenant().hostWaits()->add(s.hostFlag, sequence);
    ctx.tenant().noteHostFuncAwaited();
  }
  ctx.finish(r);
}

// The same through two words of the client's shared memory (schema/stream.capnp): the stream
// announces itself and waits; the client does the rest, without this thread.
void hostFuncBySharedWords(CallContext& ctx, session::StreamState& s, wire::HostFunc::Reader args) {
  auto reached = ctx.tenant().hostMappings().sharedWord(args.getReachedWord());
  auto done = ctx.tenant().hostMappings().sharedWord(args.getDoneWord());
  if (!reached || !done) return ctx.finish(CUDA_ERROR_INVALID_VALUE);
  uint32_t sequence = args.getSharedSequence();
  CUresult r = cuStreamWriteValue32(s.stream, reached->device, sequence, CU_STREAM_WRITE_VALUE_DEFAULT);
  if (r == CUDA_SUCCESS) r = cuStreamWaitValue32(s.stream, done->device, sequence, CU_STREAM_WAIT_VALUE_GEQ);
  if (r == CUDA_SUCCESS) ctx.tenant().holdSharedDoneWord(done->local, sequence);
  ctx.finish(r);
}

void hostFunc(CallContext& ctx, wire::HostFunc::Reader args) {
  session::StreamState* s = streamForWork(ctx, args.getStream());
  if (s == nullptr) return ctx.finish(CUDA_ERROR_INVALID_HANDLE);
  // Host nodes are not captured: a replay would not reach this client's callback words again.
  if (CUresult r = captureConflict(ctx, s->stream); r != CUDA_SUCCESS) return ctx.finish(r);
  if (args.getDoneWord() != 0) return hostFuncBySharedWords(ctx, *s, args);
  hostFuncByMessages(ctx, *s, args.getCallback());
}

void hostFuncDone(CallContext& ctx, wire::HostFuncDone::Reader args) {
  session::StreamState* s = ctx.tenant().streams().stream(args.getStream());
  if (s == nullptr || s->hostFlag == nullptr || args.getSequence() > s->hostFuncIssued) {
    return ctx.finish(CUDA_ERROR_INVALID_VALUE);
  }
  auto sequence = static_cast<uint32_t>(args.getSequence());
  if (uint32_t before = __atomic_load_n(s->hostFlag, __ATOMIC_ACQUIRE); before < sequence) {
    __atomic_store_n(s->hostFlag, sequence, __ATOMIC_RELEASE);
    ctx.tenant().noteHostFuncsDone(sequence - before);
  }
  ctx.finish(CUDA_SUCCESS);
}

// --- stream memory operations (cuStreamWaitValue*, cuStreamWriteValue*, cuStreamBatchMemOp) ---

// Why the tenant may not run `op` (empty: it may): the driver's rules, and a word that lies in
// memory the tenant may use, as for a memset.
std::string memOpProblem(const session::Tenant& t, wire::StreamMemOp::Reader op) {
  if (!stream::memOpWellFormed(op.getOperation(), op.getFlags(), op.getAddress())) {
    return "unknown operation or flags, or a null or misaligned address";
  }
  size_t bytes = *stream::memOpWordBytes(op.getOperation(), op.getFlags());
  if (bytes != 0 && t.memory().ownerOf(op.getAddress(), bytes) == nullptr) return "not memory of this tenant";
  return {};
}

CUstreamBatchMemOpParams driverMemOp(wire::StreamMemOp::Reader op) {
  CUstreamBatchMemOpParams p{};
  p.operation = static_cast<CUstreamBatchMemOpType>(op.getOperation());
  switch (p.operation) {
    case CU_STREAM_MEM_OP_WAIT_VALUE_32: case CU_STREAM_MEM_OP_WAIT_VALUE_64:
      p.waitValue.address = op.getAddress();
      p.waitValue.value64 = op.getValue();
      p.waitValue.flags = op.getFlags();
      break;
    case CU_STREAM_MEM_OP_WRITE_VALUE_32: case CU_STREAM_MEM_OP_WRITE_VALUE_64:
      p.writeValue.address = op.getAddress();
      p.writeValue.value64 = op.getValue();
      p.writeValue.flags = op.getFlags();
      break;
    case CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES: p.flushRemoteWrites.flags = op.getFlags(); break;
    default: p.memoryBarrier.flags = op.getFlags(); break;
  }
  return p;
}

// A single wait or write goes through its own driver function, as the application called it;
// anything else (several operations, flush, barrier) through cuStreamBatchMemOp.
CUresult enqueueMemOps(CUstream stream, std::vector<CUstreamBatchMemOpParams>& ops) {
  if (ops.size() == 1) {
    const CUstreamBatchMemOpParams& p = ops[0];
    switch (p.operation) {
      case CU_STREAM_MEM_OP_WAIT_VALUE_32:
        return cuStreamWaitValue32(stream, p.waitValue.address, p.waitValue.value, p.waitValue.flags);
      case CU_STREAM_MEM_OP_WAIT_VALUE_64:
        return cuStreamWaitValue64(stream, p.waitValue.address, p.waitValue.value64, p.waitValue.flags);
      case CU_STREAM_MEM_OP_WRITE_VALUE_32:
        return cuStreamWriteValue32(stream, p.writeValue.address, p.writeValue.value, p.writeValue.flags);
      case CU_STREAM_MEM_OP_WRITE_VALUE_64:
        return cuStreamWriteValue64(stream, p.writeValue.address, p.writeValue.value64, p.writeValue.flags);
      default: break;
    }
  }
  return cuStreamBatchMemOp(stream, static_cast<unsigned>(ops.size()), ops.data(), 0);
}

// One operation on a pooled word, through the stand-in kernels (server/gpu/mem_op_kernels.h);
// anything else through the driver.
CUresult enqueueOneMemOp(const gpu::MemOpKernels& kernels, CUstream stream, CUstreamBatchMemOpParams& p) {
  switch (p.operation) {
    case CU_STREAM_MEM_OP_WAIT_VALUE_32: case CU_STREAM_MEM_OP_WAIT_VALUE_64:
      if (gpu::isPoolMemory(p.waitValue.address)) {
        return kernels.wait(stream, p.waitValue.address, p.waitValue.value64,
                            p.operation == CU_STREAM_MEM_OP_WAIT_VALUE_32 ? 32 : 64, p.waitValue.flags);
      }
      break;
    case CU_STREAM_MEM_OP_WRITE_VALUE_32: case CU_STREAM_MEM_OP_WRITE_VALUE_64:
      if (gpu::isPoolMemory(p.writeValue.address)) {
        return kernels.write(stream, p.writeValue.address, p.writeValue.value64,
                             p.operation == CU_STREAM_MEM_OP_WRITE_VALUE_32 ? 32 : 64);
      }
      break;
    default: break;
  }
  std::vector<CUstreamBatchMemOpParams> one{p};
  return enqueueMemOps(stream, one);
}

bool isWait(const CUstreamBatchMemOpParams& p) {
  return p.operation == CU_STREAM_MEM_OP_WAIT_VALUE_32 || p.operation == CU_STREAM_MEM_OP_WAIT_VALUE_64;
}

bool touchesPoolMemory(const std::vector<CUstreamBatchMemOpParams>& ops) {
  for (const CUstreamBatchMemOpParams& p : ops) {
    bool wait = isWait(p);
    bool write = p.operation == CU_STREAM_MEM_OP_WRITE_VALUE_32 || p.operation == CU_STREAM_MEM_OP_WRITE_VALUE_64;
    if ((wait && gpu::isPoolMemory(p.waitValue.address)) || (write && gpu::isPoolMemory(p.writeValue.address))) {
      return true;
    }
  }
  return false;
}

// Checked whole before anything is enqueued: a refused batch runs none of its operations.
void streamMemOps(CallContext& ctx, wire::StreamMemOps::Reader args) {
  session::Tenant& t = ctx.tenant();
  auto ops = args.getOps();
  if (ops.size() == 0 || ops.size() > stream::kMaxBatchMemOps) return ctx.finish(CUDA_ERROR_INVALID_VALUE);
  std::vector<CUstreamBatchMemOpParams> params;
  params.reserve(ops.size());
  for (auto op : ops) {
    if (std::string why = memOpProblem(t, op); !why.empty()) {
      spdlog::warn("tenant {} ({}): stream memory operation {} (flags 0x{:x}) at 0x{:x} on stream {} refused: {}",
                   t.id(), t.name(), op.getOperation(), op.getFlags(), op.getAddress(), args.getStream(), why);
      return ctx.finish(CUDA_ERROR_INVALID_VALUE);
    }
    params.push_back(driverMemOp(op));
  }
  if (std::any_of(params.begin(), params.end(), isWait)) t.noteStreamWaits();
  session::StreamState* s = streamForWork(ctx, args.getStream());
  if (s == nullptr) return ctx.finish(CUDA_ERROR_INVALID_HANDLE);
  CUresult r = CUDA_SUCCESS;
  if (const gpu::MemOpKernels* kernels = s->gpu->memOpKernels(); kernels != nullptr && touchesPoolMemory(params)) {
    // The driver refuses pooled words, and tallyd's cudaMalloc is pooled: operation by operation,
    // in order, the pooled ones as kernels.
    for (CUstreamBatchMemOpParams& p : params) {
      if ((r = enqueueOneMemOp(*kernels, s->stream, p)) != CUDA_SUCCESS) break;
    }
  } else {
    r = enqueueMemOps(s->stream, params);
  }
  if (r != CUDA_SUCCESS) {
    // One-way: the tenant sees only a deferred error at its next sync, so say which operation
    // the driver refused, why, and whether its word is pooled (stream-ordered) memory, which
    // is how tallyd allocates the tenants' cudaMalloc memory.
    auto first = ops[0];
    CUmemoryPool pool = nullptr;
    bool pooled = cuPointerGetAttribute(&pool, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, first.getAddress()) == CUDA_SUCCESS &&
                  pool != nullptr;
    spdlog::warn("tenant {} ({}): the driver refused {} stream memory operation(s) on stream {} (first: operation {}, "
                 "flags 0x{:x}, at 0x{:x}, {}): {}",
                 t.id(), t.name(), ops.size(), args.getStream(), first.getOperation(), first.getFlags(),
                 first.getAddress(), pooled ? "pooled memory" : "not pooled memory", gpu::describe(r));
  }
  ctx.finish(r);
}

}  // namespace

void handleStream(CallContext& ctx, wire::Call::Reader call) {
  session::Tenant& t = ctx.tenant();
  switch (call.which()) {
    case wire::Call::STREAM_CREATE: {
      auto a = call.getStreamCreate();
      return ctx.finish(t.streams().createStream(a.getDevice(), a.getStream(), a.getNonBlocking(), a.getPriority()));
    }
    case wire::Call::STREAM_DESTROY: return destroyStream(ctx, call.getStreamDestroy().getStream());
    case wire::Call::STREAM_SYNCHRONIZE: return synchronizeStream(ctx, call.getStreamSynchronize().getStream());
    case wire::Call::STREAM_QUERY: return queryStream(ctx, call.getStreamQuery().getStream());
    case wire::Call::STREAM_WAIT_EVENT: return waitEvent(ctx, call.getStreamWaitEvent());
    case wire::Call::EVENT_CREATE: {
      auto a = call.getEventCreate();
      return ctx.finish(t.streams().createEvent(a.getDevice(), a.getEvent(), a.getFlags()));
    }
    case wire::Call::EVENT_DESTROY: return ctx.finish(t.streams().destroyEvent(call.getEventDestroy().getEvent()));
    case wire::Call::EVENT_RECORD: return recordEvent(ctx, call.getEventRecord());
    case wire::Call::EVENT_QUERY: return queryEvent(ctx, call.getEventQuery().getEvent());
    case wire::Call::EVENT_SYNCHRONIZE: return synchronizeEvent(ctx, call.getEventSynchronize().getEvent());
    case wire::Call::EVENT_ELAPSED_TIME: return elapsedTime(ctx, call.getEventElapsedTime());
    case wire::Call::HOST_FUNC: return hostFunc(ctx, call.getHostFunc());
    case wire::Call::HOST_FUNC_DONE: return hostFuncDone(ctx, call.getHostFuncDone());
    case wire::Call::STREAM_MEM_OPS: return streamMemOps(ctx, call.getStreamMemOps());
    default: return ctx.finish(CUDA_ERROR_NOT_SUPPORTED);
  }
}

}  // namespace tally::server::api

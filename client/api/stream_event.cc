// Streams, events and host callbacks. Handles are chosen here, so creating a stream or an
// event is a one-way message; syncs are the round trips.
#include "client/api/api_util.h"
#include "client/runtime/capture_table.h"
#include "client/runtime/host_callback_words.h"

using namespace tally::client;

namespace {

ClientRuntime& rt() { return ClientRuntime::get(); }

CUresult createStream(CUstream* out, unsigned flags, int priority) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = rt().ready(); r != CUDA_SUCCESS) return r;
  StreamHandle* s = rt().createStream(currentDevice(), flags, priority);
  if (s == nullptr) return CUDA_ERROR_DEVICE_UNAVAILABLE;
  *out = reinterpret_cast<CUstream>(s);
  return CUDA_SUCCESS;
}

CUresult destroyStream(CUstream stream) {
  StreamHandle* s = checkedHandle<StreamHandle>(stream, HandleMagic::kStream);
  if (s == nullptr || reinterpret_cast<uintptr_t>(stream) <= 2) return CUDA_ERROR_INVALID_HANDLE;
  handleRegistry().remove(s);
  captureTable().forgetStream(s->id);  // tallyd ends a capture it began
  forgetStreamAttributes(s->id);
  CUresult r = rt().post([&](wire::Call::Builder c) { c.initStreamDestroy().setStream(s->id); });
  delete s;
  return r;
}

// Stream id or an error for the calls below.
CUresult resolveStream(CUstream stream, uint64_t& id) {
  if (CUresult r = rt().ready(); r != CUDA_SUCCESS) return r;
  id = rt().streamId(stream);
  return id == 0 ? CUDA_ERROR_INVALID_HANDLE : CUDA_SUCCESS;
}

// Work on a capturing stream is recorded, not run: waiting for it, or asking whether it is done,
// is refused (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) and invalidates the capture, as natively.
CUresult refuseIfCapturing(uint64_t id) {
  return captureTable().invalidate(id) ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

// A stream a reply has already drained, with nothing sent since, is answered here
// (ClientRuntime::streamDrained): the sync still returns what earlier one-way calls left.
CUresult synchronizeStream(CUstream stream) {
  uint64_t id;
  if (CUresult r = resolveStream(stream, id); r != CUDA_SUCCESS) return r;
  if (CUresult r = refuseIfCapturing(id); r != CUDA_SUCCESS) return r;
  if (rt().streamDrained(id)) return rt().takePendingAsyncError();
  CUresult r = rt().sync([&](wire::Call::Builder c) { c.initStreamSynchronize().setStream(id); });
  if (r == CUDA_SUCCESS) rt().noteStreamDrained(id, Connection::lastMessageOfThisThread());
  return r;
}

CUresult queryStream(CUstream stream) {
  uint64_t id;
  if (CUresult r = resolveStream(stream, id); r != CUDA_SUCCESS) return r;
  if (CUresult r = refuseIfCapturing(id); r != CUDA_SUCCESS) return r;
  if (rt().streamDrained(id)) return CUDA_SUCCESS;
  return rt().call([&](wire::Call::Builder c) { c.initStreamQuery().setStream(id); });
}

CUresult waitEvent(CUstream stream, CUevent event) {
  uint64_t id;
  if (CUresult r = resolveStream(stream, id); r != CUDA_SUCCESS) return r;
  EventHandle* e = checkedHandle<EventHandle>(event, HandleMagic::kEvent);
  if (e == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  CUresult r = rt().post([&](wire::Call::Builder c) {
    auto w = c.initStreamWaitEvent();
    w.setStream(id);
    w.setEvent(e->id);
  });
  // Waiting on an event recorded in a capture joins that capture (a fork).
  if (r == CUDA_SUCCESS && captureTable().anyActive()) captureTable().eventWaited(id, e->id);
  return r;
}

CUresult createEvent(CUevent* out, unsigned flags) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = rt().ready(); r != CUDA_SUCCESS) return r;
  auto* e = new EventHandle();
  e->id = rt().newHandleId();
  e->device = currentDevice();
  e->flags = flags;
  CUresult r = rt().post([&](wire::Call::Builder c) {
    auto create = c.initEventCreate();
    create.setDevice(e->device);
    create.setEvent(e->id);
    create.setFlags(flags);
  });
  if (r != CUDA_SUCCESS) {
    delete e;
    return r;
  }
  registerHandle(e);
  *out = reinterpret_cast<CUevent>(e);
  return CUDA_SUCCESS;
}

enum class EventCallKind { kOneWay, kQuery, kSync };

CUresult eventCall(CUevent event, const std::function<void(wire::Call::Builder, uint64_t)>& build, EventCallKind kind) {
  if (CUresult r = rt().ready(); r != CUDA_SUCCESS) return r;
  EventHandle* e = checkedHandle<EventHandle>(event, HandleMagic::kEvent);
  if (e == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  auto builder = [&](wire::Call::Builder c) { build(c, e->id); };
  switch (kind) {
    case EventCallKind::kOneWay: return rt().post(builder);
    case EventCallKind::kQuery: return rt().call(builder);
    case EventCallKind::kSync: return rt().sync(builder);
  }
  return CUDA_ERROR_UNKNOWN;
}

CUresult recordEvent(CUevent event, CUstream stream) {
  uint64_t id;
  if (CUresult r = resolveStream(stream, id); r != CUDA_SUCCESS) return r;
  CUresult r = eventCall(event, [&](wire::Call::Builder c, uint64_t e) {
    auto rec = c.initEventRecord();
    rec.setEvent(e);
    rec.setStream(id);
  }, EventCallKind::kOneWay);
  // No capture open: none of its events is still known as captured (they go when it ends).
  if (r == CUDA_SUCCESS && captureTable().anyActive()) {
    captureTable().eventRecorded(reinterpret_cast<EventHandle*>(event)->id, id);
  }
  return r;
}

CUresult destroyEvent(CUevent event) {
  CUresult r = eventCall(event, [](wire::Call::Builder c, uint64_t e) { c.initEventDestroy().setEvent(e); }, EventCallKind::kOneWay);
  if (r == CUDA_SUCCESS) {
    handleRegistry().remove(event);
    captureTable().forgetEvent(reinterpret_cast<EventHandle*>(event)->id);
    delete reinterpret_cast<EventHandle*>(event);
  }
  return r;
}

CUresult elapsedTime(float* ms, CUevent start, CUevent end) {
  if (ms == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = rt().ready(); r != CUDA_SUCCESS) return r;
  EventHandle* a = checkedHandle<EventHandle>(start, HandleMagic::kEvent);
  EventHandle* b = checkedHandle<EventHandle>(end, HandleMagic::kEvent);
  if (a == nullptr || b == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  ReplyMessage reply;
  CUresult r = rt().call([&](wire::Call::Builder c) {
    auto t = c.initEventElapsedTime();
    t.setStart(a->id);
    t.setEnd(b->id);
  }, &reply);
  if (r == CUDA_SUCCESS) *ms = reply.reply().getElapsedMs();
  return r;
}

// The callback runs in this process once the stream reaches it; the stream then waits (on the
// GPU side) until it is done. Through shared words where memory is shared with tallyd, else
// through HostFuncReady/HostFuncDone messages.
CUresult addHostCallback(CUstream stream, std::function<void()> callback) {
  uint64_t id;
  if (CUresult r = resolveStream(stream, id); r != CUDA_SUCCESS) return r;
  // Host nodes are not forwarded: a replay would never reach this process's callback again.
  if (CUresult r = refuseIfCapturing(id); r != CUDA_SUCCESS) return r;
  if (HostCallbackWords* words = rt().hostCallbackWords(); words != nullptr) {
    HostCallbackWords::Ticket ticket;
    if (words->enqueue(id, callback, ticket)) {
      CUresult r = rt().post([&](wire::Call::Builder c) {
        auto f = c.initHostFunc();
        f.setStream(id);
        f.setReachedWord(ticket.reachedWord);
        f.setDoneWord(ticket.doneWord);
        f.setSharedSequence(ticket.sequence);
      });
      if (r != CUDA_SUCCESS) {
        words->cancelLast(id);
      } else {
        rt().hostCallbackEnqueued();
      }
      return r;
    }
  }
  uint64_t callbackId = rt().messageCallbacks().issue(std::move(callback));
  CUresult r = rt().post([&](wire::Call::Builder c) {
    auto f = c.initHostFunc();
    f.setStream(id);
    f.setCallback(callbackId);
  });
  if (r != CUDA_SUCCESS) {
    rt().messageCallbacks().take(callbackId);
  } else {
    rt().hostCallbackEnqueued();
  }
  return r;
}

CUresult streamInfo(CUstream stream, int* priority, unsigned* flags) {
  if (CUresult r = rt().ready(); r != CUDA_SUCCESS) return r;
  StreamHandle* s = reinterpret_cast<uintptr_t>(stream) > 2 ? checkedHandle<StreamHandle>(stream, HandleMagic::kStream) : nullptr;
  if (s == nullptr && reinterpret_cast<uintptr_t>(stream) > 2) return CUDA_ERROR_INVALID_HANDLE;
  if (priority != nullptr) *priority = s != nullptr ? s->priority : 0;
  if (flags != nullptr) *flags = s != nullptr ? s->flags : 0;
  return CUDA_SUCCESS;
}

// The stream's id as the client and tallyd know it (unique in the process), and its device:
// the legacy and per-thread default streams belong to the calling thread's current device.
CUresult streamIdentity(CUstream stream, unsigned long long* id, int* device) {
  if (CUresult r = streamInfo(stream, nullptr, nullptr); r != CUDA_SUCCESS) return r;
  auto raw = reinterpret_cast<uintptr_t>(stream);
  StreamHandle* s = raw > 2 ? checkedHandle<StreamHandle>(stream, HandleMagic::kStream) : nullptr;
  if (id != nullptr) *id = rt().streamId(stream);
  if (device != nullptr) *device = s != nullptr ? static_cast<int>(s->device) : threadState().device;
  return CUDA_SUCCESS;
}

// Stream capture (client/api/graph.cc begins and ends it): the queries are answered from the
// client's CaptureTable, without a round trip — PyTorch's allocator asks with every allocation.
// A stream is capturing from cudaStreamBeginCapture (or a wait on an event recorded in a capture)
// to the end of its capture; invalidated once a call the capture refuses was made. The legacy
// default stream is never capturing, and may not be asked while a blocking stream captures.
CUresult captureStatus(CUstream stream, CUstreamCaptureStatus* status, cuuint64_t* id = nullptr) {
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = streamInfo(stream, nullptr, nullptr); r != CUDA_SUCCESS) return r;
  CaptureTable::Status s;
  if (captureTable().anyActive()) {
    if (isLegacyStream(stream)) {
      if (captureTable().blockingCaptureOn(currentDevice())) return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    } else {
      s = captureTable().status(rt().streamId(stream));
    }
  }
  *status = s.status;
  if (id != nullptr) *id = s.id;
  return CUDA_SUCCESS;
}

// The capture's graph and its open dependencies are tallyd's: they read as none (null, 0).
CUresult captureInfo(CUstream stream, CUstreamCaptureStatus* status, cuuint64_t* id, CUgraph* graph,
                     const CUgraphNode** dependencies, const CUgraphEdgeData** edges, size_t* dependencyCount) {
  if (id != nullptr) *id = 0;
  if (graph != nullptr) *graph = nullptr;
  if (dependencies != nullptr) *dependencies = nullptr;
  if (edges != nullptr) *edges = nullptr;
  if (dependencyCount != nullptr) *dependencyCount = 0;
  return captureStatus(stream, status, id);
}

// Kept per thread as the runtime keeps it (CaptureTable applies it to cudaMalloc and cudaFree),
// so code that swaps it around a region gets its own value back.
CUresult exchangeCaptureMode(CUstreamCaptureMode* mode) {
  if (mode == nullptr || *mode < CU_STREAM_CAPTURE_MODE_GLOBAL || *mode > CU_STREAM_CAPTURE_MODE_RELAXED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::swap(threadCaptureMode(), *mode);
  return CUDA_SUCCESS;
}

}  // namespace

namespace tally::client {
CUresult streamPriority(CUstream stream, int& priority) { return streamInfo(stream, &priority, nullptr); }
}  // namespace tally::client

// --- runtime -----------------------------------------------------------------------------------

TALLY_API cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  return guardRuntime(__func__, [&] {
    return captureStatus(stream, reinterpret_cast<CUstreamCaptureStatus*>(status));
  });
}
TALLY_API cudaError_t cudaStreamGetCaptureInfo(cudaStream_t stream, cudaStreamCaptureStatus* status,
                                               unsigned long long* id, cudaGraph_t* graph,
                                               const cudaGraphNode_t** dependencies, const cudaGraphEdgeData** edges,
                                               size_t* dependencyCount) {
  return guardRuntime(__func__, [&] {
    return captureInfo(stream, reinterpret_cast<CUstreamCaptureStatus*>(status), reinterpret_cast<cuuint64_t*>(id),
                       reinterpret_cast<CUgraph*>(graph), reinterpret_cast<const CUgraphNode**>(dependencies),
                       reinterpret_cast<const CUgraphEdgeData**>(edges), dependencyCount);
  });
}
// Per-thread default stream builds: a null stream means the calling thread's own stream.
TALLY_API cudaError_t cudaStreamIsCapturing_ptsz(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  return cudaStreamIsCapturing(stream == nullptr ? cudaStreamPerThread : stream, status);
}
TALLY_API cudaError_t cudaStreamGetCaptureInfo_ptsz(cudaStream_t stream, cudaStreamCaptureStatus* status,
                                                    unsigned long long* id, cudaGraph_t* graph,
                                                    const cudaGraphNode_t** dependencies,
                                                    const cudaGraphEdgeData** edges, size_t* dependencyCount) {
  return cudaStreamGetCaptureInfo(stream == nullptr ? cudaStreamPerThread : stream, status, id, graph, dependencies,
                                  edges, dependencyCount);
}
TALLY_API cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
  return guardRuntime(__func__, [&] { return exchangeCaptureMode(reinterpret_cast<CUstreamCaptureMode*>(mode)); });
}

TALLY_API cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  return guardRuntime(__func__, [&] { return createStream(reinterpret_cast<CUstream*>(stream), 0, 0); });
}
TALLY_API cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  return guardRuntime(__func__, [&] { return createStream(reinterpret_cast<CUstream*>(stream), flags, 0); });
}
TALLY_API cudaError_t cudaStreamCreateWithPriority(cudaStream_t* stream, unsigned int flags, int priority) {
  return guardRuntime(__func__, [&] { return createStream(reinterpret_cast<CUstream*>(stream), flags, priority); });
}
TALLY_API cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  return guardRuntime(__func__, [&] { return destroyStream(stream); });
}
TALLY_API cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  return guardRuntime(__func__, [&] { return synchronizeStream(stream); });
}
TALLY_API cudaError_t cudaStreamQuery(cudaStream_t stream) {
  return guardRuntime(__func__, [&] { return queryStream(stream); });
}
TALLY_API cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int) {
  return guardRuntime(__func__, [&] { return waitEvent(stream, event); });
}
TALLY_API cudaError_t cudaStreamGetPriority(cudaStream_t stream, int* priority) {
  return guardRuntime(__func__, [&] { return priority == nullptr ? CUDA_ERROR_INVALID_VALUE : streamInfo(stream, priority, nullptr); });
}
TALLY_API cudaError_t cudaStreamGetFlags(cudaStream_t stream, unsigned int* flags) {
  return guardRuntime(__func__, [&] { return flags == nullptr ? CUDA_ERROR_INVALID_VALUE : streamInfo(stream, nullptr, flags); });
}
TALLY_API cudaError_t cudaStreamGetId(cudaStream_t stream, unsigned long long* id) {
  return guardRuntime(__func__, [&] { return id == nullptr ? CUDA_ERROR_INVALID_VALUE : streamIdentity(stream, id, nullptr); });
}
TALLY_API cudaError_t cudaStreamGetDevice(cudaStream_t stream, int* device) {
  return guardRuntime(__func__, [&] {
    return device == nullptr ? CUDA_ERROR_INVALID_VALUE : streamIdentity(stream, nullptr, device);
  });
}
TALLY_API cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* userData) {
  return guardRuntime(__func__, [&] {
    if (fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
    return addHostCallback(stream, [fn, userData] { fn(userData); });
  });
}
TALLY_API cudaError_t cudaStreamAddCallback(cudaStream_t stream, cudaStreamCallback_t fn, void* userData, unsigned int) {
  return guardRuntime(__func__, [&] {
    if (fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
    return addHostCallback(stream, [fn, userData, stream] { fn(stream, cudaSuccess, userData); });
  });
}

TALLY_API cudaError_t cudaEventCreate(cudaEvent_t* event) {
  return guardRuntime(__func__, [&] { return createEvent(reinterpret_cast<CUevent*>(event), 0); });
}
TALLY_API cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  return guardRuntime(__func__, [&] { return createEvent(reinterpret_cast<CUevent*>(event), flags); });
}
TALLY_API cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  return guardRuntime(__func__, [&] { return recordEvent(event, stream); });
}
TALLY_API cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream, unsigned int) {
  return guardRuntime(__func__, [&] { return recordEvent(event, stream); });
}
TALLY_API cudaError_t cudaEventQuery(cudaEvent_t event) {
  return guardRuntime(__func__, [&] {
    return eventCall(event, [](wire::Call::Builder c, uint64_t e) { c.initEventQuery().setEvent(e); }, EventCallKind::kQuery);
  });
}
TALLY_API cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  return guardRuntime(__func__, [&] {
    return eventCall(event, [](wire::Call::Builder c, uint64_t e) { c.initEventSynchronize().setEvent(e); }, EventCallKind::kSync);
  });
}
TALLY_API cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  return guardRuntime(__func__, [&] { return elapsedTime(ms, start, end); });
}
TALLY_API cudaError_t cudaEventDestroy(cudaEvent_t event) {
  return guardRuntime(__func__, [&] { return destroyEvent(event); });
}

// --- driver ------------------------------------------------------------------------------------

TALLY_API CUresult cuStreamCreate(CUstream* stream, unsigned int flags) {
  return guardDriver(__func__, [&] { return createStream(stream, flags, 0); });
}
TALLY_API CUresult cuStreamCreateWithPriority(CUstream* stream, unsigned int flags, int priority) {
  return guardDriver(__func__, [&] { return createStream(stream, flags, priority); });
}
TALLY_API CUresult cuStreamIsCapturing(CUstream stream, CUstreamCaptureStatus* status) {
  return guardDriver(__func__, [&] { return captureStatus(stream, status); });
}
TALLY_API CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  return guardDriver(__func__, [&] { return exchangeCaptureMode(mode); });
}
// cuStreamGetCaptureInfo is cuStreamGetCaptureInfo_v3 in CUDA 13's header; libraries built
// against CUDA 11.3-12.2 headers (cuBLAS 13 among them) import _v2.
TALLY_API CUresult cuStreamGetCaptureInfo(CUstream stream, CUstreamCaptureStatus* status, cuuint64_t* id, CUgraph* graph,
                                          const CUgraphNode** dependencies, const CUgraphEdgeData** edges,
                                          size_t* dependencyCount) {
  return guardDriver(__func__, [&] { return captureInfo(stream, status, id, graph, dependencies, edges, dependencyCount); });
}
TALLY_API CUresult cuStreamGetCaptureInfo_v2(CUstream stream, CUstreamCaptureStatus* status, cuuint64_t* id,
                                             CUgraph* graph, const CUgraphNode** dependencies, size_t* dependencyCount) {
  return guardDriver(__func__, [&] { return captureInfo(stream, status, id, graph, dependencies, nullptr, dependencyCount); });
}
TALLY_API CUresult cuStreamDestroy(CUstream stream) { return guardDriver(__func__, [&] { return destroyStream(stream); }); }
TALLY_API CUresult cuStreamSynchronize(CUstream stream) {
  return guardDriver(__func__, [&] { return synchronizeStream(stream); });
}
TALLY_API CUresult cuStreamQuery(CUstream stream) { return guardDriver(__func__, [&] { return queryStream(stream); }); }
TALLY_API CUresult cuStreamWaitEvent(CUstream stream, CUevent event, unsigned int) {
  return guardDriver(__func__, [&] { return waitEvent(stream, event); });
}
TALLY_API CUresult cuStreamGetPriority(CUstream stream, int* priority) {
  return guardDriver(__func__, [&] { return priority == nullptr ? CUDA_ERROR_INVALID_VALUE : streamInfo(stream, priority, nullptr); });
}
TALLY_API CUresult cuStreamGetFlags(CUstream stream, unsigned int* flags) {
  return guardDriver(__func__, [&] { return flags == nullptr ? CUDA_ERROR_INVALID_VALUE : streamInfo(stream, nullptr, flags); });
}
TALLY_API CUresult cuStreamGetId(CUstream stream, unsigned long long* id) {
  return guardDriver(__func__, [&] { return id == nullptr ? CUDA_ERROR_INVALID_VALUE : streamIdentity(stream, id, nullptr); });
}
TALLY_API CUresult cuStreamGetDevice(CUstream stream, CUdevice* device) {
  return guardDriver(__func__, [&] {
    return device == nullptr ? CUDA_ERROR_INVALID_VALUE : streamIdentity(stream, nullptr, device);
  });
}
TALLY_API CUresult cuLaunchHostFunc(CUstream stream, CUhostFn fn, void* userData) {
  return guardDriver(__func__, [&] {
    if (fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
    return addHostCallback(stream, [fn, userData] { fn(userData); });
  });
}
TALLY_API CUresult cuStreamAddCallback(CUstream stream, CUstreamCallback fn, void* userData, unsigned int) {
  return guardDriver(__func__, [&] {
    if (fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
    return addHostCallback(stream, [fn, userData, stream] { fn(stream, CUDA_SUCCESS, userData); });
  });
}
TALLY_API CUresult cuEventCreate(CUevent* event, unsigned int flags) {
  return guardDriver(__func__, [&] { return createEvent(event, flags); });
}
TALLY_API CUresult cuEventRecord(CUevent event, CUstream stream) {
  return guardDriver(__func__, [&] { return recordEvent(event, stream); });
}
TALLY_API CUresult cuEventQuery(CUevent event) {
  return guardDriver(__func__, [&] {
    return eventCall(event, [](wire::Call::Builder c, uint64_t e) { c.initEventQuery().setEvent(e); }, EventCallKind::kQuery);
  });
}
TALLY_API CUresult cuEventSynchronize(CUevent event) {
  return guardDriver(__func__, [&] {
    return eventCall(event, [](wire::Call::Builder c, uint64_t e) { c.initEventSynchronize().setEvent(e); }, EventCallKind::kSync);
  });
}
TALLY_API CUresult cuEventElapsedTime(float* ms, CUevent start, CUevent end) {
  return guardDriver(__func__, [&] { return elapsedTime(ms, start, end); });
}
TALLY_API CUresult cuEventDestroy(CUevent event) { return guardDriver(__func__, [&] { return destroyEvent(event); }); }

// --- the export older headers bind to (cuda.h renames cuEventElapsedTime to its _v2) --------
#undef cuEventElapsedTime
// The second generation only tightened which events may be timed; the answer is the same.
TALLY_API CUresult cuEventElapsedTime(float* ms, CUevent start, CUevent end) {
  return cuEventElapsedTime_v2(ms, start, end);
}

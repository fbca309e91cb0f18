#include "server/session/stream_table.h"

#include "server/gpu/cuda_check.h"
#include "server/gpu/gpu.h"
#include "server/gpu/memory_pool.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace tally::server::session {

namespace {
// cuda.h has no CUDA_ERROR_OUT_OF_RESOURCES; a driver that cannot create another stream or
// event answers out-of-memory, so a tenant over its limit gets the same.
constexpr CUresult kLimitError = CUDA_ERROR_OUT_OF_MEMORY;
// A PTB progress counter and retreat flag (gpu/variant_launch.h).
constexpr size_t kPtbControlBytes = 16;
}  // namespace

StreamTable::StreamTable(std::vector<gpu::Gpu*> gpus, StreamLimits limits, std::string tenant,
                         std::atomic<uint32_t>& publishedStreams)
    : gpus_(std::move(gpus)),
      tenant_(tenant),
      streamLimit_("streams", limits.maxStreams, tenant),
      eventLimit_("events", limits.maxEvents, tenant),
      published_(publishedStreams) {}

// --- streams ---------------------------------------------------------------------------

int StreamTable::bandPriority(const gpu::Gpu& g, int requested) const {
  if (!band_) return requested;
  return *band_ ? g.description().streamPriorityGreatest : g.description().streamPriorityLeast;
}

size_t StreamTable::userStreamCount() const {
  return std::count_if(streams_.begin(), streams_.end(), [](const auto& s) { return !s.second->legacyDefault; });
}

CUresult StreamTable::admitStream(uint64_t id) {
  if (id < kFirstUserStream || streams_.count(id) != 0) return CUDA_ERROR_INVALID_HANDLE;
  if (!streamLimit_.allowsOneMore(userStreamCount())) return kLimitError;
  return CUDA_SUCCESS;
}

void StreamTable::insertStream(std::unique_ptr<StreamState> s) {
  uint64_t id = s->id;
  streams_.emplace(id, std::move(s));
  publish();
}

CUresult StreamTable::createStream(uint32_t device, uint64_t id, bool nonBlocking, int priority) {
  gpu::Gpu* g = gpu(device);
  if (g == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  if (CUresult r = admitStream(id); r != CUDA_SUCCESS) return r;
  const auto& d = g->description();
  priority = bandPriority(*g, std::clamp(priority, d.streamPriorityGreatest, d.streamPriorityLeast));
  auto s = std::make_unique<StreamState>();
  s->id = id;
  s->gpu = g;
  s->blocking = !nonBlocking;
  // Every server stream is non-blocking: blocking semantics are the tenant's own (orderBefore),
  // never the shared context's legacy stream, which other tenants use too.
  g->makeCurrent();
  if (CUresult r = cuStreamCreateWithPriority(&s->stream, CU_STREAM_NON_BLOCKING, priority); r != CUDA_SUCCESS) return r;
  g->streamCreated();
  s->priority = priority;
  s->placed[gpu::placementIndex(gpu::Placement::wholeGpu())] = s->stream;
  cuEventCreate(&s->joinEvent, CU_EVENT_DISABLE_TIMING);
  insertStream(std::move(s));
  return CUDA_SUCCESS;
}

StreamState* StreamTable::createLegacyDefault(uint32_t device) {
  gpu::Gpu* g = gpu(device);
  if (g == nullptr) return nullptr;
  auto s = std::make_unique<StreamState>();
  s->id = device + 1;
  s->gpu = g;
  s->legacyDefault = true;
  g->makeCurrent();
  s->priority = bandPriority(*g, 0);
  if (cuStreamCreateWithPriority(&s->stream, CU_STREAM_NON_BLOCKING, s->priority) != CUDA_SUCCESS) return nullptr;
  g->streamCreated();
  s->placed[gpu::placementIndex(gpu::Placement::wholeGpu())] = s->stream;
  cuEventCreate(&s->joinEvent, CU_EVENT_DISABLE_TIMING);
  StreamState* raw = s.get();
  insertStream(std::move(s));
  return raw;
}

uint64_t StreamTable::legacyIdOf(const gpu::Gpu* g) const {
  // The tenant's device number, not the driver's: they differ under CUDA_VISIBLE_DEVICES.
  auto it = std::find(gpus_.begin(), gpus_.end(), g);
  return it == gpus_.end() ? 0 : static_cast<uint64_t>(it - gpus_.begin()) + 1;
}

StreamState* StreamTable::stream(uint64_t id) {
  auto it = streams_.find(id);
  if (it != streams_.end()) return it->second.get();
  if (id >= 1 && id <= gpus_.size()) return createLegacyDefault(static_cast<uint32_t>(id - 1));
  return nullptr;
}

void StreamTable::joinStreams(StreamState& waiter, StreamState& waited) {
  if (launches_ != nullptr) launches_->drain();
  cuEventRecord(waited.joinEvent, waited.stream);
  cuStreamWaitEvent(waiter.stream, waited.joinEvent, 0);
  ++waiter.workQueued;
}

void StreamTable::orderBefore(StreamState& s) {
  s.gpu->makeCurrent();
  // Captured work is a graph's: it neither waits for the legacy default stream nor is waited for.
  if (capturing(s)) return;
  uint64_t& epoch = defaultEpoch_[s.gpu->ordinal()];
  if (s.legacyDefault) {
    for (auto& [id, other] : streams_) {
      if (other->gpu == s.gpu && other->blocking && !other->legacyDefault && other->hasUnjoinedWork &&
          !capturing(*other)) {
        joinStreams(s, *other);
        other->hasUnjoinedWork = false;
      }
    }
    ++epoch;
    return;
  }
  if (!s.blocking) return;
  if (s.joinedDefaultEpoch != epoch) {
    StreamState* legacy = stream(legacyIdOf(s.gpu));
    if (legacy != nullptr && !capturing(*legacy)) joinStreams(s, *legacy);
    s.joinedDefaultEpoch = epoch;
  }
  s.hasUnjoinedWork = true;
}

void StreamTable::place(StreamState& s, gpu::Placement p) {
  const gpu::SmPartitions* partitions = s.gpu->partitions();
  if (p == s.placement || partitions == nullptr || capturing(s)) return;
  CUstream& target = s.placed[gpu::placementIndex(p)];
  if (target == nullptr) {
    if (partitions->createStream(p, s.priority, target) != CUDA_SUCCESS) {
      target = nullptr;
      return;
    }
    s.gpu->streamCreated();
  }
  if (launches_ != nullptr) launches_->drain();
  if (s.moveEvent == nullptr && cuEventCreate(&s.moveEvent, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) return;
  if (cuEventRecord(s.moveEvent, s.stream) != CUDA_SUCCESS || cuStreamWaitEvent(target, s.moveEvent, 0) != CUDA_SUCCESS) {
    return;
  }
  s.stream = target;
  s.placement = p;
  ++s.workQueued;
}

std::vector<CUstream*> StreamTable::driverStreamsOf(StreamState& s) {
  std::vector<CUstream*> out{&s.variantSide};
  for (CUstream& placed : s.placed) out.push_back(&placed);
  return out;
}

void StreamTable::destroyDriverStreams(StreamState& s) {
  for (CUstream* driverStream : driverStreamsOf(s)) {
    if (*driverStream == nullptr) continue;
    cuStreamDestroy(*driverStream);
    s.gpu->streamDestroyed();
    *driverStream = nullptr;
  }
  if (s.moveEvent != nullptr) cuEventDestroy(s.moveEvent);
  cuEventDestroy(s.joinEvent);
}

// --- stream capture ----------------------------------------------------------------------

bool StreamTable::capturing(CUstream stream) const {
  if (activeCaptures_ == 0 || stream == nullptr) return false;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  return cuStreamIsCapturing(stream, &status) == CUDA_SUCCESS && status != CU_STREAM_CAPTURE_STATUS_NONE;
}

void StreamTable::markCaptureStart(StreamState& s) {
  s.gpu->makeCurrent();
  cuEventRecord(s.joinEvent, s.stream);
  if (!s.blocking || s.legacyDefault || !s.hasUnjoinedWork) return;
  if (StreamState* legacy = stream(legacyIdOf(s.gpu)); legacy != nullptr && !capturing(*legacy)) {
    cuStreamWaitEvent(legacy->stream, s.joinEvent, 0);
  }
  s.hasUnjoinedWork = false;
}

std::vector<StreamState*> StreamTable::capturingBlockingStreams(gpu::Gpu* g) {
  std::vector<StreamState*> out;
  if (activeCaptures_ == 0) return out;
  for (StreamState* s : streamsOf(g)) {
    if (s->blocking && !s->legacyDefault && capturing(*s)) out.push_back(s);
  }
  return out;
}

std::vector<StreamState*> StreamTable::streamsOf(gpu::Gpu* g) {
  std::vector<StreamState*> out;
  for (auto& [id, s] : streams_) {
    if (s->gpu == g) out.push_back(s.get());
  }
  return out;
}

CUresult StreamTable::destroyStream(uint64_t id) {
  auto it = streams_.find(id);
  if (it == streams_.end() || it->second->legacyDefault) return CUDA_ERROR_INVALID_HANDLE;
  StreamState& s = *it->second;
  s.gpu->makeCurrent();
  // Like cudaStreamDestroy: pending work still completes; the handle goes away now. A host
  // callback flag may still be awaited by that work, so it lives until the tenant ends.
  destroyDriverStreams(s);
  if (s.hostFlag != nullptr) retiredHostFlags_.push_back(s.hostFlag);
  if (s.ptbControl != 0) retiredPtbControls_.emplace_back(s.gpu, s.ptbControl);
  streams_.erase(it);
  publish();
  return CUDA_SUCCESS;
}

bool StreamTable::prepareVariants(StreamState& s) {
  if (s.ptbControl != 0) return true;
  s.gpu->makeCurrent();
  if (cuStreamCreateWithPriority(&s.variantSide, CU_STREAM_NON_BLOCKING, s.gpu->description().streamPriorityGreatest) !=
      CUDA_SUCCESS) {
    s.variantSide = nullptr;
    return false;
  }
  s.gpu->streamCreated();
  if (cuMemAlloc(&s.ptbControl, kPtbControlBytes) != CUDA_SUCCESS) {
    s.ptbControl = 0;
    return false;
  }
  return true;
}

// --- private streams -------------------------------------------------------------------

CUstream StreamTable::privateStream(PrivateStreams& streams, gpu::Gpu* g) {
  auto it = streams.find(g);
  if (it != streams.end()) return it->second;
  CUstream s = nullptr;
  g->makeCurrent();
  if (cuStreamCreateWithPriority(&s, CU_STREAM_NON_BLOCKING, g->description().streamPriorityGreatest) == CUDA_SUCCESS) {
    g->streamCreated();
  }
  streams.emplace(g, s);
  return s;
}

CUstream StreamTable::syncStream(gpu::Gpu* g) { return privateStream(syncStreams_, g); }

CUstream StreamTable::allocStream(gpu::Gpu* g) { return privateStream(allocStreams_, g); }

CUstream StreamTable::joinedSyncStream(gpu::Gpu* g) {
  g->makeCurrent();
  CUstream waiter = syncStream(g);
  for (StreamState* s : streamsOf(g)) {
    // A capturing stream's join event still marks its last real work (markCaptureStart).
    if (!capturing(*s)) cuEventRecord(s->joinEvent, s->stream);
    cuStreamWaitEvent(waiter, s->joinEvent, 0);
  }
  return waiter;
}

CUresult StreamTable::freeAfterTenantWork(gpu::Gpu* g, CUdeviceptr ptr, size_t size) {
  return gpu::clearThenFree(ptr, size, joinedSyncStream(g));
}

CUresult StreamTable::clearAfterTenantWork(gpu::Gpu* g, CUdeviceptr ptr, size_t size) {
  return size == 0 ? CUDA_SUCCESS : cuMemsetD8Async(ptr, 0, size, joinedSyncStream(g));
}

void StreamTable::releaseAtEnd(gpu::Gpu* g, CUdeviceptr ptr, size_t size, bool free) {
  CUresult r = free ? freeAfterTenantWork(g, ptr, size) : clearAfterTenantWork(g, ptr, size);
  if (r != CUDA_SUCCESS) {
    spdlog::warn("{}: {} 0x{:x} ({} bytes) at release failed: {}", tenant_, free ? "freeing" : "clearing", ptr, size,
                 gpu::describe(r));
  }
}

void StreamTable::observeIdleStreams(gpu::Gpu* g) {
  g->makeCurrent();
  std::vector<CUstream> streams;
  for (StreamState* s : streamsOf(g)) {
    if (capturing(*s)) continue;
    for (CUstream placed : s->placed) {  // frees queued before the stream moved are on the old one
      if (placed != nullptr) streams.push_back(placed);
    }
  }
  if (auto it = syncStreams_.find(g); it != syncStreams_.end()) streams.push_back(it->second);
  for (CUstream s : streams) {
    if (cuStreamQuery(s) == CUDA_SUCCESS) cuStreamSynchronize(s);
  }
}

// --- events ----------------------------------------------------------------------------

CUresult StreamTable::admitEvent(uint64_t id) {
  if (events_.count(id) != 0) return CUDA_ERROR_INVALID_HANDLE;
  if (!eventLimit_.allowsOneMore(events_.size())) return kLimitError;
  return CUDA_SUCCESS;
}

CUresult StreamTable::createEvent(uint32_t device, uint64_t id, unsigned flags) {
  gpu::Gpu* g = gpu(device);
  if (g == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  if (CUresult r = admitEvent(id); r != CUDA_SUCCESS) return r;
  g->makeCurrent();
  EventState e;
  e.gpu = g;
  // Interprocess events would leak the shared context to other processes.
  flags &= ~static_cast<unsigned>(CU_EVENT_INTERPROCESS);
  if (CUresult r = cuEventCreate(&e.event, flags); r != CUDA_SUCCESS) return r;
  insertEvent(id, e);
  return CUDA_SUCCESS;
}

CUresult StreamTable::destroyEvent(uint64_t id) {
  auto it = events_.find(id);
  if (it == events_.end()) return CUDA_ERROR_INVALID_HANDLE;
  it->second.gpu->makeCurrent();
  if (!it->second.shared) cuEventDestroy(it->second.event);
  events_.erase(it);
  return CUDA_SUCCESS;
}

EventState* StreamTable::event(uint64_t id) {
  auto it = events_.find(id);
  return it == events_.end() ? nullptr : &it->second;
}

// --- end of the tenancy ----------------------------------------------------------------

void StreamTable::synchronizeAll() {
  for (auto& [id, s] : streams_) {
    s->gpu->makeCurrent();
    if (CUresult r = cuStreamSynchronize(s->stream); r != CUDA_SUCCESS) {
      spdlog::warn("{}: stream sync at release failed: {}", tenant_, gpu::describe(r));
    }
  }
}

void StreamTable::freePtbControls() {
  for (auto& [id, s] : streams_) {
    s->gpu->makeCurrent();
    if (s->variantSide != nullptr) cuStreamSynchronize(s->variantSide);
    if (s->ptbControl != 0) retiredPtbControls_.emplace_back(s->gpu, s->ptbControl);
  }
  for (auto [g, control] : retiredPtbControls_) releaseAtEnd(g, control, kPtbControlBytes, true);
  retiredPtbControls_.clear();
}

void StreamTable::destroyPrivateStreams() {
  for (PrivateStreams* streams : {&syncStreams_, &allocStreams_}) {
    for (auto& [g, s] : *streams) {
      if (s == nullptr) continue;  // its creation failed
      g->makeCurrent();
      cuStreamSynchronize(s);  // the frees just queued
      cuStreamDestroy(s);
      g->streamDestroyed();
    }
  }
}

void StreamTable::destroyStreamsAndEvents() {
  for (auto& [id, s] : streams_) {
    s->gpu->makeCurrent();
    destroyDriverStreams(*s);
    if (s->hostFlag != nullptr) cuMemFreeHost(s->hostFlag);
  }
  for (auto& [id, e] : events_) {
    e.gpu->makeCurrent();
    if (!e.shared) cuEventDestroy(e.event);
  }
}

void StreamTable::freeRetiredHostFlags() {
  for (uint32_t* flag : retiredHostFlags_) cuMemFreeHost(flag);
  retiredHostFlags_.clear();
}

void StreamTable::clear() {
  streams_.clear();
  syncStreams_.clear();
  allocStreams_.clear();
  events_.clear();
  publish();
}

}  // namespace tally::server::session

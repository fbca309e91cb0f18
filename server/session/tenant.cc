#include "server/session/tenant.h"

#include "common/fatbin/module_data.h"
#include "server/gpu/cuda_check.h"

#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>

namespace tally::server::session {

namespace {
// cuda.h has no CUDA_ERROR_OUT_OF_RESOURCES; a driver that cannot create another stream
// answers out-of-memory, so a tenant over max_streams gets the same.
constexpr CUresult kStreamLimitError = CUDA_ERROR_OUT_OF_MEMORY;
// Past its staging budget a copy waits this long for the tenant's own buffers to come back,
// then goes over; past this many budgets it is refused (out of memory).
constexpr auto kStagingWait = std::chrono::milliseconds(200);
constexpr size_t kStagingHardFactor = 8;
}  // namespace

Tenant::Tenant(uint64_t id, std::string name, PriorityClass priority, std::vector<gpu::Gpu*> gpus, TenantLimits limits)
    : id_(id),
      name_(std::move(name)),
      priority_(priority),
      gpus_(std::move(gpus)),
      limits_(limits),
      stagingBudget_(std::make_shared<gpu::StagingBudget>(limits.stagingBytes, kStagingHardFactor * limits.stagingBytes,
                                                          kStagingWait)) {
  for (gpu::Gpu* g : gpus_) g->tenantArrived();
}

// --- quotas ----------------------------------------------------------------------------

bool Tenant::memoryQuotaAllows(size_t request) {
  if (withinQuota(allocatedBytes_, request, limits_.memoryQuotaBytes)) return true;
  if (!quotaLogged_) {
    spdlog::warn("tenant {} ({}) exceeds its memory quota: {} bytes allocated, {} more requested, quota {}", id_, name_,
                 allocatedBytes_, request, limits_.memoryQuotaBytes);
    quotaLogged_ = true;
  }
  return false;
}

size_t Tenant::userStreamCount() const {
  return std::count_if(streams_.begin(), streams_.end(), [](const auto& s) { return !s.second->legacyDefault; });
}

void Tenant::publishUsage() {
  counters_.memoryBytes.store(allocatedBytes_, std::memory_order_relaxed);
  counters_.streams.store(static_cast<uint32_t>(userStreamCount()), std::memory_order_relaxed);
}

bool Tenant::streamLimitAllows() {
  if (withinStreamLimit(userStreamCount(), limits_.maxStreams)) return true;
  if (!streamLimitLogged_) {
    spdlog::warn("tenant {} ({}) reached its stream limit of {}", id_, name_, limits_.maxStreams);
    streamLimitLogged_ = true;
  }
  return false;
}

Tenant::~Tenant() { release(); }

// --- streams ---------------------------------------------------------------------------

int Tenant::bandPriority(const gpu::Gpu& g, int requested) const {
  if (!streamBand_) return requested;
  return *streamBand_ ? g.description().streamPriorityGreatest : g.description().streamPriorityLeast;
}

CUresult Tenant::createStream(uint32_t device, uint64_t id, bool nonBlocking, int priority) {
  gpu::Gpu* g = gpu(device);
  if (g == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  if (id < kFirstUserStream || streams_.count(id) != 0) return CUDA_ERROR_INVALID_HANDLE;
  if (!streamLimitAllows()) return kStreamLimitError;
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
  cuEventCreate(&s->joinEvent, CU_EVENT_DISABLE_TIMING);
  streams_.emplace(id, std::move(s));
  publishUsage();
  return CUDA_SUCCESS;
}

StreamState* Tenant::createLegacyDefault(uint32_t device) {
  gpu::Gpu* g = gpu(device);
  if (g == nullptr) return nullptr;
  auto s = std::make_unique<StreamState>();
  s->id = device + 1;
  s->gpu = g;
  s->legacyDefault = true;
  g->makeCurrent();
  if (cuStreamCreateWithPriority(&s->stream, CU_STREAM_NON_BLOCKING, bandPriority(*g, 0)) != CUDA_SUCCESS) return nullptr;
  cuEventCreate(&s->joinEvent, CU_EVENT_DISABLE_TIMING);
  StreamState* raw = s.get();
  streams_.emplace(raw->id, std::move(s));
  return raw;
}

StreamState* Tenant::stream(uint64_t id) {
  auto it = streams_.find(id);
  if (it != streams_.end()) return it->second.get();
  if (id >= 1 && id <= gpus_.size()) return createLegacyDefault(static_cast<uint32_t>(id - 1));
  return nullptr;
}

void Tenant::joinStreams(StreamState& waiter, StreamState& waited) {
  cuEventRecord(waited.joinEvent, waited.stream);
  cuStreamWaitEvent(waiter.stream, waited.joinEvent, 0);
}

void Tenant::orderBefore(StreamState& s) {
  s.gpu->makeCurrent();
  uint64_t& epoch = defaultEpoch_[s.gpu->ordinal()];
  if (s.legacyDefault) {
    for (auto& [id, other] : streams_) {
      if (other->gpu == s.gpu && other->blocking && !other->legacyDefault && other->hasUnjoinedWork) {
        joinStreams(s, *other);
        other->hasUnjoinedWork = false;
      }
    }
    ++epoch;
    return;
  }
  if (!s.blocking) return;
  if (s.joinedDefaultEpoch != epoch) {
    if (StreamState* legacy = stream(s.gpu->ordinal() + 1); legacy != nullptr) joinStreams(s, *legacy);
    s.joinedDefaultEpoch = epoch;
  }
  s.hasUnjoinedWork = true;
}

std::vector<StreamState*> Tenant::streamsOf(gpu::Gpu* g) {
  std::vector<StreamState*> out;
  for (auto& [id, s] : streams_) {
    if (s->gpu == g) out.push_back(s.get());
  }
  return out;
}

CUstream Tenant::privateStream(PrivateStreams& streams, gpu::Gpu* g) {
  auto it = streams.find(g);
  if (it != streams.end()) return it->second;
  CUstream s = nullptr;
  g->makeCurrent();
  cuStreamCreateWithPriority(&s, CU_STREAM_NON_BLOCKING, g->description().streamPriorityGreatest);
  streams.emplace(g, s);
  return s;
}

CUstream Tenant::syncStream(gpu::Gpu* g) { return privateStream(syncStreams_, g); }

CUstream Tenant::allocStream(gpu::Gpu* g) { return privateStream(allocStreams_, g); }

CUstream Tenant::joinedSyncStream(gpu::Gpu* g) {
  g->makeCurrent();
  CUstream waiter = syncStream(g);
  for (StreamState* s : streamsOf(g)) {
    cuEventRecord(s->joinEvent, s->stream);
    cuStreamWaitEvent(waiter, s->joinEvent, 0);
  }
  return waiter;
}

CUresult Tenant::destroyStream(uint64_t id) {
  auto it = streams_.find(id);
  if (it == streams_.end() || it->second->legacyDefault) return CUDA_ERROR_INVALID_HANDLE;
  StreamState& s = *it->second;
  s.gpu->makeCurrent();
  // Like cudaStreamDestroy: pending work still completes; the handle goes away now. A host
  // callback flag may still be awaited by that work, so it lives until the tenant ends.
  cuStreamDestroy(s.stream);
  cuEventDestroy(s.joinEvent);
  if (s.hostFlag != nullptr) retiredHostFlags_.push_back(s.hostFlag);
  if (s.variantSide != nullptr) cuStreamDestroy(s.variantSide);
  if (s.ptbControl != 0) retiredPtbControls_.emplace_back(s.gpu, s.ptbControl);
  streams_.erase(it);
  publishUsage();
  return CUDA_SUCCESS;
}

// --- events ----------------------------------------------------------------------------

CUresult Tenant::createEvent(uint32_t device, uint64_t id, unsigned flags) {
  gpu::Gpu* g = gpu(device);
  if (g == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  if (events_.count(id) != 0) return CUDA_ERROR_INVALID_HANDLE;
  g->makeCurrent();
  EventState e{g, nullptr};
  // Interprocess events would leak the shared context to other processes.
  flags &= ~static_cast<unsigned>(CU_EVENT_INTERPROCESS);
  if (CUresult r = cuEventCreate(&e.event, flags); r != CUDA_SUCCESS) return r;
  events_.emplace(id, e);
  return CUDA_SUCCESS;
}

CUresult Tenant::destroyEvent(uint64_t id) {
  auto it = events_.find(id);
  if (it == events_.end()) return CUDA_ERROR_INVALID_HANDLE;
  it->second.gpu->makeCurrent();
  cuEventDestroy(it->second.event);
  events_.erase(it);
  return CUDA_SUCCESS;
}

EventState* Tenant::event(uint64_t id) {
  auto it = events_.find(id);
  return it == events_.end() ? nullptr : &it->second;
}

// --- memory ----------------------------------------------------------------------------

CUresult Tenant::allocate(uint32_t device, size_t size, CUdeviceptr& out) {
  gpu::Gpu* g = gpu(device);
  if (g == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  if (!memoryQuotaAllows(size)) return CUDA_ERROR_OUT_OF_MEMORY;
  g->makeCurrent();
  // Beyond the device's memory the answer is known, and the pool need not be trimmed to find it.
  if (size > g->description().totalMem) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = g->memoryPool() != nullptr && size > 0 ? g->memoryPool()->allocate(size, allocStream(g), out)
                                                       : cuMemAlloc(&out, size);
  if (r != CUDA_SUCCESS) return r;
  ranges_.emplace(out, Range{size, g, true});
  allocatedBytes_ += size;
  publishUsage();
  return CUDA_SUCCESS;
}

CUresult Tenant::allocatePitch(uint32_t device, size_t width, size_t height, CUdeviceptr& out, size_t& pitch) {
  gpu::Gpu* g = gpu(device);
  if (g == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  if (!memoryQuotaAllows(pitchedBytesUpperBound(width, height))) return CUDA_ERROR_OUT_OF_MEMORY;
  g->makeCurrent();
  if (CUresult r = cuMemAllocPitch(&out, &pitch, width, height, 16); r != CUDA_SUCCESS) return r;
  ranges_.emplace(out, Range{pitch * height, g, true});
  allocatedBytes_ += pitch * height;
  publishUsage();
  return CUDA_SUCCESS;
}

CUresult Tenant::free(CUdeviceptr ptr, gpu::Gpu*& on) {
  auto it = ranges_.find(ptr);
  if (it == ranges_.end() || !it->second.allocation) return CUDA_ERROR_INVALID_VALUE;
  on = it->second.gpu;
  CUresult r = cuMemFreeAsync(ptr, joinedSyncStream(on));
  allocatedBytes_ -= it->second.size;
  ranges_.erase(it);
  publishUsage();
  return r;
}

gpu::Gpu* Tenant::ownerOf(CUdeviceptr ptr, size_t size) const {
  auto it = ranges_.upper_bound(ptr);
  if (it == ranges_.begin()) return nullptr;
  --it;
  CUdeviceptr base = it->first;
  size_t extent = it->second.size;
  if (ptr < base || size > extent || ptr - base > extent - size) return nullptr;
  return it->second.gpu;
}

void Tenant::addGlobalRange(CUdeviceptr ptr, size_t size, gpu::Gpu* g) {
  if (size > 0) ranges_.emplace(ptr, Range{size, g, false});
}

CUresult Tenant::mapHostMemory(int memfd, uint64_t clientAddress, size_t size, gpu::Gpu* g, uint64_t& deviceAddress) {
  if (hostMappings_.count(clientAddress) != 0) return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  // Same address as in the client when it is free here too: then device-mapped pinned
  // pointers that the application passes to kernels are valid as they are.
  void* local = ::mmap(reinterpret_cast<void*>(clientAddress), size, PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_FIXED_NOREPLACE, memfd, 0);
  if (local == MAP_FAILED) local = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
  if (local == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  g->makeCurrent();
  // Registered or refused: the driver copies unregistered (pageable) memory in pieces driven by
  // the calling thread, so the stream waits for a thread that a context-wide call (module
  // load, free) can block — a deadlock across tenants (docs/scheduler.md). A refused client
  // falls back to unshared memory, which travels through tallyd's pinned staging.
  if (CUresult r = cuMemHostRegister(local, size, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP);
      r != CUDA_SUCCESS) {
    ::munmap(local, size);
    return r;
  }
  CUdeviceptr mapped = 0;
  deviceAddress = cuMemHostGetDevicePointer(&mapped, local, 0) == CUDA_SUCCESS ? mapped : 0;
  hostMappings_.emplace(clientAddress, HostMapping{local, size, deviceAddress});
  return CUDA_SUCCESS;
}

CUresult Tenant::unmapHostMemory(uint64_t clientAddress) {
  auto it = hostMappings_.find(clientAddress);
  if (it == hostMappings_.end()) return CUDA_ERROR_INVALID_VALUE;
  auto* begin = static_cast<uint32_t*>(it->second.local);
  auto held = sharedDoneWords_.lower_bound(begin);
  if (held != sharedDoneWords_.end() && reinterpret_cast<char*>(*held) < reinterpret_cast<char*>(begin) + it->second.size) {
    return CUDA_ERROR_INVALID_VALUE;  // a stream may still wait on a word in it
  }
  cuMemHostUnregister(it->second.local);
  ::munmap(it->second.local, it->second.size);
  hostMappings_.erase(it);
  return CUDA_SUCCESS;
}

void* Tenant::hostAddress(uint64_t clientAddress, size_t size) const {
  auto it = hostMappings_.upper_bound(clientAddress);
  if (it == hostMappings_.begin()) return nullptr;
  --it;
  uint64_t offset = clientAddress - it->first;
  if (offset > it->second.size || size > it->second.size - offset) return nullptr;
  return static_cast<char*>(it->second.local) + offset;
}

std::optional<Tenant::SharedWord> Tenant::sharedWord(uint64_t clientAddress) const {
  if (clientAddress % sizeof(uint32_t) != 0) return std::nullopt;
  auto it = hostMappings_.upper_bound(clientAddress);
  if (it == hostMappings_.begin()) return std::nullopt;
  --it;
  uint64_t offset = clientAddress - it->first;
  if (it->second.device == 0 || it->second.size < sizeof(uint32_t) ||
      offset > it->second.size - sizeof(uint32_t)) {
    return std::nullopt;
  }
  return SharedWord{reinterpret_cast<uint32_t*>(static_cast<char*>(it->second.local) + offset), it->second.device + offset};
}

// --- modules ---------------------------------------------------------------------------

CUresult Tenant::loadModule(uint32_t device, uint64_t id, const std::string& identity, const std::string& image,
                            const std::string* variants) {
  gpu::Gpu* g = gpu(device);
  if (g == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  if (modules_.count(id) != 0) return CUDA_ERROR_INVALID_HANDLE;
  g->makeCurrent();
  if (variants != nullptr) {
    CUresult r = loadInstance(*g, id, identity, *variants, true);
    if (r == CUDA_SUCCESS) return r;
    spdlog::warn("tenant {} ({}): cannot load the kernel variants ({}); running the original kernels", id_, name_,
                 gpu::describe(r));
  }
  return loadInstance(*g, id, identity, image, false);
}

// A pooled instance of the image if there is one, else a fresh load (gpu/module_pool.h).
CUresult Tenant::loadInstance(gpu::Gpu& g, uint64_t id, const std::string& identity, const std::string& image,
                              bool variants) {
  std::string key = identity + (variants ? "/variants" : "");
  CUmodule m = g.modulePool().take(key);
  if (m == nullptr) {
    if (CUresult r = cuModuleLoadData(&m, image.data()); r != CUDA_SUCCESS) return r;
    if (fatbin::declaresModuleData({reinterpret_cast<const uint8_t*>(image.data()), image.size()})) key.clear();
  }
  modules_.emplace(id, ModuleState{&g, m, variants, identity, std::move(key), {}});
  return CUDA_SUCCESS;
}

CUresult Tenant::dropModule(ModuleState& m) {
  m.gpu->makeCurrent();
  if (m.poolKey.empty()) return cuModuleUnload(m.module);
  for (const auto& changed : m.changedAttributes) {
    cuFuncSetAttribute(changed.function, changed.attribute, changed.original);
  }
  m.gpu->modulePool().give(m.poolKey, m.module);
  return CUDA_SUCCESS;
}

void Tenant::noteAttributeChange(uint64_t moduleId, CUfunction f, CUfunction_attribute a) {
  ModuleState* m = module(moduleId);
  if (m == nullptr || m->poolKey.empty()) return;
  for (const auto& changed : m->changedAttributes) {
    if (changed.function == f && changed.attribute == a) return;
  }
  int original = 0;
  if (cuFuncGetAttribute(&original, a, f) == CUDA_SUCCESS) m->changedAttributes.push_back({f, a, original});
}

bool Tenant::prepareVariants(StreamState& s) {
  if (s.ptbControl != 0) return true;
  s.gpu->makeCurrent();
  if (cuStreamCreateWithPriority(&s.variantSide, CU_STREAM_NON_BLOCKING, s.gpu->description().streamPriorityGreatest) !=
      CUDA_SUCCESS) {
    s.variantSide = nullptr;
    return false;
  }
  if (cuMemAlloc(&s.ptbControl, 16) != CUDA_SUCCESS) {
    s.ptbControl = 0;
    return false;
  }
  return true;
}

CUresult Tenant::unloadModule(uint64_t id) {
  auto it = modules_.find(id);
  if (it == modules_.end()) return CUDA_ERROR_INVALID_HANDLE;
  CUresult r = dropModule(it->second);
  modules_.erase(it);
  return r;
}

ModuleState* Tenant::module(uint64_t id) {
  auto it = modules_.find(id);
  return it == modules_.end() ? nullptr : &it->second;
}

FunctionState* Tenant::function(uint64_t id) {
  auto it = functions_.find(id);
  return it == functions_.end() ? nullptr : &it->second;
}

FunctionState& Tenant::addFunction(uint64_t id, FunctionState state) {
  return functions_.insert_or_assign(id, std::move(state)).first->second;
}

// --- end of tenancy --------------------------------------------------------------------

void Tenant::freeAfterTenantWork(gpu::Gpu* g, CUdeviceptr ptr) {
  g->makeCurrent();
  if (CUresult r = cuMemFreeAsync(ptr, joinedSyncStream(g)); r != CUDA_SUCCESS) {
    spdlog::warn("tenant {} ({}): freeing 0x{:x} at release failed: {}", id_, name_, ptr, gpu::describe(r));
  }
}

void Tenant::release() {
  if (released_) return;
  released_ = true;
  // Host callbacks the client will never run must not hold streams forever.
  hostWaits_->releaseAll();
  // Memory may be freed only once no kernel of this tenant can still touch it.
  for (auto& [id, s] : streams_) {
    s->gpu->makeCurrent();
    if (CUresult r = cuStreamSynchronize(s->stream); r != CUDA_SUCCESS) {
      spdlog::warn("tenant {} ({}): stream sync at release failed: {}", id_, name_, gpu::describe(r));
    }
  }
  // Frees are stream-ordered on the tenant's sync stream: cuMemFree would wait for every kernel
  // of the context, and hold other tenants' calls while it waits.
  size_t freedBytes = allocatedBytes_;
  for (auto& [ptr, range] : ranges_) {
    if (range.allocation) freeAfterTenantWork(range.gpu, ptr);
  }
  ranges_.clear();
  allocatedBytes_ = 0;
  for (auto& [id, s] : streams_) {
    s->gpu->makeCurrent();
    if (s->variantSide != nullptr) cuStreamSynchronize(s->variantSide);
    if (s->ptbControl != 0) retiredPtbControls_.emplace_back(s->gpu, s->ptbControl);
  }
  for (auto [g, control] : retiredPtbControls_) freeAfterTenantWork(g, control);
  retiredPtbControls_.clear();
  for (PrivateStreams* streams : {&syncStreams_, &allocStreams_}) {
    for (auto& [g, s] : *streams) {
      g->makeCurrent();
      cuStreamSynchronize(s);  // the frees just queued
      cuStreamDestroy(s);
    }
  }
  for (auto& [id, s] : streams_) {
    s->gpu->makeCurrent();
    cuStreamDestroy(s->stream);
    cuEventDestroy(s->joinEvent);
    if (s->hostFlag != nullptr) cuMemFreeHost(s->hostFlag);
    if (s->variantSide != nullptr) cuStreamDestroy(s->variantSide);
  }
  for (auto& [id, e] : events_) {
    e.gpu->makeCurrent();
    cuEventDestroy(e.event);
  }
  for (auto& [id, m] : modules_) dropModule(m);
  for (uint32_t* flag : retiredHostFlags_) cuMemFreeHost(flag);
  retiredHostFlags_.clear();
  for (auto& [addr, mapping] : hostMappings_) {
    cuMemHostUnregister(mapping.local);
    ::munmap(mapping.local, mapping.size);
  }
  // Last: when no tenant is left, the GPU gives back what its pools keep.
  for (gpu::Gpu* g : gpus_) g->tenantLeft();
  spdlog::info("tenant {} ({}) released: {} streams, {} events, {} modules, {} bytes of device memory; "
               "{} launches ({} sliced, {} PTB, {} retreats)",
               id_, name_, streams_.size(), events_.size(), modules_.size(), freedBytes, counters_.launches.load(),
               counters_.slicedLaunches.load(), counters_.ptbLaunches.load(), counters_.preemptions.load());
  streams_.clear();
  syncStreams_.clear();
  allocStreams_.clear();
  events_.clear();
  modules_.clear();
  functions_.clear();
  hostMappings_.clear();
  publishUsage();
}

}  // namespace tally::server::session

#include "server/session/tenant.h"

#include "server/gpu/cuda_check.h"
#include "server/gpu/virtual_memory.h"

#include <spdlog/spdlog.h>

namespace tally::server::session {

namespace {
// Past its staging budget a copy waits this long for the tenant's own buffers to come back,
// then goes over; past this many budgets it is refused (out of memory).
constexpr auto kStagingWait = std::chrono::milliseconds(200);
constexpr size_t kStagingHardFactor = 8;
// Graphs (and, separately, executable graphs) one tenant may hold: each holds driver memory.
// Generous: torch.compile keeps a graph per captured shape and partition.
constexpr uint64_t kMaxGraphs = 16384;
}  // namespace

Tenant::Tenant(uint64_t id, std::string name, PriorityClass priority, std::vector<gpu::Gpu*> gpus, TenantLimits limits)
    : id_(id),
      name_(std::move(name)),
      priority_(priority),
      gpus_(std::move(gpus)),
      limits_(limits),
      streams_(gpus_, StreamLimits{limits.maxStreams, limits.maxEvents}, tenantLabel(id_, name_), counters_.streams),
      memory_(limits.memoryQuotaBytes, tenantLabel(id_, name_), counters_.memoryBytes),
      modules_(limits.maxModules, tenantLabel(id_, name_)),
      hostMappings_(limits.maxHostMappings, tenantLabel(id_, name_)),
      virtualMemory_(tenantLabel(id_, name_)),
      graphs_(streams_, kMaxGraphs, tenantLabel(id_, name_)),
      stagingBudget_(std::make_shared<gpu::StagingBudget>(limits.stagingBytes, kStagingHardFactor * limits.stagingBytes,
                                                          kStagingWait)) {
  for (gpu::Gpu* g : gpus_) g->tenantArrived();
}

Tenant::~Tenant() { release(); }

// --- memory ----------------------------------------------------------------------------

CUresult Tenant::allocate(uint32_t device, size_t size, CUdeviceptr& out) {
  gpu::Gpu* g = gpu(device);
  if (g == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  if (!memory_.quotaAllows(size)) return CUDA_ERROR_OUT_OF_MEMORY;
  g->makeCurrent();
  // Beyond the device's memory the answer is known, and the pool need not be trimmed to find it.
  if (size > g->description().totalMem) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = g->memoryPool() != nullptr && size > 0 ? g->memoryPool()->allocate(size, streams_.allocStream(g), out)
                                                       : cuMemAlloc(&out, size);
  if (r != CUDA_SUCCESS) return r;
  memory_.addAllocation(out, size, g);
  return CUDA_SUCCESS;
}

CUresult Tenant::allocatePitch(uint32_t device, size_t width, size_t height, CUdeviceptr& out, size_t& pitch) {
  gpu::Gpu* g = gpu(device);
  if (g == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  if (!memory_.quotaAllows(pitchedBytesUpperBound(width, height))) return CUDA_ERROR_OUT_OF_MEMORY;
  g->makeCurrent();
  if (CUresult r = cuMemAllocPitch(&out, &pitch, width, height, 16); r != CUDA_SUCCESS) return r;
  memory_.addAllocation(out, pitch * height, g);
  return CUDA_SUCCESS;
}

CUresult Tenant::free(CUdeviceptr ptr, gpu::Gpu*& on) {
  std::optional<MemoryTable::Range> range = memory_.takeAllocation(ptr);
  if (!range) return CUDA_ERROR_INVALID_VALUE;
  on = range->gpu;
  return streams_.freeAfterTenantWork(on, ptr, range->size);
}

// --- arrays ----------------------------------------------------------------------------

namespace {

constexpr size_t kArrayClearChunk = 4u << 20;  // zeros copied into an array per copy

// Queues copies of zeros over every element of `a` on `stream`.
CUresult clearArray(const ArrayState& a, CUstream stream) {
  size_t rowBytes = arrayFormatBytes(a.descriptor.Format) * a.descriptor.NumChannels * a.descriptor.Width;
  size_t rows = std::max<size_t>(a.descriptor.Height, 1), slices = std::max<size_t>(a.descriptor.Depth, 1);
  if (rowBytes == 0) return CUDA_SUCCESS;
  size_t chunkRows = std::clamp<size_t>(kArrayClearChunk / rowBytes, 1, rows);
  CUdeviceptr zeros = 0;
  gpu::MemoryPool* pool = a.gpu->memoryPool();
  CUresult r = pool != nullptr ? pool->allocate(chunkRows * rowBytes, stream, zeros) : cuMemAlloc(&zeros, chunkRows * rowBytes);
  if (r != CUDA_SUCCESS) return r;
  r = cuMemsetD8Async(zeros, 0, chunkRows * rowBytes, stream);
  for (size_t z = 0; z < slices && r == CUDA_SUCCESS; ++z) {
    for (size_t y = 0; y < rows && r == CUDA_SUCCESS; y += chunkRows) {
      CUDA_MEMCPY3D p{};
      p.srcMemoryType = CU_MEMORYTYPE_DEVICE;
      p.srcDevice = zeros;
      p.srcPitch = rowBytes;
      p.srcHeight = chunkRows;
      p.dstMemoryType = CU_MEMORYTYPE_ARRAY;
      p.dstArray = a.array;
      p.dstY = y;
      p.dstZ = z;
      p.WidthInBytes = rowBytes;
      p.Height = std::min(chunkRows, rows - y);
      p.Depth = 1;
      r = cuMemcpy3DAsync(&p, stream);
    }
  }
  if (CUresult s = cuStreamSynchronize(stream); r == CUDA_SUCCESS) r = s;
  if (pool != nullptr) {
    cuMemFreeAsync(zeros, stream);
  } else {
    cuMemFree(zeros);
  }
  return r;
}

}  // namespace

CUresult Tenant::destroyArray(const ArrayState& a) {
  a.gpu->makeCurrent();
  memory_.uncharge(a.bytes);
  // Not cleared (a broken context): kept rather than handed on with the tenant's data.
  if (CUresult r = clearArray(a, streams_.joinedSyncStream(a.gpu)); r != CUDA_SUCCESS) {
    spdlog::warn("tenant {} ({}): clearing an array of {} bytes failed ({}); it is not destroyed", id_, name_, a.bytes,
                 gpu::describe(r));
    return r;
  }
  return cuArrayDestroy(a.array);
}

CUresult Tenant::destroyMipmapped(const MipmappedState& m) {
  m.gpu->makeCurrent();
  memory_.uncharge(m.bytes);
  CUstream stream = streams_.joinedSyncStream(m.gpu);
  for (unsigned level = 0; level < m.levels; ++level) {
    ArrayState a;
    a.gpu = m.gpu;
    CUresult r = cuMipmappedArrayGetLevel(&a.array, m.array, level);
    if (r == CUDA_SUCCESS) r = cuArray3DGetDescriptor(&a.descriptor, a.array);
    if (r == CUDA_SUCCESS) r = clearArray(a, stream);
    if (r != CUDA_SUCCESS) {
      spdlog::warn("tenant {} ({}): clearing level {} of a mipmapped array failed ({}); it is not destroyed", id_, name_,
                   level, gpu::describe(r));
      return r;
    }
  }
  return cuMipmappedArrayDestroy(m.array);
}

// Objects first: they read the arrays.
void Tenant::destroyArraysAndObjects() {
  auto objects = arrays_.takeObjects();
  for (const auto& [value, object] : objects) {
    object.gpu->makeCurrent();
    if (object.surface) {
      cuSurfObjectDestroy(value);
    } else {
      cuTexObjectDestroy(value);
    }
  }
  auto arrays = arrays_.takeArrays();
  for (const ArrayState& a : arrays) destroyArray(a);
  auto mipmapped = arrays_.takeMipmapped();
  for (const MipmappedState& m : mipmapped) destroyMipmapped(m);
  if (!objects.empty() || !arrays.empty() || !mipmapped.empty()) {
    spdlog::info("tenant {} ({}): destroyed {} texture/surface objects, {} arrays and {} mipmapped arrays", id_, name_,
                 objects.size(), arrays.size(), mipmapped.size());
  }
}

// --- modules ---------------------------------------------------------------------------

CUresult Tenant::loadModule(uint32_t device, uint64_t id, const std::string& identity, const std::string& image,
                            const VariantImage* variants) {
  gpu::Gpu* g = gpu(device);
  if (g == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  return modules_.load(*g, id, identity, image, variants);
}

CUresult Tenant::unloadModule(uint64_t id) {
  std::optional<ModuleState> m = modules_.take(id);
  if (!m) return CUDA_ERROR_INVALID_HANDLE;
  // Its globals may hold this tenant's data, and unloading gives their memory back to the
  // driver, which may hand it to another tenant's allocation: cleared first (memory_pool.h).
  // A pooled instance has no globals (module_data.h), and its memory stays with the instance.
  // The clears are waited for before the unload frees the memory; if one fails (a broken
  // context) the instance stays loaded rather than hand its data on.
  bool cleared = false;
  for (auto& [ptr, global] : memory_.takeGlobalsOf(id)) {
    if (!m->poolKey.empty()) continue;
    if (CUresult r = streams_.clearAfterTenantWork(global.gpu, ptr, global.size); r != CUDA_SUCCESS) return r;
    cleared = true;
  }
  if (cleared) cuStreamSynchronize(streams_.syncStream(m->gpu));
  return dropModuleInstance(*m);
}

// --- end of tenancy --------------------------------------------------------------------

void Tenant::startLaunchThread(std::chrono::microseconds spin) {
  launchThread_ = std::make_unique<LaunchThread>(id_, spin);
  streams_.setLaunchThread(launchThread_.get());
}

void Tenant::stopLaunchThread() {
  if (!launchThread_) return;
  streams_.setLaunchThread(nullptr);
  launchThread_->drain();
  uint64_t made = launchThread_->jobsRun();
  launchThread_.reset();
  spdlog::debug("tenant {} ({}): its launch thread made {} launches", id_, name_, made);
}

void Tenant::release() {
  if (released_) return;
  released_ = true;
  stopLaunchThread();  // its launches reach the driver before the streams are synchronized
  size_t streamCount = streams_.streamCount(), eventCount = streams_.eventCount(), moduleCount = modules_.moduleCount();
  // Host callbacks the client will never run must not hold streams forever.
  hostWaits_->releaseAll();
  // A capturing stream refuses to be synchronized: its captures end first.
  size_t graphCount = graphs_.graphCount(), execCount = graphs_.execCount();
  graphs_.endCaptures();
  // Memory may be freed only once no kernel of this tenant can still touch it.
  streams_.synchronizeAll();
  // No launch of its graphs runs now; their kernel nodes name its modules' functions.
  graphs_.destroyAll();
  if (graphCount + execCount > 0) {
    spdlog::info("tenant {} ({}): destroyed {} graphs and {} executable graphs", id_, name_, graphCount, execCount);
  }
  // Library handles and descriptors next (newest first), while the streams and memory they
  // name still exist; a handle is destroyed in the context it was created in.
  size_t libraryObjectCount = libraryObjects_.size();
  for (const LibraryObject& o : libraryObjects_.takeAll()) {
    if (o.gpu != nullptr) o.gpu->makeCurrent();
    if (o.destroy != nullptr) o.destroy(o.object);
  }
  // Arrays are cleared and destroyed (their objects first), while the sync streams exist.
  destroyArraysAndObjects();
  // Frees are stream-ordered on the tenant's sync stream: cuMemFree would wait for every kernel
  // of the context, and hold other tenants' calls while it waits.
  size_t freedBytes = memory_.allocatedBytes();
  releaseVirtualMemory();
  // Allocations are cleared and freed, globals of modules that unload below only cleared.
  for (auto& [ptr, range] : memory_.takeAll()) {
    if (range.allocation || modules_.unloadsWhenDropped(range.module)) {
      streams_.releaseAtEnd(range.gpu, ptr, range.size, range.allocation);
    }
  }
  streams_.freePtbControls();
  streams_.destroyPrivateStreams();
  destroyMemPools();
  destroyLinks();
  streams_.destroyStreamsAndEvents();
  modules_.dropAll();
  streams_.freeRetiredHostFlags();
  hostMappings_.unmapAll();
  // Last: when no tenant is left, the GPU gives back what its pools keep.
  for (gpu::Gpu* g : gpus_) g->tenantLeft();
  spdlog::info("tenant {} ({}) released: {} streams, {} events, {} modules, {} library objects, {} bytes of device "
               "memory; {} launches ({} sliced, {} PTB, {} retreats, {} chained)",
               id_, name_, streamCount, eventCount, moduleCount, libraryObjectCount, freedBytes, counters_.launches.load(),
               counters_.slicedLaunches.load(), counters_.ptbLaunches.load(), counters_.preemptions.load(),
               counters_.chainedLaunches.load());
  streams_.clear();
}

// Links the client never destroyed; nothing of the GPU's work depends on them.
void Tenant::destroyLinks() {
  std::vector<std::unique_ptr<LinkState>> links = links_.takeAll();
  for (const auto& link : links) {
    link->gpu->makeCurrent();
    cuLinkDestroy(link->state);
  }
  if (!links.empty()) spdlog::info("tenant {} ({}): destroyed {} JIT links", id_, name_, links.size());
}

// Mapped memory holds the tenant's data: cleared before it is unmapped (the tenant's streams are
// idle by now). Handles that cannot be released (a broken context) are logged and kept.
void Tenant::releaseVirtualMemory() {
  VirtualMemoryTable::Contents all = virtualMemory_.takeAll();
  for (auto& [ptr, mapping] : all.mappings) {
    mapping.gpu->makeCurrent();
    if (CUresult r = gpu::unmapAfter(ptr, mapping.size, streams_.syncStream(mapping.gpu), true); r != CUDA_SUCCESS) {
      spdlog::warn("tenant {} ({}): unmapping 0x{:x} (+{}) at release failed: {}", id_, name_, ptr, mapping.size,
                   gpu::describe(r));
    }
  }
  for (auto& [base, size] : all.reservations) cuMemAddressFree(base, size);
  for (auto& h : all.handles) {
    h.gpu->makeCurrent();
    // Mapped handles were cleared with their mappings above; one unmapped earlier without a
    // clear (it was still referenced then) may still hold data.
    if (CUresult r = gpu::clearThenRelease(h.handle, h.size, static_cast<CUdevice>(h.gpu->ordinal()),
                                           h.dirty && h.mappings == 0, streams_.syncStream(h.gpu));
        r != CUDA_SUCCESS) {
      spdlog::warn("tenant {} ({}): releasing an allocation handle of {} bytes failed: {}", id_, name_, h.size,
                   gpu::describe(r));
    }
  }
}

void Tenant::destroyMemPools() {
  for (MemPoolTable::Pool& p : memPools_.takeAll()) {
    p.gpu->makeCurrent();
    cuMemPoolDestroy(p.pool);
  }
}

}  // namespace tally::server::session

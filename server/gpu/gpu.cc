#include "server/gpu/gpu.h"

#include "server/gpu/cuda_check.h"
#include "server/gpu/driver_loader.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cstdlib>

namespace tally::server::gpu {

std::string describe(CUresult result) {
  const char* name = nullptr;
  const char* text = nullptr;
  cuGetErrorName(result, &name);
  cuGetErrorString(result, &text);
  return fmt::format("{} ({})", name != nullptr ? name : "unknown CUresult", text != nullptr ? text : "?");
}

namespace {

// Idle module instances kept per GPU (module_pool.h). Each holds its code and constant banks in
// device memory: enough for a few dozen tenants' modules, all unloaded when the GPU goes idle.
constexpr size_t kMaxIdleModules = 512;

DeviceDescription describeDevice(int ordinal, CUdevice device) {
  DeviceDescription d;
  d.ordinal = ordinal;
  char name[256] = {};
  cuDeviceGetName(name, sizeof(name), device);
  d.name = name;
  cuDeviceGetAttribute(&d.major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device);
  cuDeviceGetAttribute(&d.minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device);
  cuDeviceTotalMem(&d.totalMem, device);
  d.attributes.assign(CU_DEVICE_ATTRIBUTE_MAX, 0);
  for (int a = 1; a < CU_DEVICE_ATTRIBUTE_MAX; ++a) {
    if (cuDeviceGetAttribute(&d.attributes[a], static_cast<CUdevice_attribute>(a), device) != CUDA_SUCCESS) {
      d.attributes[a] = 0;
    }
  }
  // The runtime's struct is what clients hand back to applications; fill it with the
  // server's own (statically linked) runtime so every field is exact.
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, ordinal) == cudaSuccess) {
    d.properties.assign(reinterpret_cast<const char*>(&prop), sizeof(prop));
  }
  cuCtxGetStreamPriorityRange(&d.streamPriorityLeast, &d.streamPriorityGreatest);
  CUuuid uuid{};
  cuDeviceGetUuid(&uuid, device);
  d.uuid.assign(uuid.bytes, sizeof(uuid.bytes));
  return d;
}

}  // namespace

void Gpu::requestHardwareQueues(unsigned count) {
  if (count != 0) ::setenv("CUDA_DEVICE_MAX_CONNECTIONS", std::to_string(count).c_str(), 1);
  spdlog::info("{} hardware work queues per GPU: past that many live streams, tenants' streams share queues",
               hardwareQueues());
}

unsigned Gpu::hardwareQueues() {
  // Read once, after requestHardwareQueues: the driver read it when the contexts were made.
  static const unsigned queues = [] {
    const char* set = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS");
    int count = set != nullptr ? std::atoi(set) : 0;
    return count > 0 ? static_cast<unsigned>(count) : 8u;
  }();
  return queues;
}

void Gpu::streamCreated() {
  unsigned live = liveStreams_.fetch_add(1, std::memory_order_relaxed) + 1;
  // Once: a count that moves around the limit would log on every tenant that comes and goes.
  if (live > hardwareQueues() && !sharingLogged_.exchange(true, std::memory_order_relaxed)) {
    spdlog::info("GPU {}: {} live streams, more than its {} hardware queues: new streams share queues "
                 "(a stream beside a busy one waits behind its queued work; logged once, tally_gpu_streams "
                 "follows the count; hardware_queues)",
                 ordinal(), live, hardwareQueues());
  }
}

void Gpu::streamDestroyed() { liveStreams_.fetch_sub(1, std::memory_order_relaxed); }

std::vector<std::unique_ptr<Gpu>> Gpu::openAll(std::string& error) {
  std::vector<std::unique_ptr<Gpu>> gpus;
  if (std::string why; !driverLoaded(&why)) {
    error = "the NVIDIA driver is not installed or not visible (" + why + ")";
    return gpus;
  }
  if (CUresult r = cuInit(0); r != CUDA_SUCCESS) {
    error = fmt::format("cuInit failed: {}", describe(r));
    return gpus;
  }
  int count = 0;
  if (CUresult r = cuDeviceGetCount(&count); r != CUDA_SUCCESS || count == 0) {
    error = r != CUDA_SUCCESS ? fmt::format("cuDeviceGetCount failed: {}", describe(r)) : "the driver reports 0 devices";
    return gpus;
  }
  for (int i = 0; i < count; ++i) {
    CUdevice device;
    CUcontext context;
    if (CUresult r = cuDeviceGet(&device, i); r != CUDA_SUCCESS) {
      error = fmt::format("cuDeviceGet({}) failed: {}", i, describe(r));
      continue;
    }
    if (CUresult r = cuDevicePrimaryCtxRetain(&context, device); r != CUDA_SUCCESS) {
      error = fmt::format("cuDevicePrimaryCtxRetain({}) failed: {}", i, describe(r));
      continue;
    }
    makeContextCurrent(context);
    gpus.emplace_back(new Gpu(device, context, describeDevice(i, device)));
  }
  enablePeerAccess(gpus);
  return gpus;
}

// tallyd's contexts reach each other's memory wherever the hardware allows, once for every
// tenant: a tenant's cudaDeviceEnablePeerAccess is then bookkeeping in its client.
void Gpu::enablePeerAccess(const std::vector<std::unique_ptr<Gpu>>& gpus) {
  for (const auto& from : gpus) {
    for (const auto& to : gpus) {
      int can = 0;
      if (from == to || cuDeviceCanAccessPeer(&can, from->device_, to->device_) != CUDA_SUCCESS || can == 0) continue;
      from->makeCurrent();
      CUresult r = cuCtxEnablePeerAccess(to->context_, 0);
      if (r != CUDA_SUCCESS && r != CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) {
        spdlog::warn("GPU {} cannot reach GPU {}'s memory: {}", from->ordinal(), to->ordinal(), describe(r));
      }
    }
  }
}

std::vector<int> Gpu::peerAttributes(const Gpu& peer) const {
  constexpr int kLast = CU_DEVICE_P2P_ATTRIBUTE_ONLY_PARTIAL_NATIVE_ATOMIC_SUPPORTED;
  std::vector<int> values(kLast + 1, 0);
  if (&peer == this) return values;
  for (int a = CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK; a <= kLast; ++a) {
    int value = 0;
    if (cuDeviceGetP2PAttribute(&value, static_cast<CUdevice_P2PAttribute>(a), device_, peer.device_) == CUDA_SUCCESS) {
      values[static_cast<size_t>(a)] = value;
    }
  }
  return values;
}

Gpu::Gpu(CUdevice device, CUcontext context, DeviceDescription description)
    : device_(device), context_(context), description_(std::move(description)) {
  for (CUlimit limit : {CU_LIMIT_STACK_SIZE, CU_LIMIT_PRINTF_FIFO_SIZE, CU_LIMIT_MALLOC_HEAP_SIZE,
                        CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT}) {
    size_t value = 0;
    if (cuCtxGetLimit(&value, limit) == CUDA_SUCCESS) initialLimits_[limit] = value;
  }
  completions_ = std::make_unique<CompletionQueue>(context_);
  staging_ = std::make_unique<StagingPool>(context_);
  modulePool_ = std::make_unique<ModulePool>(kMaxIdleModules, [this](CUmodule m) {
    makeCurrent();
    cuModuleUnload(m);
  });
  // Loaded now, not on first use: a module load on a tenant's launch path could wait for other
  // tenants' work that waits for that tenant's next call.
  makeCurrent();
  auto helpers = std::make_unique<PtbHelpers>();
  std::string error;
  if (helpers->load(error)) {
    ptbHelpers_ = std::move(helpers);
  } else {
    spdlog::error("GPU {}: {}; PTB kernels will not be preempted", description_.ordinal, error);
  }
  error.clear();
  auto memOps = std::make_unique<MemOpKernels>();
  if (memOps->load(error)) {
    memOpKernels_ = std::move(memOps);
  } else {
    spdlog::warn("GPU {}: {}; stream memory operations on tenants' device memory will fail", description_.ordinal,
                 error);
  }
  error.clear();
  memoryPool_ = MemoryPool::create(device_, error);
  if (!memoryPool_) {
    spdlog::warn("GPU {}: no memory pool ({}); every tenant allocation maps fresh memory", description_.ordinal, error);
  }
  spdlog::info("GPU {}: {} (sm_{}{}), {} MiB, {} SMs", description_.ordinal, description_.name,
               description_.major, description_.minor, description_.totalMem >> 20,
               description_.attributes[CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT]);
}

CUresult Gpu::probe() const {
  makeCurrent();
  size_t value = 0;
  return cuCtxGetLimit(&value, CU_LIMIT_STACK_SIZE);
}

int Gpu::multiprocessors() const { return description_.attributes[CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT]; }

bool Gpu::partitionSms(SmPartitionSpec spec, std::string& error) {
  makeCurrent();
  partitions_ = SmPartitions::create(device_, spec, error);
  if (!partitions_) error = "GPU " + std::to_string(ordinal()) + ": " + error;
  return partitions_ != nullptr;
}

Gpu::~Gpu() {
  makeCurrent();
  partitions_.reset();  // tenants' streams in them are gone by now
  modulePool_.reset();
  memoryPool_.reset();
  ptbHelpers_.reset();
  memOpKernels_.reset();
  completions_.reset();
  staging_.reset();
  cuDevicePrimaryCtxRelease(device_);
}

void makeContextCurrent(CUcontext context) {
  // Tenant threads switch devices rarely; skip the driver call when nothing changes.
  thread_local CUcontext current = nullptr;
  if (current == context) return;
  if (cuCtxSetCurrent(context) == CUDA_SUCCESS) current = context;
}

void Gpu::makeCurrent() const { makeContextCurrent(context_); }

void Gpu::tenantArrived() {
  std::lock_guard lock(tenantsMutex_);
  if (++tenants_ == 1) staging_->noteTenantsPresent();  // under the lock: ordered with noteNoTenant
}

void Gpu::tenantLeft() {
  {
    std::lock_guard lock(tenantsMutex_);
    if (tenants_ > 0) --tenants_;
    if (tenants_ > 0) return;
    // No kernel runs now, so giving pinned staging back waits for nothing (staging_pool.h).
    size_t staged = staging_->noteNoTenant();
    if (staged > 0) spdlog::info("GPU {}: no tenant left; returned {} MiB of pinned staging", description_.ordinal, staged >> 20);
  }
  size_t unloaded = modulePool_->unloadIdle();
  size_t trimmed = 0;
  if (memoryPool_) {
    makeCurrent();
    trimmed = memoryPool_->idleBytes();
    memoryPool_->trim();
  }
  if (unloaded > 0 || trimmed > 0) {
    spdlog::info("GPU {}: no tenant left; unloaded {} idle module instances, returned {} MiB of pooled memory",
                 description_.ordinal, unloaded, trimmed >> 20);
  }
}

CUresult Gpu::raiseLimit(CUlimit limit, size_t value) {
  std::lock_guard lock(limitMutex_);
  makeCurrent();
  size_t current = 0;
  if (CUresult r = cuCtxGetLimit(&current, limit); r != CUDA_SUCCESS) return r;
  if (value <= current) return CUDA_SUCCESS;
  return cuCtxSetLimit(limit, value);
}

size_t Gpu::initialLimit(CUlimit limit) const {
  auto it = initialLimits_.find(limit);
  return it == initialLimits_.end() ? 0 : it->second;
}

CUresult Gpu::getLimit(CUlimit limit, size_t& value) const {
  makeCurrent();
  return cuCtxGetLimit(&value, limit);
}

}  // namespace tally::server::gpu

// The driver behind the Launcher seam: the one place a tenant's kernel, as is or as a variant,
// is handed to the driver (gpu/variant_launch.cc builds the variants' launches).
#include "server/scheduler/launcher.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "server/gpu/gpu.h"
#include "server/scheduler/policy.h"

namespace tally::server::scheduler {
namespace {

CUresult launchWithAttributes(const KernelLaunch& k, CUfunction f, std::span<const CUlaunchAttribute> attributes,
                              void** params) {
  CUlaunchConfig config{};
  config.gridDimX = k.shape.grid[0];
  config.gridDimY = k.shape.grid[1];
  config.gridDimZ = k.shape.grid[2];
  config.blockDimX = k.shape.block[0];
  config.blockDimY = k.shape.block[1];
  config.blockDimZ = k.shape.block[2];
  config.sharedMemBytes = k.shape.sharedMem;
  config.hStream = k.stream;
  config.attrs = const_cast<CUlaunchAttribute*>(attributes.data());
  config.numAttrs = static_cast<unsigned>(attributes.size());
  return cuLaunchKernelEx(&config, f, params, nullptr);
}

class DriverLauncher final : public Launcher {
 public:
  void makeCurrent(gpu::Gpu* g) override { g->makeCurrent(); }
  int ordinal(const gpu::Gpu* g) override { return g->ordinal(); }
  std::pair<int, int> streamPriorityRange(const gpu::Gpu* g) override {
    return {g->description().streamPriorityLeast, g->description().streamPriorityGreatest};
  }
  bool hasPtbHelpers(const gpu::Gpu* g) override { return g->ptbHelpers() != nullptr; }

  uint64_t waveBlocks(const gpu::Gpu* g, CUfunction f, const gpu::LaunchShape& shape) override {
    int perSm = 0;
    int threads = static_cast<int>(shape.block[0] * shape.block[1] * shape.block[2]);
    if (f == nullptr || cuOccupancyMaxActiveBlocksPerMultiprocessor(&perSm, f, threads, shape.sharedMem) != CUDA_SUCCESS) {
      return 0;
    }
    return uint64_t(std::max(perSm, 0)) * g->multiprocessors();
  }

  bool partitionSms(gpu::Gpu* g, gpu::SmPartitionSpec spec, std::string& error) override {
    return g->partitionSms(spec, error);
  }
  unsigned partitionSmCount(const gpu::Gpu* g, gpu::Placement p) override {
    return g->partitions() != nullptr ? g->partitions()->smCount(p) : 0;
  }

  CUresult allocMappedHost(size_t bytes, void*& host) override {
    return cuMemHostAlloc(&host, bytes, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE);
  }
  CUresult mappedDevicePointer(void* host, CUdeviceptr& device) override {
    return cuMemHostGetDevicePointer(&device, host, 0);
  }
  void freeHost(void* host) override { cuMemFreeHost(host); }
  CUresult allocDevice(size_t bytes, CUdeviceptr& device) override { return cuMemAlloc(&device, bytes); }
  void freeDevice(CUdeviceptr device) override { cuMemFree(device); }

  CUresult launchOriginal(const KernelLaunch& k, void** params) override {
    if (k.attributes.empty()) {
      return cuLaunchKernel(k.original, k.shape.grid[0], k.shape.grid[1], k.shape.grid[2], k.shape.block[0],
                            k.shape.block[1], k.shape.block[2], k.shape.sharedMem, k.stream, params, nullptr);
    }
    return launchWithAttributes(k, k.original, k.attributes, params);
  }
  CUresult launchChained(const KernelLaunch& k, void** params) override {
    if (!k.followsKernel) return launchWithAttributes(k, k.chained, {}, params);
    CUlaunchAttribute chained{};
    chained.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    chained.value.programmaticStreamSerializationAllowed = 1;
    return launchWithAttributes(k, k.chained, {&chained, 1}, params);
  }
  CUresult launchSliceRange(CUfunction sliced, const gpu::LaunchShape& shape, CUstream stream, gpu::KernelParams params,
                            uint64_t offset, uint32_t count) override {
    return gpu::launchSliceRange(sliced, shape, stream, params, offset, count);
  }
  CUresult launchSliced(CUfunction sliced, const gpu::LaunchShape& shape, CUstream stream, gpu::KernelParams params,
                        uint64_t slices) override {
    return gpu::launchSliced(sliced, shape, stream, params, slices);
  }
  CUresult resetPtb(gpu::PtbControl control, CUstream stream) override { return gpu::resetPtb(control, stream); }
  CUresult launchPtb(CUfunction ptb, const gpu::LaunchShape& shape, CUstream stream, gpu::KernelParams params,
                     gpu::PtbWorkers workers, gpu::PtbControl control) override {
    return gpu::launchPtb(ptb, shape, stream, params, workers, control);
  }
  CUresult launchPtbPreempted(gpu::Gpu* g, CUfunction ptb, const gpu::LaunchShape& shape, CUstream stream,
                              CUstream side, gpu::KernelParams params, gpu::PtbWorkers workers,
                              gpu::PtbControl control, std::span<const uint64_t> thresholds) override {
    if (g->ptbHelpers() == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
    return gpu::launchPtbPreempted(ptb, shape, stream, side, params, workers, control, thresholds, *g->ptbHelpers());
  }
  CUresult launchPtbResumable(gpu::Gpu* g, CUfunction ptb, const gpu::LaunchShape& shape, CUstream stream,
                              gpu::KernelParams params, gpu::PtbWorkers workers, gpu::PtbControl control,
                              CUdeviceptr neverRetreat, unsigned resumes, uint64_t pauseNs) override {
    if (g->ptbHelpers() == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
    return gpu::launchPtbResumable(ptb, shape, stream, params, workers, control, neverRetreat, *g->ptbHelpers(),
                                   resumes, pauseNs);
  }
  CUresult writeValue32(CUstream stream, CUdeviceptr address, uint32_t value) override {
    return cuStreamWriteValue32(stream, address, value, CU_STREAM_WRITE_VALUE_DEFAULT);
  }

  CUresult createEvent(CUevent& event, bool timing) override {
    return cuEventCreate(&event, timing ? CU_EVENT_DEFAULT : CU_EVENT_DISABLE_TIMING);
  }
  CUresult recordEvent(CUevent event, CUstream stream) override { return cuEventRecord(event, stream); }
  CUresult queryEvent(CUevent event) override { return cuEventQuery(event); }
  CUresult elapsedMillis(float& ms, CUevent start, CUevent end) override {
    return cuEventElapsedTime(&ms, start, end);
  }
  void destroyEvent(CUevent event) override { cuEventDestroy(event); }
};

class SteadyClock final : public Clock {
 public:
  Nanos now() override {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  void sleepFor(Nanos duration) override { std::this_thread::sleep_for(std::chrono::nanoseconds(duration)); }
};

}  // namespace

Launcher& driverLauncher() {
  static DriverLauncher launcher;
  return launcher;
}

Clock& steadyClock() {
  static SteadyClock clock;
  return clock;
}

}  // namespace tally::server::scheduler

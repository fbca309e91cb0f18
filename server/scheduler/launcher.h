// The seam between the policies and the GPU. Everything a policy does to a GPU goes through a
// Launcher, and its sense of time through a Clock: DriverLauncher and steadyClock() call the
// driver and the OS; the scheduler tests (tests/scheduler/fake_launcher.h) put a simulated GPU
// and clock behind the same interfaces, so the policies run there unchanged, without a GPU.
// A policy treats gpu::Gpu* as a key only; the launcher is what looks inside it.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <span>
#include <string>
#include <utility>

#include "server/gpu/sm_partitions.h"
#include "server/gpu/variant_launch.h"
#include "server/scheduler/decisions.h"

namespace tally::server::gpu {
class Gpu;
}

namespace tally::server::scheduler {

struct KernelLaunch;

class Clock {
 public:
  virtual ~Clock() = default;
  virtual Nanos now() = 0;  // a steady clock
  // A polling thread's pause (the monitor, a held tenant thread).
  virtual void sleepFor(Nanos duration) = 0;
};

class Launcher {
 public:
  virtual ~Launcher() = default;

  // ---- the GPU, as the policy needs to know it
  virtual void makeCurrent(gpu::Gpu* g) = 0;
  virtual int ordinal(const gpu::Gpu* g) = 0;
  // (least, greatest) CUDA stream priority.
  virtual std::pair<int, int> streamPriorityRange(const gpu::Gpu* g) = 0;
  // Whether the PTB helper kernels (pause, retreat trigger) are loaded in the GPU's context.
  virtual bool hasPtbHelpers(const gpu::Gpu* g) = 0;
  // Blocks of `f` one wave holds at this shape (blocks per SM x SMs); 0: it cannot run it.
  virtual uint64_t waveBlocks(const gpu::Gpu* g, CUfunction f, const gpu::LaunchShape& shape) = 0;
  virtual bool partitionSms(gpu::Gpu* g, gpu::SmPartitionSpec spec, std::string& error) = 0;
  virtual unsigned partitionSmCount(const gpu::Gpu* g, gpu::Placement p) = 0;

  // ---- memory the policy keeps (the GPU's current context)
  virtual CUresult allocMappedHost(size_t bytes, void*& host) = 0;  // pinned, device-mapped, portable
  virtual CUresult mappedDevicePointer(void* host, CUdeviceptr& device) = 0;
  virtual void freeHost(void* host) = 0;
  virtual CUresult allocDevice(size_t bytes, CUdeviceptr& device) = 0;
  virtual void freeDevice(CUdeviceptr device) = 0;

  // ---- stream work
  // k.original as it is, with its attributes if it has any.
  virtual CUresult launchOriginal(const KernelLaunch& k, void** params) = 0;
  // k.chained (transform/chain.h), k has no attributes. With programmatic stream serialization
  // when k.followsKernel: it may start while the stream's previous kernel still runs, and waits
  // for it in the kernel. Otherwise an ordinary launch, whose signal lets the next chained
  // kernel be queued early.
  virtual CUresult launchChained(const KernelLaunch& k, void** params) = 0;
  // Variants (gpu/variant_launch.h has what each does).
  virtual CUresult launchSliceRange(CUfunction sliced, const gpu::LaunchShape& shape, CUstream stream,
                                    gpu::KernelParams params, uint64_t offset, uint32_t count) = 0;
  virtual CUresult launchSliced(CUfunction sliced, const gpu::LaunchShape& shape, CUstream stream,
                                gpu::KernelParams params, uint64_t slices) = 0;
  virtual CUresult resetPtb(gpu::PtbControl control, CUstream stream) = 0;
  virtual CUresult launchPtb(CUfunction ptb, const gpu::LaunchShape& shape, CUstream stream, gpu::KernelParams params,
                             gpu::PtbWorkers workers, gpu::PtbControl control) = 0;
  // With g's PTB helpers (hasPtbHelpers first).
  virtual CUresult launchPtbPreempted(gpu::Gpu* g, CUfunction ptb, const gpu::LaunchShape& shape, CUstream stream,
                                      CUstream side, gpu::KernelParams params, gpu::PtbWorkers workers,
                                      gpu::PtbControl control, std::span<const uint64_t> thresholds) = 0;
  virtual CUresult launchPtbResumable(gpu::Gpu* g, CUfunction ptb, const gpu::LaunchShape& shape, CUstream stream,
                                      gpu::KernelParams params, gpu::PtbWorkers workers, gpu::PtbControl control,
                                      CUdeviceptr neverRetreat, unsigned resumes, uint64_t pauseNs) = 0;
  // The GPU writes `value` to `address` once the stream's work queued before it is done.
  virtual CUresult writeValue32(CUstream stream, CUdeviceptr address, uint32_t value) = 0;

  // ---- events
  virtual CUresult createEvent(CUevent& event, bool timing) = 0;
  virtual CUresult recordEvent(CUevent event, CUstream stream) = 0;
  virtual CUresult queryEvent(CUevent event) = 0;  // CUDA_SUCCESS, CUDA_ERROR_NOT_READY or an error
  virtual CUresult elapsedMillis(float& ms, CUevent start, CUevent end) = 0;
  virtual void destroyEvent(CUevent event) = 0;
};

// The driver's, shared by every policy and by the API's own launches (captured streams).
Launcher& driverLauncher();
Clock& steadyClock();

}  // namespace tally::server::scheduler

// One GPU as tallyd sees it: its primary context (shared by every tenant), what it tells
// clients about itself, and the per-device services (completion watching, pinned staging).
#pragma once

#include "server/gpu/completion_queue.h"
#include "server/gpu/mem_op_kernels.h"
#include "server/gpu/memory_pool.h"
#include "server/gpu/module_pool.h"
#include "server/gpu/sm_partitions.h"
#include "server/gpu/staging_pool.h"
#include "server/gpu/variant_launch.h"

#include <cuda.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace tally::server::gpu {

struct DeviceDescription {
  int ordinal = 0;
  std::string name;
  int major = 0;
  int minor = 0;
  size_t totalMem = 0;
  std::string properties;          // raw cudaDeviceProp bytes
  std::vector<int> attributes;     // index = CUdevice_attribute
  int streamPriorityLeast = 0;
  int streamPriorityGreatest = 0;
  std::string uuid;
};

class Gpu {
 public:
  // Initializes the driver and retains the primary context of every visible device.
  // An empty vector with `error` set means no usable GPU (no driver, no device).
  static std::vector<std::unique_ptr<Gpu>> openAll(std::string& error);

  // Asks the driver for `count` hardware work queues per GPU (CUDA_DEVICE_MAX_CONNECTIONS, read
  // when a context is created, so before openAll; 0 leaves the environment's setting).
  static void requestHardwareQueues(unsigned count);
  // The queues each GPU got: CUDA_DEVICE_MAX_CONNECTIONS, or the driver's default of 8.
  static unsigned hardwareQueues();

  ~Gpu();
  Gpu(const Gpu&) = delete;
  Gpu& operator=(const Gpu&) = delete;

  // Makes this device's primary context current on the calling thread.
  void makeCurrent() const;

  int ordinal() const { return description_.ordinal; }
  CUcontext context() const { return context_; }
  const DeviceDescription& description() const { return description_; }
  // "sm_90": the architecture kernel variants are compiled for.
  std::string arch() const { return "sm_" + std::to_string(description_.major * 10 + description_.minor); }
  int multiprocessors() const;
  // CU_DEVICE_P2P_ATTRIBUTE_* values from this device towards `peer` (index = attribute); all 0
  // towards itself or where the driver does not answer.
  std::vector<int> peerAttributes(const Gpu& peer) const;
  // A driver call that touches no stream: returns the context's sticky error once a kernel faulted.
  CUresult probe() const;
  // The PTB helper kernels (variant_launch.h) in this context, loaded at startup; nullptr if
  // they could not be loaded.
  const PtbHelpers* ptbHelpers() const { return ptbHelpers_.get(); }
  // Kernels standing in for stream memory operations on pool memory (null if they did not load).
  const MemOpKernels* memOpKernels() const { return memOpKernels_.get(); }
  CompletionQueue& completions() { return *completions_; }
  StagingPool& staging() { return *staging_; }
  ModulePool& modulePool() { return *modulePool_; }
  // Device memory for tenants; nullptr when the driver has no pools (then cuMemAlloc).
  MemoryPool* memoryPool() { return memoryPool_.get(); }
  // Splits the SMs into an HP and a BE partition (the scheduler asks at startup, before any
  // tenant); false with `error` when the driver cannot.
  bool partitionSms(SmPartitionSpec spec, std::string& error);
  // The partitions; nullptr when the SMs are not split (every stream then runs on all of them).
  const SmPartitions* partitions() const { return partitions_.get(); }
  // Tenants using this GPU. When the last leaves, idle module instances are unloaded and the
  // memory pool trimmed: no kernel runs then, so neither waits for anyone.
  void tenantArrived();
  void tenantLeft();
  // Driver streams of every tenant on this GPU. Past hardwareQueues() a new stream shares a
  // queue with an older one and waits behind its queued work, whatever their priorities; the
  // first time is logged and tally_gpu_streams exported, so that an operator can tell.
  void streamCreated();
  void streamDestroyed();
  unsigned liveStreams() const { return liveStreams_.load(std::memory_order_relaxed); }

  // Context-wide limits: only raised, never lowered, so no tenant can shrink another's.
  CUresult raiseLimit(CUlimit limit, size_t value);
  CUresult getLimit(CUlimit limit, size_t& value) const;
  // The value a limit had when tallyd started: what a tenant that never set it sees.
  size_t initialLimit(CUlimit limit) const;

 private:
  Gpu(CUdevice device, CUcontext context, DeviceDescription description);
  static void enablePeerAccess(const std::vector<std::unique_ptr<Gpu>>& gpus);

  CUdevice device_;
  CUcontext context_;
  DeviceDescription description_;
  std::unique_ptr<CompletionQueue> completions_;
  std::unique_ptr<StagingPool> staging_;
  std::unique_ptr<PtbHelpers> ptbHelpers_;
  std::unique_ptr<MemOpKernels> memOpKernels_;
  std::unique_ptr<ModulePool> modulePool_;
  std::unique_ptr<MemoryPool> memoryPool_;
  std::unique_ptr<SmPartitions> partitions_;
  std::mutex tenantsMutex_;
  size_t tenants_ = 0;
  std::atomic<unsigned> liveStreams_{0};
  std::atomic<bool> sharingLogged_{false};
  std::mutex limitMutex_;
  std::map<int, size_t> initialLimits_;
};

}  // namespace tally::server::gpu

// Stream memory operations on stream-ordered (pool) memory. The driver refuses
// cuStreamWriteValue*/cuStreamWaitValue* on memory from a memory pool (CUDA_ERROR_INVALID_VALUE,
// measured on the H200, driver 580), and tallyd backs every tenant's cudaMalloc with its pool;
// natively cudaMalloc memory takes them. So for a pooled word tallyd enqueues a one-thread kernel
// instead: a write is a volatile store and a system-wide fence, a wait polls the word (with a
// nanosleep between polls) until the comparison of cuStreamWaitValue holds. A wait kernel holds
// one thread slot of one SM while it waits.
#pragma once

#include <cuda.h>

#include <string>

namespace tally::server::gpu {

class MemOpKernels {
 public:
  MemOpKernels() = default;
  ~MemOpKernels();
  MemOpKernels(const MemOpKernels&) = delete;
  MemOpKernels& operator=(const MemOpKernels&) = delete;

  // Loads the kernels into the current context; false with `error` when it cannot.
  bool load(std::string& error);
  // `bits`: 32 or 64. `flags`: the cuStreamWaitValue flags (the comparison in the low two bits).
  CUresult write(CUstream stream, CUdeviceptr address, uint64_t value, unsigned bits) const;
  CUresult wait(CUstream stream, CUdeviceptr address, uint64_t value, unsigned bits, unsigned flags) const;

 private:
  CUmodule module_ = nullptr;
  CUfunction write32_ = nullptr, write64_ = nullptr, wait32_ = nullptr, wait64_ = nullptr;
};

// Whether `address` lies in memory of a memory pool (the driver's stream memory operations refuse it).
bool isPoolMemory(CUdeviceptr address);

}  // namespace tally::server::gpu

// Tenants' device memory, from one stream-ordered pool per GPU.
//
// cuMemAlloc maps fresh memory and cuMemFree waits for every kernel of the context; both hold
// back other threads' calls while they work (bench/micro/implicit_sync_probe), so in a shared
// context one tenant's allocations stall everyone. The pool keeps freed memory mapped and hands
// it out again; frees are queued on the freeing tenant's own streams (Tenant::free). Memory the
// pool keeps goes back to the system when an allocation would fail without it and when the
// GPU's last tenant leaves (trim: it waits for nobody, per the probe).
#pragma once

#include <cuda.h>

#include <cstddef>
#include <memory>
#include <string>

namespace tally::server::gpu {

class MemoryPool {
 public:
  // The pool of `device`, made with this thread's current context; nullptr and `error` if the
  // driver refuses (the caller then allocates with cuMemAlloc).
  static std::unique_ptr<MemoryPool> create(CUdevice device, std::string& error);
  ~MemoryPool();
  MemoryPool(const MemoryPool&) = delete;
  MemoryPool& operator=(const MemoryPool&) = delete;

  // `size` bytes that every stream may use once this returns. `stream` carries nothing but
  // allocations (so waiting for it waits for no kernel).
  CUresult allocate(size_t size, CUstream stream, CUdeviceptr& out);
  // Gives the memory no allocation uses back to the system.
  void trim();
  // Bytes the pool holds mapped without any allocation in them.
  size_t idleBytes() const;

 private:
  explicit MemoryPool(CUmemoryPool pool) : pool_(pool) {}
  CUmemoryPool pool_;
};

}  // namespace tally::server::gpu

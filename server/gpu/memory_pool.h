// Tenants' device memory, from one stream-ordered pool per GPU.
//
// cuMemAlloc maps fresh memory and cuMemFree waits for every kernel of the context; both hold
// back other threads' calls while they work (bench/micro/implicit_sync_probe), so in a shared
// context one tenant's allocations stall everyone. The pool keeps freed memory mapped and hands
// it out again; frees are queued on the freeing tenant's own streams (Tenant::free). Memory the
// pool keeps goes back to the system when an allocation would fail without it and when the
// GPU's last tenant leaves (trim: it waits for nobody, per the probe).
//
// Freed memory is cleared before it goes back (clearThenFree): the next allocation from the
// pool may be another tenant's, and natively a process never sees another process's data.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <memory>
#include <string>

namespace tally::server::gpu {

// Queues, on `stream`, the clearing of [ptr, ptr+size) and then its free; every free of a
// tenant's device memory (pooled, pitched, PTB control blocks) goes through here.
// Why clear on free, on the freeing tenant's stream: the clearing then runs after that tenant's
// own work (the stream has joined its streams) and before the memory is back in the pool, so no
// other tenant can ever be handed the bytes; the cost falls on the tenant that freed (a memset
// at device bandwidth, ~0.1 ms for 256 MiB on an H200), not on the next allocation, and
// needs no host-side wait. Memory that cannot be cleared is not freed (kept until the context
// goes) rather than handed on with its contents.
CUresult clearThenFree(CUdeviceptr ptr, size_t size, CUstream stream);

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

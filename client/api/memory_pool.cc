// Stream-ordered allocator: cudaMallocAsync / cudaFreeAsync and memory pools (PyTorch's
// PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync). Pools live in tallyd, one set per tenant;
// here a pool is a handle with the wire id of it. The current pool of each device is this
// process's state, as natively; every allocation names its pool explicitly.
#include "client/api/api_util.h"

#include <array>
#include <mutex>

using namespace tally::client;

namespace {

ClientRuntime& rt() { return ClientRuntime::get(); }

// Default and current pools per device; handles live for the process (applications keep them).
struct Pools {
  std::mutex mutex;
  std::array<MemPoolHandle*, kMaxDevices> defaults{};
  std::array<MemPoolHandle*, kMaxDevices> current{};

  MemPoolHandle* defaultOf(uint32_t device) {
    if (defaults[device] == nullptr) {
      defaults[device] = new MemPoolHandle{HandleMagic::kMemPool, device + 1u, device};
      registerHandle(defaults[device]);
    }
    return defaults[device];
  }
};

Pools& pools() {
  static auto* p = new Pools();  // never destroyed: application threads may allocate during exit
  return *p;
}

CUresult checkDevice(int device) {
  if (CUresult r = rt().ready(); r != CUDA_SUCCESS) return r;
  return device < 0 || device >= rt().deviceCount() || device >= kMaxDevices ? CUDA_ERROR_INVALID_DEVICE : CUDA_SUCCESS;
}

MemPoolHandle* checkedPool(const void* pool) { return checkedHandle<MemPoolHandle>(pool, HandleMagic::kMemPool); }

CUresult defaultPool(CUmemoryPool* out, int device) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = checkDevice(device); r != CUDA_SUCCESS) return r;
  std::lock_guard lock(pools().mutex);
  *out = reinterpret_cast<CUmemoryPool>(pools().defaultOf(static_cast<uint32_t>(device)));
  return CUDA_SUCCESS;
}

CUresult currentPool(CUmemoryPool* out, int device) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = checkDevice(device); r != CUDA_SUCCESS) return r;
  std::lock_guard lock(pools().mutex);
  MemPoolHandle* p = pools().current[device];
  *out = reinterpret_cast<CUmemoryPool>(p != nullptr ? p : pools().defaultOf(static_cast<uint32_t>(device)));
  return CUDA_SUCCESS;
}

CUresult setCurrentPool(int device, CUmemoryPool pool) {
  if (CUresult r = checkDevice(device); r != CUDA_SUCCESS) return r;
  MemPoolHandle* p = checkedPool(pool);
  if (p == nullptr || p->device != static_cast<uint32_t>(device)) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(pools().mutex);
  pools().current[device] = p;
  return CUDA_SUCCESS;
}

// Only what tallyd can honour: device memory of one of its devices, no exportable handles.
CUresult createPool(CUmemoryPool* out, const CUmemPoolProps* props) {
  if (out == nullptr || props == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED || props->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (CUresult r = checkDevice(props->location.id); r != CUDA_SUCCESS) return r;
  if (props->handleTypes != CU_MEM_HANDLE_TYPE_NONE) return CUDA_ERROR_NOT_SUPPORTED;
  auto* p = new MemPoolHandle{HandleMagic::kMemPool, rt().newHandleId(), static_cast<uint32_t>(props->location.id)};
  CUresult r = rt().call([&](wire::Call::Builder c) {
    auto create = c.initMemPool().initCreate();
    create.setPool(p->id);
    create.setDevice(p->device);
    create.setMaxSize(props->maxSize);
  });
  if (r != CUDA_SUCCESS) {
    delete p;
    return r;
  }
  registerHandle(p);
  *out = reinterpret_cast<CUmemoryPool>(p);
  return CUDA_SUCCESS;
}

CUresult destroyPool(CUmemoryPool pool) {
  if (CUresult r = rt().ready(); r != CUDA_SUCCESS) return r;
  MemPoolHandle* p = checkedPool(pool);
  if (p == nullptr || p->id < (1u << 16)) return CUDA_ERROR_INVALID_VALUE;  // default pools are never destroyed
  CUresult r = rt().call([&](wire::Call::Builder c) { c.initMemPool().initDestroy().setPool(p->id); });
  if (r != CUDA_SUCCESS) return r;
  {
    // A destroyed current pool leaves its device with the default one, as natively.
    std::lock_guard lock(pools().mutex);
    if (pools().current[p->device] == p) pools().current[p->device] = nullptr;
  }
  handleRegistry().remove(p);
  delete p;
  return CUDA_SUCCESS;
}

// `pool` nullptr: the current pool of the stream's device. The address is tallyd's and valid in
// the order of `stream`, as natively.
CUresult allocAsync(CUdeviceptr* out, size_t size, CUmemoryPool pool, CUstream stream, bool zeroIsNull) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = rt().ready(); r != CUDA_SUCCESS) return r;
  if (size == 0) {
    *out = 0;
    return zeroIsNull ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  }
  uint64_t streamId = rt().streamId(stream);
  if (streamId == 0) return CUDA_ERROR_INVALID_HANDLE;
  MemPoolHandle* p = nullptr;
  if (pool == nullptr) {
    CUmemoryPool current = nullptr;
    if (CUresult r = currentPool(&current, static_cast<int>(rt().streamDevice(stream))); r != CUDA_SUCCESS) return r;
    p = reinterpret_cast<MemPoolHandle*>(current);
  } else if ((p = checkedPool(pool)) == nullptr) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  ReplyMessage reply;
  CUresult r = rt().call([&](wire::Call::Builder c) {
    auto a = c.initMemPool().initAllocAsync();
    a.setPool(p->id);
    a.setStream(streamId);
    a.setSize(size);
  }, &reply);
  if (r != CUDA_SUCCESS) return r;
  *out = reply.reply().getValue();
  rt().addDeviceRegion(*out, {.size = size, .device = p->device, .streamOrdered = true, .allocation = true});
  return CUDA_SUCCESS;
}

// One-way, like the native call: an address that is not an allocation of ours is refused here
// (tallyd checks again).
CUresult freeAsync(CUdeviceptr ptr, CUstream stream, bool nullIsFine) {
  if (CUresult r = rt().ready(); r != CUDA_SUCCESS) return r;
  if (ptr == 0) return nullIsFine ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  auto region = rt().findDeviceRegion(ptr);
  if (!region || region->first != ptr) return CUDA_ERROR_INVALID_VALUE;
  uint64_t streamId = rt().streamId(stream);
  if (streamId == 0) return CUDA_ERROR_INVALID_HANDLE;
  CUresult r = rt().post([&](wire::Call::Builder c) {
    auto f = c.initMemPool().initFreeAsync();
    f.setPtr(ptr);
    f.setStream(streamId);
  });
  if (r == CUDA_SUCCESS) rt().removeDeviceRegion(ptr);
  return r;
}

// Reuse flags are ints, the memory figures cuuint64_t (cuMemPoolSetAttribute's value types).
bool isIntAttribute(int attribute) {
  return attribute >= CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES &&
         attribute <= CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES;
}

bool isKnownAttribute(int attribute) {
  return attribute >= CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES && attribute <= CU_MEMPOOL_ATTR_USED_MEM_HIGH;
}

CUresult setAttribute(CUmemoryPool pool, int attribute, const void* value) {
  if (CUresult r = rt().ready(); r != CUDA_SUCCESS) return r;
  MemPoolHandle* p = checkedPool(pool);
  if (p == nullptr || value == nullptr || !isKnownAttribute(attribute)) return CUDA_ERROR_INVALID_VALUE;
  uint64_t wide = isIntAttribute(attribute) ? static_cast<uint64_t>(*static_cast<const int*>(value))
                                            : *static_cast<const cuuint64_t*>(value);
  return rt().call([&](wire::Call::Builder c) {
    auto a = c.initMemPool().initSetAttribute();
    a.setPool(p->id);
    a.setAttribute(static_cast<uint32_t>(attribute));
    a.setValue(wide);
  });
}

CUresult getAttribute(CUmemoryPool pool, int attribute, void* value) {
  if (CUresult r = rt().ready(); r != CUDA_SUCCESS) return r;
  MemPoolHandle* p = checkedPool(pool);
  if (p == nullptr || value == nullptr || !isKnownAttribute(attribute)) return CUDA_ERROR_INVALID_VALUE;
  ReplyMessage reply;
  CUresult r = rt().call([&](wire::Call::Builder c) {
    auto a = c.initMemPool().initGetAttribute();
    a.setPool(p->id);
    a.setAttribute(static_cast<uint32_t>(attribute));
  }, &reply);
  if (r != CUDA_SUCCESS) return r;
  uint64_t wide = reply.reply().getValue();
  if (isIntAttribute(attribute)) {
    *static_cast<int*>(value) = static_cast<int>(wide);
  } else {
    *static_cast<cuuint64_t*>(value) = wide;
  }
  return CUDA_SUCCESS;
}

CUresult trimTo(CUmemoryPool pool, size_t minBytesToKeep) {
  if (CUresult r = rt().ready(); r != CUDA_SUCCESS) return r;
  MemPoolHandle* p = checkedPool(pool);
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return rt().call([&](wire::Call::Builder c) {
    auto t = c.initMemPool().initTrimTo();
    t.setPool(p->id);
    t.setMinBytesToKeep(minBytesToKeep);
  });
}

CUmemoryPool driverPool(cudaMemPool_t pool) { return reinterpret_cast<CUmemoryPool>(pool); }

}  // namespace

// --- runtime -----------------------------------------------------------------------------------

TALLY_API cudaError_t cudaMallocAsync(void** ptr, size_t size, cudaStream_t stream) {
  return guardRuntime(__func__, [&] { return allocAsync(reinterpret_cast<CUdeviceptr*>(ptr), size, nullptr, stream, true); });
}
TALLY_API cudaError_t cudaMallocAsync_ptsz(void** ptr, size_t size, cudaStream_t stream) {
  return guardRuntime(__func__, [&] {
    return allocAsync(reinterpret_cast<CUdeviceptr*>(ptr), size, nullptr, perThreadDefault(stream), true);
  });
}
TALLY_API cudaError_t cudaMallocFromPoolAsync(void** ptr, size_t size, cudaMemPool_t pool, cudaStream_t stream) {
  return guardRuntime(__func__, [&] {
    if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
    return allocAsync(reinterpret_cast<CUdeviceptr*>(ptr), size, driverPool(pool), stream, true);
  });
}
TALLY_API cudaError_t cudaMallocFromPoolAsync_ptsz(void** ptr, size_t size, cudaMemPool_t pool, cudaStream_t stream) {
  return guardRuntime(__func__, [&] {
    if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
    return allocAsync(reinterpret_cast<CUdeviceptr*>(ptr), size, driverPool(pool), perThreadDefault(stream), true);
  });
}
TALLY_API cudaError_t cudaFreeAsync(void* ptr, cudaStream_t stream) {
  return guardRuntime(__func__, [&] { return freeAsync(reinterpret_cast<CUdeviceptr>(ptr), stream, true); });
}
TALLY_API cudaError_t cudaFreeAsync_ptsz(void* ptr, cudaStream_t stream) {
  return guardRuntime(__func__, [&] { return freeAsync(reinterpret_cast<CUdeviceptr>(ptr), perThreadDefault(stream), true); });
}
TALLY_API cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device) {
  return guardRuntime(__func__, [&] { return defaultPool(reinterpret_cast<CUmemoryPool*>(pool), device); });
}
TALLY_API cudaError_t cudaDeviceGetMemPool(cudaMemPool_t* pool, int device) {
  return guardRuntime(__func__, [&] { return currentPool(reinterpret_cast<CUmemoryPool*>(pool), device); });
}
TALLY_API cudaError_t cudaDeviceSetMemPool(int device, cudaMemPool_t pool) {
  return guardRuntime(__func__, [&] { return setCurrentPool(device, driverPool(pool)); });
}
TALLY_API cudaError_t cudaMemPoolCreate(cudaMemPool_t* pool, const cudaMemPoolProps* props) {
  static_assert(sizeof(cudaMemPoolProps) == sizeof(CUmemPoolProps));
  return guardRuntime(__func__, [&] {
    return createPool(reinterpret_cast<CUmemoryPool*>(pool), reinterpret_cast<const CUmemPoolProps*>(props));
  });
}
TALLY_API cudaError_t cudaMemPoolDestroy(cudaMemPool_t pool) {
  return guardRuntime(__func__, [&] { return destroyPool(driverPool(pool)); });
}
TALLY_API cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) {
  return guardRuntime(__func__, [&] { return setAttribute(driverPool(pool), attr, value); });
}
TALLY_API cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) {
  return guardRuntime(__func__, [&] { return getAttribute(driverPool(pool), attr, value); });
}
TALLY_API cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t minBytesToKeep) {
  return guardRuntime(__func__, [&] { return trimTo(driverPool(pool), minBytesToKeep); });
}

// --- driver ------------------------------------------------------------------------------------

TALLY_API CUresult cuMemAllocAsync(CUdeviceptr* ptr, size_t size, CUstream stream) {
  return guardDriver(__func__, [&] { return allocAsync(ptr, size, nullptr, stream, false); });
}
TALLY_API CUresult cuMemAllocAsync_ptsz(CUdeviceptr* ptr, size_t size, CUstream stream) {
  return guardDriver(__func__, [&] { return allocAsync(ptr, size, nullptr, perThreadDefault(stream), false); });
}
TALLY_API CUresult cuMemAllocFromPoolAsync(CUdeviceptr* ptr, size_t size, CUmemoryPool pool, CUstream stream) {
  return guardDriver(__func__, [&] {
    return pool == nullptr ? CUDA_ERROR_INVALID_VALUE : allocAsync(ptr, size, pool, stream, false);
  });
}
TALLY_API CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* ptr, size_t size, CUmemoryPool pool, CUstream stream) {
  return guardDriver(__func__, [&] {
    return pool == nullptr ? CUDA_ERROR_INVALID_VALUE : allocAsync(ptr, size, pool, perThreadDefault(stream), false);
  });
}
TALLY_API CUresult cuMemFreeAsync(CUdeviceptr ptr, CUstream stream) {
  return guardDriver(__func__, [&] { return freeAsync(ptr, stream, false); });
}
TALLY_API CUresult cuMemFreeAsync_ptsz(CUdeviceptr ptr, CUstream stream) {
  return guardDriver(__func__, [&] { return freeAsync(ptr, perThreadDefault(stream), false); });
}
TALLY_API CUresult cuDeviceGetDefaultMemPool(CUmemoryPool* pool, CUdevice device) {
  return guardDriver(__func__, [&] { return defaultPool(pool, device); });
}
TALLY_API CUresult cuDeviceGetMemPool(CUmemoryPool* pool, CUdevice device) {
  return guardDriver(__func__, [&] { return currentPool(pool, device); });
}
TALLY_API CUresult cuDeviceSetMemPool(CUdevice device, CUmemoryPool pool) {
  return guardDriver(__func__, [&] { return setCurrentPool(device, pool); });
}
TALLY_API CUresult cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* props) {
  return guardDriver(__func__, [&] { return createPool(pool, props); });
}
TALLY_API CUresult cuMemPoolDestroy(CUmemoryPool pool) {
  return guardDriver(__func__, [&] { return destroyPool(pool); });
}
TALLY_API CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  return guardDriver(__func__, [&] { return setAttribute(pool, attr, value); });
}
TALLY_API CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  return guardDriver(__func__, [&] { return getAttribute(pool, attr, value); });
}
TALLY_API CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep) {
  return guardDriver(__func__, [&] { return trimTo(pool, minBytesToKeep); });
}

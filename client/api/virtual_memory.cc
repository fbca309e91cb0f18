// Virtual memory management (cuMemCreate, cuMemAddressReserve, cuMemMap, ...), the driver API
// behind PyTorch's expandable_segments (resolved through cudaGetDriverEntryPointByVersion).
// Allocation handles are ids this client issues; tallyd keeps the driver's handles, the
// reservations and the mappings, and checks that each names the tenant's own (docs/security.md).
// The properties each handle was created with stay here, where the application gave them.
#include "client/api/api_util.h"
#include "client/entry/not_supported.h"

#include <mutex>
#include <optional>
#include <unordered_map>

using namespace tally::client;

namespace {

ClientRuntime& rt() { return ClientRuntime::get(); }

// What cuMemCreate was given for each live handle (cuMemGetAllocationPropertiesFromHandle).
// Counted as the driver counts a handle's references: cuMemCreate, each
// cuMemRetainAllocationHandle and each mapping add one; cuMemRelease and cuMemUnmap drop one.
// So a handle released while still mapped keeps its properties, and retaining it gives them back.
class AllocationProperties {
 public:
  void created(CUmemGenericAllocationHandle handle, const CUmemAllocationProp& prop) {
    std::lock_guard lock(mutex_);
    entries_[handle] = Entry{prop, 1};
  }
  void retained(CUmemGenericAllocationHandle handle) {
    std::lock_guard lock(mutex_);
    if (auto it = entries_.find(handle); it != entries_.end()) ++it->second.references;
  }
  void released(CUmemGenericAllocationHandle handle) {
    std::lock_guard lock(mutex_);
    drop(handle);
  }
  void mapped(CUdeviceptr ptr, CUmemGenericAllocationHandle handle) {
    std::lock_guard lock(mutex_);
    if (auto it = entries_.find(handle); it != entries_.end()) {
      ++it->second.references;
      mappings_[ptr] = handle;
    }
  }
  void unmapped(CUdeviceptr ptr) {
    std::lock_guard lock(mutex_);
    if (auto it = mappings_.find(ptr); it != mappings_.end()) {
      drop(it->second);
      mappings_.erase(it);
    }
  }
  std::optional<CUmemAllocationProp> of(CUmemGenericAllocationHandle handle) {
    std::lock_guard lock(mutex_);
    auto it = entries_.find(handle);
    return it != entries_.end() ? std::optional(it->second.prop) : std::nullopt;
  }

 private:
  struct Entry {
    CUmemAllocationProp prop;
    unsigned references;
  };
  void drop(CUmemGenericAllocationHandle handle) {
    if (auto it = entries_.find(handle); it != entries_.end() && --it->second.references == 0) entries_.erase(it);
  }
  std::mutex mutex_;
  std::unordered_map<CUmemGenericAllocationHandle, Entry> entries_;
  std::unordered_map<CUdeviceptr, CUmemGenericAllocationHandle> mappings_;  // by mapping start
};

AllocationProperties& allocationProperties() {
  static auto* properties = new AllocationProperties();  // never destroyed: exit-time calls may read it
  return *properties;
}

// Device memory of one of tallyd's devices is all there is; exportable handle types are
// dropped by tallyd (nothing is exported as a file descriptor).
CUresult checkProperties(const CUmemAllocationProp* prop) {
  if (prop == nullptr || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (CUresult r = rt().ready(); r != CUDA_SUCCESS) return r;
  return prop->location.id < 0 || prop->location.id >= rt().deviceCount() ? CUDA_ERROR_INVALID_DEVICE : CUDA_SUCCESS;
}

CUresult granularity(size_t* out, const CUmemAllocationProp* prop, CUmemAllocationGranularity_flags option) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = checkProperties(prop); r != CUDA_SUCCESS) return r;
  ReplyMessage reply;
  CUresult r = rt().call([&](wire::Call::Builder c) {
    auto g = c.initVirtualMemory().initGranularity();
    g.setDevice(static_cast<uint32_t>(prop->location.id));
    g.setRecommended(option == CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
  }, &reply);
  if (r == CUDA_SUCCESS) *out = reply.reply().getValue();
  return r;
}

CUresult create(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                unsigned long long flags) {
  if (handle == nullptr || size == 0 || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = checkProperties(prop); r != CUDA_SUCCESS) return r;
  uint64_t id = rt().newHandleId();
  CUresult r = rt().call([&](wire::Call::Builder c) {
    auto m = c.initVirtualMemory().initCreate();
    m.setHandle(id);
    m.setDevice(static_cast<uint32_t>(prop->location.id));
    m.setSize(size);
    m.setGpuDirectRdmaCapable(prop->allocFlags.gpuDirectRDMACapable != 0);
  });
  if (r != CUDA_SUCCESS) return r;
  *handle = id;
  allocationProperties().created(id, *prop);
  return CUDA_SUCCESS;
}

CUresult release(CUmemGenericAllocationHandle handle) {
  if (CUresult r = rt().ready(); r != CUDA_SUCCESS) return r;
  CUresult r = rt().call([&](wire::Call::Builder c) { c.initVirtualMemory().initRelease().setHandle(handle); });
  if (r == CUDA_SUCCESS) allocationProperties().released(handle);
  return r;
}

CUresult propertiesOf(CUmemAllocationProp* prop, CUmemGenericAllocationHandle handle) {
  if (prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::optional<CUmemAllocationProp> known = allocationProperties().of(handle);
  if (!known) return CUDA_ERROR_INVALID_VALUE;
  *prop = *known;
  return CUDA_SUCCESS;
}

CUresult reserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr hint, unsigned long long flags) {
  if (ptr == nullptr || size == 0 || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = rt().ready(); r != CUDA_SUCCESS) return r;
  ReplyMessage reply;
  CUresult r = rt().call([&](wire::Call::Builder c) {
    auto v = c.initVirtualMemory().initAddressReserve();
    v.setSize(size);
    v.setAlignment(alignment);
    v.setHint(hint);
  }, &reply);
  if (r == CUDA_SUCCESS) *ptr = reply.reply().getValue();
  return r;
}

CUresult rangeCall(CUdeviceptr ptr, size_t size, bool unmap) {
  if (CUresult r = rt().ready(); r != CUDA_SUCCESS) return r;
  return rt().call([&](wire::Call::Builder c) {
    auto v = unmap ? c.initVirtualMemory().initUnmap() : c.initVirtualMemory().initAddressFree();
    v.setPtr(ptr);
    v.setSize(size);
  });
}

// A mapped range is device memory of ours from now on (cudaMemcpyDefault, pointer attributes).
CUresult map(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle, unsigned long long flags) {
  if (flags != 0 || size == 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = rt().ready(); r != CUDA_SUCCESS) return r;
  CUresult r = rt().call([&](wire::Call::Builder c) {
    auto m = c.initVirtualMemory().initMap();
    m.setPtr(ptr);
    m.setSize(size);
    m.setOffset(offset);
    m.setHandle(handle);
  });
  if (r != CUDA_SUCCESS) return r;
  rt().addDeviceRegion(ptr, {.size = size, .device = currentDevice()});
  allocationProperties().mapped(ptr, handle);
  return CUDA_SUCCESS;
}

CUresult unmap(CUdeviceptr ptr, size_t size) {
  CUresult r = rangeCall(ptr, size, true);
  if (r != CUDA_SUCCESS) return r;
  for (CUdeviceptr at = ptr; at < ptr + size;) {  // the mappings that tiled the range
    auto region = rt().findDeviceRegion(at);
    if (!region || region->first != at || region->second.size == 0) break;
    rt().removeDeviceRegion(at);
    allocationProperties().unmapped(at);
    at += region->second.size;
  }
  return CUDA_SUCCESS;
}

CUresult setAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  if (desc == nullptr || count == 0 || size == 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = rt().ready(); r != CUDA_SUCCESS) return r;
  for (size_t i = 0; i < count; ++i) {
    if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
    if (desc[i].location.id < 0 || desc[i].location.id >= rt().deviceCount()) return CUDA_ERROR_INVALID_DEVICE;
  }
  return rt().call([&](wire::Call::Builder c) {
    auto a = c.initVirtualMemory().initSetAccess();
    a.setPtr(ptr);
    a.setSize(size);
    auto list = a.initAccess(static_cast<unsigned>(count));
    for (size_t i = 0; i < count; ++i) {
      list[i].setDevice(static_cast<uint32_t>(desc[i].location.id));
      list[i].setFlags(static_cast<uint32_t>(desc[i].flags));
    }
  });
}

CUresult getAccess(unsigned long long* flags, const CUmemLocation* location, CUdeviceptr ptr) {
  if (flags == nullptr || location == nullptr || location->type != CU_MEM_LOCATION_TYPE_DEVICE) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (CUresult r = rt().ready(); r != CUDA_SUCCESS) return r;
  ReplyMessage reply;
  CUresult r = rt().call([&](wire::Call::Builder c) {
    auto a = c.initVirtualMemory().initGetAccess();
    a.setPtr(ptr);
    a.setDevice(static_cast<uint32_t>(location->id));
  }, &reply);
  if (r == CUDA_SUCCESS) *flags = reply.reply().getValue();
  return r;
}

CUresult retain(CUmemGenericAllocationHandle* handle, void* addr) {
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = rt().ready(); r != CUDA_SUCCESS) return r;
  ReplyMessage reply;
  CUresult r = rt().call([&](wire::Call::Builder c) {
    c.initVirtualMemory().initRetainHandle().setPtr(reinterpret_cast<uint64_t>(addr));
  }, &reply);
  if (r != CUDA_SUCCESS) return r;
  *handle = reply.reply().getValue();
  allocationProperties().retained(*handle);
  return CUDA_SUCCESS;
}

// Sharing an allocation with another process through a file descriptor or fabric handle: tallyd
// exports nothing (its tenants share memory by CUDA IPC instead). Natively a handle type the
// allocation was not created for gets the same answer.
CUresult shareableHandlesNotSupported(const char* api) {
  reportNotSupported(api);
  return CUDA_ERROR_NOT_SUPPORTED;
}

}  // namespace

TALLY_API CUresult cuMemGetAllocationGranularity(size_t* granularityOut, const CUmemAllocationProp* prop,
                                                 CUmemAllocationGranularity_flags option) {
  return guardDriver(__func__, [&] { return granularity(granularityOut, prop, option); });
}
TALLY_API CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                               unsigned long long flags) {
  return guardDriver(__func__, [&] { return create(handle, size, prop, flags); });
}
TALLY_API CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  return guardDriver(__func__, [&] { return release(handle); });
}
TALLY_API CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                       unsigned long long flags) {
  return guardDriver(__func__, [&] { return reserve(ptr, size, alignment, addr, flags); });
}
TALLY_API CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  return guardDriver(__func__, [&] { return rangeCall(ptr, size, false); });
}
TALLY_API CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                            unsigned long long flags) {
  return guardDriver(__func__, [&] { return map(ptr, size, offset, handle, flags); });
}
TALLY_API CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  return guardDriver(__func__, [&] { return unmap(ptr, size); });
}
TALLY_API CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  return guardDriver(__func__, [&] { return setAccess(ptr, size, desc, count); });
}
TALLY_API CUresult cuMemGetAccess(unsigned long long* flags, const CUmemLocation* location, CUdeviceptr ptr) {
  return guardDriver(__func__, [&] { return getAccess(flags, location, ptr); });
}
TALLY_API CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  return guardDriver(__func__, [&] { return retain(handle, addr); });
}
TALLY_API CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop,
                                                          CUmemGenericAllocationHandle handle) {
  return guardDriver(__func__, [&] { return propertiesOf(prop, handle); });
}
TALLY_API CUresult cuMemExportToShareableHandle(void*, CUmemGenericAllocationHandle, CUmemAllocationHandleType,
                                                unsigned long long) {
  return shareableHandlesNotSupported(__func__);
}
TALLY_API CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle*, void*, CUmemAllocationHandleType) {
  return shareableHandlesNotSupported(__func__);
}

// Managed memory (cudaMallocManaged, cuMemAllocManaged, prefetch and advice). The client has no
// GPU, so nothing can migrate pages between it and the device. Instead managed memory is pinned
// memory shared with tallyd (a memfd, as for cudaMallocHost over a Unix socket) that tallyd maps
// and registers at the application's own address: the driver's device pointer for registered
// memory is then that same address, so one pointer is valid on the host and in kernels, as
// natively. Kernels reach it over the bus (zero-copy), which is coherent at every point but
// slower than device memory for kernels that read it many times; prefetches and advice are
// accepted and change nothing (docs/compatibility.md, "Managed memory").
//
// Needs shared memory (a Unix socket to tallyd) and the address free in tallyd's address space;
// otherwise the allocation answers NotSupported and says why. `__managed__` variables are not
// supported: their storage is the driver's, in tallyd.
#include "client/api/api_util.h"

#include <sys/mman.h>

using namespace tally::client;

namespace {

ClientRuntime& rt() { return ClientRuntime::get(); }

constexpr size_t kPage = 4096;

CUresult allocateManaged(void** out, size_t size, unsigned flags) {
  if (out == nullptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
  if (flags != cudaMemAttachGlobal && flags != cudaMemAttachHost) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = rt().ready(); r != CUDA_SUCCESS) return r;
  if (!rt().sharedHostMemory()) {
    spdlog::warn("tally: cudaMallocManaged needs memory shared with tallyd (a Unix socket); not supported here");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  const size_t rounded = (size + kPage - 1) / kPage * kPage;
  if (rounded < size) return CUDA_ERROR_INVALID_VALUE;
  void* p = nullptr;
  uint64_t deviceAddress = 0;
  if (CUresult r = rt().mapSharedHostMemory(rounded, p, deviceAddress); r != CUDA_SUCCESS) return r;
  if (deviceAddress != reinterpret_cast<uint64_t>(p)) {
    // tallyd mapped it elsewhere (the address was taken there) or the driver gave it another
    // device address: one pointer would not serve both sides.
    spdlog::warn("tally: cudaMallocManaged: tallyd could not map {} bytes at the application's address 0x{:x} "
                 "(device address 0x{:x}); not supported",
                 rounded, reinterpret_cast<uint64_t>(p), deviceAddress);
    rt().call([&](wire::Call::Builder c) { c.initHostUnregister().setClientAddress(reinterpret_cast<uint64_t>(p)); });
    ::munmap(p, rounded);
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  HostRegion region{rounded, cudaHostAllocMapped | cudaHostAllocPortable, true, deviceAddress};
  region.managed = true;
  rt().addHostRegion(p, region);
  *out = p;
  return CUDA_SUCCESS;
}

// The range lies in managed memory of this process.
bool isManagedRange(const void* ptr, size_t count) {
  auto found = rt().findHostRegion(ptr);
  if (!found || !found->second.managed) return false;
  return reinterpret_cast<uintptr_t>(ptr) - found->first + count <= found->second.size;
}

// Prefetch and advice: accepted for managed memory (there is nothing to move), refused for
// anything else as natively.
CUresult acceptHint(const void* ptr, size_t count) {
  if (CUresult r = rt().ready(); r != CUDA_SUCCESS) return r;
  if (ptr == nullptr || count == 0 || !isManagedRange(ptr, count)) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

}  // namespace

TALLY_API cudaError_t cudaMallocManaged(void** ptr, size_t size, unsigned int flags) {
  return guardRuntime(__func__, [&] { return allocateManaged(ptr, size, flags); });
}

TALLY_API CUresult cuMemAllocManaged(CUdeviceptr* ptr, size_t size, unsigned int flags) {
  return guardDriver(__func__, [&] { return allocateManaged(reinterpret_cast<void**>(ptr), size, flags); });
}

TALLY_API cudaError_t cudaMemPrefetchAsync(const void* ptr, size_t count, cudaMemLocation, unsigned int,
                                           cudaStream_t stream) {
  return guardRuntime(__func__, [&] {
    if (rt().streamId(stream) == 0) return CUDA_ERROR_INVALID_HANDLE;
    return acceptHint(ptr, count);
  });
}

TALLY_API cudaError_t cudaMemAdvise(const void* ptr, size_t count, cudaMemoryAdvise, cudaMemLocation) {
  return guardRuntime(__func__, [&] { return acceptHint(ptr, count); });
}

TALLY_API cudaError_t cudaStreamAttachMemAsync(cudaStream_t stream, void* ptr, size_t length, unsigned int) {
  return guardRuntime(__func__, [&] {
    if (rt().streamId(stream) == 0) return CUDA_ERROR_INVALID_HANDLE;
    // Length 0 attaches the whole allocation.
    return acceptHint(ptr, length == 0 ? 1 : length);
  });
}

TALLY_API CUresult cuMemPrefetchAsync(CUdeviceptr ptr, size_t count, CUmemLocation, unsigned int, CUstream stream) {
  return guardDriver(__func__, [&] {
    if (rt().streamId(stream) == 0) return CUDA_ERROR_INVALID_HANDLE;
    return acceptHint(reinterpret_cast<const void*>(ptr), count);
  });
}

TALLY_API CUresult cuMemAdvise(CUdeviceptr ptr, size_t count, CUmem_advise, CUmemLocation) {
  return guardDriver(__func__, [&] { return acceptHint(reinterpret_cast<const void*>(ptr), count); });
}

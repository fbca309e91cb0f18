#include "server/gpu/virtual_memory.h"

namespace tally::server::gpu {

CUresult unmapAfter(CUdeviceptr ptr, size_t size, CUstream stream, bool clear) {
  if (clear) {
    if (CUresult r = cuMemsetD8Async(ptr, 0, size, stream); r != CUDA_SUCCESS) return r;
  }
  if (CUresult r = cuStreamSynchronize(stream); r != CUDA_SUCCESS) return r;
  return cuMemUnmap(ptr, size);
}

namespace {

// Maps `handle` at a fresh address for as long as it takes to clear it.
CUresult clearThroughTemporaryMapping(CUmemGenericAllocationHandle handle, size_t size, CUdevice device,
                                      CUstream stream) {
  CUdeviceptr va = 0;
  if (CUresult r = cuMemAddressReserve(&va, size, 0, 0, 0); r != CUDA_SUCCESS) return r;
  CUresult r = cuMemMap(va, size, 0, handle, 0);
  if (r == CUDA_SUCCESS) {
    CUmemAccessDesc access{};
    access.location = {CU_MEM_LOCATION_TYPE_DEVICE, device};
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    r = cuMemSetAccess(va, size, &access, 1);
    if (r == CUDA_SUCCESS) r = cuMemsetD8Async(va, 0, size, stream);
    if (r == CUDA_SUCCESS) r = cuStreamSynchronize(stream);
    CUresult unmapped = cuMemUnmap(va, size);
    if (r == CUDA_SUCCESS) r = unmapped;
  }
  cuMemAddressFree(va, size);
  return r;
}

}  // namespace

CUresult clearThenRelease(CUmemGenericAllocationHandle handle, size_t size, CUdevice device, bool mayHoldData,
                          CUstream stream) {
  if (mayHoldData) {
    // Memory that cannot be cleared is kept (until the context goes) rather than handed on.
    if (CUresult r = clearThroughTemporaryMapping(handle, size, device, stream); r != CUDA_SUCCESS) return r;
  }
  return cuMemRelease(handle);
}

}  // namespace tally::server::gpu

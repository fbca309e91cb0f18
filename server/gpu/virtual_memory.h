// Driver edge of tenants' virtual memory (cuMemCreate / cuMemMap), shared by the API handlers
// and the end of a tenancy. Physical memory that leaves a tenant is cleared first, as pooled
// memory is (memory_pool.h): the driver may hand the pages to another tenant's allocation.
#pragma once

#include <cuda.h>

#include <cstddef>

namespace tally::server::gpu {

// Waits for `stream` (a tenant stream joined with all its others), clearing [ptr, ptr+size)
// first when `clear`, then unmaps the range: no work of the tenant can touch it afterwards.
CUresult unmapAfter(CUdeviceptr ptr, size_t size, CUstream stream, bool clear);

// Releases an allocation handle of `size` bytes on `device`. When it `mayHoldData` (it was
// mapped and its last mapping did not clear it), it is mapped once more, cleared and unmapped
// first, on `stream`.
CUresult clearThenRelease(CUmemGenericAllocationHandle handle, size_t size, CUdevice device, bool mayHoldData,
                          CUstream stream);

}  // namespace tally::server::gpu

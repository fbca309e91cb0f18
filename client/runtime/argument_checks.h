// Checks of what the application passes to the copy and memset families, made before anything
// is sent, answered with the error code the native runtime/driver returns for the same input.
// Pure functions of their arguments (and of which host pages are mapped), so tests call them
// directly.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace tally::client {

// A copy of `height` rows of `width` bytes; a flat copy is one row with both pitches = width.
struct Copy2D {
  uint64_t dst;
  size_t dstPitch;
  uint64_t src;
  size_t srcPitch;
  size_t width;
  size_t height;
  // Bytes from the first byte of the first row to the last byte of the last row; only
  // meaningful once checkCopyShape accepted the copy (it cannot overflow then).
  size_t extent(size_t pitch) const { return height == 0 ? 0 : pitch * (height - 1) + width; }
};

// Sizes of a non-empty copy: pitches no smaller than the width (else cudaErrorInvalidPitchValue,
// as cudaMemcpy2D), pitch * (height - 1) + width and address + extent within range (else
// CUDA_ERROR_INVALID_VALUE), no null address (CUDA_ERROR_INVALID_VALUE).
CUresult checkCopyShape(const Copy2D& c);

enum class HostAccess { kRead, kWrite };
// Host rows of a copy: the source must be readable, the destination writable — probed at the
// first byte of every row and the last byte (host_memory.h), without a signal. A hole further in
// is caught by the copy itself (host_memory::copyIn/copyOut). CUDA_ERROR_INVALID_VALUE, as natively.
CUresult checkHostRows(uint64_t address, size_t width, size_t pitch, size_t height, HostAccess access);

// cuMemsetD8/16/32[2D] and cudaMemset[2D]: `width` elements of `elementSize` bytes per row.
struct MemsetShape {
  CUdeviceptr dst;
  unsigned elementSize;
  size_t width;
  size_t height;
  size_t pitch;  // bytes
};
// Non-null dst aligned to the element size, element size 1, 2 or 4, width * elementSize,
// pitch * (height - 1) + row bytes and dst + extent within range, pitch no smaller than a row.
CUresult checkMemsetShape(const MemsetShape& m);

}  // namespace tally::client

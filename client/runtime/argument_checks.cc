#include "client/runtime/argument_checks.h"

#include "client/transport/host_memory.h"

#include <limits>

namespace tally::client {

namespace {

constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

// pitch * (rows - 1) + rowBytes, or nothing if it does not fit in 64 bits.
bool rowsExtent(size_t rowBytes, size_t pitch, size_t rows, uint64_t& extent) {
  if (rows > 1 && pitch > (kMax - rowBytes) / (rows - 1)) return false;
  extent = static_cast<uint64_t>(pitch) * (rows - 1) + rowBytes;
  return true;
}

// [address, address + extent) is a non-null range that does not wrap.
bool validRange(uint64_t address, uint64_t extent) { return address != 0 && extent - 1 <= kMax - address; }

}  // namespace

CUresult checkCopyShape(const Copy2D& c) {
  if (c.height > 1 && (c.dstPitch < c.width || c.srcPitch < c.width)) {
    return static_cast<CUresult>(cudaErrorInvalidPitchValue);
  }
  uint64_t dstExtent = 0;
  uint64_t srcExtent = 0;
  if (!rowsExtent(c.width, c.dstPitch, c.height, dstExtent) || !rowsExtent(c.width, c.srcPitch, c.height, srcExtent)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return validRange(c.dst, dstExtent) && validRange(c.src, srcExtent) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult checkHostRows(uint64_t address, size_t width, size_t pitch, size_t height, HostAccess access) {
  if (address == 0) return CUDA_ERROR_INVALID_VALUE;
  if (width == 0 || height == 0) return CUDA_SUCCESS;
  // The first byte of every row and the last byte of the last: a bad pointer or length is caught
  // for the price of a syscall; probing every page cost 20-30 % of a memcpy of the range.
  auto probe = [&](const host_memory::Rows& rows) {
    return access == HostAccess::kRead ? host_memory::readable(rows) : host_memory::writable(rows);
  };
  auto* base = reinterpret_cast<const char*>(address);
  // A flat range: its first and last byte as two one-byte "rows" width - 1 apart, in one probe
  // (one system call, two for a destination, instead of twice that on a small copy's path).
  if (height == 1) return probe({base, 1, width - 1, width > 1 ? 2u : 1u}) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  bool ok = probe({base, 1, pitch, height}) && probe({base + (height - 1) * pitch + width - 1, 1, 1, 1});
  return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult checkMemsetShape(const MemsetShape& m) {
  if (m.elementSize != 1 && m.elementSize != 2 && m.elementSize != 4) return CUDA_ERROR_INVALID_VALUE;
  if (m.dst % m.elementSize != 0) return CUDA_ERROR_INVALID_VALUE;
  if (m.width > kMax / m.elementSize) return CUDA_ERROR_INVALID_VALUE;
  uint64_t rowBytes = static_cast<uint64_t>(m.width) * m.elementSize;
  if (m.height > 1 && m.pitch < rowBytes) return CUDA_ERROR_INVALID_VALUE;
  uint64_t extent = 0;
  if (!rowsExtent(rowBytes, m.pitch, m.height, extent)) return CUDA_ERROR_INVALID_VALUE;
  return validRange(m.dst, extent) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

}  // namespace tally::client

// Pure checks of what a client asks for, used by the handlers before anything reaches the
// driver: the byte range a pitched copy or memset touches, how a copy is cut into staging
// pieces, the context-wide limits a tenant may raise, and the priority a launch may ask for.
// No schema and no driver calls, so every rule is unit-tested (request_checks_test.cc).
#pragma once

#include "server/session/auth.h"

#include <cuda.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <vector>

namespace tally::server::api {

// The widest row pitch a 2D copy or memset may name: the driver's own maximum
// (CU_DEVICE_ATTRIBUTE_MAX_PITCH, 2^31 - 1 on every GPU CUDA 13 supports). Bounding it keeps
// pitch * rows far from wrapping, and rows wider than the pitch are refused with it.
inline constexpr uint64_t kMaxPitch = (uint64_t(1) << 31) - 1;

// a * b, or nullopt when it does not fit in 64 bits.
inline std::optional<uint64_t> checkedProduct(uint64_t a, uint64_t b) {
  uint64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product)) return std::nullopt;
  return product;
}

// A CUDA enum value from the wire, or nullopt when it is not below `end` (the enum's _MAX, or its
// last value + 1): casting an unchecked integer to an enum is undefined behaviour, and the
// driver must never see a value the headers do not name.
template <typename Enum>
std::optional<Enum> enumFromWire(uint64_t value, Enum end) {
  if (value >= static_cast<uint64_t>(end)) return std::nullopt;
  return static_cast<Enum>(value);
}

// A wire pitch of 0 means "rows packed": the pitch is the row width.
inline uint64_t pitchOr(uint64_t pitch, uint64_t width) { return pitch != 0 ? pitch : width; }

// `height` rows of `width` bytes, `pitch` bytes apart.
struct PitchedRegion {
  uint64_t width = 0;
  uint64_t height = 1;
  uint64_t pitch = 0;
};

// Bytes from the region's first byte to one past its last: pitch * (height - 1) + width (the
// last row needs only `width`). nullopt when the region is malformed — for more than one row,
// rows wider than the pitch or a pitch past kMaxPitch — or when the extent would wrap. This is
// the one place a copy's or memset's range is computed; every ownership check uses it.
inline std::optional<uint64_t> regionExtent(const PitchedRegion& r) {
  if (r.height == 0) return 0;
  if (r.height == 1) return r.width;  // one row: the pitch is never applied
  if (r.pitch < r.width || r.pitch > kMaxPitch) return std::nullopt;
  uint64_t rowsBefore = 0, extent = 0;
  if (__builtin_mul_overflow(r.pitch, r.height - 1, &rowsBefore)) return std::nullopt;
  if (__builtin_add_overflow(rowsBefore, r.width, &extent)) return std::nullopt;
  return extent;
}

// One piece of a copy through staging: bytes [column, column + rowBytes) of rows
// [row, row + rows). A piece is several whole rows, or part of one row.
struct CopyPiece {
  uint64_t row = 0;
  uint64_t rows = 0;
  uint64_t column = 0;
  uint64_t rowBytes = 0;
  uint64_t bytes() const { return rows * rowBytes; }
  // Where the piece starts in the packed (pitch = width) host bytes of the whole copy.
  uint64_t packedOffset(uint64_t width) const { return row * width + column; }
};

// Cuts `height` rows of `width` bytes into pieces of at most `maxBytes` (> 0), in the order of
// the packed bytes: whole rows while a row fits, else each row in column pieces. Expects
// width * height not to wrap (checked by the caller).
inline std::vector<CopyPiece> splitIntoPieces(uint64_t width, uint64_t height, uint64_t maxBytes) {
  std::vector<CopyPiece> pieces;
  if (width == 0 || height == 0) return pieces;
  if (width <= maxBytes) {
    const uint64_t rowsPerPiece = maxBytes / width;
    for (uint64_t row = 0; row < height; row += rowsPerPiece) {
      pieces.push_back(CopyPiece{row, std::min(rowsPerPiece, height - row), 0, width});
    }
    return pieces;
  }
  for (uint64_t row = 0; row < height; ++row) {
    for (uint64_t column = 0; column < width; column += maxBytes) {
      pieces.push_back(CopyPiece{row, 1, column, std::min(maxBytes, width - column)});
    }
  }
  return pieces;
}

// The largest value a tenant may set for a context-wide limit (its TenantLimits maximum; 0 in
// TenantLimits: no maximum), nullopt for limits tallyd never lets a tenant change.
inline std::optional<uint64_t> contextLimitMaximum(const session::TenantLimits& limits, CUlimit limit) {
  auto orUnlimited = [](uint64_t maximum) { return maximum != 0 ? maximum : UINT64_MAX; };
  switch (limit) {
    case CU_LIMIT_STACK_SIZE: return orUnlimited(limits.maxStackBytes);
    case CU_LIMIT_MALLOC_HEAP_SIZE: return orUnlimited(limits.maxMallocHeapBytes);
    case CU_LIMIT_PRINTF_FIFO_SIZE: return orUnlimited(limits.maxPrintfFifoBytes);
    case CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT: return orUnlimited(limits.maxPendingLaunches);
    default: return std::nullopt;  // L2 persistence and fetch granularity change other tenants' behaviour
  }
}

// Device memory a limit's value reserves in the context where that is well defined: the device
// malloc heap and the printf buffer are that many bytes. (The stack's cost depends on how many
// threads the driver provisions for, so it is only capped, not charged.)
inline uint64_t contextLimitBytes(CUlimit limit, uint64_t value) {
  return limit == CU_LIMIT_MALLOC_HEAP_SIZE || limit == CU_LIMIT_PRINTF_FIFO_SIZE ? value : 0;
}

// What a tenant's requested limits (limit -> value) count against its memory quota.
inline uint64_t contextLimitCharge(const std::map<int, size_t>& requested) {
  uint64_t charged = 0;
  for (auto [limit, value] : requested) {
    uint64_t bytes = contextLimitBytes(static_cast<CUlimit>(limit), value);
    if (__builtin_add_overflow(charged, bytes, &charged)) return UINT64_MAX;
  }
  return charged;
}

// The stream priority a launch attribute may give a kernel. CUDA priorities run from
// `greatest` (numerically lowest, most urgent) to `least`; `band` is the priority the scheduler
// gives this tenant's class (nullopt: none), and no launch may be more urgent than it.
inline int clampLaunchPriority(int requested, int greatest, int least, std::optional<int> band) {
  int priority = std::clamp(requested, greatest, least);
  return band ? std::max(priority, *band) : priority;
}

}  // namespace tally::server::api

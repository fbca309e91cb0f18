// What the driver accepts in a stream memory operation (cuStreamWaitValue32/64,
// cuStreamWriteValue32/64, cuStreamBatchMemOp), checked by the client before it sends one (the
// native error at the call) and by tallyd before it runs one (a client is not trusted).
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <optional>

namespace tally::stream {

// cuStreamBatchMemOp: "count ... Must be less than 256" (cuda.h).
inline constexpr unsigned kMaxBatchMemOps = 255;

// The bytes of the word an operation reads or writes (4 or 8; 0 for an operation without an
// address: flush, barrier), or nullopt when the operation or its flags are not the driver's.
inline std::optional<size_t> memOpWordBytes(uint32_t operation, uint32_t flags) {
  switch (operation) {
    case CU_STREAM_MEM_OP_WAIT_VALUE_32:
    case CU_STREAM_MEM_OP_WAIT_VALUE_64: {
      uint32_t comparison = flags & ~static_cast<uint32_t>(CU_STREAM_WAIT_VALUE_FLUSH);
      if (comparison > CU_STREAM_WAIT_VALUE_NOR) return std::nullopt;
      return operation == CU_STREAM_MEM_OP_WAIT_VALUE_32 ? 4 : 8;
    }
    case CU_STREAM_MEM_OP_WRITE_VALUE_32:
    case CU_STREAM_MEM_OP_WRITE_VALUE_64:
      if ((flags & ~static_cast<uint32_t>(CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER)) != 0) return std::nullopt;
      return operation == CU_STREAM_MEM_OP_WRITE_VALUE_32 ? 4 : 8;
    case CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES:
      return flags == 0 ? std::optional<size_t>(0) : std::nullopt;
    case CU_STREAM_MEM_OP_BARRIER:
      return flags <= CU_STREAM_MEMORY_BARRIER_TYPE_GPU ? std::optional<size_t>(0) : std::nullopt;
    default:
      return std::nullopt;
  }
}

// Whether the operation is well formed: known, with known flags, and a word that is non-null and
// aligned to its size when it has one (the driver's CUDA_ERROR_INVALID_VALUE otherwise).
inline bool memOpWellFormed(uint32_t operation, uint32_t flags, uint64_t address) {
  std::optional<size_t> bytes = memOpWordBytes(operation, flags);
  if (!bytes) return false;
  return *bytes == 0 || (address != 0 && address % *bytes == 0);
}

}  // namespace tally::stream

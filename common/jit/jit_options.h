// The JIT options (CUjit_option) whose value is a number, so that they can travel between the
// client and tallyd as is; the client fills the others (log buffers, wall time) itself or refuses
// them. One list for both sides: client/api/jit_link.cc, server/api/jit_link_api.cc.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace tally::jit {

inline bool isValueOption(uint32_t option) {
  switch (option) {
    case CU_JIT_MAX_REGISTERS: case CU_JIT_THREADS_PER_BLOCK: case CU_JIT_OPTIMIZATION_LEVEL:
    case CU_JIT_TARGET_FROM_CUCONTEXT: case CU_JIT_TARGET: case CU_JIT_FALLBACK_STRATEGY:
    case CU_JIT_GENERATE_DEBUG_INFO: case CU_JIT_LOG_VERBOSE: case CU_JIT_GENERATE_LINE_INFO:
    case CU_JIT_CACHE_MODE: case CU_JIT_POSITION_INDEPENDENT_CODE: case CU_JIT_MIN_CTA_PER_SM:
    case CU_JIT_MAX_THREADS_PER_BLOCK: case CU_JIT_OVERRIDE_DIRECTIVE_VALUES:
      return true;
    default:
      return false;
  }
}

}  // namespace tally::jit

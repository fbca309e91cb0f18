// Small helpers for driver-API results inside server/gpu.
#pragma once

#include <cuda.h>

#include <string>

namespace tally::server::gpu {

// "CUDA_ERROR_INVALID_VALUE (invalid argument)" for log lines.
std::string describe(CUresult result);

// cuCtxSetCurrent, skipped when the calling thread already has `context` current. Every
// context switch in tallyd goes through here, so the per-thread cache stays true.
void makeContextCurrent(CUcontext context);

}  // namespace tally::server::gpu

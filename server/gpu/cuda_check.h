// Small helpers for driver-API results inside server/gpu.
#pragma once

#include <cuda.h>

#include <string>

namespace tally::server::gpu {

// "CUDA_ERROR_INVALID_VALUE (invalid argument)" for log lines.
std::string describe(CUresult result);

}  // namespace tally::server::gpu

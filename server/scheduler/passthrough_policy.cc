// "passthrough": every launch goes straight to the tenant's stream, untouched: the behaviour
// of a shared context without a scheduler, and the baseline the priority policy is measured
// against.
#include "server/scheduler/passthrough_policy.h"

namespace tally::server::scheduler {

CUresult PassthroughPolicy::launch(const KernelLaunch& k) {
  std::vector<void*> built;
  void** params = k.paramPointers;
  if (params == nullptr) {
    built = parameterPointers(k);
    params = built.data();
  }
  return launchOriginal(k, params);
}

CUresult launchOriginal(const KernelLaunch& k, void** params) {
  if (k.attributes.empty()) {
    return cuLaunchKernel(k.original, k.shape.grid[0], k.shape.grid[1], k.shape.grid[2], k.shape.block[0],
                          k.shape.block[1], k.shape.block[2], k.shape.sharedMem, k.stream, params, nullptr);
  }
  CUlaunchConfig config{};
  config.gridDimX = k.shape.grid[0];
  config.gridDimY = k.shape.grid[1];
  config.gridDimZ = k.shape.grid[2];
  config.blockDimX = k.shape.block[0];
  config.blockDimY = k.shape.block[1];
  config.blockDimZ = k.shape.block[2];
  config.sharedMemBytes = k.shape.sharedMem;
  config.hStream = k.stream;
  config.attrs = const_cast<CUlaunchAttribute*>(k.attributes.data());
  config.numAttrs = static_cast<unsigned>(k.attributes.size());
  return cuLaunchKernelEx(&config, k.original, params, nullptr);
}

std::vector<void*> parameterPointers(const KernelLaunch& k) {
  std::vector<void*> pointers;
  pointers.reserve(k.paramLayout->size());
  for (auto [offset, size] : *k.paramLayout) {
    pointers.push_back(const_cast<uint8_t*>(k.paramBuffer.data()) + offset);
  }
  return pointers;
}

}  // namespace tally::server::scheduler

#include "server/scheduler/stress_policy.h"

#include <algorithm>
#include <random>
#include <vector>


namespace tally::server::scheduler {

CUresult StressPolicy::launch(const KernelLaunch& k) {
  // Launches with attributes never run as variants (the API layer leaves them none).
  if (!k.attributes.empty() || (k.sliced == nullptr && k.ptb == nullptr)) return inner_->launch(k);
  ParameterPointers params(k);
  return stressLaunch(k, params.kernelParams());
}

CUresult StressPolicy::stressLaunch(const KernelLaunch& k, gpu::KernelParams params) {
  // One generator per tenant thread, seeded from the run's seed and the tenant: a failing run is
  // repeated with its logged seed.
  thread_local std::mt19937_64 rng(seed_ ^ (k.tenant * 0x9e3779b97f4a7c15ull));
  const gpu::LaunchShape& shape = k.shape;
  const uint64_t total = shape.blocks();
  auto pick = [&](uint64_t lo, uint64_t hi) { return std::uniform_int_distribution<uint64_t>(lo, hi)(rng); };
  auto count = [](std::atomic<uint64_t>* counter, uint64_t n) {
    if (counter != nullptr) counter->fetch_add(n, std::memory_order_relaxed);
  };
  uint64_t choice = pick(0, 3);
  if (choice == 1 && total > 1 && launcher_.waveBlocks(k.gpu, k.sliced, shape) > 0) {
    count(k.slicedLaunches, 1);
    return launcher_.launchSliced(k.sliced, shape, k.stream, params, pick(2, std::min<uint64_t>(16, total)));
  }
  const bool helpers = launcher_.hasPtbHelpers(k.gpu);
  uint64_t resident = choice >= 2 ? launcher_.waveBlocks(k.gpu, k.ptb, shape) : 0;
  CUstream side = nullptr;
  CUdeviceptr controlBlock = 0;
  if (resident > 0 && helpers && k.variantStreams && k.variantStreams(side, controlBlock)) {
    count(k.ptbLaunches, 1);
    gpu::PtbWorkers workers{pick(1, resident), static_cast<uint32_t>(pick(1, 4))};
    gpu::PtbControl control{controlBlock, controlBlock + 8};
    if (choice == 2 || total < 2) {
      if (CUresult r = launcher_.resetPtb(control, k.stream); r != CUDA_SUCCESS) return r;
      return launcher_.launchPtb(k.ptb, shape, k.stream, params, workers, control);
    }
    std::vector<uint64_t> thresholds(pick(1, 3));
    for (uint64_t& t : thresholds) t = pick(1, total - 1);
    std::sort(thresholds.begin(), thresholds.end());
    count(k.preemptions, thresholds.size());
    return launcher_.launchPtbPreempted(k.gpu, k.ptb, shape, k.stream, side, params, workers, control, thresholds);
  }
  return launcher_.launchOriginal(k, params.values);
}

}  // namespace tally::server::scheduler

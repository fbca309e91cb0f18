#include "server/gpu/variant_launch.h"

#include "server/gpu/ptb_helpers_ptx.h"

#include <algorithm>
#include <vector>

namespace tally::server::gpu {
namespace {

// The kernel's own parameters followed by pointers to `extra`.
std::vector<void*> withExtras(KernelParams params, std::initializer_list<void*> extra) {
  std::vector<void*> all(params.values, params.values + params.count);
  all.insert(all.end(), extra.begin(), extra.end());
  return all;
}


// Makes `waiter` wait for the work queued on `signaller` so far.
CUresult join(CUstream waiter, CUstream signaller) {
  CUevent event = nullptr;
  if (CUresult r = cuEventCreate(&event, CU_EVENT_DISABLE_TIMING); r != CUDA_SUCCESS) return r;
  CUresult r = cuEventRecord(event, signaller);
  if (r == CUDA_SUCCESS) r = cuStreamWaitEvent(waiter, event, 0);
  cuEventDestroy(event);  // released once the wait is done
  return r;
}

}  // namespace

CUresult launchSliceRange(CUfunction sliced, const LaunchShape& shape, CUstream stream, KernelParams params,
                          uint64_t offset, uint32_t count) {
  uint32_t gridX = shape.grid[0], gridY = shape.grid[1], gridZ = shape.grid[2];
  std::vector<void*> all = withExtras(params, {&gridX, &gridY, &gridZ, &offset});
  return cuLaunchKernel(sliced, count, 1, 1, shape.block[0], shape.block[1], shape.block[2], shape.sharedMem, stream,
                        all.data(), nullptr);
}

CUresult launchSliced(CUfunction sliced, const LaunchShape& shape, CUstream stream, KernelParams params,
                      uint64_t slices) {
  const uint64_t total = shape.blocks();
  if (total == 0) return CUDA_ERROR_INVALID_VALUE;
  const uint64_t per = sliceSize(total, slices);
  for (uint64_t offset = 0; offset < total; offset += per) {
    auto count = static_cast<uint32_t>(std::min(per, total - offset));
    if (CUresult r = launchSliceRange(sliced, shape, stream, params, offset, count); r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

CUresult resetPtb(PtbControl control, CUstream stream) {
  if (CUresult r = cuMemsetD32Async(control.progress, 0, 2, stream); r != CUDA_SUCCESS) return r;
  return clearRetreat(control, stream);
}

CUresult clearRetreat(PtbControl control, CUstream stream) { return cuMemsetD32Async(control.retreat, 0, 1, stream); }

CUresult launchPtb(CUfunction ptb, const LaunchShape& shape, CUstream stream, KernelParams params, PtbWorkers workers,
                   PtbControl control) {
  const uint64_t total = shape.blocks();
  if (total == 0) return CUDA_ERROR_INVALID_VALUE;
  auto blocks = static_cast<unsigned>(std::clamp<uint64_t>(workers.workers, 1, std::min(total, kMaxGridX)));
  uint32_t gridX = shape.grid[0], gridY = shape.grid[1], gridZ = shape.grid[2], chunk = std::max(workers.chunk, 1u);
  CUdeviceptr progress = control.progress, retreat = control.retreat;
  std::vector<void*> all = withExtras(params, {&gridX, &gridY, &gridZ, &progress, &retreat, &chunk});
  return cuLaunchKernel(ptb, blocks, 1, 1, shape.block[0], shape.block[1], shape.block[2], shape.sharedMem, stream,
                        all.data(), nullptr);
}

bool PtbHelpers::load(std::string& error) {
  if (CUresult r = cuModuleLoadData(&module_, kPtbHelpersPtx); r != CUDA_SUCCESS) {
    error = "cannot load the retreat trigger: CUresult " + std::to_string(r);
    return false;
  }
  if (CUresult r = cuModuleGetFunction(&function_, module_, "tally_retreat_at"); r != CUDA_SUCCESS) {
    error = "retreat trigger has no tally_retreat_at: CUresult " + std::to_string(r);
    return false;
  }
  if (CUresult r = cuModuleGetFunction(&pause_, module_, "tally_ptb_pause"); r != CUDA_SUCCESS) {
    error = "PTB helpers have no tally_ptb_pause: CUresult " + std::to_string(r);
    return false;
  }
  return true;
}

CUresult PtbHelpers::launchPause(CUstream stream, PtbControl control, uint64_t total, uint64_t timeoutNs) const {
  if (pause_ == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  CUdeviceptr retreat = control.retreat, progress = control.progress;
  void* args[] = {&retreat, &progress, &total, &timeoutNs};
  return cuLaunchKernel(pause_, 1, 1, 1, 1, 1, 1, 0, stream, args, nullptr);
}

PtbHelpers::~PtbHelpers() {
  if (module_ != nullptr) cuModuleUnload(module_);
}

CUresult PtbHelpers::launch(CUstream stream, PtbControl control, uint64_t threshold, uint64_t timeoutNs) const {
  if (function_ == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  CUdeviceptr progress = control.progress, retreat = control.retreat;
  void* args[] = {&progress, &retreat, &threshold, &timeoutNs};
  return cuLaunchKernel(function_, 1, 1, 1, 1, 1, 1, 0, stream, args, nullptr);
}

CUresult launchPtbPreempted(CUfunction ptb, const LaunchShape& shape, CUstream stream, CUstream side,
                            KernelParams params, PtbWorkers workers, PtbControl control,
                            std::span<const uint64_t> thresholds, const PtbHelpers& trigger, uint64_t timeoutNs) {
  if (CUresult r = resetPtb(control, stream); r != CUDA_SUCCESS) return r;
  for (uint64_t threshold : thresholds) {
    // The trigger starts after the reset (and after the previous run's trigger) ...
    if (CUresult r = join(side, stream); r != CUDA_SUCCESS) return r;
    if (CUresult r = trigger.launch(side, control, threshold, timeoutNs); r != CUDA_SUCCESS) return r;
    if (CUresult r = launchPtb(ptb, shape, stream, params, workers, control); r != CUDA_SUCCESS) return r;
    // ... and the flag is lowered only once it has fired, whether the run stopped or finished.
    if (CUresult r = join(stream, side); r != CUDA_SUCCESS) return r;
    if (CUresult r = clearRetreat(control, stream); r != CUDA_SUCCESS) return r;
  }
  return launchPtb(ptb, shape, stream, params, workers, control);
}

CUresult launchPtbResumable(CUfunction ptb, const LaunchShape& shape, CUstream stream, KernelParams params,
                            PtbWorkers workers, PtbControl control, CUdeviceptr neverRetreat, const PtbHelpers& helpers,
                            unsigned resumes, uint64_t pauseNs) {
  if (CUresult r = cuMemsetD32Async(control.progress, 0, 2, stream); r != CUDA_SUCCESS) return r;
  if (CUresult r = launchPtb(ptb, shape, stream, params, workers, control); r != CUDA_SUCCESS) return r;
  for (unsigned i = 0; i < resumes; ++i) {
    if (CUresult r = helpers.launchPause(stream, control, shape.blocks(), pauseNs); r != CUDA_SUCCESS) return r;
    if (CUresult r = launchPtb(ptb, shape, stream, params, workers, control); r != CUDA_SUCCESS) return r;
  }
  if (CUresult r = helpers.launchPause(stream, control, shape.blocks(), pauseNs); r != CUDA_SUCCESS) return r;
  return launchPtb(ptb, shape, stream, params, workers, PtbControl{control.progress, neverRetreat});
}

}  // namespace tally::server::gpu

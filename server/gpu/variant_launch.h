// Launching the kernel variants of server/transform: a sliced kernel as several launches over
// parts of its grid, a PTB kernel with its progress counter and retreat flag, and preempting a
// PTB launch from the GPU itself. Stream-ordered throughout: nothing here waits on the host.
#pragma once

#include <cuda.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace tally::server::gpu {

struct LaunchShape {
  uint32_t grid[3] = {1, 1, 1};
  uint32_t block[3] = {1, 1, 1};
  uint32_t sharedMem = 0;
  uint64_t blocks() const { return uint64_t(grid[0]) * grid[1] * grid[2]; }
};

// What a PTB launch reads besides its kernel's parameters: a u64 progress counter in device
// memory and a u32 retreat flag (device memory, or mapped host memory that the host can raise
// without queueing behind anything). Launches on one stream may share them: every use is
// ordered by that stream.
struct PtbControl {
  CUdeviceptr progress = 0;
  CUdeviceptr retreat = 0;
};

// The kernel's own parameters (pointers to their values, as for cuLaunchKernel).
struct KernelParams {
  void** values = nullptr;
  size_t count = 0;
};

// Launches blocks [offset, offset + count) of the original grid (count < 2^31) as one launch of
// the sliced variant.
CUresult launchSliceRange(CUfunction sliced, const LaunchShape& shape, CUstream stream, KernelParams params,
                          uint64_t offset, uint32_t count);

// The most blocks of a grid's x.
inline constexpr uint64_t kMaxGridX = (uint64_t(1) << 31) - 1;

// The block count of each slice when a grid of `blocks` is cut into `slices` (at least one
// block each, at most 2^31-1). Inline: the scheduler's CPU tests use it without the driver.
inline uint64_t sliceSize(uint64_t blocks, uint64_t slices) {
  slices = std::max<uint64_t>(slices, 1);
  return std::clamp<uint64_t>((blocks + slices - 1) / slices, 1, kMaxGridX);
}

// Launches the sliced variant of a kernel launched with `shape` as `slices` launches (more if a
// slice would exceed the 2^31-1 blocks of a grid's x), each over the next contiguous range.
CUresult launchSliced(CUfunction sliced, const LaunchShape& shape, CUstream stream, KernelParams params,
                      uint64_t slices);

// Zeroes progress and retreat flag: the next launchPtb starts the grid afresh.
CUresult resetPtb(PtbControl control, CUstream stream);
// Lowers the retreat flag, keeping the progress: the next launchPtb resumes.
CUresult clearRetreat(PtbControl control, CUstream stream);
// How a PTB launch runs: `workers` worker blocks (at least one, at most the grid's blocks),
// each claiming `chunk` logical blocks at a time (the retreat flag is read between chunks).
struct PtbWorkers {
  uint64_t workers = 1;
  uint32_t chunk = 1;
};

// Launches the PTB variant; it runs logical blocks from the progress counter on until the grid
// is done or the retreat flag is raised.
CUresult launchPtb(CUfunction ptb, const LaunchShape& shape, CUstream stream, KernelParams params, PtbWorkers workers,
                   PtbControl control);

// Two one-thread helper kernels for PTB launches. The retreat trigger raises a launch's retreat
// flag once its progress reaches a threshold (or a timeout passes, so that it never spins
// forever): a preemption at a chosen point, decided on the GPU (the stress mode and the
// equivalence tests; the scheduler raises the flag itself). The pause holds a stream between a
// retreat and the resume (launchPtbResumable).
class PtbHelpers {
 public:
  // Loads the helper into the current context; on failure `error` says why.
  bool load(std::string& error);
  ~PtbHelpers();

  CUresult launch(CUstream stream, PtbControl control, uint64_t threshold, uint64_t timeoutNs) const;
  // Between two runs of a PTB kernel on `stream`: waits on the GPU while the retreat flag is up
  // and the grid of `total` blocks unfinished, at most `timeoutNs`.
  CUresult launchPause(CUstream stream, PtbControl control, uint64_t total, uint64_t timeoutNs) const;

 private:
  CUmodule module_ = nullptr;
  CUfunction function_ = nullptr;
  CUfunction pause_ = nullptr;
};

// A complete PTB launch, preempted at each of `thresholds` (ascending logical-block counts) and
// resumed each time: run i is stopped by a trigger on `side` once the progress reaches
// thresholds[i]; the stream then waits for that trigger, lowers the flag and relaunches. The
// last run has no trigger and completes the grid. Resets the control first.
CUresult launchPtbPreempted(CUfunction ptb, const LaunchShape& shape, CUstream stream, CUstream side,
                            KernelParams params, PtbWorkers workers, PtbControl control,
                            std::span<const uint64_t> thresholds, const PtbHelpers& trigger,
                            uint64_t timeoutNs = 200'000'000);

// A PTB launch the scheduler can stop and that resumes by itself, all on `stream` with no host
// involvement: run, then up to `resumes` times [pause while the retreat flag is up, at most
// `pauseNs`; run again from the progress counter], then a last run that ignores the flag (its
// retreat pointer is `neverRetreat`, a zero word), so the grid always completes in stream order.
// Every wait is bounded in time: nothing here can hold the stream hostage to the host.
CUresult launchPtbResumable(CUfunction ptb, const LaunchShape& shape, CUstream stream, KernelParams params,
                            PtbWorkers workers, PtbControl control, CUdeviceptr neverRetreat, const PtbHelpers& helpers,
                            unsigned resumes, uint64_t pauseNs);

}  // namespace tally::server::gpu

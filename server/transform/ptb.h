// The preemptive persistent-thread-block (PTB) variant of a kernel: a few worker blocks claim
// the original grid's blocks one at a time from a global counter until the grid is done or the
// scheduler raises a retreat flag; a relaunch resumes from the counter. See docs/transform.md.
#pragma once

#include <optional>
#include <string>

#include "server/transform/kernel_rewrite.h"
#include "server/transform/ptx.h"

namespace tally::server::transform {

inline constexpr const char* kPtbSuffix = "__tally_ptb";

// Parameters appended after the kernel's own, in this order (names as in the PTX):
//   .param .u32 __tally_grid_x, __tally_grid_y, __tally_grid_z   the original launch's gridDim
//   .param .u64 __tally_progress   pointer to a global u64: logical blocks claimed so far
//                                  (linear index x fastest, then y, then z); zero it for a
//                                  fresh launch, keep it to resume
//   .param .u64 __tally_retreat    pointer to a global u32: non-zero asks the workers to stop
//                                  after their current chunk of logical blocks
//   .param .u32 __tally_chunk      logical blocks per claim (0 counts as 1)
// Launched with any number of worker blocks (any grid shape), the original block shape and
// the original dynamic shared memory. The variant adds 16 bytes of static shared memory.
inline constexpr int kPtbExtraParams = 6;

// Why the PTB variant of `f` cannot be built (the barrier-aware rewrite cannot make it safe),
// if it cannot. For a kernel (`isKernel`): barriers with a thread count, bar.arrive, unknown
// barrier forms, barriers inside { } scopes that cannot be flattened. For a device function
// the kernel calls: any CTA barrier or exit, which the rewrite of the kernel's body cannot see.
std::optional<std::string> ptbObstacle(const Function& f, bool isKernel);

// Builds `<name>__tally_ptb` from a kernel eligible for PTB.
VariantResult makePtbKernel(const Function& kernel);

// The module with the PTB variant of every PTB-eligible kernel placed right after its original.
ModuleTransformResult addPtbKernels(const Module& module);

}  // namespace tally::server::transform
